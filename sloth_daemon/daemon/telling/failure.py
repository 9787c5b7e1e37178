"""A delivery that did not succeed (daemon/telling/), in a module of its
own: the sender names it from the start, and what sends (http.py, mail.py,
messages.py: ssl, http.client, hashlib, smtplib, email) is imported only when
a message goes, so a daemon that tells no one never maps OpenSSL
(tests/acceptance/test_idle_memory.py)."""

from __future__ import annotations


class DeliveryError(Exception):
    """A delivery that did not succeed: ``permanent`` ones are not retried.
    The message names the URL masked (text.mask_url), never whole."""

    def __init__(self, message: str, *, permanent: bool = False) -> None:
        super().__init__(message)
        self.permanent = permanent

"""Secrets kept out of what sloth says: one function, ``mask``, applied
where text is made for people to read, so that no path around it exists:

- every SlothError's message and hint, when it is made (errors.py): what
  the CLI prints, the socket carries and a status field quotes;
- every log line of the daemon and the keeper, traceback included
  (``log_to_stderr``: their logs are their stderr);
- every line the CLI writes to stderr, a --debug traceback too (cli/edge.py).

It masks a password three ways, because a URL a driver cannot parse may
be quoted whole, in part, or not at all:

- the password of any ``scheme://user:password@`` (up to the last ``@``
  of the word: an unescaped ``@`` in a password must not leave its tail);
- ``password=...`` (libpq keyword strings, URL query parameters);
- the text of every password this process was configured with
  (``remember``: config.py calls it for queue_url and SLOTH_QUEUE_URL),
  raw, decoded and escaped, wherever it appears (psycopg's ``invalid
  percent-encoded token: "Secret%zz"`` names no URL).

Standard library only, and imported by every `sloth add` (through
errors.py): its imports wait until a text needs them.
"""

from __future__ import annotations

SHOWN = "***"
MIN_REMEMBERED = 3  # a shorter one would mask every "db" in every message: the patterns still cover it
URL_PASSWORD = r"(?i)\b([a-z][a-z0-9+.-]*://[^\s:/@'\"]*:)([^\s'\"]*)@"
KEYWORD = r"(?i)\b((?:pg)?password\s*=\s*)('(?:[^'\\]|\\.)*'?|[^\s&'\"]+)"
_known: tuple[str, ...] = ()  # longest first: a password that holds another is masked whole


def remember(conninfo: str) -> None:
    """Mask from now on, in this process, the password(s) that ``conninfo``
    (a URL or a libpq keyword string, well-formed or not) holds."""
    import re

    global _known
    found = {m.group(2) for m in re.finditer(URL_PASSWORD, conninfo)}
    found |= {m.group(2).strip("'") for m in re.finditer(KEYWORD, conninfo)}
    forms = {f for raw in found for f in _forms(raw) if len(f) >= MIN_REMEMBERED}
    # A new tuple bound at once: mask() in another thread reads the old or the new one.
    _known = tuple(sorted(set(_known) | forms, key=len, reverse=True))


def _forms(raw: str) -> set[str]:
    """A password as a message may quote it: as written, percent-decoded,
    and escaped the ways repr() and JSON escape it."""
    import json
    from urllib.parse import unquote

    out = set()
    for v in (raw, unquote(raw)):  # an invalid escape (%zz) is kept as written
        out |= {v, repr(v)[1:-1], json.dumps(v)[1:-1]}
    return out


def mask(text: str) -> str:
    """``text`` with every password in it shown as ``***``."""
    if not isinstance(text, str) or not text:
        return text
    for secret in _known:
        if secret in text:
            text = text.replace(secret, SHOWN)
    if "://" in text:
        import re

        text = re.sub(URL_PASSWORD, lambda m: m.group(1) + SHOWN + "@", text)
    if "assword" in text.lower():
        import re

        text = re.sub(KEYWORD, lambda m: m.group(1) + SHOWN, text)
    return text


def log_to_stderr(level: int, fmt: str) -> None:
    """The process's logging: one handler, on stderr, whose every line
    (message, arguments, traceback) is masked whole."""
    import logging
    import sys

    class Masked(logging.Formatter):
        def format(self, record: logging.LogRecord) -> str:
            return mask(super().format(record))

    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(Masked(fmt))
    logging.basicConfig(level=level, handlers=[handler])

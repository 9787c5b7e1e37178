"""What the daemon costs at rest (docs/idle.md): asyncio loaded without
ssl, and memory given back once it has been idle a while (``give_back``).

asyncio imports ssl if it can (for TLS streams), and ssl maps OpenSSL's
libssl and libcrypto: ~4 MB resident in a daemon that speaks only over
Unix sockets (PostgreSQL's TLS is libpq's own). Imported first by
daemon/main.py: asyncio then takes ssl for absent (its own ``ImportError``
branch) and ssl stays importable for anything that asks for it itself.
A process that loaded asyncio before (a test runner) keeps its own.
"""

from __future__ import annotations

import ctypes
import gc
import sys
from typing import Callable


def _asyncio_without_ssl() -> None:
    if "asyncio" in sys.modules or "ssl" in sys.modules:
        return
    sys.modules["ssl"] = None  # type: ignore[assignment]  # import ssl -> ImportError, inside asyncio only
    try:
        import asyncio  # noqa: F401
    finally:
        del sys.modules["ssl"]


_asyncio_without_ssl()


def give_back(rest_queue: Callable[[], None]) -> None:
    """Idle (the keeper let go): the queue's cache, Python's garbage, and
    the C heap's free pages back to the system. glibc keeps freed memory
    for reuse unless asked (malloc_trim); elsewhere there is no such call."""
    try:
        rest_queue()
    except Exception as e:  # a broken file says so on its next use; resting is never worth a failure
        import logging

        logging.getLogger("sloth.daemon").debug("queue rest: %r", e)
    gc.collect()
    trim = getattr(ctypes.CDLL(None), "malloc_trim", None)
    if trim is not None:
        trim(0)

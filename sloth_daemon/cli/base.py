"""What the commands share, without Typer: the daemon connection, reading
the queue file when no daemon answers, JSON output, ids and durations as
typed. The Typer commands get these through app.py; the fast path
(fast.py) uses them directly, so both do the same.

Imported by every `sloth add`: the standard library and our light modules
only; anything heavier is imported inside the function that needs it.
"""

from __future__ import annotations

from sloth_daemon import errors
from sloth_daemon.cli.edge import echo

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from sloth_daemon.cli.client import Client
    from sloth_daemon.paths import Paths

_TOLD_OFFLINE = False  # "no daemon is running" said once per command


def paths() -> Paths:
    from sloth_daemon import paths as p

    return p.resolve()


def log_paths() -> Paths:
    """The paths with this folder's queue's own log folder (identity.py)."""
    from sloth_daemon.backends.sqlite.identity import queue_paths

    return queue_paths(paths())


def connect(*, timeout_s: float | None = 30.0) -> Client:
    from sloth_daemon.cli.client import Client
    from sloth_daemon.cli.locate import find_daemon

    sock, lock = find_daemon()
    return Client(sock, timeout_s=timeout_s, lock_path=lock)


def call(op: str, **args: Any) -> Any:
    with connect() as c:
        return c.call(op, **args)


def call_or_read(op: str, **args: Any) -> Any:
    """``call``, or, when no daemon answers, the same answer read from the
    queue file read-only (for ls, show, logs, lanes, status, config), with
    a note on stderr."""
    try:
        return call(op, **args)
    except errors.DaemonNotRunning:
        from sloth_daemon.cli.offline import answer

        tell_offline()
        return answer(paths(), op, **args)


def tell_offline() -> None:
    """Say once per command, on stderr, that the queue is read without a daemon."""
    from sloth_daemon.cli.offline import where

    global _TOLD_OFFLINE
    if not _TOLD_OFFLINE:
        echo(f"sloth: no daemon is running; reading {where(paths())} (read-only)", err=True)
        _TOLD_OFFLINE = True


def emit_json(data: Any) -> None:
    from sloth_daemon.protocol import dumps_pretty

    echo(dumps_pretty(data))  # json.dumps(data, indent=2, sort_keys=True), without importing json


def parse_id(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise errors.BadRequest(f"bad job id {text!r}: ids are whole numbers (see `sloth ls`)") from None
    if v < 1:
        raise errors.BadRequest(f"bad job id {text!r}: ids start at 1")
    return v


def duration(text: str | None, what: str) -> float | None:
    if text is None:
        return None
    from sloth_daemon.durations import parse_duration

    return parse_duration(text, what=what)

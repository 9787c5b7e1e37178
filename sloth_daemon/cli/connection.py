"""The commands' connection to the daemon, without Typer: its paths, the
connection (the daemon started when a command needs it and none runs, as
`sloth add` always did: after a crash `cancel`, `wait` or `logs -f` bring
it back and say so), and reading the queue file when no daemon answers.
Both readers of the command line (typer_app.py, fast.py) reach the daemon
through here, so both do the same.

Imported by every `sloth add`: the standard library and our light modules
only; anything heavier is imported inside the function that needs it.
"""

from __future__ import annotations

import os

from sloth_daemon import errors
from sloth_daemon.cli.output import echo

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


# The ops no daemon is started for: the reading ones (answered from the
# queue file instead, call_or_read) and the daemon's own controls (a
# stop, a reload or a status of a daemon that is not there says so). Every
# other op needs a daemon, and connect() starts one as `sloth add` does.
NO_START = frozenset({"ping", "status", "shutdown", "reload", "config", "list", "show", "logs", "lanes", "scan",
                      "schedule_ls", "schedule_show", "result"})


def connect(*, timeout_s: float | None = 30.0, start: bool = True) -> Client:
    """A connection to this queue's daemon. With ``start``, when none
    listens (it crashed, or never ran), start one and say so on stderr, as
    `sloth add` does (unless SLOTH_NO_START is set: then, and without
    ``start``, DaemonNotRunning)."""
    from sloth_daemon.cli.client import Client
    from sloth_daemon.cli.locate import find_daemon

    sock, lock = find_daemon()
    try:
        return Client(sock, timeout_s=timeout_s, lock_path=lock)
    except errors.DaemonNotRunning:
        if not start or os.environ.get("SLOTH_NO_START"):
            raise
    echo(f"sloth: started the daemon (pid {start_daemon()})", err=True)
    sock, lock = find_daemon()  # where the new daemon listens
    return Client(sock, timeout_s=timeout_s, lock_path=lock)


def start_daemon(timeout_s: float = 10.0) -> int:
    """Start the daemon in the background: its pid once it answers (launcher.py)."""
    from sloth_daemon.cli.launcher import start_background

    return start_background(paths(), timeout_s=timeout_s)


def call(op: str, **args: Any) -> Any:
    """One request to the daemon (started first if ``op`` needs one and none runs)."""
    with connect(start=op not in NO_START) as c:
        return c.call(op, **args)


def call_or_read(op: str, **args: Any) -> Any:
    """``call``, or, when no daemon answers, the same answer read from the
    queue file read-only (for ls, show, logs, lanes, status, config,
    prune --dry-run), with a note on stderr."""
    try:
        with connect(start=False) as c:
            return c.call(op, **args)
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

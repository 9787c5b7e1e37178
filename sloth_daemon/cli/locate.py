"""Finding the running daemon's socket when this process's runtime dir is
not the daemon's.

The socket lives in the runtime dir, which depends on XDG_RUNTIME_DIR: a
daemon started from a desktop session listens in /run/user/UID/sloth while
cron, `su` or ssh without a session would look in /tmp/runtime-UID/sloth,
miss it, and start a second daemon that the instance lock refuses ("already
running"). The data dir does not depend on it, and the daemon writes its
socket's path into its lock file there (daemon.InstanceLock); a client that
finds no socket where it looks reads that. Kept import-light: `sloth add`
runs this (find_daemon: no pathlib, no platformdirs when it can see the
data dir without them).
"""

from __future__ import annotations

import os
import stat
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path

    from sloth_daemon.paths import Paths


def find_daemon() -> tuple[str | Path, str | Path]:
    """(socket, lock file) to reach this queue's daemon: the same socket as
    ``daemon_socket(resolve())`` and the same lock as ``resolve().lock``.
    When the data dir is plain from the environment and the lock file there
    records a socket of ours, that is where daemon_socket would send us
    (recorded and ours wins; if it equals the computed one, so does that),
    and the rest of resolve() -- platformdirs, pathlib, the runtime dir --
    is not needed."""
    data = plain_data_dir()
    if data is not None:
        lock = os.path.join(data, "daemon.lock")
        recorded = _recorded(lock)
        if recorded is not None and _is_our_socket(recorded):
            return recorded, lock
    from sloth_daemon.paths import resolve

    p = resolve()
    return daemon_socket(p), p.lock


def plain_data_dir() -> str | None:
    """The data dir resolve() finds, where the environment makes it plain:
    SLOTH_HOME; on Linux, $XDG_DATA_HOME/sloth or ~/.local/share/sloth with
    an absolute XDG_DATA_HOME or HOME (what every platformdirs version
    answers there). None when it takes more than that to know."""
    home = os.environ.get("SLOTH_HOME")
    if home:
        expanded = os.path.expanduser(home)
        return expanded if os.path.isabs(expanded) else None
    if not sys.platform.startswith("linux"):
        return None
    xdg = os.environ.get("XDG_DATA_HOME", "")
    if xdg:
        return os.path.join(xdg, "sloth") if xdg.startswith("/") else None
    if not os.environ.get("HOME", "").startswith("/"):
        return None
    return os.path.join(os.path.expanduser("~/.local/share"), "sloth")


def daemon_socket(paths: Paths) -> Path:
    """Where to connect: the socket this queue's daemon recorded in the lock
    file (the last daemon to hold the lock wrote it), if it is a socket of
    ours; else the socket path this process computes (the connection then
    fails with a clear "not running" if nothing listens)."""
    recorded = recorded_socket(paths)
    if recorded is not None and recorded != paths.socket and _is_our_socket(recorded):
        return recorded
    return paths.socket


def recorded_socket(paths: Paths) -> Path | None:
    """The socket path in the lock file (second line), or None."""
    from pathlib import Path

    recorded = _recorded(paths.lock)
    return None if recorded is None else Path(recorded)


def _recorded(lock: str | Path) -> str | None:
    """The second line of the lock file if it is a path (a regular file only,
    not through a link, a FIFO refused rather than waited on: safefile)."""
    from sloth_daemon.safefile import read_file

    try:
        data = read_file(lock, 8192, head=True)
    except OSError:  # missing, or not a regular file
        return None
    lines = data.decode("utf-8", "replace").splitlines()
    return lines[1] if len(lines) > 1 and lines[1].startswith("/") else None


def _is_our_socket(p: str | Path) -> bool:
    # Ours only: a socket another user planted where we look must not get our jobs' environments.
    try:
        st = os.lstat(p)
    except OSError:
        return False
    return stat.S_ISSOCK(st.st_mode) and st.st_uid == os.getuid()

"""Finding the running daemon's socket when this process's runtime dir is
not the daemon's.

The socket lives in the runtime dir, which depends on XDG_RUNTIME_DIR: a
daemon started from a desktop session listens in /run/user/UID/sloth while
cron, `su` or ssh without a session would look in /tmp/runtime-UID/sloth,
miss it, and start a second daemon that the instance lock refuses ("already
running"). The data dir does not depend on it, and the daemon writes its
socket's path into its lock file there (daemon.InstanceLock); a client that
finds no socket where it looks reads that. Kept import-light: `sloth add`
runs this.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from .paths import Paths


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
    return read_lock(paths.lock)[1]


def read_lock(lock: Path) -> tuple[str | None, Path | None]:
    """What the lock file says: the daemon's pid (digits, or None) and its
    socket (or None). Never follows a link to read it."""
    try:
        fd = os.open(lock, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return None, None
    try:
        lines = os.read(fd, 8192).decode("utf-8", "replace").splitlines()
    except OSError:
        return None, None
    finally:
        os.close(fd)
    pid = lines[0].strip() if lines and lines[0].strip().isdigit() else None
    return pid, Path(lines[1]) if len(lines) > 1 and lines[1].startswith("/") else None


def _is_our_socket(p: Path) -> bool:
    # Ours only: a socket another user planted where we look must not get our jobs' environments.
    try:
        st = os.lstat(p)
    except OSError:
        return False
    return stat.S_ISSOCK(st.st_mode) and st.st_uid == os.getuid()

"""Which process holds an flock: the proof that a process is the daemon.

The daemon is, by definition, the process that holds its data dir's
instance lock (daemon/main.py, InstanceLock): a second one cannot start. So a
process that says it is the daemon (the keeper's hello) is believed only
if it holds that lock. On Linux the kernel says who holds it
(/proc/locks: the pid that took each lock, and the file's device and
inode); elsewhere the lock must be held (a probe cannot take it) and the
file must name the process (the daemon writes its pid there, once it
holds it).
"""

from __future__ import annotations

import errno
import fcntl
import os
from pathlib import Path

PROC_LOCKS = "/proc/locks"


def holds(pid: int, path: Path) -> bool:
    """True if process ``pid`` holds the exclusive flock on ``path``."""
    try:
        st = os.lstat(path)  # a link is no lock file (the daemon opens it O_NOFOLLOW)
    except OSError:
        return False  # no lock file: no daemon
    by_kernel = _kernel_holders(st)
    if by_kernel is not None:
        return pid in by_kernel
    return held(path) and _named(path) == pid


def _kernel_holders(st: os.stat_result) -> set[int] | None:
    """The pids holding an exclusive flock on the file ``st`` describes, or
    None where /proc/locks cannot be read."""
    dev = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    try:
        with open(PROC_LOCKS, encoding="ascii", errors="replace") as f:
            lines = f.read(1 << 22).splitlines()
    except OSError:
        return None
    out = set()
    for line in lines:
        # "1: FLOCK  ADVISORY  WRITE 1234 fe:00:5678 0 EOF" ("1: -> FLOCK ..." waits for it)
        parts = line.split()
        if len(parts) >= 6 and parts[1:4] == ["FLOCK", "ADVISORY", "WRITE"] and parts[5] == dev:
            try:
                out.add(int(parts[4]))
            except ValueError:
                continue
    return out


def held(path: Path) -> bool:
    """Someone holds ``path`` exclusively: a shared lock cannot be had."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)  # an instant: the daemon retries its own for longer
        return False
    except OSError as e:
        return e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES)
    finally:
        os.close(fd)


def _named(path: Path) -> int | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            first = os.read(fd, 64).split(b"\n", 1)[0]
        finally:
            os.close(fd)
        return int(first)
    except (OSError, ValueError):
        return None

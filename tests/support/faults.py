"""Faults at the edges of the machine, for the chaos soak (issue 14): a
full disk, a flood of idle connections, another program holding the
queue's write lock; and (issue 20) a config file replaced by what a clumsy
user or an attacker leaves there. Each is real: a filled tmpfs, real
sockets, a real SQLite write transaction in another connection, a real
FIFO and a real link to /dev/zero.
"""

from __future__ import annotations

import errno
import os
import random
import re
import socket
import sqlite3
import subprocess
from pathlib import Path
from typing import Callable


class DiskFull:
    """A tmpfs of ``size_mb`` mounted at ``path`` (the daemon's home), which
    ``fill()`` fills to the last byte and ``free()`` empties again. Only
    where mounting is allowed (root, no seccomp in the way): ``mount``
    returns None elsewhere and the soak goes without this fault."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.filler = path / ".filler"

    @classmethod
    def mount(cls, path: Path, size_mb: int = 256) -> "DiskFull | None":
        path.mkdir(parents=True, exist_ok=True)
        if os.geteuid() != 0:
            return None
        p = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_mb}m,mode=0700", "tmpfs", str(path)],
                           capture_output=True, text=True)
        return cls(path) if p.returncode == 0 else None

    def fill(self) -> int:
        """Take every free byte; returns how many."""
        fd = os.open(self.filler, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        total, size = 0, 1 << 20
        try:
            while size:  # big writes, then smaller, until not one byte more fits
                try:
                    total += os.write(fd, b"\0" * size)
                except OSError as e:
                    if e.errno != errno.ENOSPC:
                        raise
                    size //= 2
        finally:
            os.close(fd)
        return total

    def free(self) -> None:
        self.filler.unlink(missing_ok=True)

    def unmount(self) -> None:
        self.free()
        subprocess.run(["umount", "-l", str(self.path)], capture_output=True)


def flood(sock_path: Path, n: int, hold: Callable[[], None]) -> int:
    """Open ``n`` idle connections to the daemon (as many as it takes), run
    ``hold()``, close them all. Returns how many were opened."""
    held: list[socket.socket] = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.setblocking(False)
            try:
                s.connect(str(sock_path))
            except (BlockingIOError, InterruptedError):
                pass  # in the accept queue: it counts
            except OSError:
                s.close()
                break  # the accept queue is full, or the daemon is down: enough
            held.append(s)
        hold()
        return len(held)
    finally:
        for s in held:
            s.close()


def hold_write_lock(db: Path, hold: Callable[[], None], wait_s: float = 10.0) -> bool:
    """Another program's write transaction on the queue file (BEGIN
    IMMEDIATE: the write lock), held through ``hold()`` -- past the daemon's
    busy timeout -- then rolled back. False if the lock could not be had."""
    con = sqlite3.connect(str(db), timeout=wait_s, isolation_level=None)
    try:
        try:
            con.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError:
            return False
        hold()
        con.execute("ROLLBACK")
        return True
    finally:
        con.close()


# What a config file may be replaced by (issue 20.5, 20.11): each must be
# refused by `sloth daemon reload` with a clear error while the daemon keeps
# serving, never hang it or be read without limit.
CONFIG_SWAPS = ("fifo", "dev-zero", "garbage", "huge-lane", "huge-number")
HUGE = "99999999999999999999999"


def swap_config(path: Path, what: str, good: str, rng: random.Random) -> None:
    """Replace the file at ``path`` (renamed over it, as an editor saves) by
    ``what`` of CONFIG_SWAPS, or ``lease=DURATION``: ``good`` (a valid
    config text with a top-level ``max_attempts`` and a ``[lanes]`` table
    last) with its lease set to DURATION."""
    tmp = path.with_name(path.name + ".swap")
    tmp.unlink(missing_ok=True)
    if what == "fifo":
        os.mkfifo(tmp, 0o600)  # an open for reading blocks until a writer comes
    elif what == "dev-zero":
        os.symlink("/dev/zero", tmp)  # endless
    elif what == "garbage":
        tmp.write_bytes(rng.randbytes(rng.randint(1, 4096)) + b'\n[lanes\n= "\xff\x00')
    elif what == "huge-lane":
        tmp.write_text(good + f"huge = {HUGE}\n")  # under [lanes]: a lane of 10**23 slots
    elif what == "huge-number":
        tmp.write_text(_set_key(good, "max_attempts", HUGE))
    elif what.startswith("lease="):
        tmp.write_text(_set_key(good, "lease_s", f'"{what[6:]}"'))
    else:
        raise ValueError(f"no such config swap: {what}")
    os.replace(tmp, path)


def restore_config(path: Path, text: str) -> None:
    """Put a regular file with ``text`` back (renamed over a FIFO or a link too)."""
    tmp = path.with_name(path.name + ".good")
    tmp.write_text(text)
    os.replace(tmp, path)


def _set_key(text: str, key: str, value: str) -> str:
    out, n = re.subn(rf"(?m)^{key} = .*$", f"{key} = {value}", text)
    if n != 1:
        raise ValueError(f"the config has no top-level {key} to replace")
    return out

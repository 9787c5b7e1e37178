"""One attempt's log file: capped (head and tail kept, the cut said in the
file), written only to a file this writer created, never raising.

Shared by the keeper, which writes each job's output here as it comes, and
whoever makes the folder the logs go in (``make_log_dir``).
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_DIRECTORY = getattr(os, "O_DIRECTORY", 0)


class LogWriter:
    """Writes one attempt's output, capped: past ``cap`` bytes it keeps the
    first half and the last half and says in between how much was cut.

    The file is created with the first byte written, so an attempt that
    prints nothing leaves no file. That is fewer empty files for the many
    quiet jobs, and it is cheaper than it looks: on ext4 every new file's
    metadata rides along with the queue's next fsync, which made creating
    it about a fifth of a trivial job's whole cost (tests/bench/bench_daemon.py).

    Only a file this writer creates is written: never one that exists (it
    is not ours: a stale file, or a symlink planted to make us write
    elsewhere), never through a symlink, never making folders (the caller
    made and checked the one it names).

    The head goes to disk as it arrives; the tail is held in memory and
    written at ``finish`` (so after a crash the log holds the head only).
    Never raises: a file that cannot be created or written (full disk, a
    folder in the way) counts the bytes lost, and ``problem`` says so for
    the job's history, since the log itself cannot."""

    def __init__(self, path: str | Path, cap: int) -> None:
        self.path = path
        self.fd: int | None = None  # the file we created, once the first byte comes
        self.closed = False  # finished: nothing more is written
        self.head_cap = cap // 2
        self.tail_cap = cap - self.head_cap
        self.head = 0
        self.tail = bytearray()
        self.cut = 0
        self.total = 0
        self.lost = 0  # bytes that could not be written (disk full ...)
        self.error: str | None = None
        self.problem: str | None = None  # what was lost and why, once finished

    def write(self, data: bytes) -> None:
        self.total += len(data)
        room = self.head_cap - self.head
        if room > 0:
            part, data = data[:room], data[room:]
            self._put(part)
            self.head += len(part)
        if data:
            self.tail += data
            over = len(self.tail) - self.tail_cap
            if over > 0:
                del self.tail[:over]
                self.cut += over

    def snapshot(self) -> bytes:
        """Everything written so far, as the finished log will show it. Read
        through the descriptor we created (pread), never by name: a symlink
        swapped in at the path must not be streamed to a follower."""
        if self.closed:
            return self._pread(self._size())
        data = self._pread(self.head) if self.head else b""
        if self.cut:
            data += f"\n[sloth] ... {self.cut} bytes cut here so far ...\n".encode()
        return data + bytes(self.tail)

    def _size(self) -> int:
        try:
            return os.fstat(self.fd).st_size if self.fd is not None else 0
        except OSError:
            return 0

    def _pread(self, n: int) -> bytes:
        out = bytearray()
        try:
            while self.fd is not None and len(out) < n:
                chunk = os.pread(self.fd, n - len(out), len(out))
                if not chunk:
                    break
                out += chunk
        except OSError:
            pass
        return bytes(out)

    def _open(self) -> None:
        try:
            folder, name = os.path.split(self.path)
            dfd = os.open(folder, os.O_RDONLY | _DIRECTORY | _NOFOLLOW)
        except OSError as e:
            self.error = f"cannot create {self.path}: {e.strerror or e}"
            return
        try:
            self.fd = os.open(name, os.O_RDWR | os.O_CREAT | os.O_EXCL | _NOFOLLOW,
                              0o600, dir_fd=dfd)
        except FileExistsError:
            self.error = self._exists(dfd, name)
        except OSError as e:
            self.error = f"cannot create {self.path}: {e.strerror or e}"
        finally:
            os.close(dfd)

    def _exists(self, dfd: int, name: str) -> str:
        try:
            if stat.S_ISDIR(os.lstat(name, dir_fd=dfd).st_mode):
                return f"cannot create {self.path}: {os.strerror(errno.EISDIR)}"
        except OSError:
            pass
        return f"{self.path} exists; not appending to a file sloth did not create"

    def _put(self, data: bytes) -> None:
        """Write all of ``data``, never raise: a full disk must not stop a
        kill or a settle. What could not be written is counted."""
        if not data:
            return
        if self.closed:
            return  # after finish nothing is written, nor a file made
        if self.error is None and self.fd is None:
            self._open()
        if self.error is not None or self.fd is None:
            self.lost += len(data)
            return
        view = memoryview(data)
        try:
            while view:
                n = os.write(self.fd, view)  # may write only part
                if not n:
                    raise OSError(errno.EIO, "the write made no progress")
                view = view[n:]
        except OSError as e:
            self.error = str(e.strerror or e)
            self.lost += len(view)

    def note(self, text: str) -> None:
        self.write(f"\n[sloth] {text}\n".encode())

    def finish(self) -> None:
        """Write the tail (and what was cut or lost); nothing is written after.
        The file stays open for ``snapshot`` until ``close``."""
        if self.closed:
            return
        if self.cut:
            self._put(
                f"\n[sloth] ... {self.cut} bytes cut here: the log keeps the first "
                f"{self.head_cap} and the last {self.tail_cap} bytes of {self.total} ...\n".encode()
            )
        self._put(bytes(self.tail))
        self.tail.clear()
        if self.error is not None:
            self.problem = f"{self.lost} bytes of output lost: {self.error}"
            if self.fd is not None:  # one more try, in case there is room again
                self.error = None
                self._put(f"\n[sloth] {self.problem}\n".encode())
        self.closed = True

    def close(self) -> None:
        self.finish()
        if self.fd is not None:
            try:
                os.close(self.fd)
            except OSError:
                pass
            self.fd = None


def make_log_dir(path: Path) -> None:
    """Create a folder for attempt logs (0700) if it is missing: LogWriter
    makes no folders. When it exists this is one failing mkdir, no metadata
    write, so calling it before each job costs next to nothing. Never
    raises: a folder that cannot be made is the LogWriter's problem to report."""
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError:
        pass

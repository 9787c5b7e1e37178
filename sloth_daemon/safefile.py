"""Opening a file that someone may have replaced, without getting stuck on it.

Every file sloth opens by a name a user can put something else at (the
config, the locks, queue.id, the keeper's journal and log, the daemon's
log, the service unit, the queue's header) goes through :func:`open_file`
or :func:`read_file`:

* opened with O_NONBLOCK and O_NOCTTY, so a FIFO, a tty or a device in its
  place opens at once (or fails) instead of blocking in open(2) for good,
  and never becomes our controlling terminal;
* then checked with fstat on the descriptor (what was opened, not what the
  name points at a moment later): anything but a regular file is refused,
  saying what it is ("... is a FIFO, not a regular file");
* read with a cap (read_file): a link to /dev/zero, a huge or a growing file
  is refused after ``cap`` + 1 bytes, never read to the end.

Links: sloth's own files (in its 0700 folders) are opened without following
one (``follow=False``, the default: paths.py's rule). A file the user
writes, such as config.toml, may be a link into a dotfiles repository
(``follow=True``): the link is followed, and what it leads to must still be
a regular file.

Only the standard library: the keeper, the fast CLI path and the queue's
core all use it.
"""

from __future__ import annotations

import errno
import os
import stat

_OPEN = os.O_CLOEXEC | os.O_NOCTTY | os.O_NONBLOCK
_CHUNK = 1 << 16
# What a mode is, for the message (S_ISLNK only with follow=False).
_KINDS = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISDIR, "a folder"), (stat.S_ISLNK, "a symbolic link"))


class NotRegular(OSError):
    """Something other than a regular file is at the path. ``str()`` is
    "PATH is a FIFO, not a regular file"; ``strerror`` the same without the
    path ("it is a FIFO, ...") for "cannot read PATH: ..." messages."""

    def __init__(self, path: str | os.PathLike[str], problem: str, code: int = errno.EINVAL) -> None:
        super().__init__(code, f"it {problem}", os.fspath(path))
        self.problem = problem

    def __str__(self) -> str:
        return f"{self.filename} {self.problem}"


class TooLarge(NotRegular):
    """A regular file longer than the reader's cap."""


def kind(mode: int) -> str:
    """What a file of ``mode`` is: "a regular file", "a FIFO", "a folder" ..."""
    if stat.S_ISREG(mode):
        return "a regular file"
    return next((name for test, name in _KINDS if test(mode)), "not a file")


def open_file(path: str | os.PathLike[str], flags: int = os.O_RDONLY, mode: int = 0o600, *,
              follow: bool = False) -> int:
    """A descriptor of the regular file at ``path`` (``flags`` as for
    os.open, O_CREAT included), blocking again once it is known to be a
    regular file. Raises FileNotFoundError, NotRegular (a link when
    ``follow`` is False, a FIFO, a device, a folder ...), or open's OSError."""
    try:
        fd = os.open(path, flags | _OPEN | (0 if follow else os.O_NOFOLLOW), mode)
    except OSError as e:
        raise _why_not(path, e, follow) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotRegular(path, f"is {kind(st.st_mode)}, not a regular file")
        os.set_blocking(fd, True)
        return fd
    except BaseException:
        os.close(fd)
        raise


def read_file(path: str | os.PathLike[str], cap: int, *, follow: bool = False, head: bool = False) -> bytes:
    """The contents of the regular file at ``path`` (see open_file), at
    most ``cap`` bytes: a longer one raises TooLarge, or with ``head`` gives
    its first ``cap`` bytes (a journal: what fits is kept)."""
    fd = open_file(path, os.O_RDONLY, follow=follow)
    try:
        if os.fstat(fd).st_size > cap and not head:
            raise _too_large(path, cap)
        chunks, left = [], cap + 1  # one byte past the cap tells a longer file (st_size may be 0: /proc)
        while left > 0:
            chunk = os.read(fd, min(left, _CHUNK))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if len(data) > cap and not head:
        raise _too_large(path, cap)
    return data[:cap]


def _too_large(path: str | os.PathLike[str], cap: int) -> TooLarge:
    return TooLarge(path, f"is larger than {_size(cap)}, the most sloth reads of it", errno.EFBIG)


def _size(n: int) -> str:
    for unit, shift in (("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift} {unit}"
    return f"{n} bytes"


def _why_not(path: str | os.PathLike[str], e: OSError, follow: bool) -> OSError:
    """open(2)'s error, as NotRegular when the cause is what is at the path:
    ELOOP (a link, with O_NOFOLLOW), EISDIR, ENXIO (a FIFO opened to write
    with no reader, a socket), ENODEV/EOPNOTSUPP (a device or socket)."""
    if e.errno not in (errno.ELOOP, errno.EISDIR, errno.ENXIO, errno.ENODEV, errno.EOPNOTSUPP):
        return e
    try:
        st = os.stat(path) if follow else os.lstat(path)
    except OSError:
        return e
    if stat.S_ISLNK(st.st_mode):
        return NotRegular(path, "is a symbolic link; sloth does not follow links to its own files", errno.ELOOP)
    if stat.S_ISREG(st.st_mode):
        return e
    return NotRegular(path, f"is {kind(st.st_mode)}, not a regular file", e.errno or errno.EINVAL)


def replace_file(path: str | os.PathLike[str], data: bytes, mode: int = 0o600) -> None:
    """``data`` at ``path``, whole or not at all (a temporary file beside it,
    renamed over it), where a file a user names is written (a page, a
    metrics file). Only a regular file or nothing is replaced: a rename
    would put a file in the place of a FIFO, a device (``/dev/full``,
    ``/dev/null`` as root), a link or a folder, so those raise NotRegular
    and are left as they are."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        pass
    else:
        if stat.S_ISLNK(st.st_mode):
            raise NotRegular(path, "is a symbolic link; name the file it leads to", errno.ELOOP)
        if not stat.S_ISREG(st.st_mode):
            raise NotRegular(path, f"is {kind(st.st_mode)}, not a regular file")
    head, name = os.path.split(os.fspath(path))
    tmp = os.path.join(head, f".{name}.{os.getpid()}.sloth-tmp")
    try:
        os.unlink(tmp)  # left by a crash of a process of this pid
    except FileNotFoundError:
        pass
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    try:
        try:
            os.fchmod(fd, mode)  # whatever the umask
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise

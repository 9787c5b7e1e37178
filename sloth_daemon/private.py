"""Folders and files that are the user's own and nobody else's.

Every sloth folder (data, logs, logs/jobs, the runtime folder, config) is
created 0700 and checked each time the daemon starts: it must be a folder
(not a symbolic link to one), owned by the daemon's uid, and not writable by
group or others (someone else could have put a link or a file of theirs in
it). A folder of ours that others may only read is tightened to 0700; any
other problem is refused with the fix in the message, before anything is
created in it. Files (the queue, its -wal/-shm, the lock, the daemon log)
are 0600, opened without following links, and never anything but regular
files. ``problems`` is the same rule as a report, for ``sloth doctor``.

No ``chmod`` here follows a link: checks and changes go through a
descriptor opened with O_NOFOLLOW.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import BinaryIO, NoReturn

from . import owners
from .errors import LogUnreadable, StorageError
from .safefile import NotRegular, kind, open_file
from .text import shell_command

DIR_MODE = 0o700
FILE_MODE = 0o600
_OPEN_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_OPEN_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY  # a FIFO must not block us


def ensure_dir(p: Path) -> None:
    """Create ``p`` (missing parents too) 0700 and check it (see module
    docstring). Raises StorageError saying what is wrong and how to fix it.
    Nothing is made inside a folder of another user (root's excepted: /tmp,
    /run/user): what we made there would be ours in their folder."""
    _refuse_foreign_parent(p)
    try:
        os.makedirs(p, mode=DIR_MODE, exist_ok=True)
    except FileExistsError:
        pass  # a file or a dangling link in the way: the check below says which
    except OSError as e:
        _refuse_foreign_parent(p, root_too=True)  # e.g. a folder `sudo sloth` left: say whose, not "denied"
        raise StorageError(f"cannot create folder {p}: {e.strerror or e}",
                           hint="Check the permissions of its parent, or set SLOTH_HOME to a folder of yours.") from e
    secure(p, is_dir=True)


def _refuse_foreign_parent(p: Path, *, root_too: bool = False) -> None:
    """If ``p`` is missing, its nearest existing ancestor must be ours (or
    root's, unless ``root_too``); else refuse, saying whose it is."""
    parent = p
    while True:
        try:
            st = os.stat(parent)
            break
        except (FileNotFoundError, NotADirectoryError, PermissionError):  # missing, or in a folder we may not search
            if parent == parent.parent:
                return
            parent = parent.parent
        except OSError:
            return  # makedirs says what it is
    if parent != p and st.st_uid != os.getuid() and (root_too or st.st_uid != 0):
        problem, fix = owners.not_ours(parent, st.st_uid)
        _refuse(parent, f"{problem}: sloth makes nothing in it (it wanted {p})", fix)


def secure(p: Path, *, is_dir: bool) -> None:
    """Check ``p`` (if it exists) and tighten a mode that lets others read
    it. Raises StorageError for a link, a wrong type, another owner, or a
    mode that lets others write."""
    try:
        fd = os.open(p, _OPEN_DIR if is_dir else _OPEN_FILE)
    except FileNotFoundError:
        if os.path.islink(p):
            _refuse(p, "is a symbolic link to nothing", f"Remove it ({shell_command('rm', p)}); sloth makes its own.")
        return
    except OSError as e:
        _refuse(p, *_open_problem(p, e, is_dir))
    try:
        found = _problem(p, os.fstat(fd), is_dir)
        if found is not None and found[0] != "loose":
            _refuse(p, *found)
        if found is not None:
            os.fchmod(fd, DIR_MODE if is_dir else FILE_MODE)
    finally:
        os.close(fd)


def problems(p: Path, *, is_dir: bool) -> tuple[str, bool] | None:
    """What is wrong with ``p`` and whether the daemon refuses it (False: it
    only tightens the mode), or None if it is fine or absent. Changes
    nothing (for doctor)."""
    try:
        st = os.lstat(p)
    except (FileNotFoundError, NotADirectoryError):
        return None
    if stat.S_ISLNK(st.st_mode):
        return _link_problem(p)[0], True
    found = _problem(p, st, is_dir)
    if found is not None and found[0] == "loose":
        return f"has mode {stat.S_IMODE(st.st_mode):04o}: others may read it", False
    return None if found is None else (found[0], True)


def _problem(p: Path, st: os.stat_result, is_dir: bool) -> tuple[str, str] | None:
    wanted = "folder" if is_dir else "regular file"
    if is_dir and not stat.S_ISDIR(st.st_mode) or not is_dir and not stat.S_ISREG(st.st_mode):
        return (f"is {kind(st.st_mode)}, not a {wanted}",
                f"Move it away ({shell_command('mv', p, f'{p}.away')}); sloth makes its own.")
    if st.st_uid != os.getuid():
        return owners.not_ours(p, st.st_uid)
    mode = stat.S_IMODE(st.st_mode)
    if mode & 0o022:
        return (f"is writable by {'group and others' if mode & 0o002 else 'its group'} (mode {mode:04o})",
                "Check that everything in it is yours, then: "
                + shell_command("chmod", f"{DIR_MODE if is_dir else FILE_MODE:o}", p))
    if mode & 0o077:
        return "loose", ""
    return None


def _open_problem(p: Path, e: OSError, is_dir: bool) -> tuple[str, str]:
    if e.errno == errno.ELOOP or os.path.islink(p):
        return _link_problem(p)
    if e.errno == errno.ENOTDIR:
        return "is not a folder", f"Move it away ({shell_command('mv', p, f'{p}.away')}); sloth makes its own."
    if isinstance(e, NotRegular):
        return e.problem, f"Move it away ({shell_command('mv', p, f'{p}.away')}); sloth makes its own."
    return f"cannot be opened: {e.strerror or e}", "Check its permissions (`sloth doctor`)."


def _link_problem(p: Path) -> tuple[str, str]:
    return ("is a symbolic link; sloth does not follow links for its own folders and files",
            f"Remove the link ({shell_command('rm', p)}) and point SLOTH_HOME at the real folder instead.")


def _refuse(p: Path, problem: str, fix: str) -> NoReturn:
    raise StorageError(f"{p} {problem}", hint=fix)


# -------------------------------------------------------------------- files
def open_append(p: Path) -> BinaryIO:
    """The daemon's own log, for appending: created 0600, never through a
    link, refused unless it is a regular file of ours (safefile.open_file:
    a FIFO there is refused, not waited on)."""
    try:
        fd = open_file(p, os.O_WRONLY | os.O_APPEND | os.O_CREAT, FILE_MODE)
    except OSError as e:
        _refuse(p, *_open_problem(p, e, False))
    try:
        found = _problem(p, os.fstat(fd), False)
        if found is not None and found[0] != "loose":
            _refuse(p, *found)
        if found is not None:
            os.fchmod(fd, FILE_MODE)
        return os.fdopen(fd, "ab")
    except BaseException:
        os.close(fd)
        raise


def open_regular(p: Path) -> BinaryIO:
    """``p`` for reading: never through a link, and only a regular file (a
    FIFO or a device in its place is refused, not read from, which could
    hang: safefile.open_file). Raises FileNotFoundError, or OSError saying
    which it was."""
    return os.fdopen(open_file(p), "rb")


def open_log(p: Path) -> BinaryIO:
    """A job's log for reading (see open_regular). Raises FileNotFoundError
    (the attempt printed nothing) or LogUnreadable."""
    try:
        return open_regular(p)
    except FileNotFoundError:
        raise
    except OSError as e:
        raise LogUnreadable(p, e) from None

"""Where the database, socket, logs and config live.

Platform dirs by default (platformdirs); ``SLOTH_HOME`` overrides every
location at once, for tests and for "a second queue in a second folder".

The user's own files: folders and files that are the user's own and nobody else's.

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

Whose a file is: whose a file, a folder or a daemon is, and the advice that follows.

The one place that words a problem of ownership. Sloth never advises
taking over (chown) or removing another user's files, nor loosening their
modes: a folder, a socket or a daemon of another user is theirs, and the
way on is to use it as them or to use a folder of one's own. The only
ownership sloth suggests changing is of something root made in the
user's own home (a ``sudo sloth``): it is given back to that user.

Names come from the password database (``pwd``, imported when asked: the
fast path of ``sloth add`` never needs it).
"""

from __future__ import annotations

import errno
import os
import shlex
import stat
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import BinaryIO, NoReturn

from sloth_daemon.errors import ConfigError, LogUnreadable, StorageError
from sloth_daemon.safefile import NotRegular, kind, open_file
from sloth_daemon.text import shell_command

APP = "sloth"
# sockaddr_un.sun_path: 108 bytes on Linux, 104 on macOS/BSD, NUL included.
SOCKET_PATH_MAX = 107 if sys.platform.startswith("linux") else 103


@dataclass(frozen=True)
class Paths:
    home: Path | None  # SLOTH_HOME if set
    data_dir: Path
    log_dir: Path
    runtime_dir: Path
    config_dir: Path
    queue_id: str | None = None  # the queue's identity, once it is open: its logs live under it

    @property
    def db(self) -> Path:
        return self.data_dir / "queue.db"

    @property
    def lock(self) -> Path:
        # The lock guards the database, so it lives beside it.
        return self.data_dir / "daemon.lock"

    @property
    def socket(self) -> Path:
        return self.runtime_dir / "sloth.sock"

    @property
    def config_file(self) -> Path:
        return self.config_dir / "config.toml"

    @property
    def daemon_log(self) -> Path:
        return self.log_dir / "daemon.log"

    @property
    def queue_id_file(self) -> Path:
        """Which queue this folder holds (identity.py): kept beside the
        database, so a lost or replaced database is noticed."""
        return self.data_dir / "queue.id"

    @property
    def all_jobs_log_dir(self) -> Path:
        return self.log_dir / "jobs"

    @property
    def jobs_log_dir(self) -> Path:
        """This queue's job logs: one folder per queue identity, so a new
        queue (ids from 1 again) never writes into an old queue's logs."""
        return self.all_jobs_log_dir / self.queue_id if self.queue_id else self.all_jobs_log_dir

    def for_queue(self, queue_id: str) -> "Paths":
        return replace(self, queue_id=queue_id)

    # The keeper (keeper/main.py): the process that outlives the daemon and owns
    # running jobs. Its lock and journal sit beside the db (they guard and
    # record state of this data dir); its socket beside the daemon's.
    @property
    def keeper_socket(self) -> Path:
        return self.runtime_dir / "keeper.sock"

    @property
    def keeper_lock(self) -> Path:
        return self.data_dir / "keeper.lock"

    @property
    def keeper_journal(self) -> Path:
        return self.data_dir / "keeper.journal"

    @property
    def keeper_log(self) -> Path:
        return self.log_dir / "keeper.log"

    def job_log(self, job_id: int, attempt: int) -> Path:
        # Flat: one file per attempt, no folder per job (a mkdir per job
        # measurably slowed runs of many tiny jobs).
        return self.jobs_log_dir / f"{job_id}.{attempt}.log"

    def private_dirs(self) -> list[Path]:
        """Every folder sloth writes in, parents first (config only if it exists:
        the daemon reads it, never makes it)."""
        dirs = [self.data_dir, self.log_dir, self.all_jobs_log_dir, self.runtime_dir]
        if self.queue_id:
            dirs.append(self.jobs_log_dir)
        if self.config_dir.exists() and self.config_dir not in dirs:
            dirs.append(self.config_dir)
        return list(dict.fromkeys(dirs))

    def private_files(self) -> list[Path]:
        """Every file of sloth's in those folders (the keeper's too: a FIFO
        or a link at one is refused when the daemon starts, before a keeper
        is spawned to trip over it)."""
        db = str(self.db)
        return [self.db, Path(db + "-wal"), Path(db + "-shm"), self.lock, self.queue_id_file, self.daemon_log,
                self.keeper_lock, self.keeper_journal, self.keeper_log]

    def as_dict(self) -> dict[str, str]:
        return {
            "data_dir": str(self.data_dir),
            "db": str(self.db),
            "log_dir": str(self.log_dir),
            "jobs_log_dir": str(self.jobs_log_dir),
            "socket": str(self.socket),
            "config": str(self.config_file),
        }


def resolve(env: dict[str, str] | None = None) -> Paths:
    env = dict(os.environ) if env is None else env
    home = env.get("SLOTH_HOME")
    if home:
        h = Path(home).expanduser()
        if not h.is_absolute():
            # Relative to what? Each command's folder would be another queue, and
            # the daemon (which runs in /) would make yet another one there.
            raise ConfigError(f"SLOTH_HOME must be an absolute path, got {home!r}",
                              hint=f'Set it to a full path, e.g. SLOTH_HOME="$PWD/{home}".')
        return Paths(h, h, h / "logs", h / "run", h)
    import platformdirs

    import warnings

    data = Path(platformdirs.user_data_dir(APP, appauthor=False))
    with warnings.catch_warnings():
        # Without XDG_RUNTIME_DIR platformdirs warns and guesses; we check
        # the guess below and fall back to a private folder in data.
        warnings.simplefilter("ignore")
        runtime = Path(platformdirs.user_runtime_dir(APP, appauthor=False))
    if not _usable_parent(runtime):
        # e.g. no /run/user/$UID (no logind session): keep it private in data.
        runtime = data / "run"
    return Paths(
        None,
        data,
        Path(platformdirs.user_log_dir(APP, appauthor=False)),
        runtime,
        Path(platformdirs.user_config_dir(APP, appauthor=False)),
    )


def _usable_parent(p: Path) -> bool:
    parent = p.parent
    return parent.is_dir() and os.access(parent, os.W_OK | os.X_OK)


def check_socket_path(p: Path) -> None:
    n = len(os.fsencode(str(p)))
    if n > SOCKET_PATH_MAX:
        raise StorageError(
            f"socket path {p} is {n} bytes; Unix sockets allow at most {SOCKET_PATH_MAX}",
            hint="Point SLOTH_HOME at a shorter folder (e.g. ~/.sloth).",
        )


def secure_all(paths: Paths) -> None:
    """Make and check every folder, and check every file there is (the
    daemon's start, before anything is created in them)."""
    for d in paths.private_dirs():
        ensure_dir(d)
    for f in paths.private_files():
        secure(f, is_dir=False)


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
        problem, fix = not_ours(parent, st.st_uid)
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
        _hold_to_rule(p, fd, is_dir)
    finally:
        os.close(fd)


def _hold_to_rule(p: Path, fd: int, is_dir: bool) -> None:
    """What ``fd`` (opened as ``p``) is must be ours: refused (StorageError)
    for a wrong type, another owner or a mode others may write; a mode that
    lets others read is tightened."""
    found = _problem(p, os.fstat(fd), is_dir)
    if found is not None and found[0] != "loose":
        _refuse(p, *found)
    if found is not None:
        os.fchmod(fd, DIR_MODE if is_dir else FILE_MODE)


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
        return not_ours(p, st.st_uid)
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
    link, refused unless it is a regular file of ours (open_file:
    a FIFO there is refused, not waited on)."""
    try:
        fd = open_file(p, os.O_WRONLY | os.O_APPEND | os.O_CREAT, FILE_MODE)
    except OSError as e:
        _refuse(p, *_open_problem(p, e, False))
    try:
        _hold_to_rule(p, fd, False)
        return os.fdopen(fd, "ab")
    except BaseException:
        os.close(fd)
        raise


def open_regular(p: Path) -> BinaryIO:
    """``p`` for reading: never through a link, and only a regular file (a
    FIFO or a device in its place is refused, not read from, which could
    hang: open_file). Raises FileNotFoundError, or OSError saying
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


def user_name(uid: int) -> str | None:
    """The login name of ``uid``, or None if this machine has none for it."""
    import pwd

    try:
        return pwd.getpwuid(uid).pw_name
    except (KeyError, OverflowError):
        return None


def whose(uid: int) -> str:
    """``user alice (uid 1234)``; ``uid 1234 (no user of that name here)``."""
    name = user_name(uid)
    return f"user {name} (uid {uid})" if name else f"uid {uid} (no user has that id here)"


def not_ours(p: os.PathLike[str] | str, owner: int) -> tuple[str, str]:
    """(problem, fix) for ``p``, owned by ``owner``, not by us."""
    return f"is owned by {whose(owner)}, not by {whose(os.getuid())} who runs sloth", advice(p, owner)


def advice(p: os.PathLike[str] | str, owner: int) -> str:
    """What to do about ``p`` (or the daemon serving there) belonging to
    ``owner``, who is not us. Never: chown it to us, chmod it, remove it."""
    me = os.getuid()
    mine = "set SLOTH_HOME to a folder of your own"
    if owner == 0 and me != 0 and _in_my_home(Path(p)):
        # sudo sloth left it in our own home: giving it back takes nothing from anyone
        return (f"{p} was made in your home by sloth run as root (sudo?): give it back with "
                f"`sudo chown -R {me} {shlex.quote(os.fspath(p))}`, or {mine}.")
    name = user_name(owner)
    as_them = f"run sloth as that user (`sudo -u {shlex.quote(name)} sloth ...`)" if name else "run sloth as that user"
    return (f"It belongs to {whose(owner)}: sloth does not use, take over or remove another user's files. "
            f"To work with that user's queue, {as_them}; for a queue of your own, {mine}.")


def _in_my_home(p: Path) -> bool:
    home = os.path.expanduser("~")
    try:
        return home not in ("", "/") and Path(os.path.abspath(p)).is_relative_to(os.path.abspath(home))
    except (OSError, ValueError):
        return False


def peer_refused(peer: int, owner: int) -> tuple[str, str]:
    """(message, hint) of a daemon of ``owner`` refusing a client of ``peer``:
    the daemon read nothing from it, so nothing was done."""
    name = user_name(owner)
    as_them = f"`sudo -u {shlex.quote(name)} sloth ...`" if name else "sloth as that user"
    return (f"{whose(peer)} may not use this sloth daemon: it belongs to {whose(owner)}, and serves only them",
            f"Nothing was done. To work with that user's queue, run {as_them}; for a queue of your own, "
            "set SLOTH_HOME to a folder of yours.")

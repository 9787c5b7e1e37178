"""Where the database, socket, logs and config live.

Platform dirs by default (platformdirs); ``SLOTH_HOME`` overrides every
location at once, for tests and for "a second queue in a second folder".
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import BinaryIO

from .errors import ConfigError, StorageError

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

    # The keeper (keeper.py): the process that outlives the daemon and owns
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


def ensure_private_dir(p: Path) -> None:
    """Create ``p`` (and parents) 0700 and check it is ours (private.py).
    Raises StorageError with the fix."""
    from .private import ensure_dir

    ensure_dir(p)


def secure_all(paths: Paths) -> None:
    """Make and check every folder, and check every file there is (the
    daemon's start, before anything is created in them)."""
    from .private import secure

    for d in paths.private_dirs():
        ensure_private_dir(d)
    for f in paths.private_files():
        secure(f, is_dir=False)


def open_private_log(p: Path) -> BinaryIO:
    """The daemon's log, to append to: 0600, never through a link."""
    from .private import open_append

    return open_append(p)

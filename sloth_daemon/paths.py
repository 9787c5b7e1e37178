"""Where the database, socket, logs and config live.

Platform dirs by default (platformdirs); ``SLOTH_HOME`` overrides every
location at once, for tests and for "a second queue in a second folder".
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

from .errors import StorageError

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
    def jobs_log_dir(self) -> Path:
        return self.log_dir / "jobs"

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

    def as_dict(self) -> dict[str, str]:
        return {
            "data_dir": str(self.data_dir),
            "db": str(self.db),
            "log_dir": str(self.log_dir),
            "socket": str(self.socket),
            "config": str(self.config_file),
        }


def resolve(env: dict[str, str] | None = None) -> Paths:
    env = dict(os.environ) if env is None else env
    home = env.get("SLOTH_HOME")
    if home:
        h = Path(home).expanduser().absolute()
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
    """Create ``p`` (and parents) and make it 0700. Raises StorageError."""
    try:
        p.mkdir(parents=True, exist_ok=True)
        os.chmod(p, 0o700)
    except OSError as e:
        raise StorageError(
            f"cannot create or secure folder {p}: {e.strerror or e}",
            hint="Check permissions of its parent, or set SLOTH_HOME to a writable folder.",
        ) from e

"""Which queue a folder holds, so a lost or replaced database is noticed and
never silently recreated.

A queue gets a random id when it is made (Queue.identity, in its meta
table). The daemon writes the same id beside it, in ``queue.id``, the first
time it opens that queue, and keeps the queue's job logs under
``logs/jobs/ID/``. At every start, before the database is opened (opening a
missing or empty file would make a new, empty queue):

- no ``queue.id``: a fresh folder, or one from before identities: go on;
- ``queue.id`` but no database, an empty one, or one that is not SQLite:
  the queue was lost; refuse, and say how to get it back;
- after opening: a database with another id than ``queue.id`` (put there by
  hand): refuse.

To start a new, empty queue on purpose: move ``queue.db`` and ``queue.id``
aside. Doctor reports the same findings (``findings``), read-only.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from sloth_daemon.paths import ensure_dir
from sloth_daemon.backends.sqlite.db import HEADER
from sloth_daemon.errors import StorageError
from sloth_daemon.paths import Paths
from sloth_daemon.safefile import NotRegular, open_file, read_file
from sloth_daemon.text import shell_command

QUEUE_ID_MAX_BYTES = 4096  # an id is 16 hex digits and a newline
_LEGACY_LOG = re.compile(r"[0-9]+\.[0-9]+\.log")


class QueueLost(StorageError):
    """This folder held a queue whose database is gone, empty or replaced."""

    code = "queue_lost"


def recorded(paths: Paths) -> str | None:
    """The id in ``queue.id``, or None if there is none."""
    try:
        text = read_file(paths.queue_id_file, QUEUE_ID_MAX_BYTES).decode("ascii", "replace").strip()
    except FileNotFoundError:
        return None
    except OSError as e:
        raise StorageError(f"cannot read {paths.queue_id_file}: {e.strerror or e}",
                           hint="Remove it if it is not a file sloth made "
                                f"({shell_command('rm', paths.queue_id_file)}).") from e
    return text or None


def check_before_open(paths: Paths) -> None:
    """Refuse to open a queue that this folder had and lost (see module docstring)."""
    qid = recorded(paths)
    if qid is None:
        return
    problem = file_problem(paths.db)
    if problem is not None:
        raise QueueLost(f"this folder held queue {qid}, but {paths.db} {problem}", hint=recover_hint(paths, qid))


def file_problem(db: Path) -> str | None:
    """Why ``db`` is no queue database at all (missing, empty, not SQLite), or None."""
    try:
        fd = open_file(db)  # a FIFO in its place is refused, not read from
    except FileNotFoundError:
        return "is missing"
    except NotRegular as e:
        return e.problem
    except OSError as e:
        return f"cannot be read ({e.strerror or e})"
    try:
        head = os.read(fd, len(HEADER))
    except OSError as e:
        return f"cannot be read ({e.strerror or e})"
    finally:
        os.close(fd)
    if not head:
        return "is empty (0 bytes)"
    if head != HEADER:
        return "is not a SQLite database (its header is wrong)"
    return None


def recover_hint(paths: Paths, qid: str) -> str:
    db = paths.db
    return (f"Put the queue back: restore {db} from a backup, or salvage a damaged copy with "
            f"`{shell_command('sqlite3', f'{db}.broken', '.recover')} | {shell_command('sqlite3', db)}` "
            f"(its logs are in {paths.all_jobs_log_dir / qid}). "
            f"To start a new, empty queue instead, move {db} and {paths.queue_id_file} aside.")


def queue_paths(paths: Paths) -> Paths:
    """The paths of the queue this folder holds (its own log folder), as a
    client reads them without opening the queue."""
    qid = recorded(paths)
    return paths.for_queue(qid) if qid else paths


def adopt(paths: Paths, identity: str, *, had_jobs: bool) -> Paths:
    """After the queue is open: record its id beside it, or refuse one that
    is not the queue this folder held. Returns the paths with the queue's
    own log folder, made 0700."""
    qid = recorded(paths)
    if qid is not None and qid != identity:
        raise QueueLost(f"{paths.db} holds queue {identity}, but this folder held queue {qid}",
                        hint=recover_hint(paths, qid))
    mine = paths.for_queue(identity)
    ensure_dir(mine.jobs_log_dir)
    if qid is None:
        if had_jobs:
            _adopt_flat_logs(paths.all_jobs_log_dir, mine.jobs_log_dir)
        _write_id(paths.queue_id_file, identity)
    return mine


def ensure_log_dir(mine: Paths) -> None:
    """The log folder of a queue that lives elsewhere (a PostgreSQL queue:
    its identity is kept in its database, nothing beside it here)."""
    ensure_dir(mine.jobs_log_dir)


def _adopt_flat_logs(flat: Path, mine: Path) -> None:
    """A queue from before identities kept its logs in logs/jobs/ itself:
    they are this queue's (it had jobs, so it is the queue that wrote them)."""
    for name in os.listdir(flat):
        src = flat / name
        if _LEGACY_LOG.fullmatch(name) and src.is_file() and not src.is_symlink():
            os.replace(src, mine / name)


def _write_id(p: Path, identity: str) -> None:
    tmp = p.with_name(p.name + ".tmp")
    tmp.unlink(missing_ok=True)
    with os.fdopen(open_file(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL), "w", encoding="ascii") as f:
        f.write(identity + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, p)


def findings(paths: Paths) -> tuple[str, str, str]:
    """(status, detail, fix) about which queue this folder holds, for doctor:
    ok for a sound queue or a fresh folder, fail for a lost or replaced one,
    warn when there is no queue but logs of earlier ones are there."""
    qid = recorded(paths)
    problem = file_problem(paths.db)
    if qid is not None and problem is not None:
        return "fail", f"LOST: this folder held queue {qid}, but {paths.db} {problem}", recover_hint(paths, qid)
    if qid is None and problem == "is missing":
        old = _earlier_logs(paths)
        if old:
            return ("warn", f"no queue here yet, but logs of earlier queues are ({', '.join(old[:3])})",
                    f"If a queue.db was lost, put it back in {paths.data_dir} before the next start; "
                    "else nothing to do (a new queue is made at first start).")
        return "ok", "no queue yet: a fresh folder (the queue is made at first start)", ""
    if problem is not None:
        return "fail", f"{paths.db} {problem}", recover_hint(paths, "ID")
    return "ok", f"queue {qid or '(id not recorded yet)'}", ""


def _earlier_logs(paths: Paths) -> list[str]:
    try:
        names = sorted(os.listdir(paths.all_jobs_log_dir))
    except OSError:
        return []
    return [n for n in names if (paths.all_jobs_log_dir / n).is_dir() or _LEGACY_LOG.fullmatch(n)]

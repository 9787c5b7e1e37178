"""Adding jobs to the SQLite queue: one job, or a batch in one transaction.

A base class of SqliteQueue (sqlite.py). A batch is validated whole before
anything is written (all or none), each distinct environment is stored
once, and runs of keyless jobs go in with one executemany.
"""

from __future__ import annotations

import hashlib
import sqlite3
from typing import Any, Callable, ContextManager, Iterable, Mapping, Sequence

from ..clock import Clock
from ..spec import Defaults, EnvCache, JobSpec

# The literal IN list must match jobs_active_key's WHERE for the partial index
# to apply; with bound parameters it cannot, and the lookup scans the table.
SQL_ACTIVE_KEY = (
    "SELECT id FROM jobs INDEXED BY jobs_active_key"
    " WHERE key = ? AND state IN ('queued', 'claimed')"
)
SQL_INSERT = (
    "INSERT INTO jobs (command, state, lane, priority, max_attempts, lease_s,"
    " timeout_s, not_before, key, cwd, env_id, label, shell, created_at, updated_at)"
    " VALUES (?, 'queued', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)


class SqliteEnqueue:
    _conn: sqlite3.Connection
    _tx: Callable[..., ContextManager[sqlite3.Connection]]  # SqliteReads._tx
    clock: Clock
    lease_s: float
    max_attempts: int

    def enqueue(
        self,
        command: Sequence[str],
        *,
        max_attempts: int | None = None,
        lease_s: float | None = None,
        not_before: float | None = None,
        priority: int = 0,
        lane: str = "default",
        key: str | None = None,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        timeout_s: float | None = None,
        label: str | None = None,
        shell: bool = False,
    ) -> int:
        """Add a job in state ``queued`` and return its id.

        With ``key``: if an unfinished (queued or claimed) job has the same key,
        return its id and add nothing. Raises BadRequest for invalid fields.
        """
        return self.enqueue_many(
            [
                dict(
                    command=command, max_attempts=max_attempts, lease_s=lease_s,
                    not_before=not_before, priority=priority, lane=lane, key=key,
                    cwd=cwd, env=env, timeout_s=timeout_s, label=label, shell=shell,
                )
            ]
        )[0]

    def enqueue_many(self, specs: Iterable[Mapping[str, Any]]) -> list[int]:
        """Enqueue many jobs in one transaction; all or none. Same rules as enqueue."""
        cache: EnvCache = {}
        defaults = Defaults(self.max_attempts, self.lease_s)
        rows = [JobSpec.parse(s, defaults, cache) for s in specs]  # validate all before writing any
        now = self.clock.now()
        ids: list[int] = []
        run: list[tuple] = []  # consecutive rows without a key, inserted by one executemany
        with self._tx() as c:
            env_ids: dict[str, int] = {}  # one envs row per distinct environment
            for r in rows:
                if r.env_json is not None and r.env_json not in env_ids:
                    env_ids[r.env_json] = _put_env(c, r.env_json)
            for r in rows:
                env_id = None if r.env_json is None else env_ids[r.env_json]
                if r.key is None:
                    run.append(_values(r, env_id, now))
                    continue
                ids += _insert_run(c, run)
                run = []
                hit = c.execute(SQL_ACTIVE_KEY, (r.key,)).fetchone()
                if hit:
                    ids.append(hit[0])
                    continue
                ids.append(int(c.execute(SQL_INSERT, _values(r, env_id, now)).lastrowid or 0))
            ids += _insert_run(c, run)
        return ids


def _put_env(c: sqlite3.Connection, text: str) -> int:
    """The id of this environment in ``envs``, adding it if new."""
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
    c.execute("INSERT INTO envs (hash, data) VALUES (?, ?) ON CONFLICT(hash) DO NOTHING",
              (digest, text))
    return c.execute("SELECT id FROM envs WHERE hash = ?", (digest,)).fetchone()[0]


def _values(r: JobSpec, env_id: int | None, now: float) -> tuple:
    nb = now if r.not_before is None else r.not_before
    return (r.command_json, r.lane, r.priority, r.max_attempts, r.lease_s, r.timeout_s, nb,
            r.key, r.cwd, env_id, r.label, int(r.shell), now, now)


def _insert_run(c: sqlite3.Connection, run: list[tuple]) -> list[int]:
    """Insert rows with one executemany; return their ids. Under our write lock
    with AUTOINCREMENT each insert takes the next rowid, so the ids of a run
    are the consecutive numbers ending at last_insert_rowid()."""
    if not run:
        return []
    c.executemany(SQL_INSERT, run)
    last = c.execute("SELECT last_insert_rowid()").fetchone()[0]
    return list(range(last - len(run) + 1, last + 1))

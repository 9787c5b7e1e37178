"""Adding jobs to the SQLite queue: one job, or a batch in one transaction.

A base class of SqliteQueue (sqlite.py). A batch is validated whole before
anything is written (all or none), each distinct environment is stored
once, and runs of keyless jobs go in with one executemany.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from typing import Any, Iterable, Mapping, Sequence

from .. import db
from ..clock import Clock
from ..errors import IllegalTransition
from ..spec import Defaults, EnvCache, JobSpec
from ..text import as_bytes, is_utf8
from .sqlite_reads import reads

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


BATCH_PREFIX, BATCH_PREFIX_END = "batch:", "batch;"  # meta keys of batch records: [start, end)
BATCH_RECORD_S = 86400.0  # long enough to ask after any crash and restart


def _runs(ids: list[int]) -> list[list[int]]:
    """[3, 4, 5, 9] -> [[3, 5], [9, 9]]: a batch's ids are mostly consecutive."""
    out: list[list[int]] = []
    for i in ids:
        if out and i == out[-1][1] + 1:
            out[-1][1] = i
        else:
            out.append([i, i])
    return out


class SqliteEnqueue:
    _conn: sqlite3.Connection
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

    def enqueue_many(self, specs: Iterable[Mapping[str, Any] | JobSpec], *, batch: str | None = None) -> list[int]:
        """Enqueue many jobs in one transaction; all or none. Same rules as enqueue.

        A spec may be a job object or a JobSpec already validated. With
        ``batch`` (a client's token), the ids are recorded under it in the same
        transaction, so a client that lost the answer can ask (batch_ids)
        whether the batch was queued: the answer is never "some of it"."""
        cache: EnvCache = {}
        defaults = Defaults(self.max_attempts, self.lease_s)
        # validate all before writing any
        rows = [s if isinstance(s, JobSpec) else JobSpec.parse(s, defaults, cache) for s in specs]
        now = self.clock.now()
        ids: list[int] = []
        run: list[tuple] = []  # consecutive rows without a key, inserted by one executemany
        with db.transaction(self._conn) as c:
            if batch is not None and c.execute("SELECT 1 FROM meta WHERE key = ?", (BATCH_PREFIX + batch,)).fetchone():
                raise IllegalTransition(f"batch {batch} was queued already; it is never queued twice",
                                        hint="Ask which ids it got with the `batch` op.")
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
            if batch is not None:
                c.execute("INSERT INTO meta (key, value) VALUES (?, ?)",
                          (BATCH_PREFIX + batch, json.dumps({"at": now, "ids": _runs(ids)})))
        return ids

    @reads
    def batch_ids(self, batch: str) -> list[int] | None:
        """The ids the batch ``batch`` was queued as, or None if it was not
        (or its record was pruned: records are kept BATCH_RECORD_S)."""
        row = self._conn.execute("SELECT value FROM meta WHERE key = ?", (BATCH_PREFIX + batch,)).fetchone()
        if row is None:
            return None
        return [i for a, b in json.loads(row[0])["ids"] for i in range(a, b + 1)]

    def _prune_batch_records(self, c: sqlite3.Connection, now: float) -> None:
        """Batch records older than BATCH_RECORD_S (a range of meta's primary key)."""
        for key, value in c.execute("SELECT key, value FROM meta WHERE key >= ? AND key < ?",
                                    (BATCH_PREFIX, BATCH_PREFIX_END)).fetchall():
            if json.loads(value)["at"] < now - BATCH_RECORD_S:
                c.execute("DELETE FROM meta WHERE key = ?", (key,))


def _put_env(c: sqlite3.Connection, text: str) -> int:
    """The id of this environment in ``envs``, adding it if new."""
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
    c.execute("INSERT INTO envs (hash, data) VALUES (?, ?) ON CONFLICT(hash) DO NOTHING",
              (digest, text))
    return c.execute("SELECT id FROM envs WHERE hash = ?", (digest,)).fetchone()[0]


def _values(r: JobSpec, env_id: int | None, now: float) -> tuple:
    nb = now if r.not_before is None else r.not_before
    return (r.command_json, r.lane, r.priority, r.max_attempts, r.lease_s, r.timeout_s, nb,
            r.key, path_value(r.cwd), env_id, r.label, int(r.shell), now, now)


def path_value(p: str | None) -> str | bytes | None:
    """A path as SQLite keeps it: TEXT when it is UTF-8, else its bytes as a
    BLOB (a folder named in Latin-1 round-trips exactly; Job.from_row reads both)."""
    if p is None or is_utf8(p):
        return p
    return as_bytes(p)


def _insert_run(c: sqlite3.Connection, run: list[tuple]) -> list[int]:
    """Insert rows with one executemany; return their ids. Under our write lock
    with AUTOINCREMENT each insert takes the next rowid, so the ids of a run
    are the consecutive numbers ending at last_insert_rowid()."""
    if not run:
        return []
    c.executemany(SQL_INSERT, run)
    last = c.execute("SELECT last_insert_rowid()").fetchone()[0]
    return list(range(last - len(run) + 1, last + 1))

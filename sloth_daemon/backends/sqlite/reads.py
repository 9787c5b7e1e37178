"""The read side of the SQLite queue: jobs, events, counts, lanes, meta.

A base class of SqliteQueue (backends/sqlite/queue.py) and of the read-only view the CLI
opens when no daemon answers (backends/sqlite/readonly.py), split off to keep each
module small; reads run outside any write transaction (WAL readers never
block the writer, nor wait for it).
"""

from __future__ import annotations

import functools
import json
import sqlite3
from typing import Any, Callable, Collection, ContextManager, Sequence, TypeVar

from sloth_daemon.backends.sqlite import db
from sloth_daemon.errors import JobNotFound
from sloth_daemon.models import STATE_NAMES, Event, Job, JobState
from sloth_daemon.spec import integer
from sloth_daemon.backends.sqlite import deps
from sloth_daemon.backends.sqlite import pick
from sloth_daemon.backends.sqlite.listing import SqliteListing


SQL_BY_ID = "SELECT * FROM jobs WHERE id = ?"
SQL_BUSY_QUEUED = "SELECT 1 FROM jobs INDEXED BY jobs_due WHERE state = 'queued' AND lane = ? LIMIT 1"
SQL_BUSY_BLOCKED = "SELECT 1 FROM jobs INDEXED BY jobs_blocked WHERE state = 'blocked' AND lane = ? LIMIT 1"
SQL_BUSY_RUNNING = "SELECT 1 FROM jobs INDEXED BY jobs_lease WHERE state = 'running' AND lane = ? LIMIT 1"
SQL_LANE_BLOCKED = ("SELECT lane, 'blocked', count(*) FROM jobs INDEXED BY jobs_blocked"
                    " WHERE state = 'blocked' GROUP BY lane")
SQL_LANE_QUEUED = ("SELECT lane, 'queued', count(*) FROM jobs INDEXED BY jobs_due"
                   " WHERE state = 'queued' GROUP BY lane")
SQL_LANE_RUNNING = ("SELECT lane, 'running', count(*) FROM jobs INDEXED BY jobs_lease"
                    " WHERE state = 'running' GROUP BY lane")


F = TypeVar("F", bound=Callable[..., Any])


def reads(fn: F) -> F:
    """A damaged or replaced file is a StorageError (QueueBroken), never a
    bare sqlite3 error that the daemon would call a bug."""

    @functools.wraps(fn)
    def wrapper(self: Any, *a: Any, **kw: Any) -> Any:
        try:
            return fn(self, *a, **kw)
        except sqlite3.DatabaseError as e:
            raise db.reading(self._conn, e) from e

    return wrapper  # type: ignore[return-value]


class SqliteReads(SqliteListing):
    _conn: sqlite3.Connection
    _envs: dict[int, dict[str, str]]  # env_id -> env, decoded once
    _patience_s: float

    def _tx(self, *, durable: bool = True) -> ContextManager[sqlite3.Connection]:
        """One write transaction (db.transaction), with this queue's patience for locks."""
        return db.transaction(self._conn, durable=durable, patience_s=self._patience_s)

    @reads
    def get(self, job_id: int) -> Job:
        return self._job(self._get_row(self._conn, job_id))

    @reads
    def jobs(
        self, state: str | JobState | None = None, lane: str | None = None, limit: int = 1000,
        *, states: Sequence[str] | None = None,
    ) -> list[Job]:
        """The newest ``limit`` jobs matching the filters, oldest first."""
        wanted = list(states or ([] if state is None else [state]))
        for s in wanted:
            JobState(s)  # raises ValueError for an unknown state
        limit = integer(limit, "limit", 1000, lo=1)
        where, args = [], []
        if wanted:
            where.append(f"state IN ({','.join('?' * len(wanted))})")
            args += [JobState(s).value for s in wanted]
        if lane is not None:
            where.append("lane = ?")
            args.append(lane)
        sql = "SELECT * FROM jobs" + (" WHERE " + " AND ".join(where) if where else "")
        sql = f"SELECT * FROM ({sql} ORDER BY id DESC LIMIT ?) ORDER BY id"
        return [self._job(r) for r in self._conn.execute(sql, (*args, limit))]

    @reads
    def events(self, job_id: int) -> list[Event]:
        self._get_row(self._conn, job_id)
        rows = self._conn.execute(
            "SELECT job_id, at, kind, attempt, message FROM events WHERE job_id = ? ORDER BY id",
            (job_id,),
        ).fetchall()
        return [Event(**dict(r)) for r in rows]

    @reads
    def counts(self) -> dict[str, int]:
        """Jobs per state, every state named (0 for none)."""
        out = dict.fromkeys(STATE_NAMES, 0)
        for st, n in self._conn.execute("SELECT state, count(*) FROM jobs GROUP BY state"):
            out[st] = n
        return out

    @reads
    def running(self) -> list[Job]:
        """All jobs currently leased (running somewhere, or lost)."""
        return [self._job(r) for r in self._conn.execute(
            "SELECT * FROM jobs WHERE state = 'running' ORDER BY id")]

    claimed = running  # the name of schema v1-v3 days

    def prereqs(self, job_id: int) -> list[dict[str, Any]]:
        """What the job was added after: [{id, need ('done' | 'end'), state}]
        (a pruned prerequisite is no longer listed)."""
        return deps.prereqs(self._conn, job_id)

    def dependents(self, job_id: int) -> list[int]:
        """Ids of the jobs added after this one."""
        return [r[0] for r in self._conn.execute(
            "SELECT job_id FROM deps WHERE after_id = ? ORDER BY job_id", (job_id,))]

    @reads
    def next_due_at(self, lanes: Sequence[str] | None = None, *,
                    exclude_lanes: Collection[str] = (),
                    exclude_ids: Collection[int] = (),
                    places: Collection[str] | None = None) -> float | None:
        """Earliest wall time at which ``claim`` (with the same filters)
        could return something: the first queued ``not_before``, or just
        after the first lease expiry."""
        return pick.next_due_at(self._conn, lanes, exclude_lanes, exclude_ids, places)

    @reads
    def lanes(self) -> list[str]:
        """Lanes that have blocked, queued or running jobs."""
        return sorted(self.lane_counts())

    def lane_counts(self) -> dict[str, dict[str, int]]:
        """lane -> {blocked, queued, running: n} for lanes with active jobs,
        by index-only scans (finished jobs are not read)."""
        out: dict[str, dict[str, int]] = {}
        for sql in (SQL_LANE_BLOCKED, SQL_LANE_QUEUED, SQL_LANE_RUNNING):
            for lane, state, n in self._conn.execute(sql):
                out.setdefault(lane, {"blocked": 0, "queued": 0, "running": 0})[state] = n
        return out

    def lane_busy(self, lane: str) -> bool:
        """True while the lane has a blocked, queued or running job (index seeks only)."""
        return any(self._conn.execute(sql, (lane,)).fetchone() is not None
                   for sql in (SQL_BUSY_QUEUED, SQL_BUSY_BLOCKED, SQL_BUSY_RUNNING))

    def lane_rows(self) -> dict[str, dict[str, Any]]:
        """The lanes table: name -> {concurrency, config_was, created_at}
        (concurrency and config_was are None unless `sloth lane set` set them)."""
        return {r[0]: {"concurrency": r[1], "config_was": r[2], "created_at": r[3]} for r in self._conn.execute(
            "SELECT name, concurrency, config_was, created_at FROM lanes ORDER BY name")}

    @reads
    def get_meta(self, key: str, default: Any = None) -> Any:
        """A small persisted setting (JSON value), e.g. which lanes are paused."""
        row = self._conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return default if row is None else json.loads(row[0])

    def _job(self, row: sqlite3.Row) -> Job:
        env_id = row["env_id"]
        if env_id is None:
            return Job.from_row(row)  # no env, or one stored inline by schema v1/v2
        env = self._envs.get(env_id)
        if env is None:
            found = self._conn.execute("SELECT data FROM envs WHERE id = ?", (env_id,)).fetchone()
            env = json.loads(found[0]) if found else {}
            if len(self._envs) > 256:
                self._envs.clear()
            self._envs[env_id] = env
        # The one object per env_id, not a copy: jobs of one `sloth add` share
        # it, so the worker's and the keeper client's caches (keyed by object)
        # send it to the keeper once, not whole with every job. Never changed.
        return Job.from_row(row, env=env)

    def _get_row(self, c: sqlite3.Connection, job_id: int) -> sqlite3.Row:
        if isinstance(job_id, bool) or not isinstance(job_id, int):
            raise JobNotFound(job_id)
        row = c.execute(SQL_BY_ID, (job_id,)).fetchone()
        if row is None:
            raise JobNotFound(job_id)
        return row

"""The read side of the SQLite queue: jobs, events, counts, lanes, meta.

A base class of SqliteQueue (sqlite.py), split off to keep each module
small; reads run outside any write transaction (WAL readers never block the
writer, nor wait for it).
"""

from __future__ import annotations

import functools
import json
import sqlite3
from typing import Any, Callable, Collection, Sequence, TypeVar

from .. import db
from ..errors import JobNotFound
from ..models import Event, Job, JobState
from ..spec import integer
from . import sqlite_pick as pick


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


class SqliteReads:
    _conn: sqlite3.Connection
    _envs: dict[int, dict[str, str]]  # env_id -> env, decoded once

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
        out = {s.value: 0 for s in JobState}
        for st, n in self._conn.execute("SELECT state, count(*) FROM jobs GROUP BY state"):
            out[st] = n
        return out

    @reads
    def claimed(self) -> list[Job]:
        """All jobs currently leased (running somewhere, or lost)."""
        return [self._job(r) for r in self._conn.execute(
            "SELECT * FROM jobs WHERE state = 'claimed' ORDER BY id")]

    @reads
    def next_due_at(self, lanes: Sequence[str] | None = None, *,
                    exclude_lanes: Collection[str] = (),
                    exclude_ids: Collection[int] = ()) -> float | None:
        """Earliest wall time at which ``claim`` could return something:
        the first queued ``not_before``, or just after the first lease expiry."""
        return pick.next_due_at(self._conn, lanes, exclude_lanes, exclude_ids)

    @reads
    def lanes(self) -> list[str]:
        """Lanes that have queued or claimed jobs."""
        claimed = {r[0] for r in self._conn.execute("SELECT lane FROM jobs WHERE state = 'claimed'")}
        return sorted(set(pick.queued_lanes(self._conn)) | claimed)

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
        return Job.from_row(row, env=dict(env))  # a copy: callers may change theirs

    def _get_row(self, c: sqlite3.Connection, job_id: int) -> sqlite3.Row:
        if isinstance(job_id, bool) or not isinstance(job_id, int):
            raise JobNotFound(job_id)
        row = c.execute("SELECT * FROM jobs WHERE id = ?", (job_id,)).fetchone()
        if row is None:
            raise JobNotFound(job_id)
        return row

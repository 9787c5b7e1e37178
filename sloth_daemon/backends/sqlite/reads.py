"""The read side of the SQLite queue: jobs, events, counts, lanes, meta,
and how a row becomes a Job.

A part of the SQLite engine (engine.py) over its connection, and of the
read-only engine the CLI opens when no daemon answers over a read-only
one; reads run outside any
write transaction (WAL readers never block the writer, nor wait for it).
"""

from __future__ import annotations

import functools
import json
import sqlite3
from typing import Any, Callable, Collection, Sequence, TypeVar

from sloth_daemon.backends import attempt_rules, contract, rules, run_tally
from sloth_daemon.backends.sqlite import db
from sloth_daemon.clock import Clock
from sloth_daemon.errors import BatchNotFound, JobNotFound
from sloth_daemon.models import Event, Job, JobState
from sloth_daemon.spec import integer
from sloth_daemon.backends.sqlite import deps
from sloth_daemon.backends.sqlite import pick


SQL_BY_ID = "SELECT * FROM jobs WHERE id = ?"
SQL_HELD_GATES = ("SELECT DISTINCT gate FROM jobs INDEXED BY jobs_held WHERE state = 'held' AND gate IS NOT NULL"
                  " ORDER BY gate")
SQL_BUSY_QUEUED = "SELECT 1 FROM jobs INDEXED BY jobs_due WHERE state = 'queued' AND gate IS NULL AND lane = ? LIMIT 1"
SQL_BUSY_GATED = ("SELECT 1 FROM jobs WHERE state = 'queued' AND gate IS NOT NULL AND lane = ? LIMIT 1")
SQL_BUSY_BLOCKED = "SELECT 1 FROM jobs INDEXED BY jobs_blocked WHERE state = 'blocked' AND lane = ? LIMIT 1"
SQL_BUSY_HELD = "SELECT 1 FROM jobs INDEXED BY jobs_held WHERE state = 'held' AND lane = ? LIMIT 1"
SQL_BUSY_RUNNING = "SELECT 1 FROM jobs INDEXED BY jobs_lease WHERE state = 'running' AND lane = ? LIMIT 1"
SQL_LANE_BLOCKED = ("SELECT lane, 'blocked', count(*) FROM jobs INDEXED BY jobs_blocked"
                    " WHERE state = 'blocked' GROUP BY lane")
SQL_LANE_HELD = ("SELECT lane, 'held', count(*) FROM jobs INDEXED BY jobs_held"
                 " WHERE state = 'held' GROUP BY lane")
SQL_LANE_QUEUED = ("SELECT lane, 'queued', count(*) FROM jobs INDEXED BY jobs_due"
                   " WHERE state = 'queued' AND gate IS NULL GROUP BY lane")
SQL_LANE_GATED = ("SELECT lane, 'queued', count(*) FROM jobs INDEXED BY jobs_gated"
                  " WHERE state = 'queued' AND gate IS NOT NULL GROUP BY lane")
SQL_LANE_RUNNING = ("SELECT lane, 'running', count(*) FROM jobs INDEXED BY jobs_lease"
                    " WHERE state = 'running' GROUP BY lane")


F = TypeVar("F", bound=Callable[..., Any])


def reads(fn: F) -> F:
    """A damaged or replaced file is a StorageError (QueueBroken), never a
    bare sqlite3 error that the daemon would call a bug. For methods of an
    object whose ``conn`` they read."""

    @functools.wraps(fn)
    def wrapper(self: Any, *a: Any, **kw: Any) -> Any:
        try:
            return fn(self, *a, **kw)
        except sqlite3.DatabaseError as e:
            raise db.reading(self.conn, e) from e

    return wrapper  # type: ignore[return-value]


class JobRows:
    """Rows of the jobs table as Job objects. State: the connection and the
    environments decoded so far (env_id -> env, at most ~256: the jobs of
    one `sloth add` share one)."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        self.envs: dict[int, dict[str, str]] = {}  # env_id -> env, decoded once

    def job(self, row: sqlite3.Row) -> Job:
        env_id = row["env_id"]
        if env_id is None:
            return Job.from_row(row)  # no env, or one stored inline by schema v1/v2
        env = self.envs.get(env_id)
        if env is None:
            found = self.conn.execute("SELECT data FROM envs WHERE id = ?", (env_id,)).fetchone()
            env = json.loads(found[0]) if found else {}
            if len(self.envs) > 256:
                self.envs.clear()
            self.envs[env_id] = env
        # The one object per env_id, not a copy: jobs of one `sloth add` share
        # it, so the worker's and the keeper client's caches (keyed by object)
        # send it to the keeper once, not whole with every job. Never changed.
        return Job.from_row(row, env=env)

    @staticmethod
    def row(c: sqlite3.Connection, job_id: int) -> sqlite3.Row:
        """The row of ``job_id``, read on ``c`` (inside a transaction, or not). Raises JobNotFound."""
        row = c.execute(SQL_BY_ID, (JobRows.an_id(job_id),)).fetchone()
        if row is None:
            raise JobNotFound(job_id)
        return row

    @staticmethod
    def an_id(job_id: object) -> int:
        """``job_id`` if it is a job's id at all (an int), else JobNotFound:
        SQLite would match the text "5" to job 5."""
        if isinstance(job_id, bool) or not isinstance(job_id, int):
            raise JobNotFound(job_id)
        return job_id


# Batches with a handle (issue 33): found by id or by the newest of a name, counted by state.
SQL_BATCH_BY_ID = "SELECT id, name, at FROM batches WHERE id = ? AND handle"
SQL_BATCH_BY_NAME = ("SELECT id, name, at FROM batches INDEXED BY batches_name WHERE name = ? AND handle"
                     " ORDER BY id DESC LIMIT 1")
SQL_BATCH_COUNTS = "SELECT state, count(*) FROM jobs INDEXED BY jobs_batch WHERE batch_id = ? GROUP BY state"
SQL_ACTIVE_BATCHES = ("SELECT DISTINCT batch_id FROM jobs INDEXED BY jobs_batch WHERE batch_id IS NOT NULL"
                      " AND state IN ('blocked', 'held', 'queued', 'running') ORDER BY batch_id DESC LIMIT ?")


class SqliteReads(contract.Reads):
    """The queue's reads over one connection (read-write or read-only);
    ``rows`` tells its rows as Jobs; ``clock``: the queue's now (gated_heads)."""

    def __init__(self, conn: sqlite3.Connection, rows: JobRows, clock: Clock) -> None:
        self.conn, self.rows, self.clock = conn, rows, clock

    @reads
    def get(self, job_id: int) -> Job:
        return self.rows.job(self.rows.row(self.conn, job_id))

    @reads
    def get_many(self, ids: Sequence[int]) -> list[Job]:
        wanted = [i for i in ids if isinstance(i, int) and not isinstance(i, bool)]
        rows = [r for k in range(0, len(wanted), 900) for r in self.conn.execute(
            f"SELECT * FROM jobs WHERE id IN ({','.join('?' * len(wanted[k:k + 900]))})", wanted[k:k + 900])]
        return [self.rows.job(r) for r in sorted(rows, key=lambda r: r["id"])]

    @reads
    def jobs(
        self, state: str | JobState | None = None, lane: str | None = None, limit: int = 1000,
        *, states: Sequence[str] | None = None,
    ) -> list[Job]:
        wanted = rules.job_states(state, states)
        limit = integer(limit, "limit", 1000, lo=1)
        where, args = [], []
        if wanted:
            where.append(f"state IN ({','.join('?' * len(wanted))})")
            args += wanted
        if lane is not None:
            where.append("lane = ?")
            args.append(lane)
        sql = "SELECT * FROM jobs" + (" WHERE " + " AND ".join(where) if where else "")
        sql = f"SELECT * FROM ({sql} ORDER BY id DESC LIMIT ?) ORDER BY id"
        return [self.rows.job(r) for r in self.conn.execute(sql, (*args, limit))]

    @reads
    def events(self, job_id: int) -> list[Event]:
        self.rows.row(self.conn, job_id)
        rows = self.conn.execute(
            "SELECT job_id, at, kind, attempt, message FROM events WHERE job_id = ? ORDER BY id",
            (job_id,),
        ).fetchall()
        return [Event(**dict(r)) for r in rows]

    @reads
    def costs(self, job_ids: Sequence[int]) -> dict[int, list[dict[str, Any]]]:
        ids = [i for i in job_ids if isinstance(i, int) and not isinstance(i, bool)]
        rows = [r for k in range(0, len(ids), 500) for r in self.conn.execute(
            "SELECT * FROM attempts WHERE job_id IN (SELECT value FROM json_each(?)) ORDER BY job_id, attempt",
            (json.dumps(ids[k:k + 500]),))]
        return attempt_rules.costs_by_job(rows)

    @reads
    def run_times(self, column: str, value: str, *, prefix: bool = False) -> list[float]:
        sql = attempt_rules.run_times_sql(column, prefix, "jobs", "?")
        return [r[0] for r in self.conn.execute(sql, attempt_rules.run_times_args(value, prefix))]

    @reads
    def results(self, job_ids: Sequence[int], *, attempts: tuple[int, int] | None = None
                ) -> dict[int, list[dict[str, Any]]]:
        out: dict[int, list[dict[str, Any]]] = {}
        lo, hi = attempts or (0, 2**62)
        for i in range(0, len(job_ids), 500):
            part = list(job_ids[i:i + 500])
            for r in self.conn.execute(f"SELECT job_id, attempt, data, at FROM results WHERE job_id IN"
                                       f" ({', '.join('?' * len(part))}) AND attempt BETWEEN ? AND ?"
                                       " ORDER BY job_id, attempt", [*part, lo, hi]):
                out.setdefault(r[0], []).append({"attempt": r[1], "result": json.loads(r[2]), "at": r[3]})
        return out

    @reads
    def counts(self) -> dict[str, int]:
        return rules.state_counts(self.conn.execute("SELECT state, count(*) FROM jobs GROUP BY state"))

    @reads
    def outbox_counts(self) -> dict[str, int]:
        rows = self.conn.execute("SELECT state, count(*) FROM outbox GROUP BY state")
        return {"pending": 0, "failed": 0, "sent": 0, **{r[0]: r[1] for r in rows}}

    @reads
    def batch_find(self, ref: str) -> dict[str, Any]:
        by_id, arg = rules.batch_ref(ref)
        row = self.conn.execute(SQL_BATCH_BY_ID if by_id else SQL_BATCH_BY_NAME, (arg,)).fetchone()
        if row is None:
            raise BatchNotFound(ref)
        same = (0 if row[1] is None else
                self.conn.execute("SELECT count(*) FROM batches WHERE name = ? AND handle", (row[1],)).fetchone()[0])
        return rules.batch_summary(row[0], row[1], row[2], self.conn.execute(SQL_BATCH_COUNTS, (row[0],)), same)

    @reads
    def batch_members(self, batch_id: int, states: Sequence[str] | None = None) -> list[int]:
        sql = "SELECT id FROM jobs INDEXED BY jobs_batch WHERE batch_id = ?"
        if states is not None:
            sql += f" AND state IN ({', '.join('?' * len(states))})"
        return [r[0] for r in self.conn.execute(sql + " ORDER BY id", (batch_id, *(states or ())))]

    @reads
    def active_batches(self, limit: int = rules.ACTIVE_BATCHES) -> list[dict[str, Any]]:
        out = []
        for (bid,) in self.conn.execute(SQL_ACTIVE_BATCHES, (limit,)).fetchall():
            row = self.conn.execute("SELECT id, name, at FROM batches WHERE id = ?", (bid,)).fetchone()
            if row is not None:
                out.append(rules.batch_summary(row[0], row[1], row[2], self.conn.execute(SQL_BATCH_COUNTS, (bid,))))
        return out

    @reads
    def latest(self, *, origin: str | None = None, ran: bool = False) -> int | None:
        # ``origin`` names nothing here: a SQLite queue is one machine's, every job was queued from it
        row = self.conn.execute("SELECT max(id) FROM jobs" + (" WHERE attempts > 0" if ran else "")).fetchone()
        return None if row[0] is None else int(row[0])

    @reads
    def running(self) -> list[Job]:
        return [self.rows.job(r) for r in self.conn.execute(
            "SELECT * FROM jobs WHERE state = 'running' ORDER BY id")]

    claimed = running  # the name of schema v1-v3 days

    def prereqs(self, job_id: int) -> list[dict[str, Any]]:
        return deps.prereqs(self.conn, job_id)

    def dependents(self, job_id: int) -> list[int]:
        return [r[0] for r in self.conn.execute(
            "SELECT job_id FROM deps WHERE after_id = ? ORDER BY job_id", (job_id,))]

    @reads
    def next_due_at(self, lanes: Sequence[str] | None = None, *,
                    exclude_lanes: Collection[str] = (),
                    exclude_ids: Collection[int] = (),
                    places: Collection[str] | None = None) -> float | None:
        return pick.next_due_at(self.conn, lanes, exclude_lanes, exclude_ids, places)

    @reads
    def gates(self) -> list[str]:
        return pick.gates(self.conn)

    @reads
    def held_gates(self) -> list[str]:
        return [r[0] for r in self.conn.execute(SQL_HELD_GATES).fetchall()]

    @reads
    def gated_heads(self, gates: Collection[str], *, exclude_lanes: Collection[str] = (),
                    exclude_ids: Collection[int] = (),
                    places: Collection[str] | None = None) -> tuple[list[Job], float | None]:
        heads, later = pick.gated_heads(self.conn, self.clock.now(), gates, exclude_lanes, exclude_ids, places)
        return [self.rows.job(r) for r in heads], later

    @reads
    def lanes(self) -> list[str]:
        return sorted(self.lane_counts())

    def lane_counts(self) -> dict[str, dict[str, int]]:
        return rules.lane_counts(r for sql in (SQL_LANE_BLOCKED, SQL_LANE_QUEUED, SQL_LANE_GATED, SQL_LANE_HELD,
                                               SQL_LANE_RUNNING)
                                 for r in self.conn.execute(sql))

    def lane_busy(self, lane: str) -> bool:
        return any(self.conn.execute(sql, (lane,)).fetchone() is not None
                   for sql in (SQL_BUSY_QUEUED, SQL_BUSY_GATED, SQL_BUSY_BLOCKED, SQL_BUSY_HELD, SQL_BUSY_RUNNING))

    def lane_rows(self) -> dict[str, dict[str, Any]]:
        return {r[0]: {"concurrency": r[1], "config_was": r[2], "created_at": r[3]} for r in self.conn.execute(
            "SELECT name, concurrency, config_was, created_at FROM lanes ORDER BY name")}

    @reads
    def get_meta(self, key: str, default: Any = None) -> Any:
        row = self.conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return default if row is None else json.loads(row[0])

    @reads
    def run_tally(self) -> run_tally.Tally:
        return run_tally.merged(run_tally.from_rows(self.conn.execute(run_tally.statement())),
                                run_tally.from_meta(self.get_meta(run_tally.PRUNED_KEY)))

    @reads
    def oldest_queued(self) -> dict[str, float]:
        return {r[0]: r[1] for r in self.conn.execute(
            "SELECT lane, min(not_before) FROM jobs WHERE state = 'queued' GROUP BY lane")}

    @reads
    def window_jobs(self, since: float, *, lane: str | None = None, before_id: int | None = None,
                    limit: int = 100) -> list[tuple[Job, list[Event]]]:
        limit = integer(limit, "limit", 100, lo=1)
        rows = self.conn.execute(
            "SELECT * FROM jobs WHERE id < ? AND (finished_at IS NULL OR finished_at >= ?)"
            + (" AND lane = ?" if lane is not None else "") + " ORDER BY id DESC LIMIT ?",
            (2**62 if before_id is None else before_id, since, *([lane] if lane is not None else []),
             min(limit, 900))).fetchall()
        events: dict[int, list[Event]] = {r["id"]: [] for r in rows}
        if rows:
            for e in self.conn.execute(
                    "SELECT job_id, at, kind, attempt, message FROM events"
                    f" WHERE job_id IN ({','.join('?' * len(rows))}) ORDER BY job_id, id", list(events)):
                events[e["job_id"]].append(Event(**dict(e)))
        return [(self.rows.job(r), events[r["id"]]) for r in rows]

    @reads
    def machine_events(self, since: float, host: str | None = None) -> list[dict[str, Any]]:
        if self.conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'machine_events'"
                             ).fetchone() is None:
            return []  # a read-only view of a file older than them
        rows = self.conn.execute(
            "SELECT id, host, kind, start_at, end_at, detail FROM machine_events WHERE end_at >= ?"
            + (" AND host = ?" if host is not None else "") + " ORDER BY start_at, id",
            (since, *([host] if host is not None else []))).fetchall()
        return [dict(r) for r in rows]

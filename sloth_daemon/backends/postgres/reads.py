"""The read side of the PostgreSQL queue: jobs, events, counts, lanes,
dependencies, meta, and rows made into Jobs (the counterpart of
backends/sqlite/reads.py).

Two objects, each over one connection: JobRows makes rows into Jobs (every
reader and writer of a queue shares its one, and so its cache of decoded
environments); PgReads answers the read side of the contract, a part of
the engine (engine.py) and of its read-only engine. A read is one statement outside any
transaction (db.Connection.read), so it never holds a lock another daemon
waits for.
"""

from __future__ import annotations

import json
import math
from typing import Any, Collection, Mapping, Sequence

from sloth_daemon.backends import attempt_rules, contract, rules, run_tally
from sloth_daemon.errors import BatchNotFound, JobNotFound
from sloth_daemon.models import Event, Job, JobState
from sloth_daemon.spec import integer
from sloth_daemon.backends.postgres import pick
from sloth_daemon.backends.postgres import deps
from sloth_daemon.backends.postgres import migrate as pg_migrate
from sloth_daemon.backends.postgres.db import Connection, Cursor, Row, one

_JOB_COLUMNS = frozenset(Job.__dataclass_fields__) | {"env_id", "prereqs", "paused_run", "batch_id", "batch_name"}
_ENV_CACHE_MAX = 256  # decoded environments kept before the cache starts over
SQL_RESULTS = ("SELECT job_id, attempt, data, at FROM sloth.results WHERE job_id = ANY(%s::bigint[])"
               " AND attempt BETWEEN %s AND %s ORDER BY job_id, attempt")
SQL_EVENTS = "SELECT job_id, at, kind, attempt, message FROM sloth.events WHERE job_id = %s ORDER BY id"
SQL_COUNTS = "SELECT state, count(*) AS n FROM sloth.jobs GROUP BY state"
# Each an index seek on a partial index (jobs_due, jobs_blocked, jobs_lease).
SQL_LANE_BUSY = ("SELECT EXISTS (SELECT 1 FROM sloth.jobs WHERE state = 'queued' AND lane = %(lane)s)"
                 " OR EXISTS (SELECT 1 FROM sloth.jobs WHERE state = 'blocked' AND lane = %(lane)s)"
                 " OR EXISTS (SELECT 1 FROM sloth.jobs WHERE state = 'held' AND lane = %(lane)s)"
                 " OR EXISTS (SELECT 1 FROM sloth.jobs WHERE state = 'running' AND lane = %(lane)s) AS busy")
SQL_LANE_ROWS = "SELECT name, concurrency, config_was, created_at FROM sloth.lanes ORDER BY name"
SQL_LANE_COUNTS = ("SELECT lane, state, count(*) AS n FROM sloth.jobs"
                   " WHERE state IN ('blocked', 'held', 'queued', 'running') GROUP BY lane, state")


SQL_HELD_GATES = "SELECT DISTINCT gate FROM sloth.jobs WHERE state = 'held' AND gate IS NOT NULL ORDER BY gate"
SQL_RUN_TALLY = run_tally.statement("sloth.")

class JobRows:
    """Rows made into Jobs, with their environments: an env is read once
    and kept (``envs``, env_id -> env) until the cache is full or a prune
    deletes environments (then its owner clears it)."""

    def __init__(self, db: Connection) -> None:
        self._db = db
        self.envs: dict[int, dict[str, str]] = {}

    def job(self, row: Mapping[str, Any], c: Cursor | None = None) -> Job:
        """A Job from a row, with its environment (see _env)."""
        d = {k: v for k, v in row.items() if k in _JOB_COLUMNS}
        d["env"] = None
        if d["env_id"] is None:
            return Job.from_row(d)
        # The one object per env_id, not a copy: jobs of one `sloth add` share
        # it, so the worker's and the keeper client's caches (keyed by object)
        # send it to the keeper once, not whole with every job. Never changed.
        return Job.from_row(d, env=self._env(d["env_id"], c))

    def _env(self, env_id: int, c: Cursor | None) -> dict[str, str]:
        """An environment from the cache or ``envs`` (on ``c`` inside a
        transaction, else by a read of its own)."""
        env = self.envs.get(env_id)
        if env is not None:
            return env

        def fetch(cur: Cursor) -> Row | None:
            return cur.execute("SELECT data FROM sloth.envs WHERE id = %s", (env_id,)).fetchone()

        found = fetch(c) if c is not None else self._db.read(fetch, "reading a job's environment")
        env = json.loads(found["data"]) if found else {}
        if len(self.envs) > _ENV_CACHE_MAX:
            self.envs.clear()
        self.envs[env_id] = env
        return env


# Batches with a handle (issue 33): found by id or by the newest of a name, counted by state.
SQL_BATCH_BY_ID = "SELECT id, name, at FROM sloth.batches WHERE id = %s AND handle"
SQL_BATCH_BY_NAME = "SELECT id, name, at FROM sloth.batches WHERE name = %s AND handle ORDER BY id DESC LIMIT 1"
SQL_BATCH_SAME = "SELECT count(*) AS n FROM sloth.batches WHERE name = %s AND handle"
SQL_BATCH_COUNTS = "SELECT state, count(*) AS n FROM sloth.jobs WHERE batch_id = %s GROUP BY state"
SQL_BATCH_MEMBERS = ("SELECT id FROM sloth.jobs WHERE batch_id = %(b)s"
                     " AND (%(states)s::text[] IS NULL OR state = ANY(%(states)s)) ORDER BY id")
SQL_ACTIVE_BATCHES = ("SELECT b.id, b.name, b.at FROM sloth.batches b WHERE b.id IN (SELECT DISTINCT batch_id"
                      " FROM sloth.jobs WHERE batch_id IS NOT NULL"
                      " AND state IN ('blocked', 'held', 'queued', 'running'))"
                      " ORDER BY b.id DESC LIMIT %s")


class PgReads(contract.Reads):
    """The read side of the contract, over ``db``; ``rows`` makes its Jobs."""

    def __init__(self, db: Connection, rows: JobRows) -> None:
        self._db = db
        self.rows = rows

    def get(self, job_id: int) -> Job:
        return self._db.read(lambda c: self.rows.job(get_row(c, job_id), c), "reading a job")

    def get_many(self, ids: Sequence[int]) -> list[Job]:
        wanted = [i for i in ids if pick.is_job_id(i)]

        def read(c: Cursor) -> list[Job]:
            rows = [r for k in range(0, len(wanted), 10_000) for r in c.execute(
                "SELECT * FROM sloth.jobs WHERE id = ANY(%s) ORDER BY id", (wanted[k:k + 10_000],)).fetchall()]
            return [self.rows.job(r, c) for r in rows]

        return self._db.read(read, "reading jobs")

    def jobs(
        self, state: str | JobState | None = None, lane: str | None = None, limit: int = 1000,
        *, states: Sequence[str] | None = None,
    ) -> list[Job]:
        wanted = rules.job_states(state, states)
        limit = integer(limit, "limit", 1000, lo=1)
        sql, args = _jobs_statement(wanted, lane)

        def read(c: Cursor) -> list[Job]:
            return [self.rows.job(r, c) for r in c.execute(sql, (*args, limit)).fetchall()]

        return self._db.read(read, "listing jobs")

    def events(self, job_id: int) -> list[Event]:
        def read(c: Cursor) -> list[Event]:
            get_row(c, job_id)
            return [Event(**r) for r in c.execute(SQL_EVENTS, (job_id,)).fetchall()]

        return self._db.read(read, "reading a job's events")

    def costs(self, job_ids: Sequence[int]) -> dict[int, list[dict[str, Any]]]:
        ids = [i for i in job_ids if pick.is_job_id(i)]
        rows = self._db.read(lambda c: c.execute(
            "SELECT * FROM sloth.attempts WHERE job_id = ANY(%s) ORDER BY job_id, attempt", (ids,)).fetchall(),
            "reading what runs cost")
        return attempt_rules.costs_by_job(rows)

    def run_times(self, column: str, value: str, *, prefix: bool = False) -> list[float]:
        sql = attempt_rules.run_times_sql(column, prefix, "sloth.jobs", "%s")
        rows = self._db.read(lambda c: c.execute(sql, attempt_rules.run_times_args(value, prefix)).fetchall(),
                             "reading past runs' times")
        return [float(r["wall_s"]) for r in rows]

    def results(self, job_ids: Sequence[int], *, attempts: tuple[int, int] | None = None
                ) -> dict[int, list[dict[str, Any]]]:
        lo, hi = attempts or (0, 2**62)

        def read(c: Cursor) -> dict[int, list[dict[str, Any]]]:
            out: dict[int, list[dict[str, Any]]] = {}
            for r in c.execute(SQL_RESULTS, (list(job_ids), lo, hi)).fetchall():
                out.setdefault(int(r["job_id"]), []).append(
                    {"attempt": int(r["attempt"]), "result": json.loads(r["data"]), "at": r["at"]})
            return out

        return self._db.read(read, "reading jobs' results")

    def latest(self, *, origin: str | None = None, ran: bool = False) -> int | None:
        where = [w for w, on in (("origin = %(origin)s", origin is not None), ("attempts > 0", ran)) if on]
        sql = ("SELECT id FROM sloth.jobs" + (" WHERE " + " AND ".join(where) if where else "")
               + " ORDER BY id DESC LIMIT 1")
        row = self._db.read(lambda c: c.execute(sql, {"origin": origin}).fetchone(), "finding the latest job")
        return None if row is None else int(row["id"])

    def counts(self) -> dict[str, int]:
        rows = self._db.read(lambda c: c.execute(SQL_COUNTS).fetchall(), "counting jobs")
        return rules.state_counts((r["state"], r["n"]) for r in rows)

    def outbox_counts(self) -> dict[str, int]:
        rows = self._db.read(lambda c: c.execute(
            "SELECT state, count(*) AS n FROM sloth.outbox GROUP BY state").fetchall(), "counting the outbox")
        return {"pending": 0, "failed": 0, "sent": 0, **{r["state"]: int(r["n"]) for r in rows}}

    def batch_find(self, ref: str) -> dict[str, Any]:
        by_id, arg = rules.batch_ref(ref)

        def read(c: Cursor) -> dict[str, Any]:
            row = c.execute(SQL_BATCH_BY_ID if by_id else SQL_BATCH_BY_NAME, (arg,)).fetchone()
            if row is None:
                raise BatchNotFound(ref)
            same = 0 if row["name"] is None else int(one(c.execute(SQL_BATCH_SAME, (row["name"],)))["n"])
            counts = [(r["state"], r["n"]) for r in c.execute(SQL_BATCH_COUNTS, (row["id"],))]
            return rules.batch_summary(row["id"], row["name"], row["at"], counts, same)

        return self._db.read(read, "reading a batch", snapshot=True)

    def batch_members(self, batch_id: int, states: Sequence[str] | None = None) -> list[int]:
        args = {"b": batch_id, "states": None if states is None else list(states)}
        return self._db.read(lambda c: [r["id"] for r in c.execute(SQL_BATCH_MEMBERS, args)], "reading a batch")

    def active_batches(self, limit: int = rules.ACTIVE_BATCHES) -> list[dict[str, Any]]:
        def read(c: Cursor) -> list[dict[str, Any]]:
            return [rules.batch_summary(b["id"], b["name"], b["at"], [(r["state"], r["n"]) for r in c.execute(
                SQL_BATCH_COUNTS, (b["id"],))]) for b in c.execute(SQL_ACTIVE_BATCHES, (limit,)).fetchall()]

        return self._db.read(read, "reading the active batches", snapshot=True)

    def running(self) -> list[Job]:
        return self._db.read(lambda c: [self.rows.job(r, c) for r in c.execute(
            "SELECT * FROM sloth.jobs WHERE state = 'running' ORDER BY id").fetchall()],
            "listing running jobs")

    claimed = running  # the name of schema v1-v2 days

    def prereqs(self, job_id: int) -> list[dict[str, Any]]:
        return self._db.read(lambda c: deps.prereqs(c, job_id), "reading a job's prerequisites")

    def dependents(self, job_id: int) -> list[int]:
        return self._db.read(lambda c: deps.dependents(c, job_id), "reading a job's dependents")

    def next_due_at(self, lanes: Sequence[str] | None = None, *,
                    exclude_lanes: Collection[str] = (),
                    exclude_ids: Collection[int] = (),
                    places: Collection[str] | None = None) -> float | None:
        if lanes is not None and not lanes:
            return None
        sql, args = pick.next_due_statement(lanes, exclude_lanes, exclude_ids, places)
        row = self._db.read(lambda c: one(c.execute(sql, args)), "finding the next due time")
        times = [row["due"]]
        if row["lease"] is not None:
            times.append(math.nextafter(row["lease"], math.inf))  # strict: expired only after
        return min((t for t in times if t is not None), default=None)

    def gates(self) -> list[str]:
        def gates(c: Any) -> list[Any]:
            # one round trip (every claiming turn asks): the plan's setting, the read and the setting
            # back, as one simple query (its own implicit transaction, or a part of the unit's)
            c.execute(f"{pick.SQL_GATES_PLAN}; {pick.SQL_GATES}; SET LOCAL enable_seqscan TO DEFAULT", prepare=False)
            c.nextset()
            return c.fetchall()

        rows = self._db.read(gates, "reading the gates of queued jobs")
        return [r["gate"] for r in rows]

    def held_gates(self) -> list[str]:
        rows = self._db.read(lambda c: c.execute(SQL_HELD_GATES).fetchall(), "reading the gates of held jobs")
        return [r["gate"] for r in rows]

    def gated_heads(self, gates: Collection[str], *, exclude_lanes: Collection[str] = (),
                    exclude_ids: Collection[int] = (),
                    places: Collection[str] | None = None) -> tuple[list[Job], float | None]:
        wanted = sorted({str(g) for g in gates})
        sql, args = pick.gated_statement(exclude_lanes, exclude_ids, places)
        later_sql, later_args = pick.gated_later_statement(exclude_lanes, places)

        def read(c: Cursor) -> tuple[list[Job], float | None]:
            rows = c.execute(sql, {**args, "gates": wanted}).fetchall()
            later = one(c.execute(later_sql, {**later_args, "gates": wanted}))["t"] if wanted else None
            heads = sorted((self.rows.job(r, c) for r in rows), key=lambda j: (-j.priority, j.not_before, j.id))
            return heads, later
        # A transaction of its own that pins sloth.now (a test's clock): due-ness is read against it.
        return self._db.write(read, "reading the jobs that wait for a gate")

    def lanes(self) -> list[str]:
        return sorted(self.lane_counts())

    def lane_counts(self) -> dict[str, dict[str, int]]:
        rows = self._db.read(lambda c: c.execute(SQL_LANE_COUNTS).fetchall(), "counting jobs per lane")
        return rules.lane_counts((r["lane"], r["state"], r["n"]) for r in rows)

    def lane_busy(self, lane: str) -> bool:
        row = self._db.read(lambda c: one(c.execute(SQL_LANE_BUSY, {"lane": lane})), "reading a lane")
        return bool(row["busy"])

    def lane_rows(self) -> dict[str, dict[str, Any]]:
        rows = self._db.read(lambda c: c.execute(SQL_LANE_ROWS).fetchall(), "reading the lanes")
        return {r["name"]: {k: r[k] for k in ("concurrency", "config_was", "created_at")} for r in rows}

    def get_meta(self, key: str, default: Any = None) -> Any:
        row = self._db.read(lambda c: c.execute(
            "SELECT value FROM sloth.meta WHERE key = %s", (key,)).fetchone(), "reading a setting")
        return default if row is None else json.loads(row["value"])

    def run_tally(self) -> run_tally.Tally:
        rows = self._db.read(lambda c: c.execute(SQL_RUN_TALLY).fetchall(), "counting runs")
        return run_tally.merged(run_tally.from_rows(rows), run_tally.from_meta(self.get_meta(run_tally.PRUNED_KEY)))

    def oldest_queued(self) -> dict[str, float]:
        rows = self._db.read(lambda c: c.execute(
            "SELECT lane, min(not_before) AS t FROM sloth.jobs WHERE state = 'queued' GROUP BY lane").fetchall(),
            "reading the oldest queued jobs")
        return {r["lane"]: r["t"] for r in rows}

    def window_jobs(self, since: float, *, lane: str | None = None, before_id: int | None = None,
                    limit: int = 100) -> list[tuple[Job, list[Event]]]:
        limit = integer(limit, "limit", 100, lo=1)

        def read(c: Cursor) -> list[tuple[Job, list[Event]]]:
            rows = c.execute("SELECT * FROM sloth.jobs WHERE id < %s AND (finished_at IS NULL OR finished_at >= %s)"
                             " AND (%s::text IS NULL OR lane = %s) ORDER BY id DESC LIMIT %s",
                             (2**62 if before_id is None else before_id, since, lane, lane, limit)).fetchall()
            events: dict[int, list[Event]] = {r["id"]: [] for r in rows}
            if rows:
                for e in c.execute("SELECT job_id, at, kind, attempt, message FROM sloth.events"
                                   " WHERE job_id = ANY(%s) ORDER BY job_id, id", (list(events),)).fetchall():
                    events[e["job_id"]].append(Event(**e))
            return [(self.rows.job(r, c), events[r["id"]]) for r in rows]

        return self._db.read(read, "reading the timeline's jobs", snapshot=True)

    def machine_events(self, since: float, host: str | None = None) -> list[dict[str, Any]]:
        def read(c: Cursor) -> list[dict[str, Any]]:
            if one(c.execute("SELECT to_regclass('sloth.machine_events') IS NOT NULL AS there"))["there"] is False:
                return []  # a read-only view of a database older than them
            return [dict(r) for r in c.execute(
                "SELECT id, host, kind, start_at, end_at, detail FROM sloth.machine_events WHERE end_at >= %s"
                " AND (%s::text IS NULL OR host = %s) ORDER BY start_at, id", (since, host, host)).fetchall()]
        return self._db.read(read, "reading the machine's events")

    def schema_status(self) -> pg_migrate.SchemaStatus:
        """The database's schema version against this code's (for `sloth db status`)."""
        return pg_migrate.status(self._db)


def get_row(c: Cursor, job_id: int, *, lock: bool = False) -> Row:
    """The job's row (``lock``: FOR UPDATE, until commit), or JobNotFound."""
    check_id(job_id)
    row = c.execute("SELECT * FROM sloth.jobs WHERE id = %s" + (" FOR UPDATE" if lock else ""),
                    (job_id,)).fetchone()
    if row is None:
        raise JobNotFound(job_id)
    return row


def check_id(job_id: object) -> None:
    """A job id the server can take, or JobNotFound (not a server error)."""
    if not pick.is_job_id(job_id):
        raise JobNotFound(job_id)


def _jobs_statement(wanted: list[str], lane: str | None) -> tuple[str, list[Any]]:
    """jobs()'s query (fixed fragments; values are parameters, the limit last)."""
    where: list[str] = []
    args: list[Any] = []
    if wanted:
        where.append("state = ANY(%s)")
        args.append(wanted)
    if lane is not None:
        where.append("lane = %s")
        args.append(lane)
    sql = "SELECT * FROM sloth.jobs" + (" WHERE " + " AND ".join(where) if where else "")
    return f"SELECT * FROM ({sql} ORDER BY id DESC LIMIT %s) newest ORDER BY id", args

"""The lease queue on PostgreSQL: the only module that speaks its SQL
(pgdb.py connects and runs transactions, pg_migrate.py migrates).

The contract is SqliteQueue's (same methods, values, errors and event
history); what differs is who keeps time and who may race:

* **One clock, the server's.** Every lease comparison and every time written
  is ``sloth.now()`` in SQL: the server's clock at the start of the
  transaction, one instant for all it writes (see the migration); clients
  send durations (a lease, a backoff), never timestamps. A test passes a
  ManualClock and each transaction pins sloth.now() to its reading instead.
  (``not_before`` given to enqueue is the one absolute time a caller may
  send: it is the user's own "not before this moment".)
* **Hot writes are one statement**: a claim, a renewal or a completion is
  one UPDATE that also inserts its event, committed alone: one round trip.
* **Several daemons claim at once.** A claim is one UPDATE whose candidates
  come from ``FOR UPDATE SKIP LOCKED`` selects, so two claimers never wait
  for or take the same row; the UPDATE re-checks due-ness itself, so a row
  that changed after it was picked (completed, renewed) is left alone
  (River #1302). Lease holders are matched on id AND token in the UPDATE.
* **Fencing tokens** are ``<sequence value>-<16 random hex digits>``: the
  number grows with every claim in the whole queue, so a resource that
  remembers the highest token it saw can refuse an older holder
  (Kleppmann); the random part makes a token unguessable, and keeps a stale
  holder from matching a reissued number if the sequence is ever reset (a
  restore from backup, a recreated schema).
"""

from __future__ import annotations

import hashlib
import json
import math
import secrets
from typing import Any, Collection, Iterable, Mapping, Sequence

import psycopg
from psycopg import errors as pgerr

from ..clock import Clock, SystemClock, SystemClocks
from ..errors import BadRequest, IllegalTransition, JobNotFound, LeaseLost, StorageError
from ..models import ACTIVE_STATES, FINISHED_STATES, Event, Job, JobState
from ..spec import Defaults, EnvCache, JobSpec, integer, number
from . import pg_migrate, pgdb
from .sqlite import DEFAULT_BACKOFF_CAP_S, DEFAULT_LEASE_S, DEFAULT_MAX_ATTEMPTS

Cursor = psycopg.Cursor
INT64 = (-(2**63), 2**63)

# The claim: the best due queued row and the best expired lease (each the
# first unlocked one in claim order), the better of the two, updated in the
# same statement with its due-ness checked again, and its event written.
# {lanes}/{ids} are filled with fixed fragments, never with input. An
# expired lease with no attempts left becomes failed instead (event
# lease_expired; the caller then claims again).
SQL_CLAIM = """
WITH q AS (
    SELECT id, priority, not_before, state, worker, lease_until, false AS spent FROM sloth.jobs
    WHERE state = 'queued' AND not_before <= sloth.now() {lanes}
    ORDER BY priority DESC, not_before, id LIMIT 1 FOR UPDATE SKIP LOCKED
), e AS (
    SELECT id, priority, not_before, state, worker, lease_until, attempts >= max_attempts AS spent
    FROM sloth.jobs
    WHERE state = 'claimed' AND lease_until < sloth.now() {lanes} {ids}
    ORDER BY priority DESC, not_before, id LIMIT 1 FOR UPDATE SKIP LOCKED
), pick AS (
    SELECT * FROM (SELECT * FROM q UNION ALL SELECT * FROM e) candidates
    ORDER BY priority DESC, not_before, id LIMIT 1
), u AS (
UPDATE sloth.jobs j SET
    state = CASE WHEN pick.spent THEN 'failed' ELSE 'claimed' END,
    attempts = CASE WHEN pick.spent THEN j.attempts ELSE j.attempts + 1 END,
    token = CASE WHEN pick.spent THEN NULL
                 ELSE nextval('sloth.fence')::text || '-' || %(rand)s END,
    worker = CASE WHEN pick.spent THEN j.worker ELSE %(worker)s END,
    lease_until = CASE WHEN pick.spent THEN NULL
                       ELSE sloth.now() + coalesce(%(lease_s)s, j.lease_s) END,
    message = CASE WHEN pick.spent
                   THEN format('lease expired on the last attempt (%%s/%%s); worker %%s was lost',
                               j.attempts, j.max_attempts, j.worker)
                   ELSE j.message END,
    finished_at = CASE WHEN pick.spent THEN sloth.now() ELSE j.finished_at END,
    updated_at = sloth.now()
FROM pick
WHERE j.id = pick.id
  AND ((j.state = 'queued' AND j.not_before <= sloth.now())
       OR (j.state = 'claimed' AND j.lease_until < sloth.now()))
RETURNING j.*, pick.state AS was_state, pick.spent
), ev AS (
INSERT INTO sloth.events (job_id, at, kind, attempt, message)
SELECT u.id, sloth.now(),
       CASE WHEN u.spent THEN 'lease_expired'
            WHEN u.was_state = 'claimed' THEN 'reclaimed' ELSE 'claimed' END,
       u.attempts,
       CASE WHEN u.spent THEN u.message
            WHEN u.was_state = 'claimed'
            THEN format('by %%s; lease of %%s expired at %%s', %(worker)s, pick.worker,
                        round(pick.lease_until::numeric, 3))
            ELSE 'by ' || %(worker)s END
FROM u JOIN pick ON pick.id = u.id
)
SELECT * FROM u
"""
LANES_IN = "AND lane = ANY(%({p}lanes)s)"
LANES_OUT = "AND lane <> ALL(%({p}exclude_lanes)s)"
IDS_OUT = "AND id <> ALL(%({p}exclude_ids)s)"

SQL_INSERT_COLUMNS = (
    "id, command, state, lane, priority, max_attempts, lease_s, timeout_s, not_before, key,"
    " cwd, env_id, label, shell, created_at, updated_at"
)
# A run of jobs in one statement: the arrays are columns, now is the server's.
SQL_INSERT_MANY = f"""
INSERT INTO sloth.jobs ({SQL_INSERT_COLUMNS})
SELECT t.id, t.command, 'queued', t.lane, t.priority, t.max_attempts, t.lease_s, t.timeout_s,
       coalesce(t.not_before, sloth.now()), NULL, t.cwd, t.env_id, t.label, t.shell,
       sloth.now(), sloth.now()
FROM unnest(%s::bigint[], %s::text[], %s::text[], %s::bigint[], %s::bigint[],
            %s::float8[], %s::float8[], %s::float8[], %s::text[], %s::bigint[], %s::text[],
            %s::bool[])
     AS t(id, command, lane, priority, max_attempts, lease_s, timeout_s, not_before, cwd,
          env_id, label, shell)
"""
SQL_INSERT_KEYED = f"""
INSERT INTO sloth.jobs ({SQL_INSERT_COLUMNS})
VALUES (nextval(pg_get_serial_sequence('sloth.jobs', 'id')), %s, 'queued', %s, %s, %s, %s, %s,
        coalesce(%s, sloth.now()), %s, %s, %s, %s, %s, sloth.now(), sloth.now())
ON CONFLICT (key) WHERE key IS NOT NULL AND state IN ('queued', 'claimed') DO NOTHING
RETURNING id
"""
SQL_ACTIVE_KEY = "SELECT id FROM sloth.jobs WHERE key = %s AND state IN ('queued', 'claimed')"


class ServerClock:
    """``now()`` of the database server (``sloth.now()``): what a caller that
    needs "now" (a due time to sleep until) must compare with."""

    def __init__(self, queue: "PgQueue") -> None:
        self._queue = queue

    def now(self) -> float:
        return self._queue._db.read(
            lambda c: c.execute("SELECT sloth.now() AS now").fetchone()["now"], "reading the clock")


class PgQueue:
    """A durable lease queue on PostgreSQL, shared by any number of daemons
    (see the module docstring). Same contract as SqliteQueue.

    ``clock``: None (production) uses the server's clock. A test clock
    (ManualClock) pins every transaction's now to its reading. A SystemClock
    is this machine's wall clock, which a shared queue must not trust: it is
    taken to mean "the real clock", i.e. the server's.
    ``migrate``: apply pending schema migrations on open (under an advisory
    lock); False refuses a schema that is not exactly this code's.
    ``options``: connection settings (pgdb.PgOptions).
    """

    def __init__(
        self,
        url: str,
        clock: Clock | None = None,
        *,
        lease_s: float = DEFAULT_LEASE_S,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        backoff_cap_s: float = DEFAULT_BACKOFF_CAP_S,
        migrate: bool = True,
        options: pgdb.PgOptions | None = None,
    ) -> None:
        self.url = url
        if isinstance(clock, (SystemClock, SystemClocks)):
            clock = None
        self._pinned = clock
        self.clock: Clock = clock if clock is not None else ServerClock(self)
        self.lease_s = float(lease_s)
        self.max_attempts = int(max_attempts)
        self.backoff_cap_s = float(backoff_cap_s)
        self._envs: dict[int, dict[str, str]] = {}  # env_id -> env, decoded once
        self._db = pgdb.Connection(url, options or pgdb.PgOptions(), self._pin)
        try:
            if migrate:
                pg_migrate.migrate(self._db)
            else:
                pg_migrate.check_schema(self._db)
        except BaseException:
            self._db.close()
            raise

    def _pin(self) -> float | None:
        return None if self._pinned is None else self._pinned.now()

    # ----------------------------------------------------------------- enqueue
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
        if not rows:
            return []

        def tx(c: Cursor) -> list[int]:
            env_ids = {text: _put_env(c, text) for text in {r.env_json for r in rows} - {None}}
            ids: list[int] = []
            run: list[tuple[JobSpec, int | None]] = []  # consecutive rows without a key: one INSERT
            for r in rows:
                env_id = None if r.env_json is None else env_ids[r.env_json]
                if r.key is None:
                    run.append((r, env_id))
                    continue
                ids += _insert_run(c, run)
                run = []
                ids.append(_insert_keyed(c, r, env_id))
            return ids + _insert_run(c, run)

        return self._db.write(tx, "adding jobs")

    # ------------------------------------------------------------------- claim
    def claim(
        self, worker: str, *, lease_s: float | None = None, lanes: Sequence[str] | None = None,
        exclude_lanes: Collection[str] = (), exclude_ids: Collection[int] = (),
    ) -> Job | None:
        """Lease the most urgent due job to ``worker``, or return None.

        Due means ``queued`` with ``not_before <= now``, or ``claimed`` with an
        expired lease (``lease_until < now``, strict), now being the server's.
        Transition: -> claimed, ``attempts`` + 1, fresh token, ``lease_until =
        now + lease``, event ``claimed`` or ``reclaimed``. An expired job with
        no attempts left goes to ``failed`` instead (event ``lease_expired``)
        and the search goes on. The returned Job keeps the previous attempt's
        ``runner``. ``exclude_lanes`` skips lanes; ``exclude_ids`` never
        re-issues these jobs' expired leases. Rows another claimer holds
        locked right now are skipped, not waited for.
        """
        if lease_s is not None:  # refuse a bad lease even when nothing is due
            lease_s = number(lease_s, "lease_s", None, lo=0.001)
        if isinstance(lanes, str):  # a bare string would be read as its letters
            raise BadRequest(f"lanes must be a list of lane names, got the string {lanes!r}")
        if lanes is not None and not lanes:
            return None
        sql, args = _claim_sql(worker, lease_s, lanes, exclude_lanes, exclude_ids)

        while True:
            args["rand"] = secrets.token_hex(8)
            rows = self._db.write_one(sql, args, "claiming a job")
            if not rows:
                return None
            if not rows[0]["spent"]:  # spent: failed, lease expired on the last attempt
                return self._job(rows[0])

    # --------------------------------------------------------- lease holders
    def heartbeat(self, job_id: int, token: str, *, lease_s: float | None = None) -> Job:
        """Extend the lease of the holder of ``token``: ``lease_until = now + lease``.

        The token decides, not the clock: a lapsed lease that nobody reclaimed
        may still be renewed. Raises LeaseLost (stale token) or JobNotFound.
        """
        if lease_s is not None:
            lease_s = number(lease_s, "lease_s", None, lo=0.001)
        return self._held_step(job_id, token, EXTEND, {"lease_s": lease_s}, "renewing a lease")

    def renew_after_resume(self, job_id: int, token: str, message: str) -> Job:
        """Heartbeat after the machine slept, and record a ``resumed`` event."""
        return self._held_step(job_id, token, EXTEND, {"lease_s": None},
                               "renewing a lease after resume", event=("resumed", message))

    def set_runner(self, job_id: int, token: str, runner: dict[str, Any]) -> Job:
        """Record the identity of the process running this attempt (event ``started``)."""
        return self._held_step(job_id, token, "runner = %(runner)s, updated_at = sloth.now()",
                               {"runner": json.dumps(runner)}, "recording a job's process",
                               event=("started", f"pid {runner.get('pid')}"))

    def complete(self, job_id: int, token: str, *, message: str = "", exit_code: int | None = None) -> Job:
        """claimed -> done. Raises LeaseLost for a stale token."""
        return self._held_step(job_id, token, FINISH, {"state": JobState.DONE.value, "message": message,
                                                       "exit_code": exit_code},
                               "completing a job", event=("done", message))

    def fail(
        self, job_id: int, token: str, *, message: str = "", retry: bool = True,
        exit_code: int | None = None,
    ) -> Job:
        """claimed -> queued with ``not_before = now + min(2**attempts, cap)`` while
        attempts remain (and ``retry``), else -> failed. Raises LeaseLost."""
        def tx(c: Cursor) -> Job:
            row = self._held(c, job_id, token)
            attempts = row["attempts"]
            if retry and attempts < row["max_attempts"]:
                delay = min(2.0 ** min(attempts, 1000), self.backoff_cap_s)  # 2.0**1024 overflows
                out = c.execute(
                    "UPDATE sloth.jobs SET state = 'queued', not_before = sloth.now() + %s,"
                    " token = NULL, lease_until = NULL, message = %s, exit_code = %s,"
                    " updated_at = sloth.now() WHERE id = %s RETURNING *",
                    (delay, message, exit_code, job_id),
                ).fetchone()
                self._event(c, job_id, "failed", attempts,
                            _join(message, f"retry {attempts + 1}/{row['max_attempts']} in {delay:g}s"))
                return self._job(out, c)
            why = "no attempts left" if retry else "not retried"
            return self._finish(c, job_id, JobState.FAILED, attempts, "failed",
                                _join(message, why), exit_code=exit_code, stored_message=message)

        return self._db.write(tx, "failing a job")

    def release(self, job_id: int, token: str, *, message: str = "interrupted") -> Job:
        """claimed -> queued, due now, attempt refunded (event ``interrupted``).

        For a graceful shutdown: the interruption was not the job's fault, so
        it does not use up its failure budget. Raises LeaseLost.
        """
        def tx(c: Cursor) -> Job:
            row = self._held(c, job_id, token)
            out = c.execute(
                "UPDATE sloth.jobs SET state = 'queued', not_before = sloth.now(), token = NULL,"
                " lease_until = NULL, attempts = greatest(attempts - 1, 0), updated_at = sloth.now()"
                " WHERE id = %s RETURNING *", (job_id,),
            ).fetchone()
            self._event(c, job_id, "interrupted", row["attempts"], message)
            return self._job(out, c)

        return self._db.write(tx, "releasing a job")

    def abandon(self, job_id: int, token: str, *, message: str) -> Job:
        """Declare the holder of ``token`` gone. The lease counts as expired
        from now, so the next claim re-issues the job with a ``reclaimed``
        event. Event ``abandoned``. Raises LeaseLost."""
        return self._held_step(job_id, token,
                               "lease_until = sloth.just_before(sloth.now()), updated_at = sloth.now()",
                               {}, "abandoning a lease", event=("abandoned", message))

    # ---------------------------------------------------------- user actions
    def cancel(self, job_id: int, *, message: str = "cancelled by user") -> Job:
        """queued|claimed -> cancelled. A claimed job's holder loses its lease
        (its token is cleared); ending its process is the caller's business."""
        def tx(c: Cursor) -> Job:
            row = self._get_row(c, job_id, lock=True)
            if row["state"] not in ACTIVE_STATES:
                raise IllegalTransition(
                    f"job {job_id} is {row['state']}; only queued or running jobs can be cancelled"
                )
            return self._finish(c, job_id, JobState.CANCELLED, row["attempts"], "cancelled", message)

        return self._db.write(tx, "cancelling a job")

    def retry(self, job_id: int) -> Job:
        """failed|cancelled -> queued, due now, with a fresh attempt budget."""
        def tx(c: Cursor) -> Job:
            row = self._get_row(c, job_id, lock=True)
            if row["state"] not in (JobState.FAILED.value, JobState.CANCELLED.value):
                raise IllegalTransition(
                    f"job {job_id} is {row['state']}; only failed or cancelled jobs can be retried",
                    hint="A queued or running job will run anyway; a done job can be re-added.",
                )
            if row["key"] is not None:
                other = c.execute(SQL_ACTIVE_KEY, (row["key"],)).fetchone()
                if other:
                    raise _key_taken(other["id"], row["key"])
            try:
                with c.connection.transaction():  # a savepoint: a racing enqueue may take the key
                    out = c.execute(
                        "UPDATE sloth.jobs SET state = 'queued', attempts = 0, not_before = sloth.now(),"
                        " token = NULL, lease_until = NULL, finished_at = NULL, updated_at = sloth.now()"
                        " WHERE id = %s RETURNING *", (job_id,),
                    ).fetchone()
            except pgerr.UniqueViolation:
                other = c.execute(SQL_ACTIVE_KEY, (row["key"],)).fetchone()
                raise _key_taken(other["id"] if other else "?", row["key"]) from None
            self._event(c, job_id, "retried", 0, "back to queued by user")
            return self._job(out, c)

        return self._db.write(tx, "retrying a job")

    def prune(self, older_than_s: float) -> int:
        """Delete finished jobs (and their events) that ended more than
        ``older_than_s`` ago. Returns how many jobs were deleted."""
        if older_than_s is None:
            raise BadRequest("older_than_s must be a number of seconds, got None")
        older = number(older_than_s, "older_than_s", None, lo=0)

        def tx(c: Cursor) -> int:
            cur = c.execute(
                "DELETE FROM sloth.jobs WHERE finished_at IS NOT NULL"
                " AND finished_at < sloth.now() - %s AND state = ANY(%s)",
                (older, list(FINISHED_STATES)),
            )
            n = cur.rowcount
            if n:
                # SKIP LOCKED: an environment an enqueue is using right now
                # (it holds a KEY SHARE lock on it) is left for next time.
                c.execute("DELETE FROM sloth.envs WHERE id IN (SELECT e.id FROM sloth.envs e"
                          " WHERE NOT EXISTS (SELECT 1 FROM sloth.jobs j WHERE j.env_id = e.id)"
                          " FOR UPDATE SKIP LOCKED)")
                self._envs.clear()
            return n

        return self._db.write(tx, "pruning finished jobs")

    # ----------------------------------------------------------------- reads
    def get(self, job_id: int) -> Job:
        return self._db.read(lambda c: self._job(self._get_row(c, job_id), c), "reading a job")

    def jobs(
        self, state: str | JobState | None = None, lane: str | None = None, limit: int = 1000,
        *, states: Sequence[str] | None = None,
    ) -> list[Job]:
        """The newest ``limit`` jobs matching the filters, oldest first."""
        wanted = list(states or ([] if state is None else [state]))
        for s in wanted:
            JobState(s)  # raises ValueError for an unknown state
        limit = integer(limit, "limit", 1000, lo=1)
        where, args = [], []  # fixed fragments; values are parameters
        if wanted:
            where.append("state = ANY(%s)")
            args.append([JobState(s).value for s in wanted])
        if lane is not None:
            where.append("lane = %s")
            args.append(lane)
        sql = "SELECT * FROM sloth.jobs" + (" WHERE " + " AND ".join(where) if where else "")
        sql = f"SELECT * FROM ({sql} ORDER BY id DESC LIMIT %s) newest ORDER BY id"

        def read(c: Cursor) -> list[Job]:
            return [self._job(r, c) for r in c.execute(sql, (*args, limit)).fetchall()]

        return self._db.read(read, "listing jobs")

    def events(self, job_id: int) -> list[Event]:
        def read(c: Cursor) -> list[Event]:
            self._get_row(c, job_id)
            rows = c.execute("SELECT job_id, at, kind, attempt, message FROM sloth.events"
                             " WHERE job_id = %s ORDER BY id", (job_id,)).fetchall()
            return [Event(**r) for r in rows]

        return self._db.read(read, "reading a job's events")

    def counts(self) -> dict[str, int]:
        out = {s.value: 0 for s in JobState}
        rows = self._db.read(lambda c: c.execute(
            "SELECT state, count(*) AS n FROM sloth.jobs GROUP BY state").fetchall(), "counting jobs")
        for r in rows:
            out[r["state"]] = r["n"]
        return out

    def claimed(self) -> list[Job]:
        """All jobs currently leased (running somewhere, or lost)."""
        return self._db.read(lambda c: [self._job(r, c) for r in c.execute(
            "SELECT * FROM sloth.jobs WHERE state = 'claimed' ORDER BY id").fetchall()],
            "listing claimed jobs")

    def next_due_at(self, lanes: Sequence[str] | None = None, *,
                    exclude_lanes: Collection[str] = (),
                    exclude_ids: Collection[int] = ()) -> float | None:
        """Earliest time (server clock) at which ``claim`` could return
        something: the first queued ``not_before``, or just after the first
        lease expiry."""
        if lanes is not None and not lanes:
            return None
        filt, args = _filters(lanes, exclude_lanes, ())
        lease_filt, lease_args = _filters(lanes, exclude_lanes, exclude_ids, prefix="l_")
        sql = (f"SELECT (SELECT min(not_before) FROM sloth.jobs WHERE state = 'queued' {filt}) AS due,"
               f" (SELECT min(lease_until) FROM sloth.jobs WHERE state = 'claimed' {lease_filt})"
               " AS lease")
        args.update(lease_args)
        row = self._db.read(lambda c: c.execute(sql, args).fetchone(), "finding the next due time")
        times = [row["due"]]
        if row["lease"] is not None:
            times.append(math.nextafter(row["lease"], math.inf))  # strict: expired only after
        return min((t for t in times if t is not None), default=None)

    def lanes(self) -> list[str]:
        """Lanes that have queued or claimed jobs."""
        rows = self._db.read(lambda c: c.execute(
            "SELECT DISTINCT lane FROM sloth.jobs WHERE state IN ('queued', 'claimed')").fetchall(),
            "listing lanes")
        return sorted(r["lane"] for r in rows)

    def get_meta(self, key: str, default: Any = None) -> Any:
        """A small persisted setting (JSON value), e.g. which lanes are paused."""
        row = self._db.read(lambda c: c.execute(
            "SELECT value FROM sloth.meta WHERE key = %s", (key,)).fetchone(), "reading a setting")
        return default if row is None else json.loads(row["value"])

    def set_meta(self, key: str, value: Any) -> None:
        text = json.dumps(value)
        self._db.write(lambda c: c.execute(
            "INSERT INTO sloth.meta (key, value) VALUES (%s, %s)"
            " ON CONFLICT (key) DO UPDATE SET value = excluded.value", (key, text)),
            "saving a setting")

    def schema_status(self) -> pg_migrate.SchemaStatus:
        """The database's schema version against this code's (for `sloth db status`)."""
        return pg_migrate.status(self._db)

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> "PgQueue":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --------------------------------------------------------------- helpers
    def _job(self, row: Mapping[str, Any], c: Cursor | None = None) -> Job:
        """A Job from a row; its environment from the cache or ``envs`` (on
        ``c`` inside a transaction, else by a read of its own)."""
        d = {k: v for k, v in row.items() if k in _JOB_COLUMNS}
        d["env"] = None
        env_id = d["env_id"]
        if env_id is None:
            return Job.from_row(d)
        env = self._envs.get(env_id)
        if env is None:
            def fetch(cur: Cursor) -> dict[str, Any] | None:
                return cur.execute("SELECT data FROM sloth.envs WHERE id = %s", (env_id,)).fetchone()

            found = fetch(c) if c is not None else self._db.read(fetch, "reading a job's environment")
            env = json.loads(found["data"]) if found else {}
            if len(self._envs) > 256:
                self._envs.clear()
            self._envs[env_id] = env
        return Job.from_row(d, env=dict(env))  # a copy: callers may change theirs

    @staticmethod
    def _get_row(c: Cursor, job_id: int, *, lock: bool = False) -> dict[str, Any]:
        _check_id(job_id)
        row = c.execute("SELECT * FROM sloth.jobs WHERE id = %s" + (" FOR UPDATE" if lock else ""),
                        (job_id,)).fetchone()
        if row is None:
            raise JobNotFound(job_id)
        return row

    def _held(self, c: Cursor, job_id: int, token: str) -> dict[str, Any]:
        """The job's row, locked, if ``token`` holds its lease; else the error."""
        row = self._get_row(c, job_id, lock=True)
        if row["state"] != JobState.CLAIMED.value or row["token"] is None or row["token"] != token:
            raise self._not_held(c, row, token)
        return row

    def _held_step(self, job_id: int, token: str, assignments: str, args: dict[str, Any],
                   doing: str, *, event: tuple[str, str] | None = None) -> Job:
        """One statement (the hot path: renewals, completions): UPDATE the job
        where id AND token still hold its lease, and write its event. No
        match: a read finds the reason (JobNotFound, IllegalTransition,
        LeaseLost)."""
        _check_id(job_id)
        sql = (f"WITH u AS (UPDATE sloth.jobs SET {assignments} WHERE id = %(id)s"
               " AND state = 'claimed' AND token = %(token)s RETURNING *)")
        if event is not None:
            sql += (", ev AS (INSERT INTO sloth.events (job_id, at, kind, attempt, message)"
                    " SELECT id, sloth.now(), %(kind)s, attempts, %(event_message)s FROM u)")
            args = {**args, "kind": event[0], "event_message": event[1]}
        rows = self._db.write_one(sql + " SELECT * FROM u",
                                  {**args, "id": job_id, "token": token if isinstance(token, str) else None},
                                  doing)
        if not rows:
            raise self._db.read(lambda c: self._not_held(c, self._get_row(c, job_id), token), doing)
        return self._job(rows[0])

    @staticmethod
    def _not_held(c: Cursor, row: Mapping[str, Any], token: object) -> Exception:
        job_id = row["id"]
        if row["state"] == JobState.QUEUED.value and row["token"] is None and row["attempts"] == 0:
            ever = c.execute("SELECT 1 FROM sloth.events WHERE job_id = %s"
                             " AND kind IN ('claimed', 'reclaimed') LIMIT 1", (job_id,)).fetchone()
            if ever is None:
                return IllegalTransition(f"job {job_id} is queued, not claimed by anyone")
        return LeaseLost(f"job {job_id}: token {str(token)[:16]!r} no longer holds the lease "
                         f"(job is {row['state']}, attempt {row['attempts']})")

    def _finish(
        self, c: Cursor, job_id: int, state: JobState, attempt: int, kind: str, message: str,
        *, exit_code: int | None = None, stored_message: str | None = None,
    ) -> Job:
        out = c.execute(
            f"UPDATE sloth.jobs SET {FINISH} WHERE id = %(id)s RETURNING *",
            {"state": state.value, "message": message if stored_message is None else stored_message,
             "exit_code": exit_code, "id": job_id},
        ).fetchone()
        self._event(c, job_id, kind, attempt, message)
        return self._job(out, c)

    @staticmethod
    def _event(c: Cursor, job_id: int, kind: str, attempt: int, message: str) -> None:
        c.execute("INSERT INTO sloth.events (job_id, at, kind, attempt, message)"
                  " VALUES (%s, sloth.now(), %s, %s, %s)", (job_id, kind, attempt, message))


_JOB_COLUMNS = frozenset(Job.__dataclass_fields__) | {"env_id"}
EXTEND = "lease_until = sloth.now() + coalesce(%(lease_s)s, lease_s), updated_at = sloth.now()"
FINISH = ("state = %(state)s, token = NULL, lease_until = NULL, message = %(message)s,"
          " exit_code = coalesce(%(exit_code)s, exit_code), finished_at = sloth.now(),"
          " updated_at = sloth.now()")


def _check_id(job_id: object) -> None:
    """Job ids are 64-bit ints; anything else names no job (not a server error)."""
    if isinstance(job_id, bool) or not isinstance(job_id, int) or not INT64[0] <= job_id < INT64[1]:
        raise JobNotFound(job_id)


def _filters(lanes: Sequence[str] | None, exclude_lanes: Collection[str],
             exclude_ids: Collection[int], prefix: str = "") -> tuple[str, dict[str, Any]]:
    """WHERE fragments (fixed text) and their parameters (named with
    ``prefix``) for the lane and id filters."""
    parts, args = [], {}
    if lanes is not None:
        parts.append(LANES_IN.format(p=prefix))
        args[prefix + "lanes"] = [str(x) for x in lanes]
    if exclude_lanes:
        parts.append(LANES_OUT.format(p=prefix))
        args[prefix + "exclude_lanes"] = [str(x) for x in exclude_lanes]
    ids = [i for i in exclude_ids if isinstance(i, int) and not isinstance(i, bool)
           and INT64[0] <= i < INT64[1]]
    if ids:
        parts.append(IDS_OUT.format(p=prefix))
        args[prefix + "exclude_ids"] = ids
    return " ".join(parts), args


def _claim_sql(worker: str, lease_s: float | None, lanes: Sequence[str] | None,
               exclude_lanes: Collection[str], exclude_ids: Collection[int]) -> tuple[str, dict]:
    lane_filt, args = _filters(lanes, exclude_lanes, ())
    id_filt, id_args = _filters(None, (), exclude_ids)
    return (SQL_CLAIM.format(lanes=lane_filt, ids=id_filt),
            {**args, **id_args, "worker": worker, "lease_s": lease_s})


def _put_env(c: Cursor, text: str) -> int:
    """The id of this environment in ``envs``, adding it if new. The row is
    locked FOR KEY SHARE until commit, so a concurrent prune cannot delete
    it before our jobs reference it."""
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
    while True:
        row = c.execute("SELECT id FROM sloth.envs WHERE hash = %s FOR KEY SHARE", (digest,)).fetchone()
        if row:
            return row["id"]
        row = c.execute("INSERT INTO sloth.envs (hash, data) VALUES (%s, %s)"
                        " ON CONFLICT (hash) DO NOTHING RETURNING id", (digest, text)).fetchone()
        if row:
            return row["id"]
        # another transaction added it between our two statements: read it again


def _insert_run(c: Cursor, run: list[tuple[JobSpec, int | None]]) -> list[int]:
    """Insert keyless jobs with one statement; ids are taken from the sequence
    first, so they are known in order whatever order the server inserts in."""
    if not run:
        return []
    ids = [r["id"] for r in c.execute(
        "SELECT nextval(pg_get_serial_sequence('sloth.jobs', 'id')) AS id"
        " FROM generate_series(1, %s)", (len(run),)).fetchall()]
    cols = list(zip(*[(r.command_json, r.lane, r.priority, r.max_attempts, r.lease_s, r.timeout_s,
                       r.not_before, r.cwd, env_id, r.label, r.shell) for r, env_id in run]))
    c.execute(SQL_INSERT_MANY, (ids, *[list(col) for col in cols]))
    return ids


def _insert_keyed(c: Cursor, r: JobSpec, env_id: int | None) -> int:
    """The active job with this key, or a new one. The partial unique index
    settles a race with another enqueuer of the same key."""
    while True:
        hit = c.execute(SQL_ACTIVE_KEY, (r.key,)).fetchone()
        if hit:
            return hit["id"]
        row = c.execute(SQL_INSERT_KEYED, (
            r.command_json, r.lane, r.priority, r.max_attempts, r.lease_s, r.timeout_s,
            r.not_before, r.key, r.cwd, env_id, r.label, r.shell)).fetchone()
        if row:
            return row["id"]
        # the other enqueuer committed first: its job is the active one now


def _key_taken(other: object, key: str) -> IllegalTransition:
    return IllegalTransition(f"job {other} with the same key {key!r} is still active",
                             hint=f"Wait for job {other} or cancel it first.")


def _join(a: str, b: str) -> str:
    return f"{a}; {b}" if a else b


__all__ = ["PgQueue", "ServerClock", "StorageError"]

"""The lease queue on PostgreSQL: leases and transitions. Its SQL lives in
the pg*.py modules of this package (pg_enqueue: adding jobs, pg_claim: what
a claim picks, pg_reads: the read side); pgdb.py connects and runs
transactions, pg_migrate.py migrates.

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

import json
import secrets
from typing import Any, Collection, Mapping, Sequence

from psycopg import errors as pgerr

from ..clock import Clock, SystemClock, SystemClocks
from ..errors import BadRequest, IllegalTransition, LeaseLost
from ..models import ACTIVE_STATES, FINISHED_STATES, Job, JobState
from ..spec import number
from . import pg_claim as pick
from . import pg_migrate, pgdb
from .pg_enqueue import SQL_ACTIVE_KEY, PgEnqueue
from .pg_reads import PgReads, check_id
from .pgdb import Cursor, Row, one
from .sqlite import DEFAULT_BACKOFF_CAP_S, DEFAULT_LEASE_S, DEFAULT_MAX_ATTEMPTS
from .sqlite_leases import MAX_CRASH_REFUNDS

__all__ = ["PgQueue", "ServerClock"]

# SET lists of the one-statement writes of lease holders (_held_step).
EXTEND = "lease_until = sloth.now() + coalesce(%(lease_s)s, lease_s), updated_at = sloth.now()"
# finished_at: when the process really ended (%(ended_at)s, as reported), never after now.
FINISH = ("state = %(state)s, token = NULL, lease_until = NULL, message = %(message)s,"
          " exit_code = coalesce(%(exit_code)s, exit_code),"
          " finished_at = least(coalesce(%(ended_at)s, sloth.now()), sloth.now()), updated_at = sloth.now()")
ADOPT = "worker = %(worker)s, lease_until = sloth.now() + lease_s, updated_at = sloth.now()"
SET_RUNNER = "runner = %(runner)s, updated_at = sloth.now()"
SQL_SET_RUNNER = "UPDATE sloth.jobs SET runner = %s, updated_at = sloth.now() WHERE id = %s"
SQL_FLUSH = ("INSERT INTO sloth.meta (key, value) VALUES ('flushed', '0')"
             " ON CONFLICT (key) DO UPDATE SET value = (sloth.meta.value::bigint + 1)::text")
SQL_HELD_UPDATE = ("WITH u AS (UPDATE sloth.jobs SET {assignments} WHERE id = %(id)s"
                   " AND state = 'claimed' AND token = %(token)s RETURNING *)")
SQL_HELD_EVENT = (", ev AS (INSERT INTO sloth.events (job_id, at, kind, attempt, message)"
                  " SELECT id, least(coalesce(%(at)s, sloth.now()), sloth.now()), %(kind)s, attempts,"
                  " %(event_message)s FROM u)")
# Transactions of several statements, on a row they hold locked.
SQL_BACK_OFF = ("UPDATE sloth.jobs SET state = 'queued', not_before = sloth.now() + %s,"
                " token = NULL, lease_until = NULL, message = %s, exit_code = %s,"
                " updated_at = sloth.now() WHERE id = %s RETURNING *")
SQL_RELEASE = ("UPDATE sloth.jobs SET state = 'queued', not_before = sloth.now(), token = NULL,"
               " lease_until = NULL, tries = greatest(tries - 1, 0), updated_at = sloth.now()"
               " WHERE id = %s RETURNING *")
SQL_ABANDON = ("UPDATE sloth.jobs SET lease_until = sloth.just_before(sloth.now()), tries = tries - %s,"
               " refunds = refunds + %s, updated_at = sloth.now() WHERE id = %s RETURNING *")
SQL_REQUEUE = ("UPDATE sloth.jobs SET state = 'queued', tries = 0, refunds = 0, not_before = sloth.now(),"
               " token = NULL, lease_until = NULL, finished_at = NULL, updated_at = sloth.now()"
               " WHERE id = %s RETURNING *")
SQL_FINISH = f"UPDATE sloth.jobs SET {FINISH} WHERE id = %(id)s RETURNING *"
SQL_EVENT = ("INSERT INTO sloth.events (job_id, at, kind, attempt, message)"
             " VALUES (%s, least(coalesce(%s, sloth.now()), sloth.now()), %s, %s, %s)")
SQL_PRUNE_JOBS = ("DELETE FROM sloth.jobs WHERE finished_at IS NOT NULL"
                  " AND finished_at < sloth.now() - %s AND state = ANY(%s)")
# SKIP LOCKED: an environment an enqueue is using right now (it holds a KEY
# SHARE lock on it) is left for next time.
SQL_PRUNE_ENVS = ("DELETE FROM sloth.envs WHERE id IN (SELECT e.id FROM sloth.envs e"
                  " WHERE NOT EXISTS (SELECT 1 FROM sloth.jobs j WHERE j.env_id = e.id)"
                  " FOR UPDATE SKIP LOCKED)")
SQL_SET_META = ("INSERT INTO sloth.meta (key, value) VALUES (%s, %s)"
                " ON CONFLICT (key) DO UPDATE SET value = excluded.value")


class ServerClock:
    """``now()`` of the database server (``sloth.now()``): what a caller that
    needs "now" (a due time to sleep until) must compare with."""

    def __init__(self, queue: "PgQueue") -> None:
        self._queue = queue

    def now(self) -> float:
        return self._queue._db.read(
            lambda c: one(c.execute("SELECT sloth.now() AS now"))["now"], "reading the clock")


class PgQueue(PgEnqueue, PgReads):
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
        self._open_schema(migrate)

    def _pin(self) -> float | None:
        return None if self._pinned is None else self._pinned.now()

    def _open_schema(self, migrate: bool) -> None:
        """Migrate the schema, or refuse one that is not this code's; the
        connection is closed if that fails."""
        try:
            if migrate:
                pg_migrate.migrate(self._db)
            else:
                pg_migrate.check_schema(self._db)
        except BaseException:
            self._db.close()
            raise

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
        lease_s = pick.claim_lease(lease_s, lanes)
        if lanes is not None and not lanes:
            return None
        sql, args = pick.claim_statement(worker, lease_s, lanes, exclude_lanes, exclude_ids)
        while True:  # until a job is leased or none is due
            rows = self._db.write_one(sql, {**args, "rand": secrets.token_hex(8)}, "claiming a job")
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
        return self._held_step(job_id, token, SET_RUNNER, {"runner": json.dumps(runner)},
                               "recording a job's process", event=("started", f"pid {runner.get('pid')}"))

    def complete(self, job_id: int, token: str, *, message: str = "", exit_code: int | None = None,
                 ended_at: float | None = None, runner: dict[str, Any] | None = None,
                 durable: bool = True) -> Job:
        """claimed -> done. ``ended_at``, ``runner``, ``durable``: as
        SqliteQueue.complete (durable=False: synchronous_commit off for this
        transaction; a later synchronous commit or flush() makes it durable).
        Raises LeaseLost for a stale token."""
        at = _finite(ended_at)
        if runner is None and durable:  # the hot path: one statement
            return self._held_step(job_id, token, FINISH, {"state": JobState.DONE.value, "message": message,
                                                           "exit_code": exit_code, "ended_at": at},
                                   "completing a job", event=("done", message), at=at)

        def tx(c: Cursor) -> Job:
            row = self._begin_end(c, job_id, token, runner, durable)
            return self._finish(c, job_id, JobState.DONE, row["attempts"], "done", message,
                                exit_code=exit_code, at=at)

        return self._db.write(tx, "completing a job")

    def _begin_end(self, c: Cursor, job_id: int, token: str, runner: dict[str, Any] | None,
                   durable: bool) -> Row:
        """The first steps of an outcome written in a transaction: its commit
        durability, the lease check, the process identity if not yet written."""
        if not durable:
            c.execute("SET LOCAL synchronous_commit TO OFF")
        row = self._held(c, job_id, token)
        if runner is not None:
            c.execute(SQL_SET_RUNNER, (json.dumps(runner), job_id))
            self._event(c, job_id, "started", row["attempts"], f"pid {runner.get('pid')}",
                        _finite(runner.get("started_at")))
        return row

    def flush(self) -> None:
        """Make every commit made with ``durable=False`` durable now."""
        self._db.write(lambda c: c.execute(SQL_FLUSH), "flushing the log of commits")

    def fail(
        self, job_id: int, token: str, *, message: str = "", retry: bool = True,
        exit_code: int | None = None, ended_at: float | None = None,
        runner: dict[str, Any] | None = None, durable: bool = True,
    ) -> Job:
        """claimed -> queued with ``not_before = now + min(2**tries, cap)`` while
        tries remain (and ``retry``), else -> failed (``ended_at`` as for
        complete). Raises LeaseLost."""
        at = _finite(ended_at)

        def tx(c: Cursor) -> Job:
            row = self._begin_end(c, job_id, token, runner, durable)
            if retry and row["tries"] < row["max_attempts"]:
                return self._back_off(c, row, message, exit_code, at)
            why = "no attempts left" if retry else "not retried"
            return self._finish(c, job_id, JobState.FAILED, row["attempts"], "failed",
                                _join(message, why), exit_code=exit_code, stored_message=message, at=at)

        return self._db.write(tx, "failing a job")

    def _back_off(self, c: Cursor, row: Row, message: str, exit_code: int | None, at: float | None) -> Job:
        """A failed try with tries left: queued again after a delay that
        doubles with each try, up to backoff_cap_s."""
        tries = row["tries"]
        delay = min(2.0 ** min(tries, 1000), self.backoff_cap_s)  # 2.0**1024 overflows
        out = one(c.execute(SQL_BACK_OFF, (delay, message, exit_code, row["id"])))
        self._event(c, row["id"], "failed", row["attempts"],
                    _join(message, f"retry {tries + 1}/{row['max_attempts']} in {delay:g}s"), at)
        return self._job(out, c)

    def release(self, job_id: int, token: str, *, message: str = "interrupted",
                kind: str = "interrupted", runner: dict[str, Any] | None = None,
                durable: bool = True) -> Job:
        """claimed -> queued, due now, the try given back (event ``kind``:
        ``interrupted`` by a stopping daemon, ``fenced`` when its keeper ended
        it for want of a lease renewal). Raises LeaseLost."""
        def tx(c: Cursor) -> Job:
            row = self._begin_end(c, job_id, token, runner, durable)
            out = one(c.execute(SQL_RELEASE, (job_id,)))
            self._event(c, job_id, kind, row["attempts"], message)
            return self._job(out, c)

        return self._db.write(tx, "releasing a job")

    def abandon(self, job_id: int, token: str, *, message: str, refund: bool = False) -> Job:
        """Declare the holder of ``token`` gone. The lease counts as expired
        from now, so the next claim re-issues the job with a ``reclaimed``
        event. Event ``abandoned``. ``refund``: as SqliteQueue.abandon (a
        crash of sloth gives the try back, at most MAX_CRASH_REFUNDS times).
        Raises LeaseLost."""
        def tx(c: Cursor) -> Job:
            row = self._held(c, job_id, token)
            give = refund and row["refunds"] < MAX_CRASH_REFUNDS and row["tries"] > 0
            out = one(c.execute(SQL_ABANDON, (int(give), int(give), job_id)))
            self._event(c, job_id, "abandoned", row["attempts"], message + _refund_note(refund, give, row))
            return self._job(out, c)

        return self._db.write(tx, "abandoning a lease")

    def adopt(self, job_id: int, token: str, worker: str, *, message: str) -> Job:
        """A new holder takes over the lease of ``token``: renewed from now,
        ``worker`` renamed; event ``adopted``. Raises LeaseLost or JobNotFound."""
        return self._held_step(job_id, token, ADOPT, {"worker": worker}, "adopting a lease",
                               event=("adopted", message))

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
            _refuse_unless_retryable(row)
            out = _requeue(c, row)
            self._event(c, job_id, "retried", row["attempts"], "back to queued by user")
            return self._job(out, c)

        return self._db.write(tx, "retrying a job")

    def prune(self, older_than_s: float) -> int:
        """Delete finished jobs (and their events) that ended more than
        ``older_than_s`` ago. Returns how many jobs were deleted."""
        if older_than_s is None:
            raise BadRequest("older_than_s must be a number of seconds, got None")
        older = number(older_than_s, "older_than_s", 0.0, lo=0)
        return self._db.write(lambda c: self._prune(c, older), "pruning finished jobs")

    def _prune(self, c: Cursor, older: float) -> int:
        n = c.execute(SQL_PRUNE_JOBS, (older, list(FINISHED_STATES))).rowcount
        if n:
            c.execute(SQL_PRUNE_ENVS)
            self._envs.clear()
        return n

    def set_meta(self, key: str, value: Any) -> None:
        text = json.dumps(value)
        self._db.write(lambda c: c.execute(SQL_SET_META, (key, text)), "saving a setting")

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> "PgQueue":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --------------------------------------------------------------- helpers
    def _held(self, c: Cursor, job_id: int, token: str) -> Row:
        """The job's row, locked, if ``token`` holds its lease; else the error."""
        row = self._get_row(c, job_id, lock=True)
        if row["state"] != JobState.CLAIMED.value or row["token"] is None or row["token"] != token:
            raise _not_held(c, row, token)
        return row

    def _held_step(self, job_id: int, token: str, assignments: str, args: dict[str, Any],
                   doing: str, *, event: tuple[str, str] | None = None, at: float | None = None) -> Job:
        """One statement (the hot path: renewals, completions): UPDATE the job
        where id AND token still hold its lease, and write its event. No
        match: a read finds the reason (JobNotFound, IllegalTransition,
        LeaseLost)."""
        check_id(job_id)
        sql = SQL_HELD_UPDATE.format(assignments=assignments)
        args = {**args, "id": job_id, "token": token if isinstance(token, str) else None}
        if event is not None:
            sql += SQL_HELD_EVENT
            args.update(kind=event[0], event_message=event[1], at=at)
        rows = self._db.write_one(sql + " SELECT * FROM u", args, doing)
        if not rows:
            raise self._db.read(lambda c: _not_held(c, self._get_row(c, job_id), token), doing)
        return self._job(rows[0])

    def _finish(
        self, c: Cursor, job_id: int, state: JobState, attempt: int, kind: str, message: str,
        *, exit_code: int | None = None, stored_message: str | None = None, at: float | None = None,
    ) -> Job:
        out = one(c.execute(SQL_FINISH, {
            "state": state.value, "message": message if stored_message is None else stored_message,
            "exit_code": exit_code, "id": job_id, "ended_at": at}))
        self._event(c, job_id, kind, attempt, message, at)
        return self._job(out, c)

    @staticmethod
    def _event(c: Cursor, job_id: int, kind: str, attempt: int, message: str, at: float | None = None) -> None:
        c.execute(SQL_EVENT, (job_id, at, kind, attempt, message))


def _not_held(c: Cursor, row: Mapping[str, Any], token: object) -> Exception:
    """Why ``token`` does not hold the job's lease: never claimed at all
    (IllegalTransition), or the lease moved on (LeaseLost)."""
    job_id = row["id"]
    if row["state"] == JobState.QUEUED.value and row["token"] is None and row["attempts"] == 0:
        return IllegalTransition(f"job {job_id} is queued, not claimed by anyone")
    return LeaseLost(f"job {job_id}: token {str(token)[:16]!r} no longer holds the lease "
                     f"(job is {row['state']}, attempt {row['attempts']})")


def _refuse_unless_retryable(row: Row) -> None:
    if row["state"] not in (JobState.FAILED.value, JobState.CANCELLED.value):
        raise IllegalTransition(
            f"job {row['id']} is {row['state']}; only failed or cancelled jobs can be retried",
            hint="A queued or running job will run anyway; a done job can be re-added.",
        )


def _requeue(c: Cursor, row: Row) -> Row:
    """A finished job back to queued with a fresh budget, unless another
    active job has its key now (IllegalTransition)."""
    key = row["key"]
    if key is not None:
        other = c.execute(SQL_ACTIVE_KEY, (key,)).fetchone()
        if other:
            raise _key_taken(other["id"], key)
    try:
        with c.connection.transaction():  # a savepoint: a racing enqueue may take the key
            return one(c.execute(SQL_REQUEUE, (row["id"],)))
    except pgerr.UniqueViolation:
        other = c.execute(SQL_ACTIVE_KEY, (key,)).fetchone()
        raise _key_taken(other["id"] if other else "?", key) from None


def _key_taken(other: object, key: str) -> IllegalTransition:
    return IllegalTransition(f"job {other} with the same key {key!r} is still active",
                             hint=f"Wait for job {other} or cancel it first.")


def _join(a: str, b: str) -> str:
    return f"{a}; {b}" if a else b


def _refund_note(refund: bool, given: bool, row: Row) -> str:
    if not refund:
        return ""
    if given:
        return f"; not counted as a try ({row['refunds'] + 1} of {MAX_CRASH_REFUNDS} forgiven)"
    return f"; counted as a try ({MAX_CRASH_REFUNDS} crashes already forgiven)"


def _finite(t: float | None) -> float | None:
    return t if isinstance(t, (int, float)) and t == t and abs(t) != float("inf") else None

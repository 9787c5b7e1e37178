"""The lease queue on PostgreSQL: leases and transitions. Its SQL lives in
the pg*.py modules of this package (pg_enqueue: adding jobs, pg_claim:
claiming, pg_leases: the lease holder's renewals, pg_batch: requests on
many jobs, pg_deps: dependencies, pg_reads and pg_listing: the read side,
pg_identity: which queue a database holds); backends/postgres/db.py connects and runs
transactions, backends/postgres/migrate.py migrates.

The contract is SqliteQueue's (same methods, values, errors and event
history); what differs is who keeps time and who may race:

* **One clock, the server's.** Every lease comparison and every time written
  is ``sloth.now()`` in SQL: the server's clock at the start of the
  transaction, one instant for all it writes (see the migration); clients
  send durations (a lease, a backoff), never timestamps. A test passes a
  ManualClock and each transaction pins sloth.now() to its reading instead.
  (``not_before`` given to enqueue is the one absolute time a caller may
  send: it is the user's own "not before this moment"; ``ended_at`` and a
  runner's ``started_at`` are reports, never later than now.)
* **Hot writes are one statement**: a claim, a renewal or the completion of
  a job nobody waits for is one UPDATE that also inserts its event,
  committed alone: one round trip. An end that settles dependents
  (backends/postgres/deps.py) is a transaction.
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
* **Identity.** A queue has a random id, made with it and kept in its meta
  table, as on SQLite. Where SQLite watches its file, this queue checks
  every new connection: a URL that now reaches another queue, or a
  database that was dropped, breaks the queue (``broken``, QueueBroken),
  and it takes no more requests.

States: blocked -> queued -> running -> done | failed | cancelled (and
running -> queued for a retry or an interruption). A transition that ends a
job may queue or cancel jobs that wait for it; those are passed, after the
commit, to ``on_side_change``.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Callable, TypeVar

from psycopg import errors as pgerr

from sloth_daemon.clock import Clock, SystemClock, SystemClocks
from sloth_daemon.errors import IllegalTransition
from sloth_daemon.models import ACTIVE_STATES, Job, JobState
from sloth_daemon.spec import number
from sloth_daemon.backends.postgres import deps
from sloth_daemon.backends.postgres import identity as pg_identity, migrate as pg_migrate, db as pgdb
from sloth_daemon.backends.postgres.batch import PgBatch
from sloth_daemon.backends.postgres.claim import PgClaim
from sloth_daemon.backends.postgres.enqueue import SQL_ACTIVE_KEY, PgEnqueue
from sloth_daemon.backends.postgres.hosts import PgHosts
from sloth_daemon.backends.postgres.logs import PgLogs
from sloth_daemon.backends.postgres.leases import PgLeases, WaitedOn, holds, not_held
from sloth_daemon.backends.sqlite.leases import may_refund, refund_note
from sloth_daemon.backends.postgres.reads import PgReads
from sloth_daemon.backends.postgres.db import Cursor, Row, finite, one, storable_text
from sloth_daemon.backends.sqlite.queue import DEFAULT_BACKOFF_CAP_S, DEFAULT_LEASE_S, DEFAULT_MAX_ATTEMPTS

__all__ = ["PgQueue", "ServerClock"]

T = TypeVar("T")
# finished_at: when the process really ended (%(ended_at)s, as reported), never after now.
FINISH = ("state = %(state)s, token = NULL, lease_until = NULL, message = %(message)s,"
          " exit_code = coalesce(%(exit_code)s, exit_code),"
          " finished_at = least(coalesce(%(ended_at)s, sloth.now()), sloth.now()), updated_at = sloth.now()")
SQL_FINISH = f"UPDATE sloth.jobs SET {FINISH} WHERE id = %(id)s RETURNING *"
SQL_SET_RUNNER = "UPDATE sloth.jobs SET runner = %s, updated_at = sloth.now() WHERE id = %s"
SQL_BACK_OFF = ("UPDATE sloth.jobs SET state = 'queued', not_before = sloth.now() + %s,"
                " token = NULL, lease_until = NULL, message = %s, exit_code = %s,"
                " updated_at = sloth.now() WHERE id = %s RETURNING *")
SQL_RELEASE = ("UPDATE sloth.jobs SET state = 'queued', not_before = sloth.now() + %s, token = NULL,"
               " lease_until = NULL, tries = greatest(tries - 1, 0), refunds = refunds + %s,"
               " updated_at = sloth.now() WHERE id = %s RETURNING *")
SQL_REQUEUE = ("UPDATE sloth.jobs SET state = %s, tries = 0, refunds = 0, not_before = sloth.now(),"
               " token = NULL, lease_until = NULL, finished_at = NULL, updated_at = sloth.now()"
               " WHERE id = %s RETURNING *")
SQL_EVENT = ("INSERT INTO sloth.events (job_id, at, kind, attempt, message)"
             " VALUES (%s, least(coalesce(%s, sloth.now()), sloth.now()), %s, %s, %s)")
SQL_SET_META = ("INSERT INTO sloth.meta (key, value) VALUES (%s, %s)"
                " ON CONFLICT (key) DO UPDATE SET value = excluded.value")
SQL_SET_LANE = ("INSERT INTO sloth.lanes (name, concurrency, config_was, created_at) VALUES (%s, %s, %s, sloth.now())"
                " ON CONFLICT (name) DO UPDATE SET concurrency = excluded.concurrency,"
                " config_was = excluded.config_was")


class ServerClock:
    """``now()`` of the database server (``sloth.now()``): what a caller that
    needs "now" (a due time to sleep until) must compare with."""

    def __init__(self, queue: "PgQueue") -> None:
        self._queue = queue

    def now(self) -> float:
        return self._queue._db.read(
            lambda c: one(c.execute("SELECT sloth.now() AS now"))["now"], "reading the clock")


class PgQueue(PgClaim, PgLeases, PgBatch, PgEnqueue, PgReads, PgHosts, PgLogs):
    """A durable lease queue on PostgreSQL, shared by any number of daemons
    (see the module docstring). Same contract as SqliteQueue.

    ``clock``: None (production) uses the server's clock. A test clock
    (ManualClock) pins every transaction's now to its reading. A SystemClock
    is this machine's wall clock, which a shared queue must not trust: it is
    taken to mean "the real clock", i.e. the server's.
    ``lock_wait_s``: how long a write waits for a row another session holds
    before StorageBusy (SqliteQueue's; None: up to the statement timeout).
    ``migrate``: apply pending schema migrations on open (under an advisory
    lock); False refuses a schema that is not exactly this code's.
    ``options``: connection settings (pgdb.PgOptions).
    """

    on_side_change: Callable[[Job], None] | None = None  # see the module docstring

    def __init__(
        self,
        url: str,
        clock: Clock | None = None,
        *,
        lease_s: float = DEFAULT_LEASE_S,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        backoff_cap_s: float = DEFAULT_BACKOFF_CAP_S,
        lock_wait_s: float | None = None,
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
        self._side: list[Job] = []  # dependents changed by the open transaction
        options = options or pgdb.PgOptions()
        if lock_wait_s is not None:
            options = dataclasses.replace(options, lock_wait_s=lock_wait_s)
        self._db = pgdb.Connection(url, options, self._pin)
        self.identity: str = self._open(migrate)

    def _pin(self) -> float | None:
        return None if self._pinned is None else self._pinned.now()

    def _open(self, migrate: bool) -> str:
        """Migrate the schema (or refuse one that is not this code's), then
        read or make the queue's identity; the connection is closed if that
        fails. From then on every new connection is checked against it."""
        try:
            if migrate:
                pg_migrate.migrate(self._db)
            else:
                pg_migrate.check_schema(self._db)
            identity = self._db.write(pg_identity.make, "reading the queue's identity")
        except BaseException:
            self._db.close()
            raise
        self._db.verify = lambda conn: pg_identity.other_queue(conn, identity)
        return identity

    def check(self) -> None:
        """Raise QueueBroken if this queue's database was dropped, lost its
        schema, or the URL now reaches another queue (then it takes no more
        requests)."""
        why = self._db.read(lambda c: pg_identity.other_queue(c.connection, self.identity), "checking the queue")
        if why is not None:
            raise self._db.mark_broken(why)

    def revalidate(self) -> None:
        """After a suspend or a network change: connect afresh on the next call."""
        self._db.revalidate()

    @property
    def broken(self) -> str | None:
        """Why this queue takes no more requests, or None."""
        return self._db.broken

    def _write(self, fn: Callable[[Cursor], T], doing: str) -> T:
        """pgdb's write, then (after the commit only) tell ``on_side_change``
        of each dependent the transaction queued or cancelled."""
        def attempt(c: Cursor) -> T:
            self._side = []  # run again after a lost connection: start over
            return fn(c)

        out = self._db.write(attempt, doing)
        side, self._side = self._side, []
        if self.on_side_change is not None:
            for job in side:
                self.on_side_change(job)
        return out

    # --------------------------------------------------------- lease holders
    def complete(self, job_id: int, token: str, *, message: str = "", exit_code: int | None = None,
                 ended_at: float | None = None, runner: dict[str, Any] | None = None,
                 durable: bool = True) -> Job:
        """running -> done (dependents may be queued). ``ended_at``,
        ``runner``, ``durable``: as SqliteQueue.complete (durable=False:
        synchronous_commit off for this transaction; a later synchronous
        commit or flush() makes it durable). Raises LeaseLost for a stale token."""
        at = finite(ended_at)
        if runner is None and durable:  # the hot path: one statement
            try:
                return self._held_step(job_id, token, FINISH, {
                    "state": JobState.DONE.value, "message": storable_text(message), "exit_code": exit_code,
                    "ended_at": at}, "completing a job", event=("done", message), at=at, unwaited=True)
            except WaitedOn:
                pass  # its end settles the jobs that wait for it: a transaction

        def tx(c: Cursor) -> Job:
            row = self._begin_end(c, job_id, token, runner, durable)
            return self._finish(c, job_id, JobState.DONE, row["attempts"], "done", message,
                                exit_code=exit_code, at=at)

        return self._write(tx, "completing a job")

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
                        finite(runner.get("started_at")))
        return row

    def fail(
        self, job_id: int, token: str, *, message: str = "", retry: bool = True,
        exit_code: int | None = None, ended_at: float | None = None,
        runner: dict[str, Any] | None = None, durable: bool = True,
    ) -> Job:
        """running -> queued with ``not_before = now + min(2**tries, cap)`` while
        tries remain (and ``retry``), else -> failed (dependents that need it
        done are cancelled, the others may be queued). ``ended_at``,
        ``runner`` and ``durable`` as for complete. Raises LeaseLost."""
        at = finite(ended_at)

        def tx(c: Cursor) -> Job:
            row = self._begin_end(c, job_id, token, runner, durable)
            return self._fail_row(c, row, message, retry, exit_code, at)

        return self._write(tx, "failing a job")

    def _fail_row(self, c: Cursor, row: Row, message: str, retry: bool, exit_code: int | None,
                  at: float | None, kind: str = "failed") -> Job:
        """A try that counts ended: backed off while tries remain (and
        ``retry``, the event ``kind``), else failed."""
        if retry and row["tries"] < row["max_attempts"]:
            return self._back_off(c, row, message, exit_code, at, kind)
        why = "no attempts left" if retry else "not retried"
        return self._finish(c, row["id"], JobState.FAILED, row["attempts"], "failed",
                            _join(message, why), exit_code=exit_code, stored_message=message, at=at)

    def _back_off(self, c: Cursor, row: Row, message: str, exit_code: int | None, at: float | None,
                  kind: str = "failed") -> Job:
        """A failed try with tries left: queued again after a delay that
        doubles with each try, up to backoff_cap_s."""
        tries = row["tries"]
        delay = min(2.0 ** min(tries, 1000), self.backoff_cap_s)  # 2.0**1024 overflows
        out = one(c.execute(SQL_BACK_OFF, (delay, storable_text(message), exit_code, row["id"])))
        self._event(c, row["id"], kind, row["attempts"],
                    _join(message, f"retry {tries + 1}/{row['max_attempts']} in {delay:g}s"), at)
        return self._job(out, c)

    def release(self, job_id: int, token: str, *, message: str = "interrupted", delay_s: float = 0.0,
                kind: str = "interrupted", runner: dict[str, Any] | None = None,
                durable: bool = True) -> Job:
        """running -> queued, due in ``delay_s``, the try given back (event
        ``kind``: ``interrupted``, ``fenced`` or ``postponed``, as
        SqliteQueue.release: a fence is forgiven MAX_CRASH_REFUNDS times).
        ``runner``, ``durable``: as for complete. Raises LeaseLost."""
        delay = number(delay_s, "delay_s", 0.0, lo=0)

        def tx(c: Cursor) -> Job:
            row = self._begin_end(c, job_id, token, runner, durable)
            forgiven = kind != "fenced" or may_refund(row)
            note = refund_note(row, forgiven) if kind == "fenced" else ""
            if not forgiven:
                return self._fail_row(c, row, message + note, True, None, None, kind)
            out = one(c.execute(SQL_RELEASE, (delay, int(kind == "fenced"), job_id)))
            self._event(c, job_id, kind, row["attempts"], message + note)
            return self._job(out, c)

        return self._write(tx, "releasing a job")

    # ---------------------------------------------------------- user actions
    def cancel(self, job_id: int, *, message: str = "cancelled by user") -> Job:
        """blocked|queued|running -> cancelled; what waits for it to be done is
        cancelled too. A running job's holder loses its lease (its token is
        cleared); ending its process is the caller's business. Raises
        IllegalTransition for a finished job, JobNotFound."""
        def tx(c: Cursor) -> Job:
            row = self._get_row(c, job_id, lock=True)
            if row["state"] not in ACTIVE_STATES:
                raise IllegalTransition(
                    f"job {job_id} is {row['state']}; only blocked, queued or running jobs can be cancelled"
                )
            return self._finish(c, job_id, JobState.CANCELLED, row["attempts"], "cancelled", message)

        return self._write(tx, "cancelling a job")

    def retry(self, job_id: int) -> Job:
        """failed|cancelled -> queued, due now, with a fresh budget of tries
        (``attempts`` keeps counting runs); -> blocked instead while a job it
        was added after is unfinished. Raises IllegalTransition (other
        states, or its key is taken by an active job), JobNotFound."""
        return self._write(lambda c: self._retry(c, self._get_row(c, job_id, lock=True)), "retrying a job")

    def _retry(self, c: Cursor, row: Row) -> Job:
        if row["state"] not in (JobState.FAILED.value, JobState.CANCELLED.value):
            raise IllegalTransition(
                f"job {row['id']} is {row['state']}; only failed or cancelled jobs can be retried",
                hint="A queued or running job will run anyway; `sloth restart` queues a finished one again.",
            )
        waits = deps.still_waits(c, row["id"])
        out = _requeue(c, row, "queued" if waits is None else "blocked")
        why = "back to queued by user" if waits is None else f"retried by user; waits for job {waits}"
        self._event(c, row["id"], "retried", row["attempts"], why)
        return self._job(out, c)

    def set_meta(self, key: str, value: Any) -> None:
        text = json.dumps(value)
        self._db.write(lambda c: c.execute(SQL_SET_META, (key, text)), "saving a setting")

    def set_lane(self, name: str, concurrency: int | None, config_was: int | None = None) -> None:
        """Record a lane (and, unless None, the concurrency `sloth lane set`
        gave it, with the config's value at that moment)."""
        self._db.write(lambda c: c.execute(SQL_SET_LANE, (name, concurrency, config_was)), "saving a lane")

    def forget_lane(self, name: str) -> None:
        """Remove a lane from the lanes table (its jobs, if any, keep their lane)."""
        self._db.write(lambda c: c.execute("DELETE FROM sloth.lanes WHERE name = %s", (name,)),
                       "forgetting a lane")

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
        if not holds(row, token):
            raise not_held(row, token)
        return row

    def _finish(
        self, c: Cursor, job_id: int, state: JobState, attempt: int, kind: str, message: str,
        *, exit_code: int | None = None, stored_message: str | None = None, at: float | None = None,
    ) -> Job:
        """The job ends (``state``, event ``kind``); the jobs waiting for it
        are settled in the same transaction, and kept for on_side_change."""
        out = one(c.execute(SQL_FINISH, {
            "state": state.value, "message": storable_text(message if stored_message is None else stored_message),
            "exit_code": exit_code, "id": job_id, "ended_at": at}))
        self._event(c, job_id, kind, attempt, message, at)
        if out["waited_on"]:
            self._side += [self._job(r, c) for r in deps.settle(c, job_id, state.value)]
        return self._job(out, c)

    @staticmethod
    def _event(c: Cursor, job_id: int, kind: str, attempt: int, message: str, at: float | None = None) -> None:
        c.execute(SQL_EVENT, (job_id, at, kind, attempt, storable_text(message)))


def _requeue(c: Cursor, row: Row, state: str) -> Row:
    """A finished job back to ``state`` with a fresh budget, unless another
    active job has its key now (IllegalTransition)."""
    key = row["key"]
    if key is not None:
        other = c.execute(SQL_ACTIVE_KEY, (key,)).fetchone()
        if other:
            raise _key_taken(other["id"], key)
    try:
        with c.connection.transaction():  # a savepoint: a racing enqueue may take the key
            return one(c.execute(SQL_REQUEUE, (state, row["id"])))
    except pgerr.UniqueViolation:
        other = c.execute(SQL_ACTIVE_KEY, (key,)).fetchone()
        raise _key_taken(other["id"] if other else "?", key) from None


def _key_taken(other: object, key: str) -> IllegalTransition:
    return IllegalTransition(f"job {other} with the same key {key!r} is still active",
                             hint=f"Wait for job {other} or cancel it first.")


def _join(a: str, b: str) -> str:
    return f"{a}; {b}" if a else b

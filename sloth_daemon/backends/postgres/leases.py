"""The lease holder's side of the PostgreSQL queue: renewing a lease,
recording the process that runs it, handing it to a new holder, declaring a
holder gone, and making earlier commits durable (the counterpart of
backends/sqlite/leases.py).

A base class of PgQueue (backends/postgres/queue.py): the transitions that end a lease
(complete, fail, release) stay there, beside claim. A renewal is one
UPDATE that matches id AND token and writes its event in the same
statement: one round trip, and a stale holder changes nothing.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Callable, Mapping, TypeVar

from sloth_daemon.errors import IllegalTransition, LeaseLost
from sloth_daemon.models import Job, JobState
from sloth_daemon.spec import number
from sloth_daemon.backends.postgres.reads import check_id
from sloth_daemon.backends.postgres.db import Connection, Cursor, Row, finite, one, storable_text
from sloth_daemon.backends.sqlite.leases import MAX_CRASH_REFUNDS, may_refund

T = TypeVar("T")

# SET lists of the one-statement writes of lease holders (_held_step).
EXTEND = "lease_until = sloth.now() + coalesce(%(lease_s)s, lease_s), updated_at = sloth.now()"
ADOPT = "worker = %(worker)s, lease_until = sloth.now() + lease_s, updated_at = sloth.now()"
SET_RUNNER = "runner = %(runner)s, updated_at = sloth.now()"
SQL_FLUSH = ("INSERT INTO sloth.meta (key, value) VALUES ('flushed', '0')"
             " ON CONFLICT (key) DO UPDATE SET value = (sloth.meta.value::bigint + 1)::text")
SQL_HELD_UPDATE = ("WITH u AS (UPDATE sloth.jobs SET {assignments} WHERE id = %(id)s"
                   " AND state = 'running' AND token = %(token)s {unwaited} RETURNING *)")
SQL_HELD_EVENT = (", ev AS (INSERT INTO sloth.events (job_id, at, kind, attempt, message)"
                  " SELECT id, least(coalesce(%(at)s, sloth.now()), sloth.now()), %(kind)s, attempts,"
                  " %(event_message)s FROM u)")
SQL_ABANDON = ("UPDATE sloth.jobs SET lease_until = sloth.just_before(sloth.now()), tries = tries - %s,"
               " refunds = refunds + %s, updated_at = sloth.now() WHERE id = %s RETURNING *")


class PgLeases:
    _db: Connection

    if TYPE_CHECKING:
        def _write(self, fn: Callable[[Cursor], T], doing: str) -> T: ...
        def _held(self, c: Cursor, job_id: int, token: str) -> Row: ...
        def _get_row(self, c: Cursor, job_id: int, *, lock: bool = False) -> Row: ...
        def _job(self, row: Mapping[str, Any], c: Cursor | None = None) -> Job: ...
        @staticmethod
        def _event(c: Cursor, job_id: int, kind: str, attempt: int, message: str,
                   at: float | None = None) -> None: ...

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
        return self._held_step(job_id, token, EXTEND, {"lease_s": None}, "renewing a lease after resume",
                               event=("resumed", message))

    def set_runner(self, job_id: int, token: str, runner: dict[str, Any]) -> Job:
        """Record the identity of the process running this attempt (event ``started``)."""
        return self._held_step(job_id, token, SET_RUNNER, {"runner": json.dumps(runner)},
                               "recording a job's process", event=("started", f"pid {runner.get('pid')}"),
                               at=finite(runner.get("started_at")))

    def note_ended(self, job_id: int, attempt: int, message: str, *, ended_at: float | None = None,
                   durable: bool = True) -> Job:
        """A run of a job it no longer holds ended: event ``ended``, as
        SqliteQueue.note_ended. Raises JobNotFound."""
        check_id(job_id)

        def tx(c: Cursor) -> Job:
            row = self._get_row(c, job_id)
            self._event(c, job_id, "ended", attempt, message, at=finite(ended_at))
            return self._job(row, c)

        return self._write(tx, "recording how a cancelled job's run ended")

    def flush(self) -> None:
        """Make every commit made with ``durable=False`` durable now."""
        self._db.write(lambda c: c.execute(SQL_FLUSH), "flushing the log of commits")

    def adopt(self, job_id: int, token: str, worker: str, *, message: str) -> Job:
        """A new holder takes over the lease of ``token``: renewed from now,
        ``worker`` renamed; event ``adopted``. Raises LeaseLost or JobNotFound."""
        return self._held_step(job_id, token, ADOPT, {"worker": worker}, "adopting a lease",
                               event=("adopted", message))

    def abandon(self, job_id: int, token: str, *, message: str, refund: bool = False) -> Job:
        """Declare the holder of ``token`` gone. The lease counts as expired
        from now, so the next claim re-issues the job with a ``reclaimed``
        event. Event ``abandoned``. ``refund``: as SqliteQueue.abandon (a
        crash of sloth gives the try back, at most MAX_CRASH_REFUNDS times).
        Raises LeaseLost."""
        def tx(c: Cursor) -> Job:
            row = self._held(c, job_id, token)
            give = refund and may_refund(row)
            out = one(c.execute(SQL_ABANDON, (int(give), int(give), job_id)))
            self._event(c, job_id, "abandoned", row["attempts"], message + _refund_note(refund, give, row))
            return self._job(out, c)

        return self._write(tx, "abandoning a lease")

    def _held_step(self, job_id: int, token: str, assignments: str, args: dict[str, Any],
                   doing: str, *, event: tuple[str, str] | None = None, at: float | None = None,
                   unwaited: bool = False) -> Job:
        """One statement (the hot path: renewals, completions): UPDATE the job
        where id AND token still hold its lease, and write its event. No
        match: a read finds the reason (JobNotFound, IllegalTransition,
        LeaseLost). ``unwaited``: only a job nobody waits for; WaitedOn for
        one that others wait for (its end must settle them: a transaction)."""
        check_id(job_id)
        sql = SQL_HELD_UPDATE.format(assignments=assignments, unwaited="AND NOT waited_on" if unwaited else "")
        args = {**args, "id": job_id, "token": token if isinstance(token, str) else None}
        if event is not None:
            sql += SQL_HELD_EVENT
            args.update(kind=event[0], event_message=storable_text(event[1]), at=at)
        rows = self._db.write_one(sql + " SELECT * FROM u", args, doing)
        if rows:
            return self._job(rows[0])
        row = self._db.read(lambda c: self._get_row(c, job_id), doing)
        if unwaited and row["waited_on"] and holds(row, token):
            raise WaitedOn(job_id)
        raise not_held(row, token)


class WaitedOn(Exception):
    """Other jobs wait for this one: its end is not a one-statement write."""


def holds(row: Mapping[str, Any], token: object) -> bool:
    """Whether ``token`` holds the lease of the job in ``row``."""
    return row["state"] == JobState.RUNNING.value and row["token"] is not None and row["token"] == token


def not_held(row: Mapping[str, Any], token: object) -> Exception:
    """Why ``token`` does not hold the job's lease: never claimed at all
    (IllegalTransition), or the lease moved on (LeaseLost)."""
    job_id = row["id"]
    if row["state"] == JobState.QUEUED.value and row["token"] is None and row["attempts"] == 0:
        return IllegalTransition(f"job {job_id} is queued, not claimed by anyone")
    return LeaseLost(f"job {job_id}: token {str(token)[:16]!r} no longer holds the lease "
                     f"(job is {row['state']}, attempt {row['attempts']})")


def _refund_note(refund: bool, given: bool, row: Row) -> str:
    if not refund:
        return ""
    if given:
        return f"; not counted as a try ({row['refunds'] + 1} of {MAX_CRASH_REFUNDS} forgiven)"
    return f"; counted as a try ({MAX_CRASH_REFUNDS} crashes already forgiven)"

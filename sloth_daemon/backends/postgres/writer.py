"""The writes of job transitions on the PostgreSQL queue: one transaction
per queue call that tells, after its commit, of the dependents it queued or
cancelled, and the two steps every transition shares: an event, and a
job's end (which settles the jobs that wait for it, backends/postgres/deps.py).

PgClaims, lease holders, user requests and enqueues (claim.py, leases.py,
batch.py, enqueue.py) all write through the one PgWriter of their engine.
"""

from __future__ import annotations

from typing import Callable, TypeVar

from sloth_daemon.models import Job, JobState
from sloth_daemon.backends.postgres import deps
from sloth_daemon.backends.postgres.db import Connection, Cursor, one, storable_text
from sloth_daemon.backends.postgres.reads import JobRows

T = TypeVar("T")
# finished_at: when the process really ended (%(ended_at)s, as reported), never after now.
FINISH = ("state = %(state)s, token = NULL, lease_until = NULL, message = %(message)s,"
          " exit_code = coalesce(%(exit_code)s, exit_code),"
          " finished_at = least(coalesce(%(ended_at)s, sloth.now()), sloth.now()), updated_at = sloth.now()")
SQL_FINISH = f"UPDATE sloth.jobs SET {FINISH} WHERE id = %(id)s RETURNING *"
SQL_EVENT = ("INSERT INTO sloth.events (job_id, at, kind, attempt, message)"
             " VALUES (%s, least(coalesce(%s, sloth.now()), sloth.now()), %s, %s, %s)")


class PgWriter:
    """Transactions on ``db`` that report changed dependents.

    ``side``: the dependents the open transaction has queued or cancelled
    so far (started afresh with each run of a transaction); after the
    commit each is passed to ``on_side_change`` (the store's, set by the
    daemon's worker loop).
    """

    def __init__(self, db: Connection, rows: JobRows) -> None:
        self.db = db
        self.rows = rows
        self.on_side_change: Callable[[Job], None] | None = None
        self.side: list[Job] = []

    def write(self, fn: Callable[[Cursor], T], doing: str) -> T:
        """db.write, then (after the commit only, the unit's inside one)
        tell ``on_side_change`` of each dependent the transaction queued or
        cancelled."""
        def attempt(c: Cursor) -> T:
            self.side = []  # run again after a lost connection: start over
            return fn(c)

        out = self.db.write(attempt, doing)
        side, self.side = self.side, []
        tell = self.on_side_change
        if tell is not None and side:
            def told() -> None:
                for job in side:
                    tell(job)
            self.db.after_commit(told)  # inside a unit: once it commits
        return out

    def finish(
        self, c: Cursor, job_id: int, state: JobState, attempt: int, kind: str, message: str,
        *, exit_code: int | None = None, stored_message: str | None = None, at: float | None = None,
    ) -> Job:
        """The job ends (``state``, event ``kind``); the jobs waiting for it
        are settled in the same transaction, and kept for on_side_change."""
        out = one(c.execute(SQL_FINISH, {
            "state": state.value, "message": storable_text(message if stored_message is None else stored_message),
            "exit_code": exit_code, "id": job_id, "ended_at": at}))
        event(c, job_id, kind, attempt, message, at)
        if out["waited_on"]:
            self.side += [self.rows.job(r, c) for r in deps.settle(c, job_id, state.value)]
        return self.rows.job(out, c)


def event(c: Cursor, job_id: int, kind: str, attempt: int, message: str, at: float | None = None) -> None:
    """An event in the job's history, at ``at`` (a report) but never after now."""
    c.execute(SQL_EVENT, (job_id, at, kind, attempt, storable_text(message)))

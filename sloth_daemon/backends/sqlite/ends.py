"""A job's end on the SQLite queue, inside the writer's open transaction:
the row (done, failed or cancelled), its event, and the jobs that waited for
it settled in the same transaction (deps.release), noted with the store so
that they are told after the commit (unit.py). Shared by the lease holder's
side (leases.py: a claim that finds a lease expired for good, complete,
fail) and the user's requests (batch.py: cancel)."""

from __future__ import annotations

import sqlite3

from sloth_daemon.backends import rules
from sloth_daemon.backends.sqlite import deps
from sloth_daemon.backends.sqlite.reads import JobRows
from sloth_daemon.backends.sqlite.unit import SqliteStore
from sloth_daemon.models import Job, JobState
from sloth_daemon.text import storable

SQL_EVENT = "INSERT INTO events (job_id, at, kind, attempt, message) VALUES (?, ?, ?, ?, ?)"
SQL_TWO_EVENTS = SQL_EVENT + ", (?, ?, ?, ?, ?)"  # in this order: the first gets the lower id
ANYONE = object()  # finish's held_by when no lease is checked (a cancel, an expiry)
SQL_FINISH = ("UPDATE jobs SET state = ?, token = NULL, lease_until = NULL, message = ?,"
              " exit_code = coalesce(?, exit_code), finished_at = ?, updated_at = ?, runner = coalesce(?, runner)"
              " WHERE id = ? RETURNING *")
SQL_FINISH_HELD = SQL_FINISH.replace(" WHERE id = ?", " WHERE id = ? AND state = 'running' AND token = ?")


def event(c: sqlite3.Connection, job_id: int, at: float, kind: str, attempt: int, message: str) -> None:
    """One line of a job's history."""
    c.execute(SQL_EVENT, (job_id, at, kind, attempt, storable(message)))


class SqliteEnds:
    """Ends jobs (see the module docstring); ``store`` hears of the
    dependents each end settled, ``rows`` tells the ended job."""

    def __init__(self, store: SqliteStore, rows: JobRows) -> None:
        self.store, self.rows = store, rows

    def finish(
        self, c: sqlite3.Connection, job_id: int, state: JobState, now: float, attempt: int | None,
        kind: str, message: str, *, exit_code: int | None = None, stored_message: str | None = None,
        runner: str | None = None, started: tuple[float, str] | None = None, held_by: object = ANYONE,
    ) -> Job:
        """-> ``state`` (token and lease cleared, ``finished_at = now``), event
        ``kind`` with ``message`` (the job keeps ``stored_message`` if given).
        ``runner``: the process identity (JSON) written with it, and
        ``started`` its event (at, message) before ``kind``'s, in the same
        statements (an outcome of a short run: the worker writes its start
        with its end). ``held_by``: only if that token holds its lease
        (rules.holds, checked by the update itself: no read first), else
        LeaseLost or JobNotFound and nothing written; ``attempt`` None: the
        row's."""
        checked = held_by is not ANYONE
        args = (state.value, storable(message if stored_message is None else stored_message),
                exit_code, now, now, runner, self.rows.an_id(job_id))
        token = held_by if isinstance(held_by, str) else None  # no text (a list): held by nothing, not unbindable
        out = c.execute(SQL_FINISH_HELD if checked else SQL_FINISH, (*args, token) if checked else args).fetchone()
        if out is None:
            row = self.rows.row(c, job_id)  # JobNotFound
            raise rules.not_held(row, held_by)
        attempt = out["attempts"] if attempt is None else attempt
        if started is None:
            event(c, job_id, now, kind, attempt, message)
        else:
            c.execute(SQL_TWO_EVENTS, (job_id, started[0], "started", attempt, storable(started[1]),
                                       job_id, now, kind, attempt, storable(message)))
        self.store.settled(deps.release(c, job_id, state.value, now))
        return self.rows.job(out)

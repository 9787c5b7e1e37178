"""Requests on many jobs at once, each one transaction: cancel, retry,
restart and prune, by ids or by a selection (lane, states).

A base class of SqliteQueue (backends/sqlite/queue.py). By ids: an id that does not exist
refuses the whole request (JobNotFound, nothing changed: a typo must not
half-apply); a job in a state the action does not apply to is left alone
and reported in ``Batch.skipped`` with why, so one job that finished a
moment ago does not undo the other thirty-nine.
"""

from __future__ import annotations

import sqlite3
from typing import TYPE_CHECKING, Collection, Iterator, Sequence

from sloth_daemon.errors import BadRequest, IllegalTransition
from sloth_daemon.models import ACTIVE_STATES, FINISHED_STATES, Batch, Job, JobState, state_name
from sloth_daemon.spec import number
from sloth_daemon.backends.sqlite.enqueue import SQL_ACTIVE_KEY

if TYPE_CHECKING:
    from contextlib import AbstractContextManager

    from sloth_daemon.clock import Clock

_COPIED = ("command, lane, priority, max_attempts, lease_s, timeout_s, key, cwd, env, env_id,"
           " label, shell, retry_exit, no_retry_exit")
SQL_RESTART = (
    f"INSERT INTO jobs (state, not_before, created_at, updated_at, {_COPIED})"
    f" SELECT 'queued', ?, ?, ?, {_COPIED} FROM jobs WHERE id = ?"
)


class SqliteBatch:
    clock: "Clock"
    _envs: dict[int, dict[str, str]]
    _side: list[sqlite3.Row]

    if TYPE_CHECKING:  # SqliteQueue's and SqliteReads's, which this mixin's methods use
        def _tx(self, *, durable: bool = True) -> "AbstractContextManager[sqlite3.Connection]": ...
        def _get_row(self, c: sqlite3.Connection, job_id: int) -> sqlite3.Row: ...
        def _prune_batch_records(self, c: sqlite3.Connection, now: float) -> None: ...
        def _job(self, row: sqlite3.Row) -> Job: ...
        def _retry(self, c: sqlite3.Connection, row: sqlite3.Row, now: float) -> Job: ...
        def _finish(self, c: sqlite3.Connection, job_id: int, state: JobState, now: float, attempt: int,
                    kind: str, message: str, *, exit_code: int | None = None,
                    stored_message: str | None = None) -> Job: ...
        @staticmethod
        def _event(c: sqlite3.Connection, job_id: int, at: float, kind: str, attempt: int,
                   message: str) -> None: ...

    def cancel_many(self, ids: Sequence[int] | None = None, *, lane: str | None = None,
                    states: Sequence[str] | None = None, message: str = "cancelled by user",
                    exclude: Collection[int] = ()) -> Batch:
        """blocked|queued|running -> cancelled for each of ``ids``, or for
        every active job of ``lane`` and/or ``states`` (a selection). Jobs
        waiting for them to be done are cancelled too (in ``Batch.jobs``
        when named). ``exclude``: jobs left out, as if not named (the daemon
        asks the keeper about their runs first). Raises JobNotFound,
        BadRequest (a state that is not active)."""
        now, skip = self.clock.now(), set(exclude)
        with self._tx() as c:
            out = Batch([])
            for row in self._rows(c, ids, lane, _states(states, ACTIVE_STATES, "cancel")):
                if row["id"] in skip:
                    continue
                if row["state"] in ACTIVE_STATES:
                    out.jobs.append(self._finish(c, row["id"], JobState.CANCELLED, now, row["attempts"],
                                                 "cancelled", message))
                elif any(r["id"] == row["id"] for r in self._side):
                    out.jobs.append(self._job(row))  # cancelled a moment ago, by a job it waited for
                else:
                    out.skipped.append((row["id"], f"job {row['id']} is {row['state']}"))
            return out

    def retry_many(self, ids: Sequence[int] | None = None, *, lane: str | None = None,
                   states: Sequence[str] | None = None, busy: Collection[int] = ()) -> Batch:
        """failed|cancelled -> queued (or blocked), as :meth:`retry`, for each
        of ``ids`` or every job of the selection (default state: failed).
        ``busy``: jobs not to touch yet (their cancelled run is still ending).
        Raises JobNotFound, BadRequest."""
        now = self.clock.now()
        wanted = _states(states, (JobState.FAILED.value, JobState.CANCELLED.value), "retry")
        if ids is None and states is None:
            wanted = [JobState.FAILED.value]
        with self._tx() as c:
            out = Batch([])
            for row in self._rows(c, ids, lane, wanted):
                if row["id"] in busy:
                    out.skipped.append((row["id"], f"job {row['id']} is still being stopped"))
                    continue
                try:
                    out.jobs.append(self._retry(c, row, now))
                except IllegalTransition as e:
                    out.skipped.append((row["id"], e.message))
            return out

    def restart(self, ids: Sequence[int]) -> Batch:
        """For each finished job of ``ids``: a new queued job with the same
        command, lane, priority, limits, folder, environment, label and key
        (not its prerequisites), due now. Events: ``restart`` on the new job,
        ``restarted`` on the old. Raises JobNotFound."""
        now = self.clock.now()
        with self._tx() as c:
            out = Batch([])
            for row in self._rows(c, ids, None, None):
                why = _why_not_restart(c, row)
                if why:
                    out.skipped.append((row["id"], why))
                    continue
                new = int(c.execute(SQL_RESTART, (now, now, now, row["id"])).lastrowid or 0)
                self._event(c, new, now, "restart", 0, f"a restart of job {row['id']}")
                self._event(c, row["id"], now, "restarted", row["attempts"], f"queued again as job {new}")
                out.jobs.append(self._job(self._get_row(c, new)))
            return out

    def prune(self, older_than_s: float, *, states: Sequence[str] | None = None, lane: str | None = None,
              dry_run: bool = False) -> int:
        """Delete finished jobs (and their events) that ended more than
        ``older_than_s`` ago, of ``states`` (default: every finished state) and
        ``lane``. Returns how many were (``dry_run``: would be) deleted."""
        if older_than_s is None:
            raise BadRequest("older_than_s must be a number of seconds, got None")
        older = number(older_than_s, "older_than_s", 0.0, lo=0)
        wanted = _states(states, FINISHED_STATES, "prune") or list(FINISHED_STATES)
        where = (f"finished_at IS NOT NULL AND finished_at < ? AND state IN ({', '.join('?' * len(wanted))})"
                 + (" AND lane = ?" if lane is not None else ""))
        args = (self.clock.now() - older, *wanted, *([lane] if lane is not None else []))
        with self._tx() as c:
            if dry_run:
                return int(c.execute(f"SELECT count(*) FROM jobs WHERE {where}", args).fetchone()[0])
            n = c.execute(f"DELETE FROM jobs WHERE {where}", args).rowcount
            if n:
                c.execute("DELETE FROM envs WHERE NOT EXISTS (SELECT 1 FROM jobs WHERE jobs.env_id = envs.id)")
                self._envs.clear()
            self._prune_batch_records(c, self.clock.now())
            return n

    def _rows(self, c: sqlite3.Connection, ids: Sequence[int] | None, lane: str | None,
              states: Sequence[str] | None) -> Iterator[sqlite3.Row]:
        """The rows a request names: each of ``ids`` (all must exist; read
        afresh as each is reached, since an earlier one's end may change it),
        or the selection, oldest first."""
        if ids is not None:
            for i in ids:
                self._get_row(c, i)  # every id exists, or nothing changes
            for i in dict.fromkeys(ids):
                yield self._get_row(c, i)
            return
        for i in _selected(c, lane, states):
            yield self._get_row(c, i)


def _selected(c: sqlite3.Connection, lane: str | None, states: Sequence[str] | None) -> list[int]:
    """Ids of the jobs of a lane and/or states, oldest first."""
    if not states and lane is None:
        raise BadRequest("name the jobs: ids, a lane or states")
    where, args = [], []
    if states:
        where.append(f"state IN ({', '.join('?' * len(states))})")
        args += list(states)
    if lane is not None:
        where.append("lane = ?")
        args.append(lane)
    return [r[0] for r in c.execute(f"SELECT id FROM jobs WHERE {' AND '.join(where)} ORDER BY id", args)]


def _states(states: Sequence[str] | None, allowed: Sequence[str], action: str) -> list[str] | None:
    """Validated state names (``claimed`` read as ``running``) among ``allowed``."""
    if states is None:
        return None
    out = []
    for s in states:
        try:
            name = state_name(s)
        except ValueError:
            raise BadRequest(f"unknown state {s!r}", hint=f"States: {', '.join(allowed)}.") from None
        if name not in allowed:
            raise BadRequest(f"cannot {action} {name} jobs", hint=f"States to {action}: {', '.join(allowed)}.")
        out.append(name)
    return out


def _why_not_restart(c: sqlite3.Connection, row: sqlite3.Row) -> str | None:
    if row["state"] not in FINISHED_STATES:
        return f"job {row['id']} is {row['state']}; only finished jobs can be restarted"
    if row["key"] is not None:
        other = c.execute(SQL_ACTIVE_KEY, (row["key"],)).fetchone()
        if other:
            return f"job {other[0]} with the same key {row['key']!r} is still active"
    return None


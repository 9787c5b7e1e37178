"""The user's requests on the SQLite queue, each one transaction: cancel and
retry one job, or many at once (cancel, retry, restart and prune, by ids or
by a selection: lane, states).

A part of the SQLite engine (engine.py). By ids: an id that does not exist
refuses the whole request (JobNotFound, nothing changed: a typo must not
half-apply); a job in a state the action does not apply to is left alone
and reported in ``Batch.skipped`` with why, so one job that finished a
moment ago does not undo the other thirty-nine.
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any, Collection, Iterator, Sequence

from sloth_daemon.backends import contract, rules, run_tally
from sloth_daemon.backends.sqlite import deps
from sloth_daemon.backends.sqlite.ends import SqliteEnds, event
from sloth_daemon.backends.sqlite.enqueue import SQL_ACTIVE_KEY, SqliteAdds
from sloth_daemon.backends.sqlite.reads import JobRows
from sloth_daemon.backends.sqlite.unit import SqliteStore
from sloth_daemon.clock import Clock
from sloth_daemon.errors import BadRequest
from sloth_daemon.models import ACTIVE_STATES, FINISHED_STATES, Batch, Job, JobState
from sloth_daemon.spec import number

_COPIED = rules.restart_columns("env")  # env: the environment as the first schema kept it
SQL_RESTART = (
    f"INSERT INTO jobs (state, not_before, created_at, updated_at, {_COPIED})"
    f" SELECT 'queued', ?, ?, ?, {_COPIED} FROM jobs WHERE id = ?"
)


class SqliteRequests(contract.Requests):
    """The user's requests (see the module docstring). Its own state: the
    clock; writes go through ``store``, ended jobs through ``ends``, the
    batch records a prune drops are ``adds``'s (enqueue.py)."""

    def __init__(self, store: SqliteStore, rows: JobRows, ends: SqliteEnds, adds: SqliteAdds,
                 clock: Clock) -> None:
        self.store, self.rows, self.ends, self.adds, self.clock = store, rows, ends, adds, clock

    def cancel(self, job_id: int, *, message: str = "cancelled by user") -> Job:
        now = self.clock.now()
        with self.store.tx() as c:
            row = self.rows.row(c, job_id)
            if row["state"] not in ACTIVE_STATES:
                raise rules.not_cancellable(job_id, row["state"])
            return self.ends.finish(c, job_id, JobState.CANCELLED, now, row["attempts"],
                                    "cancelled", message)

    def retry(self, job_id: int) -> Job:
        now = self.clock.now()
        with self.store.tx() as c:
            return self._retry(c, self.rows.row(c, job_id), now)

    def _retry(self, c: sqlite3.Connection, row: sqlite3.Row, now: float) -> Job:
        job_id = row["id"]
        if row["state"] not in (JobState.FAILED.value, JobState.CANCELLED.value):
            raise rules.not_retriable(job_id, row["state"])
        if row["key"] is not None:
            other = c.execute(SQL_ACTIVE_KEY, (row["key"],)).fetchone()
            if other:
                raise rules.key_taken(other[0], row["key"])
        waits = deps.still_waits(c, job_id)
        out = c.execute(
            "UPDATE jobs SET state = ?, tries = 0, refunds = 0, not_before = ?, token = NULL,"
            " lease_until = NULL, finished_at = NULL, updated_at = ? WHERE id = ? RETURNING *",
            ("queued" if waits is None else "blocked", now, now, job_id),
        ).fetchone()
        event(c, job_id, now, "retried", row["attempts"], rules.retried_why(waits))
        return self.rows.job(out)

    def cancel_many(self, ids: Sequence[int] | None = None, *, lane: str | None = None,
                    states: Sequence[str] | None = None, message: str = "cancelled by user",
                    exclude: Collection[int] = ()) -> Batch:
        now, skip = self.clock.now(), set(exclude)
        with self.store.tx() as c:
            out = Batch([])
            for row in self._rows(c, ids, lane, rules.wanted_states(states, ACTIVE_STATES, "cancel")):
                if row["id"] in skip:
                    continue
                if row["state"] in ACTIVE_STATES:
                    out.jobs.append(self.ends.finish(c, row["id"], JobState.CANCELLED, now, row["attempts"],
                                                     "cancelled", message))
                elif self.store.was_settled(row["id"]):
                    out.jobs.append(self.rows.job(row))  # cancelled a moment ago, by a job it waited for
                else:
                    out.skipped.append((row["id"], f"job {row['id']} is {row['state']}"))
            return out

    def retry_many(self, ids: Sequence[int] | None = None, *, lane: str | None = None,
                   states: Sequence[str] | None = None, busy: Collection[int] = ()) -> Batch:
        now = self.clock.now()
        wanted = rules.retry_wanted(ids, states)
        with self.store.tx() as c:
            return rules.retry_each(self._rows(c, ids, lane, wanted), busy, lambda row: self._retry(c, row, now))

    def restart(self, ids: Sequence[int]) -> Batch:
        now = self.clock.now()
        with self.store.tx() as c:
            out = Batch([])
            for row in self._rows(c, ids, None, None):
                why = _why_not_restart(c, row)
                if why:
                    out.skipped.append((row["id"], why))
                    continue
                new = int(c.execute(SQL_RESTART, (now, now, now, row["id"])).lastrowid or 0)
                event(c, new, now, "restart", 0, f"a restart of job {row['id']}")
                event(c, row["id"], now, "restarted", row["attempts"], f"queued again as job {new}")
                out.jobs.append(self.rows.job(self.rows.row(c, new)))
            return out

    def prune(self, older_than_s: float, *, states: Sequence[str] | None = None, lane: str | None = None,
              dry_run: bool = False) -> int:
        if older_than_s is None:
            raise BadRequest("older_than_s must be a number of seconds, got None")
        older = number(older_than_s, "older_than_s", 0.0, lo=0)
        wanted = rules.wanted_states(states, FINISHED_STATES, "prune") or list(FINISHED_STATES)
        where = (f"finished_at IS NOT NULL AND finished_at < ? AND state IN ({', '.join('?' * len(wanted))})"
                 + (" AND lane = ?" if lane is not None else ""))
        args = (self.clock.now() - older, *wanted, *([lane] if lane is not None else []))
        with self.store.tx() as c:
            if dry_run:
                return int(c.execute(f"SELECT count(*) FROM jobs WHERE {where}", args).fetchone()[0])
            _keep_tally(c, where, args)  # the counters of runs never go back (backends/run_tally.py)
            n = c.execute(f"DELETE FROM jobs WHERE {where}", args).rowcount
            if n:
                c.execute("DELETE FROM envs WHERE NOT EXISTS (SELECT 1 FROM jobs WHERE jobs.env_id = envs.id)")
                self.rows.envs.clear()  # environments were deleted: decode afresh
            self.adds.prune_batch_records(c, self.clock.now())
            if states is None and lane is None:  # the whole history: the machine's too (meta.py)
                c.execute("DELETE FROM machine_events WHERE end_at < ? AND NOT (kind = 'up' AND detail = 'running')",
                          (args[0],))
            return n

    def _rows(self, c: sqlite3.Connection, ids: Sequence[int] | None, lane: str | None,
              states: Sequence[str] | None) -> Iterator[sqlite3.Row]:
        """The rows a request names: each of ``ids`` (all must exist; read
        afresh as each is reached, since an earlier one's end may change it),
        or the selection, oldest first."""
        if ids is not None:
            for i in ids:
                self.rows.row(c, i)  # every id exists, or nothing changes
            for i in dict.fromkeys(ids):
                yield self.rows.row(c, i)
            return
        for i in _selected(c, lane, states):
            yield self.rows.row(c, i)


def _keep_tally(c: sqlite3.Connection, where: str, args: Sequence[Any]) -> None:
    """Fold the runs of the jobs about to be pruned into the pruned tally, in the prune's transaction."""
    pruned = run_tally.from_rows(c.execute(run_tally.statement(jobs_where=where), args))
    if pruned:
        row = c.execute("SELECT value FROM meta WHERE key = ?", (run_tally.PRUNED_KEY,)).fetchone()
        kept = run_tally.merged(run_tally.from_meta(json.loads(row[0]) if row else None), pruned)
        c.execute("INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                  (run_tally.PRUNED_KEY, run_tally.to_json(kept)))


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


def _why_not_restart(c: sqlite3.Connection, row: sqlite3.Row) -> str | None:
    if row["state"] not in FINISHED_STATES:
        return rules.not_restartable(row["id"], row["state"])
    if row["key"] is not None:
        other = c.execute(SQL_ACTIVE_KEY, (row["key"],)).fetchone()
        if other:
            return f"job {other[0]} with the same key {row['key']!r} is still active"
    return None


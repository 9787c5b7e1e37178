"""A user's requests on jobs, each one transaction: cancel and retry of one
job, and cancel, retry, restart and prune of many, by ids or by a selection
(lane, states) -- the counterpart of backends/sqlite/batch.py, with the
same rules and answers (backends/contract.py: Requests).

PgRequests, a part of the PostgreSQL engine (engine.py). By ids: an id that does not exist
refuses the whole request (JobNotFound, nothing changed); a job in a state
the action does not apply to is left alone and reported in
``Batch.skipped`` with why. Each job is locked as it is reached and read
afresh (an earlier one's end may have changed it), so a request never
acts on a state another daemon has just changed.
"""

from __future__ import annotations

import json
from typing import Any, Collection, Iterator, Sequence

from psycopg import errors as pgerr

from sloth_daemon.errors import BadRequest
from sloth_daemon.models import ACTIVE_STATES, FINISHED_STATES, Batch, Job, JobState
from sloth_daemon.spec import number
from sloth_daemon.backends import contract, rules, run_tally
from sloth_daemon.backends.postgres import deps
from sloth_daemon.backends.postgres.enqueue import SQL_ACTIVE_KEY, SQL_KEY_LOCK, prune_batch_records
from sloth_daemon.backends.postgres.reads import JobRows, check_id, get_row
from sloth_daemon.backends.postgres.db import Connection, Cursor, Row, one
from sloth_daemon.backends.postgres.writer import PgWriter, event

_COPIED = rules.restart_columns()
# A restart yields to an active job with the same key, even one another
# daemon adds at this moment (the partial unique index decides).
SQL_RESTART = (
    f"INSERT INTO sloth.jobs (state, not_before, created_at, updated_at, {_COPIED})"
    f" SELECT 'queued', sloth.now(), sloth.now(), sloth.now(), {_COPIED} FROM sloth.jobs WHERE id = %s"
    " ON CONFLICT (key) WHERE key IS NOT NULL AND key_behind IS NULL"
    " AND state IN ('blocked', 'held', 'queued', 'running') DO NOTHING"
    " RETURNING *"
)
SQL_PRUNE_WHERE = ("finished_at IS NOT NULL AND finished_at < sloth.now() - %(older)s AND state = ANY(%(states)s)"
                   " AND (%(lane)s::text IS NULL OR lane = %(lane)s)")
# The machine's events (meta.py) ended before the cut; a daemon's up row still running stays.
SQL_PRUNE_MACHINE = ("DELETE FROM sloth.machine_events WHERE end_at < sloth.now() - %(older)s"
                     " AND NOT (kind = 'up' AND detail = 'running')")
# SKIP LOCKED: an environment an enqueue is using right now (it holds a KEY
# SHARE lock on it) is left for next time.
SQL_PRUNE_ENVS = ("DELETE FROM sloth.envs WHERE id IN (SELECT e.id FROM sloth.envs e"
                  " WHERE NOT EXISTS (SELECT 1 FROM sloth.jobs j WHERE j.env_id = e.id)"
                  " FOR UPDATE SKIP LOCKED)")
SQL_SELECTED = ("SELECT id FROM sloth.jobs WHERE (%(states)s::text[] IS NULL OR state = ANY(%(states)s))"
                " AND (%(lane)s::text IS NULL OR lane = %(lane)s) ORDER BY id")
SQL_REQUEUE = ("UPDATE sloth.jobs SET state = %s, tries = 0, refunds = 0, not_before = sloth.now(),"
               " token = NULL, lease_until = NULL, finished_at = NULL, updated_at = sloth.now()"
               " WHERE id = %s RETURNING *")


class PgRequests(contract.Requests):
    """A user's requests of the queue: transactions through ``writer`` (a
    count on ``db``); ``rows`` makes the Jobs returned (and forgets the
    environments a prune deleted). No state of its own."""

    def __init__(self, db: Connection, rows: JobRows, writer: PgWriter) -> None:
        self._db = db
        self.rows = rows
        self.writer = writer

    def cancel(self, job_id: int, *, message: str = "cancelled by user") -> Job:
        def tx(c: Cursor) -> Job:
            row = get_row(c, job_id, lock=True)
            if row["state"] not in ACTIVE_STATES:
                raise rules.not_cancellable(job_id, row["state"])
            return self.writer.finish(c, job_id, JobState.CANCELLED, row["attempts"], "cancelled", message)

        return self.writer.write(tx, "cancelling a job")

    def retry(self, job_id: int) -> Job:
        return self.writer.write(lambda c: self._retry(c, get_row(c, job_id, lock=True)), "retrying a job")

    def _retry(self, c: Cursor, row: Row) -> Job:
        if row["state"] not in (JobState.FAILED.value, JobState.CANCELLED.value):
            raise rules.not_retriable(row["id"], row["state"])
        waits = deps.still_waits(c, row["id"])
        out = _requeue(c, row, "queued" if waits is None else "blocked")
        event(c, row["id"], "retried", row["attempts"], rules.retried_why(waits))
        return self.rows.job(out, c)


    def cancel_many(self, ids: Sequence[int] | None = None, *, lane: str | None = None,
                    states: Sequence[str] | None = None, message: str = "cancelled by user",
                    exclude: Collection[int] = ()) -> Batch:
        wanted, skip = rules.wanted_states(states, ACTIVE_STATES, "cancel"), set(exclude)

        def tx(c: Cursor) -> Batch:
            out = Batch([])
            for row in self._rows(c, ids, lane, wanted):
                if row["id"] in skip:
                    continue
                if row["state"] in ACTIVE_STATES:
                    out.jobs.append(self.writer.finish(c, row["id"], JobState.CANCELLED, row["attempts"],
                                                 "cancelled", message))
                elif any(j.id == row["id"] for j in self.writer.side):
                    out.jobs.append(self.rows.job(row, c))  # cancelled a moment ago, by a job it waited for
                else:
                    out.skipped.append((row["id"], f"job {row['id']} is {row['state']}"))
            return out

        return self.writer.write(tx, "cancelling jobs")

    def retry_many(self, ids: Sequence[int] | None = None, *, lane: str | None = None,
                   states: Sequence[str] | None = None, busy: Collection[int] = ()) -> Batch:
        wanted = rules.retry_wanted(ids, states)

        def tx(c: Cursor) -> Batch:
            return rules.retry_each(self._rows(c, ids, lane, wanted), busy, lambda row: self._retry(c, row))

        return self.writer.write(tx, "retrying jobs")

    def restart(self, ids: Sequence[int]) -> Batch:
        def tx(c: Cursor) -> Batch:
            out = Batch([])
            for row in self._rows(c, ids, None, None):
                why = _why_not_restart(c, row)
                new = None if why else c.execute(SQL_RESTART, (row["id"],)).fetchone()
                if new is None:
                    out.skipped.append((row["id"], why or _why_not_restart(c, row) or "its key is taken"))
                    continue
                event(c, new["id"], "restart", 0, f"a restart of job {row['id']}")
                event(c, row["id"], "restarted", row["attempts"], f"queued again as job {new['id']}")
                out.jobs.append(self.rows.job(new, c))
            return out

        return self.writer.write(tx, "restarting jobs")

    def prune(self, older_than_s: float, *, states: Sequence[str] | None = None, lane: str | None = None,
              dry_run: bool = False) -> int:
        if older_than_s is None:
            raise BadRequest("older_than_s must be a number of seconds, got None")
        args = {"older": number(older_than_s, "older_than_s", 0.0, lo=0), "lane": lane,
                "states": rules.wanted_states(states, FINISHED_STATES, "prune") or list(FINISHED_STATES),
                "whole": states is None and lane is None}
        if dry_run:
            return int(self._db.read(lambda c: c.execute(
                f"SELECT count(*) AS n FROM sloth.jobs WHERE {SQL_PRUNE_WHERE}", args).fetchall()[0]["n"],
                "counting jobs to prune"))
        return self.writer.write(lambda c: self._prune(c, args), "pruning finished jobs")

    def _prune(self, c: Cursor, args: dict[str, Any]) -> int:
        _keep_tally(c, args)  # the counters of runs never go back (backends/run_tally.py)
        n = c.execute(f"DELETE FROM sloth.jobs WHERE {SQL_PRUNE_WHERE}", args).rowcount
        if n:
            c.execute(SQL_PRUNE_ENVS)
            self.rows.envs.clear()  # environments were deleted: decode afresh
        prune_batch_records(c)
        if args["whole"]:  # the whole history (no states, no lane): the machine's too
            c.execute(SQL_PRUNE_MACHINE, args)
        return n

    def _rows(self, c: Cursor, ids: Sequence[int] | None, lane: str | None,
              states: Sequence[str] | None) -> Iterator[Row]:
        """The rows a request names, each locked and read afresh as it is
        reached: each of ``ids`` (all must exist), or the selection, oldest first."""
        if ids is not None:
            for i in ids:
                check_id(i)
            found = {r["id"] for r in c.execute("SELECT id FROM sloth.jobs WHERE id = ANY(%s)", (list(ids),))}
            for i in ids:
                if i not in found:
                    get_row(c, i)  # raises JobNotFound: nothing changes
            selected: Sequence[int] = list(dict.fromkeys(ids))
        else:
            if not states and lane is None:
                raise BadRequest("name the jobs: ids, a lane or states")
            selected = [r["id"] for r in c.execute(SQL_SELECTED, {"states": states or None, "lane": lane})]
        for i in selected:
            yield get_row(c, i, lock=True)


def _why_not_restart(c: Cursor, row: Row) -> str | None:
    """Why ``row`` is not restarted, or None. Its key's adds take turns
    (SQL_KEY_LOCK), and any unfinished job with the key keeps it out: the
    head the unique index knows, and a job added behind it (--on-dup
    append), which that index does not hold."""
    if row["state"] not in FINISHED_STATES:
        return rules.not_restartable(row["id"], row["state"])
    if row["key"] is None:
        return None
    c.execute(SQL_KEY_LOCK, (row["key"],))
    other = c.execute(SQL_ACTIVE_KEY, (row["key"],)).fetchone()
    return None if other is None else f"job {other['id']} with the same key {row['key']!r} is still active"


def _requeue(c: Cursor, row: Row, state: str) -> Row:
    """A finished job back to ``state`` with a fresh budget, unless another
    active job has its key now (IllegalTransition)."""
    key = row["key"]
    if key is not None:
        other = c.execute(SQL_ACTIVE_KEY, (key,)).fetchone()
        if other:
            raise rules.key_taken(other["id"], key)
    try:
        with c.connection.transaction():  # a savepoint: a racing enqueue may take the key
            return one(c.execute(SQL_REQUEUE, (state, row["id"])))
    except pgerr.UniqueViolation:
        other = c.execute(SQL_ACTIVE_KEY, (key,)).fetchone()
        raise rules.key_taken(other["id"] if other else "?", key) from None


def _keep_tally(c: Cursor, args: dict[str, Any]) -> None:
    """Fold the runs of the jobs about to be pruned into the pruned tally,
    in the prune's transaction. Its row is locked first, so of two machines
    pruning at once the second counts only what the first left."""
    c.execute("INSERT INTO sloth.meta (key, value) VALUES (%s, '[]') ON CONFLICT DO NOTHING", (run_tally.PRUNED_KEY,))
    row = one(c.execute("SELECT value FROM sloth.meta WHERE key = %s FOR UPDATE", (run_tally.PRUNED_KEY,)))
    pruned = run_tally.from_rows(c.execute(run_tally.statement("sloth.", SQL_PRUNE_WHERE), args).fetchall())
    if pruned:
        kept = run_tally.merged(run_tally.from_meta(json.loads(row["value"])), pruned)
        c.execute("UPDATE sloth.meta SET value = %s WHERE key = %s", (run_tally.to_json(kept), run_tally.PRUNED_KEY))

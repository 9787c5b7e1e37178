"""The queue edits on the SQLite queue, each one transaction: edit a
waiting job, bump jobs to the front of their lane, hold and release jobs
(the rules, and their words, are backends/edits.py's).

A part of the SQLite engine (engine.py). Every write is
under ``BEGIN IMMEDIATE``: the row is read and written with the write lock
held, so no claim comes between; ``expect`` (the job as the client
read it, e.g. before an editor ran) makes an edit a compare-and-set across
the time a person took. A held job leaves jobs_ready and jobs_due (they are
partial on ``state = 'queued'``), as a blocked one does.
"""

from __future__ import annotations

import sqlite3
from typing import Any, Sequence

from sloth_daemon.backends import contract, edits as rules
from sloth_daemon.backends.sqlite import deps
from sloth_daemon.backends.sqlite.ends import event
from sloth_daemon.backends.sqlite.enqueue import path_value
from sloth_daemon.backends.sqlite.reads import JobRows
from sloth_daemon.backends.sqlite.unit import SqliteStore
from sloth_daemon.clock import Clock
from sloth_daemon.errors import BadRequest, JobNotFound
from sloth_daemon.models import Batch, JobState
from sloth_daemon.backends.rules import prereqs_json
from sloth_daemon.checks import command_json

SQL_WANTS = "SELECT after_id, need FROM deps WHERE job_id = ? ORDER BY after_id"
# Whether ``other`` waits for ``job`` down a chain: a walk up from job's dependents.
SQL_WAITS_ON = (
    "WITH RECURSIVE down(id) AS (SELECT job_id FROM deps WHERE after_id = :job"
    " UNION SELECT d.job_id FROM deps d JOIN down ON d.after_id = down.id)"
    " SELECT 1 FROM down WHERE id = :other LIMIT 1"
)
SQL_EDIT = (
    "UPDATE jobs SET command = :command, shell = :shell, lane = :lane, priority = :priority, label = :label,"
    " not_before = :not_before, state = :state, prereqs = :prereqs, updated_at = :now,"
    " max_attempts = :max_attempts, lease_s = :lease_s, timeout_s = :timeout_s, cwd = :cwd, retry_exit = :retry_exit,"
    " no_retry_exit = :no_retry_exit, place = :place, keep_awake = :keep_awake, limits = :limits, gate = :gate,"
    " rules = :rules, wait_reason = :wait_reason"
    " WHERE id = :id AND state IN ('blocked', 'held', 'queued') RETURNING *"
)
SQL_ADD_LANE = "INSERT INTO lanes (name, created_at) VALUES (?, ?) ON CONFLICT(name) DO NOTHING"
# The highest priority of the other waiting jobs of a lane: index seeks on
# jobs_ready and jobs_held; blocked rows have no priority index (a bump is
# a user's request, not the hot path).
SQL_TOP = (
    "SELECT max(p) FROM ("
    " SELECT max(priority) AS p FROM jobs INDEXED BY jobs_ready WHERE state = 'queued' AND gate IS NULL"
    " AND lane = :lane AND id <> :id"
    " UNION ALL SELECT max(priority) FROM jobs WHERE state = 'queued' AND gate IS NOT NULL AND lane = :lane"
    " AND id <> :id"
    " UNION ALL SELECT max(priority) FROM jobs INDEXED BY jobs_held WHERE state = 'held' AND lane = :lane AND id <> :id"
    " UNION ALL SELECT max(priority) FROM jobs WHERE state = 'blocked' AND lane = :lane AND id <> :id)"
)
SQL_BUMP = "UPDATE jobs SET priority = ?, not_before = ?, updated_at = ? WHERE id = ? RETURNING *"
SQL_STATE = "UPDATE jobs SET state = ?, wait_reason = NULL, updated_at = ? WHERE id = ? RETURNING *"
# The waiting jobs of a gate a machine can never meet (Gates.never): held, with why.
# Queued ones by jobs_gated, held ones by jobs_held (partial indexes: a reload
# or a `lane set` on a queue of a million jobs reads only these).
# A held one that already says why is not changed (nor said again by the next reload).
SQL_NEVER = ("SELECT id, state, attempts FROM jobs INDEXED BY jobs_gated WHERE state = 'queued' AND gate = :gate"
             " AND (:lane IS NULL OR lane = :lane) AND (:place IS NULL OR place = :place)"
             " UNION ALL SELECT id, state, attempts FROM jobs INDEXED BY jobs_held WHERE state = 'held'"
             " AND gate = :gate AND (:lane IS NULL OR lane = :lane) AND (:place IS NULL OR place = :place)"
             " AND wait_reason IS NOT :why")
SQL_HOLD_WHY = "UPDATE jobs SET state = 'held', wait_reason = ?, updated_at = ? WHERE id = ?"
SQL_FORGET_WHY = ("UPDATE jobs INDEXED BY jobs_held SET wait_reason = NULL WHERE state = 'held'"
                  " AND wait_reason IS NOT NULL AND gate = :gate"
                  " AND (:lane IS NULL OR lane = :lane) AND (:place IS NULL OR place = :place) RETURNING id")
SQL_HOLDABLE = "SELECT id FROM jobs WHERE lane = ? AND state IN ('blocked', 'queued') ORDER BY id"
SQL_RELEASABLE = "SELECT id FROM jobs INDEXED BY jobs_held WHERE lane = ? AND state = 'held' ORDER BY id"


class SqliteEdits(contract.Edits):
    """edit, bump, hold and unhold (`sloth release`) (see the module docstring); writes go
    through ``store``, rows become Jobs through ``rows``; ``clock``: now."""

    def __init__(self, store: SqliteStore, rows: JobRows, clock: Clock) -> None:
        self.store, self.rows, self.clock = store, rows, clock

    def edit(self, job_id: int, changes: Any, *, expect: Any = None) -> rules.Edited:
        wanted = rules.changes_of(changes)
        now = self.clock.now()
        with self.store.tx() as c:
            row = self.rows.row(c, job_id)
            if not rules.waiting(row["state"]):
                raise rules.not_editable(job_id, row["state"])
            job = self.rows.job(row)
            rules.check_expect(job, expect)
            old_wants = [(r[0], r[1]) for r in c.execute(SQL_WANTS, (job_id,))]
            plan = rules.plan_edit(row, old_wants, wanted, now, job)
            if not plan.words:
                return rules.Edited(self.rows.job(row))
            state = row["state"]
            if plan.wants is not None:
                state = self._new_prereqs(c, job_id, state, plan.wants)
            v = plan.values
            if v["lane"] != row["lane"]:
                c.execute(SQL_ADD_LANE, (v["lane"], now))
            if state == JobState.QUEUED.value and row["state"] == JobState.BLOCKED.value:
                v["not_before"] = max(v["not_before"], now)
                plan.words.append("blocked -> queued")
            elif state != row["state"]:
                plan.words.append(f"{row['state']} -> {state}")
            prereqs = row["prereqs"] if plan.wants is None else prereqs_json(plan.wants)
            cwd = path_value(v["cwd"]) if isinstance(v["cwd"], str) else v["cwd"]  # changed: text; else as stored
            out = c.execute(SQL_EDIT, {**v, "command": command_json(v["command"]), "shell": int(v["shell"]),
                                       "cwd": cwd, "keep_awake": int(v["keep_awake"]),
                                       "state": state, "prereqs": prereqs, "now": now, "id": job_id}).fetchone()
            if out is None:  # cannot happen under the write lock; never write half an edit
                raise rules.stale(job_id, row["state"])
            event(c, job_id, now, "edited", row["attempts"], rules.describe(plan.words))
            return rules.Edited(self.rows.job(out), plan.words)

    def _new_prereqs(self, c: sqlite3.Connection, job_id: int, state: str, wants: list[tuple[int, str]]) -> str:
        """Replace the job's deps rows with ``wants``, refusing a cycle or an
        id that does not exist; its new state (rules.new_state)."""
        for pid, _ in wants:
            if pid != job_id and c.execute(SQL_WAITS_ON, {"job": job_id, "other": pid}).fetchone():
                raise rules.cycle_error(job_id, pid)
        new = rules.new_state(state, wants, lambda pid: _state_of(c, pid), job_id)
        c.execute("DELETE FROM deps WHERE job_id = ?", (job_id,))
        deps.add_deps(c, [(job_id, pid, need) for pid, need in wants])
        return new

    def bump(self, ids: Sequence[int]) -> Batch:
        now = self.clock.now()
        with self.store.tx() as c:
            rows = _all(self.rows, c, ids)
            out = Batch([])
            done: dict[int, Any] = {}
            for row in reversed(rows):  # the first named ends first
                row = self.rows.row(c, row["id"])
                if not rules.waiting(row["state"]):
                    out.skipped.append((row["id"], rules.not_editable(row["id"], row["state"], "bumped").message))
                    continue
                top = c.execute(SQL_TOP, {"lane": row["lane"], "id": row["id"]}).fetchone()[0]
                prio = rules.bump_priority(row["priority"], top)
                delayed = row["not_before"] > now
                new = c.execute(SQL_BUMP, (prio, now if delayed else row["not_before"], now, row["id"])).fetchone()
                event(c, row["id"], now, "bumped", row["attempts"],
                      rules.bump_words(row["lane"], row["priority"], prio, delayed))
                done[row["id"]] = new
            out.jobs.extend(self.rows.job(done[r["id"]]) for r in rows if r["id"] in done)
            out.skipped.reverse()
            return out

    def hold(self, ids: Sequence[int] | None = None, *, lane: str | None = None) -> Batch:
        now = self.clock.now()
        with self.store.tx() as c:
            out = Batch([])
            for row in self._named(c, ids, lane, SQL_HOLDABLE):
                state = row["state"]
                if state == JobState.HELD.value:
                    out.jobs.append(self.rows.job(row))  # held already: as asked
                elif state in (JobState.QUEUED.value, JobState.BLOCKED.value):
                    out.jobs.append(self.rows.job(c.execute(SQL_STATE, ("held", now, row["id"])).fetchone()))
                    event(c, row["id"], now, "held", row["attempts"], rules.held_words())
                else:
                    out.skipped.append((row["id"], rules.not_editable(row["id"], state, "held").message))
            return out

    def hold_never(self, gate: str, why: str | None, *, lane: str | None = None,
                   place: str | None = None) -> list[int]:
        now = self.clock.now()
        with self.store.tx() as c:
            if why is None:
                rows = c.execute(SQL_FORGET_WHY, {"gate": gate, "lane": lane, "place": place}).fetchall()
                return sorted(row["id"] for row in rows)
            rows = c.execute(SQL_NEVER, {"gate": gate, "lane": lane, "place": place, "why": why}).fetchall()
            for row in rows:
                c.execute(SQL_HOLD_WHY, (why, now, row["id"]))
                if row["state"] == JobState.QUEUED.value:
                    event(c, row["id"], now, "held", row["attempts"], rules.never_words(why))
            return sorted(row["id"] for row in rows)

    def unhold(self, ids: Sequence[int] | None = None, *, lane: str | None = None) -> Batch:
        now = self.clock.now()
        with self.store.tx() as c:
            out = Batch([])
            for row in self._named(c, ids, lane, SQL_RELEASABLE):
                state = row["state"]
                if state == JobState.HELD.value:
                    waits = deps.still_waits(c, row["id"])
                    new = JobState.QUEUED.value if waits is None else JobState.BLOCKED.value
                    out.jobs.append(self.rows.job(c.execute(SQL_STATE, (new, now, row["id"])).fetchone()))
                    event(c, row["id"], now, "released", row["attempts"], rules.released_words(new, waits))
                elif state in (JobState.QUEUED.value, JobState.BLOCKED.value):
                    out.jobs.append(self.rows.job(row))  # not held: as asked
                else:
                    out.skipped.append((row["id"], f"job {row['id']} is {state}, not held"))
            return out

    def _named(self, c: sqlite3.Connection, ids: Sequence[int] | None, lane: str | None,
               select: str) -> list[sqlite3.Row]:
        """The rows of ``ids`` (all must exist), or of the lane's jobs ``select`` picks."""
        if (ids is None) == (lane is None):
            raise BadRequest("name the jobs: ids, or a lane (not both)")
        if ids is not None:
            return _all(self.rows, c, ids)
        return [self.rows.row(c, r[0]) for r in c.execute(select, (lane,)).fetchall()]


def _all(rows: JobRows, c: sqlite3.Connection, ids: Sequence[int]) -> list[sqlite3.Row]:
    """Each of ``ids`` once, in order; JobNotFound for any that does not exist (nothing changes)."""
    if not isinstance(ids, (list, tuple)) or not ids:
        raise BadRequest("ids must be a non-empty list of job ids")
    return [rows.row(c, i) for i in dict.fromkeys(ids)]


def _state_of(c: sqlite3.Connection, job_id: int) -> str:
    row = c.execute("SELECT state FROM jobs WHERE id = ?", (job_id,)).fetchone()
    if row is None:
        raise JobNotFound(job_id)
    return str(row[0])


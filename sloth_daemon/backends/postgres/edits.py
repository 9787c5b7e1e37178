"""The queue edits on the PostgreSQL queue, each one transaction (the
counterpart of backends/sqlite/edits.py: the same rules, words and
events, backends/edits.py's).

PgEdits, a part of the PostgreSQL engine (engine.py). Several daemons
claim at once, so each job is locked (FOR UPDATE) before its state is
read: a claim's ``FOR UPDATE SKIP LOCKED`` passes it by meanwhile, and a
claim that took it first leaves it ``running``, which the edit then
refuses. ``expect`` (the job as the client read it) makes an edit a compare-and-set across the
time a person took (an editor open). New prerequisites are locked and
marked waited on (deps.lock_states), as an enqueue does, so their end
settles the edited job.
"""

from __future__ import annotations

from typing import Any, Sequence

from sloth_daemon.backends import contract, edits as rules
from sloth_daemon.backends.postgres import deps
from sloth_daemon.backends.postgres.db import Cursor, Row, one
from sloth_daemon.backends.postgres.reads import JobRows, get_row
from sloth_daemon.backends.postgres.writer import PgWriter, event
from sloth_daemon.backends.rules import prereqs_json
from sloth_daemon.checks import command_json
from sloth_daemon.text import as_bytes
from sloth_daemon.errors import BadRequest, JobNotFound
from sloth_daemon.models import Batch, JobState

SQL_NOW = "SELECT sloth.now() AS now"
SQL_WANTS = "SELECT after_id, need FROM sloth.deps WHERE job_id = %s ORDER BY after_id"
SQL_WAITS_ON = (
    "WITH RECURSIVE down(id) AS (SELECT job_id FROM sloth.deps WHERE after_id = %(job)s"
    " UNION SELECT d.job_id FROM sloth.deps d JOIN down ON d.after_id = down.id)"
    " SELECT 1 AS hit FROM down WHERE id = %(other)s LIMIT 1"
)
SQL_EDIT = (
    "UPDATE sloth.jobs SET command = %(command)s, shell = %(shell)s, lane = %(lane)s, priority = %(priority)s,"
    " label = %(label)s, not_before = %(not_before)s, state = %(state)s, prereqs = %(prereqs)s,"
    " max_attempts = %(max_attempts)s, lease_s = %(lease_s)s, timeout_s = %(timeout_s)s, cwd = %(cwd)s,"
    " retry_exit = %(retry_exit)s, no_retry_exit = %(no_retry_exit)s, place = %(place)s, keep_awake = %(keep_awake)s,"
    " limits = %(limits)s, gate = %(gate)s, rules = %(rules)s, wait_reason = %(wait_reason)s,"
    " updated_at = sloth.now() WHERE id = %(id)s AND state IN ('blocked', 'held', 'queued') RETURNING *"
)
SQL_ADD_LANE = "INSERT INTO sloth.lanes (name, created_at) VALUES (%s, sloth.now()) ON CONFLICT (name) DO NOTHING"
SQL_DROP_DEPS = "DELETE FROM sloth.deps WHERE job_id = %s"
SQL_TOP = ("SELECT max(priority) AS top FROM sloth.jobs"
           " WHERE lane = %(lane)s AND state IN ('queued', 'held', 'blocked') AND id <> %(id)s")
SQL_BUMP = "UPDATE sloth.jobs SET priority = %s, not_before = %s, updated_at = sloth.now() WHERE id = %s RETURNING *"
SQL_STATE = "UPDATE sloth.jobs SET state = %s, wait_reason = NULL, updated_at = sloth.now() WHERE id = %s RETURNING *"
# The waiting jobs of a gate a machine can never meet (Gates.never): held, with why.
# Queued ones by jobs_gated, held ones by jobs_held (partial indexes); the
# state is judged again on the row as locked (a claim may have taken it).
_NEVER_OF = ("SELECT id FROM sloth.jobs WHERE state = '{}' AND gate = %(gate)s"
             " AND (%(lane)s::text IS NULL OR lane = %(lane)s) AND (%(place)s::text IS NULL OR place = %(place)s)")
# A held one that already says why is not changed (nor said again by the next reload).
SQL_NEVER = ("SELECT id, state, attempts FROM sloth.jobs WHERE id IN (" + _NEVER_OF.format("queued")
             + " UNION ALL " + _NEVER_OF.format("held") + " AND wait_reason IS DISTINCT FROM %(why)s)"
             " AND (state = 'queued' OR state = 'held' AND wait_reason IS DISTINCT FROM %(why)s)"
             " ORDER BY id FOR UPDATE")
SQL_HOLD_WHY = "UPDATE sloth.jobs SET state = 'held', wait_reason = %s, updated_at = sloth.now() WHERE id = %s"
SQL_FORGET_WHY = ("UPDATE sloth.jobs SET wait_reason = NULL WHERE state = 'held' AND wait_reason IS NOT NULL"
                  " AND gate = %(gate)s AND (%(lane)s::text IS NULL OR lane = %(lane)s)"
                  " AND (%(place)s::text IS NULL OR place = %(place)s) RETURNING id")
SQL_HOLDABLE = "SELECT id FROM sloth.jobs WHERE lane = %s AND state IN ('blocked', 'queued') ORDER BY id"
SQL_RELEASABLE = "SELECT id FROM sloth.jobs WHERE lane = %s AND state = 'held' ORDER BY id"


class PgEdits(contract.Edits):
    """edit, bump, hold and unhold (`sloth release`) of the PostgreSQL queue: transactions through
    ``writer``; ``rows`` makes the Jobs returned. No state of its own."""

    def __init__(self, rows: JobRows, writer: PgWriter) -> None:
        self.rows = rows
        self.writer = writer

    def edit(self, job_id: int, changes: Any, *, expect: Any = None) -> rules.Edited:
        wanted = rules.changes_of(changes)

        def tx(c: Cursor) -> rules.Edited:
            row = get_row(c, job_id, lock=True)
            if not rules.waiting(row["state"]):
                raise rules.not_editable(job_id, row["state"])
            job = self.rows.job(row, c)
            rules.check_expect(job, expect)
            now = one(c.execute(SQL_NOW))["now"]
            old_wants = [(r["after_id"], r["need"]) for r in c.execute(SQL_WANTS, (job_id,)).fetchall()]
            plan = rules.plan_edit(row, old_wants, wanted, now, job)
            if not plan.words:
                return rules.Edited(self.rows.job(row, c))
            state = row["state"] if plan.wants is None else _new_prereqs(c, job_id, row["state"], plan.wants)
            v = plan.values
            if v["lane"] != row["lane"]:
                c.execute(SQL_ADD_LANE, (v["lane"],))
            if state == JobState.QUEUED.value and row["state"] == JobState.BLOCKED.value:
                v["not_before"] = max(v["not_before"], now)
                plan.words.append("blocked -> queued")
            elif state != row["state"]:
                plan.words.append(f"{row['state']} -> {state}")
            cwd = as_bytes(v["cwd"]) if isinstance(v["cwd"], str) else v["cwd"]  # changed: text; else as stored
            out = c.execute(SQL_EDIT, {**v, "command": command_json(v["command"]), "state": state, "id": job_id,
                                       "cwd": cwd,
                                       "prereqs": row["prereqs"] if plan.wants is None else prereqs_json(plan.wants),
                                       }).fetchone()
            if out is None:  # the row is locked: cannot happen; never write half an edit
                raise rules.stale(job_id, row["state"])
            event(c, job_id, "edited", row["attempts"], rules.describe(plan.words))
            return rules.Edited(self.rows.job(out, c), plan.words)

        return self.writer.write(tx, "editing a job")

    def bump(self, ids: Sequence[int]) -> Batch:
        def tx(c: Cursor) -> Batch:
            named = _all(c, ids)
            now = one(c.execute(SQL_NOW))["now"]
            out, done = Batch([]), {}
            for jid in reversed(named):  # the first named ends first
                row = get_row(c, jid, lock=True)
                if not rules.waiting(row["state"]):
                    out.skipped.append((jid, rules.not_editable(jid, row["state"], "bumped").message))
                    continue
                top = one(c.execute(SQL_TOP, {"lane": row["lane"], "id": jid}))["top"]
                prio = rules.bump_priority(row["priority"], top)
                delayed = row["not_before"] > now
                done[jid] = one(c.execute(SQL_BUMP, (prio, now if delayed else row["not_before"], jid)))
                event(c, jid, "bumped", row["attempts"], rules.bump_words(row["lane"], row["priority"], prio, delayed))
            out.jobs.extend(self.rows.job(done[i], c) for i in named if i in done)
            out.skipped.reverse()
            return out

        return self.writer.write(tx, "bumping jobs")

    def hold(self, ids: Sequence[int] | None = None, *, lane: str | None = None) -> Batch:
        def tx(c: Cursor) -> Batch:
            out = Batch([])
            for row in _named(c, ids, lane, SQL_HOLDABLE):
                state = row["state"]
                if state == JobState.HELD.value:
                    out.jobs.append(self.rows.job(row, c))
                elif state in (JobState.QUEUED.value, JobState.BLOCKED.value):
                    out.jobs.append(self.rows.job(one(c.execute(SQL_STATE, ("held", row["id"]))), c))
                    event(c, row["id"], "held", row["attempts"], rules.held_words())
                else:
                    out.skipped.append((row["id"], rules.not_editable(row["id"], state, "held").message))
            return out

        return self.writer.write(tx, "holding jobs")

    def hold_never(self, gate: str, why: str | None, *, lane: str | None = None,
                   place: str | None = None) -> list[int]:
        def tx(c: Cursor) -> list[int]:
            if why is None:
                return sorted(row["id"] for row in c.execute(SQL_FORGET_WHY, {"gate": gate, "lane": lane,
                                                                              "place": place}).fetchall())
            rows = c.execute(SQL_NEVER, {"gate": gate, "lane": lane, "place": place, "why": why}).fetchall()
            for row in rows:
                c.execute(SQL_HOLD_WHY, (why, row["id"]))
                if row["state"] == JobState.QUEUED.value:
                    event(c, row["id"], "held", row["attempts"], rules.never_words(why))
            return [row["id"] for row in rows]

        return self.writer.write(tx, "holding jobs that cannot run")

    def unhold(self, ids: Sequence[int] | None = None, *, lane: str | None = None) -> Batch:
        def tx(c: Cursor) -> Batch:
            out = Batch([])
            for row in _named(c, ids, lane, SQL_RELEASABLE):
                state = row["state"]
                if state == JobState.HELD.value:
                    waits = deps.still_waits(c, row["id"])
                    new = JobState.QUEUED.value if waits is None else JobState.BLOCKED.value
                    out.jobs.append(self.rows.job(one(c.execute(SQL_STATE, (new, row["id"]))), c))
                    event(c, row["id"], "released", row["attempts"], rules.released_words(new, waits))
                elif state in (JobState.QUEUED.value, JobState.BLOCKED.value):
                    out.jobs.append(self.rows.job(row, c))
                else:
                    out.skipped.append((row["id"], f"job {row['id']} is {state}, not held"))
            return out

        return self.writer.write(tx, "releasing jobs")


def _new_prereqs(c: Cursor, job_id: int, state: str, wants: list[tuple[int, str]]) -> str:
    """Replace the job's deps rows with ``wants`` (locked, marked waited on),
    refusing a cycle or an id that does not exist; its new state."""
    for pid, _ in wants:
        if pid != job_id and c.execute(SQL_WAITS_ON, {"job": job_id, "other": pid}).fetchone():
            raise rules.cycle_error(job_id, pid)
    known = deps.lock_states(c, [pid for pid, _ in wants if pid != job_id])
    new = rules.new_state(state, wants, lambda pid: _known(known, pid), job_id)
    c.execute(SQL_DROP_DEPS, (job_id,))
    deps.add_deps(c, [(job_id, pid, need) for pid, need in wants], [], [])
    return new


def _known(known: dict[int, str], pid: int) -> str:
    if pid not in known:
        raise JobNotFound(pid)
    return known[pid]


def _all(c: Cursor, ids: Sequence[int]) -> list[int]:
    """Each of ``ids`` once, in order; JobNotFound for any that does not exist (nothing changes)."""
    if not isinstance(ids, (list, tuple)) or not ids:
        raise BadRequest("ids must be a non-empty list of job ids")
    named = list(dict.fromkeys(ids))
    for i in named:
        get_row(c, i)
    return named


def _named(c: Cursor, ids: Sequence[int] | None, lane: str | None, select: str) -> list[Row]:
    """The rows of ``ids`` (all must exist), or of the lane's jobs ``select`` picks, each locked."""
    if (ids is None) == (lane is None):
        raise BadRequest("name the jobs: ids, or a lane (not both)")
    named = _all(c, ids) if ids is not None else [r["id"] for r in c.execute(select, (lane,)).fetchall()]
    return [get_row(c, i, lock=True) for i in named]

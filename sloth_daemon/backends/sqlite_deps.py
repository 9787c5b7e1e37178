"""Dependencies between jobs on the SQLite queue: the SQL of ``--after``.

A job added after others is stored ``blocked`` (or ``queued`` when nothing
it waits for is unfinished) with one ``deps`` row per prerequisite. No claim
index covers ``blocked`` rows, so a million waiting jobs cost a claim
nothing. Whenever a job ends (done, failed, cancelled), :func:`release`
runs in the same transaction: each blocked dependent is cancelled (a
prerequisite it needed ``done`` did not end done) or queued (nothing left to
wait for). A cancel cascades down a chain in one transaction.
"""

from __future__ import annotations

import json
import sqlite3
from typing import Callable, Iterable

from ..errors import JobNotFound
from ..models import FINISHED_STATES

NEED_DONE, NEED_END = "done", "end"  # deps.need: --after, --after-any

SQL_DEPENDENTS = (
    "SELECT d.job_id, d.need FROM deps d JOIN jobs j ON j.id = d.job_id"
    " WHERE d.after_id = ? AND j.state = 'blocked' ORDER BY d.job_id"
)
SQL_UNFINISHED_PREREQ = (
    "SELECT d.after_id FROM deps d JOIN jobs j ON j.id = d.after_id"
    " WHERE d.job_id = ? AND j.state IN ('blocked', 'queued', 'running') LIMIT 1"
)
SQL_PREREQS = (
    "SELECT d.after_id, d.need, j.state FROM deps d JOIN jobs j ON j.id = d.after_id"
    " WHERE d.job_id = ? ORDER BY d.after_id"
)
SQL_STATE_OF = "SELECT state FROM jobs WHERE id = ?"
SQL_PROMOTE = (
    "UPDATE jobs SET state = 'queued', not_before = max(not_before, ?), updated_at = ?"
    " WHERE id = ? AND state = 'blocked' RETURNING *"
)

# Ends a dependent and records it: (conn, job_id, now, message).
Cancel = Callable[[sqlite3.Connection, int, float, str], None]
Event = Callable[[sqlite3.Connection, int, float, str, int, str], None]


def prereqs_json(after: Iterable[int], after_any: Iterable[int]) -> str | None:
    """The ``jobs.prereqs`` text: what the job was added after, for display."""
    a, b = list(after), list(after_any)
    if not a and not b:
        return None
    return json.dumps({"after": a, "after_any": b})


def initial_state(c: sqlite3.Connection, wanted: list[tuple[int, str]],
                  known: dict[int, str]) -> tuple[str, str]:
    """(state, why) for a new job that waits for ``wanted`` (id, need):
    ``cancelled`` if one it needs done already ended otherwise, ``blocked``
    while any is unfinished, else ``queued``. ``known``: states of jobs
    earlier in the same batch (saves a lookup each). Raises JobNotFound."""
    blocked = None
    for pid, need in wanted:
        state = known.get(pid) or _state_of(c, pid)
        if need == NEED_DONE and state in FINISHED_STATES and state != "done":
            return "cancelled", f"not run: job {pid}, which it runs after, {_ended(state)}"
        if state not in FINISHED_STATES and blocked is None:
            blocked = pid
    if blocked is not None:
        return "blocked", f"waits for job {blocked}"
    return "queued", ""


def _state_of(c: sqlite3.Connection, job_id: int) -> str:
    row = c.execute(SQL_STATE_OF, (job_id,)).fetchone()
    if row is None:
        raise JobNotFound(job_id)
    return str(row[0])


def add_deps(c: sqlite3.Connection, job_id: int, wanted: list[tuple[int, str]]) -> None:
    c.executemany("INSERT OR IGNORE INTO deps (job_id, after_id, need) VALUES (?, ?, ?)",
                  [(job_id, pid, need) for pid, need in wanted])


def release(c: sqlite3.Connection, ended_id: int, ended_state: str, now: float,
            cancel: Cancel, event: Event) -> list[sqlite3.Row]:
    """Settle the blocked dependents of a job that just ended, and theirs in
    turn (a worklist, not recursion: a chain may be 50,000 long). Returns
    the rows of the dependents it queued; cancelled ones go through
    ``cancel``, which records them."""
    queued: list[sqlite3.Row] = []
    work = [(ended_id, ended_state)]
    while work:
        pid, pstate = work.pop()
        for dep_id, need in c.execute(SQL_DEPENDENTS, (pid,)).fetchall():
            if need == NEED_DONE and pstate != "done":
                cancel(c, dep_id, now, f"not run: job {pid}, which it runs after, {_ended(pstate)}")
                work.append((dep_id, "cancelled"))
            elif c.execute(SQL_UNFINISHED_PREREQ, (dep_id,)).fetchone() is None:
                row = c.execute(SQL_PROMOTE, (now, now, dep_id)).fetchone()
                event(c, dep_id, now, "ready", 0, f"job {pid} {_ended(pstate)}; nothing left to wait for")
                queued.append(row)
    return queued


def still_waits(c: sqlite3.Connection, job_id: int) -> int | None:
    """The id of an unfinished prerequisite of ``job_id``, or None."""
    row = c.execute(SQL_UNFINISHED_PREREQ, (job_id,)).fetchone()
    return None if row is None else int(row[0])


def prereqs(c: sqlite3.Connection, job_id: int) -> list[dict[str, object]]:
    """Each prerequisite of a job: id, need ('done' | 'end') and its state now."""
    return [{"id": r[0], "need": r[1], "state": r[2]} for r in c.execute(SQL_PREREQS, (job_id,))]


def _ended(state: str) -> str:
    return {"done": "is done", "failed": "failed", "cancelled": "was cancelled"}.get(state, f"is {state}")

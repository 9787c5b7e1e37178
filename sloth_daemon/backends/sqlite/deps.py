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

import sqlite3

from sloth_daemon.backends import rules
from sloth_daemon.errors import JobNotFound

SQL_UNFINISHED_PREREQ = (
    "SELECT d.after_id FROM deps d JOIN jobs j ON j.id = d.after_id"
    " WHERE d.job_id = ? AND j.state IN ('blocked', 'held', 'queued', 'running') LIMIT 1"
)
SQL_PREREQS = (
    "SELECT d.after_id, d.need, j.state FROM deps d JOIN jobs j ON j.id = d.after_id"
    " WHERE d.job_id = ? ORDER BY d.after_id"
)
SQL_STATE_OF = "SELECT state FROM jobs WHERE id = ?"
# Set-based, one statement per ended job however many wait for it (a fan-out
# of 100,000 is one UPDATE, not 100,000). RETURNING rows are read with
# fetchall: a RETURNING statement left unfinished is prepared again next time.
SQL_CANCEL_NEEDING = (
    "UPDATE jobs SET state = 'cancelled', message = :why, finished_at = :now, updated_at = :now"
    " WHERE id IN (SELECT job_id FROM deps WHERE after_id = :ended AND need = 'done')"
    " AND state IN ('blocked', 'held')"
    " RETURNING *"
)
SQL_PROMOTE = (
    "UPDATE jobs SET state = 'queued', not_before = max(not_before, :now), updated_at = :now"
    " WHERE id IN (SELECT job_id FROM deps WHERE after_id = :ended) AND state = 'blocked'"
    " AND NOT EXISTS (SELECT 1 FROM deps d JOIN jobs p ON p.id = d.after_id"
    " WHERE d.job_id = jobs.id AND p.state IN ('blocked', 'held', 'queued', 'running'))"
    " RETURNING *"
)
SQL_EVENT = "INSERT INTO events (job_id, at, kind, attempt, message) VALUES (?, ?, ?, 0, ?)"

def initial_state(c: sqlite3.Connection, wanted: list[tuple[int, str]],
                  known: dict[int, str]) -> tuple[str, str]:
    """(state, why) for a new job that waits for ``wanted`` (id, need):
    ``cancelled`` if one it needs done already ended otherwise, ``blocked``
    while any is unfinished, else ``queued``. ``known``: states already
    read in this transaction (jobs of the batch, prerequisites looked up
    before; nothing else writes meanwhile), filled as it reads more.
    Raises JobNotFound."""
    return rules.initial_state(wanted, lambda pid: known.get(pid) or known.setdefault(pid, _state_of(c, pid)))


def _state_of(c: sqlite3.Connection, job_id: int) -> str:
    row = c.execute(SQL_STATE_OF, (job_id,)).fetchone()
    if row is None:
        raise JobNotFound(job_id)
    return str(row[0])


def add_deps(c: sqlite3.Connection, rows: list[tuple[int, int, str]]) -> None:
    """deps rows (job id, prerequisite id, need)."""
    c.executemany("INSERT OR IGNORE INTO deps (job_id, after_id, need) VALUES (?, ?, ?)", rows)


SQL_ANY_DEPENDENT = "SELECT 1 FROM deps WHERE after_id = ? LIMIT 1"


def release(c: sqlite3.Connection, ended_id: int, ended_state: str, now: float) -> list[sqlite3.Row]:
    """Settle the blocked dependents of a job that just ended, and theirs in
    turn (a worklist, not recursion: a chain may be 50,000 long): cancelled
    (event ``cancelled``) when they needed it done and it is not, queued
    (event ``ready``) when nothing they wait for is unfinished. Returns the
    rows it changed."""
    changed: list[sqlite3.Row] = []
    work = [(ended_id, ended_state)]
    while work:
        pid, pstate = work.pop()
        if c.execute(SQL_ANY_DEPENDENT, (pid,)).fetchone() is None:
            continue  # most jobs: nothing waits for them (one index probe, not two updates)
        args = {"ended": pid, "now": now, "why": rules.not_run(pid, pstate)}
        if pstate != "done":
            gone = c.execute(SQL_CANCEL_NEEDING, args).fetchall()
            c.executemany(SQL_EVENT, [(r["id"], now, "cancelled", args["why"]) for r in gone])
            work += [(r["id"], "cancelled") for r in gone]
            changed += gone
        ready = c.execute(SQL_PROMOTE, args).fetchall()
        why = f"job {pid} {rules.ended_text(pstate)}; nothing left to wait for"
        c.executemany(SQL_EVENT, [(r["id"], now, "ready", why) for r in ready])
        changed += ready
    return changed


def still_waits(c: sqlite3.Connection, job_id: int) -> int | None:
    """The id of an unfinished prerequisite of ``job_id``, or None."""
    row = c.execute(SQL_UNFINISHED_PREREQ, (job_id,)).fetchone()
    return None if row is None else int(row[0])


def prereqs(c: sqlite3.Connection, job_id: int) -> list[dict[str, object]]:
    """Each prerequisite of a job: id, need ('done' | 'end') and its state now."""
    return [{"id": r[0], "need": r[1], "state": r[2]} for r in c.execute(SQL_PREREQS, (job_id,))]



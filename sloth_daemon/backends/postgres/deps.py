"""Dependencies between jobs on the PostgreSQL queue: the SQL of ``--after``
(the counterpart of backends/sqlite/deps.py; the same states, messages and events).

A job added after others is stored ``blocked`` (or ``queued`` or
``cancelled`` when what it waits for has ended already) with one ``deps``
row per prerequisite; blocked rows are in no claim index. When a job others
wait for ends, ``sloth.settle`` (a function of the schema, see migration 3)
settles them in the same transaction, down a chain of any length in one
round trip.

Several daemons add and end jobs at once, so whatever decides a state from
another job's state first locks that job's row: an enqueue locks its
prerequisites (and marks them ``waited_on``), a retry locks the
prerequisites it reads, settle locks the dependents it judges. The
transaction that ends a prerequisite then either waits for the enqueue and
sees its deps rows, or ends first and the enqueue sees it ended.
"""

from __future__ import annotations

from typing import Any, Iterable

from sloth_daemon.errors import JobNotFound
from sloth_daemon.models import FINISHED_STATES
from sloth_daemon.backends.postgres.db import Cursor, Row
from sloth_daemon.backends import rules

__all__ = ["add_deps", "dependents", "initial_state", "lock_states", "prereqs", "settle", "still_waits"]

# Locked in id order, so two enqueues that wait for the same jobs take turns
# instead of deadlocking; RETURNING gives each job's state after any
# transaction that held it committed.
SQL_LOCK = ("UPDATE sloth.jobs SET waited_on = true WHERE id IN"
            " (SELECT id FROM sloth.jobs WHERE id = ANY(%s) ORDER BY id FOR NO KEY UPDATE)"
            " RETURNING id, state")
SQL_ADD = ("INSERT INTO sloth.deps (job_id, after_id, need)"
           " SELECT * FROM unnest(%s::bigint[], %s::bigint[], %s::text[]) ON CONFLICT DO NOTHING")
SQL_MARK = "UPDATE sloth.jobs SET waited_on = true WHERE id = ANY(%s) AND NOT waited_on"
SQL_SETTLE = "SELECT * FROM sloth.settle(%s, %s)"
SQL_PREREQ_STATES = ("SELECT p.id, p.state FROM sloth.deps d JOIN sloth.jobs p ON p.id = d.after_id"
                     " WHERE d.job_id = %s ORDER BY p.id FOR SHARE OF p")
SQL_PREREQS = ("SELECT d.after_id AS id, d.need, j.state FROM sloth.deps d JOIN sloth.jobs j"
               " ON j.id = d.after_id WHERE d.job_id = %s ORDER BY d.after_id")
SQL_DEPENDENTS = "SELECT job_id FROM sloth.deps WHERE after_id = %s ORDER BY job_id"
SQL_EVENTS = ("INSERT INTO sloth.events (job_id, at, kind, attempt, message)"
              " SELECT id, sloth.now(), 'cancelled', 0, why FROM unnest(%s::bigint[], %s::text[]) AS t(id, why)")


def lock_states(c: Cursor, ids: Iterable[int]) -> dict[int, str]:
    """Lock these jobs (those that exist), mark them waited on, and return
    their states: what a new dependent's state is decided from."""
    wanted = sorted(set(ids))
    if not wanted:
        return {}
    return {r["id"]: r["state"] for r in c.execute(SQL_LOCK, (wanted,)).fetchall()}


def initial_state(wanted: list[tuple[int, str]], known: dict[int, str]) -> tuple[str, str]:
    """(state, why) for a new job that waits for ``wanted`` (id, need):
    ``cancelled`` if one it needs done already ended otherwise, ``blocked``
    while any is unfinished, else ``queued``. ``known``: the states of the
    jobs locked or inserted by this transaction. Raises JobNotFound."""
    return rules.initial_state(wanted, lambda pid: _known(known, pid))


def _known(known: dict[int, str], pid: int) -> str:
    state = known.get(pid)
    if state is None:
        raise JobNotFound(pid)
    return state


def add_deps(c: Cursor, rows: list[tuple[int, int, str]], cancelled: list[tuple[int, str]],
             mark: Iterable[int]) -> None:
    """deps rows (job id, prerequisite id, need), the prerequisites ``mark``
    marked waited on (the others were, as they were locked or inserted),
    and the events of the jobs cancelled as they were added."""
    if rows:
        c.execute(SQL_ADD, [list(col) for col in zip(*rows, strict=True)])
    wanted = sorted(mark)
    if wanted:
        c.execute(SQL_MARK, (wanted,))
    if cancelled:
        c.execute(SQL_EVENTS, [list(col) for col in zip(*cancelled, strict=True)])


def settle(c: Cursor, job_id: int, state: str) -> list[Row]:
    """Settle the blocked dependents of a job that just ended (see the
    module docstring); the rows it changed."""
    return c.execute(SQL_SETTLE, (job_id, state)).fetchall()


def still_waits(c: Cursor, job_id: int) -> int | None:
    """The id of an unfinished prerequisite of ``job_id``, or None (its
    prerequisites locked until commit: see the module docstring)."""
    rows = c.execute(SQL_PREREQ_STATES, (job_id,)).fetchall()
    return next((r["id"] for r in rows if r["state"] not in FINISHED_STATES), None)


def prereqs(c: Cursor, job_id: int) -> list[dict[str, Any]]:
    """Each prerequisite of a job: id, need ('done' | 'end') and its state now."""
    return [dict(r) for r in c.execute(SQL_PREREQS, (job_id,)).fetchall()]


def dependents(c: Cursor, job_id: int) -> list[int]:
    return [r["job_id"] for r in c.execute(SQL_DEPENDENTS, (job_id,)).fetchall()]

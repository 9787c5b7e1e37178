"""What both queue engines keep alike for schedules; no SQL here.

A schedule is a row of ``schedules`` (its recipe as JSON, paused, and its
progress: ``next_slot``, the first slot not yet handled, and ``version``,
bumped by every change). Each slot handled is a row of ``schedule_runs``
keyed (schedule, slot): the job it queued, or none and why. A firing is
one transaction: the schedule's progress moves only if ``version`` is still
the one the firer read (compare and set), each slot's row goes in only if
that slot has none, and its job -- an ordinary job whose key is
``schedule:NAME:SLOT`` -- in the same transaction. So a crash, a restart,
a clock stepped back, two firers on one machine or daemons on several
machines sharing one PostgreSQL queue never make two jobs of one slot, and
never lose one: the slot and its job are written together or not at all.

What to fire (missed runs, overlap, jitter, time zones) is the daemon's
policy (daemon/schedules/); the engines only keep what it decided.
"""

from __future__ import annotations

import json
from typing import Any, Mapping, NamedTuple

from sloth_daemon.errors import IllegalTransition, ScheduleNotFound
from sloth_daemon.spec import JobSpec

# A manual `sloth schedule run`: the occurrence's key while it is active, so
# two runs at once make one job (the second is told the first's id).
MANUAL = "run"
RUNS_SHOWN = 50  # occurrences `schedule show` lists by default


class Occurrence(NamedTuple):
    """One slot handled: queue ``spec`` (its key set) or, with no spec,
    record the slot as not run and ``note`` why."""

    slot: int
    spec: JobSpec | None
    note: str = ""


class Firing(NamedTuple):
    """What one firing writes: its occurrences, the schedule's progress
    (``next_slot``; None leaves it, as a manual run does), and how many
    slots it coalesced (``missed``) or dropped beyond the cap (``dropped``).
    ``version``: the schedule's version the plan was made from (None: any)."""

    version: int | None
    occurrences: list[Occurrence]
    next_slot: int | None = None
    missed: int = 0
    dropped: int = 0


def slot_key(name: str, slot: int | str) -> str:
    """The idempotency key of a slot's job."""
    return f"schedule:{name}:{slot}"


def manual_slot(row: Any, slot: int) -> int:
    """The row key of a run by hand made at ``slot`` (its second), given the
    latest one's (``row["top"]``): after it, so two runs in one second are two rows."""
    top = None if row is None else row["top"]
    return slot if top is None or top < slot else int(top) + 1


def record(row: Any) -> dict[str, Any]:
    """A schedules row (joined with its last job's state) as the daemon and
    the CLI see it."""
    d = dict(row) if isinstance(row, dict) else dict(zip(row.keys(), row, strict=True))
    d["recipe"] = json.loads(d["recipe"])
    d["paused"] = bool(d["paused"])
    return d


def run_record(row: Any) -> dict[str, Any]:
    return dict(row) if isinstance(row, dict) else dict(zip(row.keys(), row, strict=True))


def taken(name: str) -> IllegalTransition:
    return IllegalTransition(f"a schedule named {name!r} exists already; nothing changed",
                             hint=f"Change it with `sloth schedule edit {name} ...`, or choose another name.")


def missing(name: str) -> ScheduleNotFound:
    return ScheduleNotFound(name)


def changes(recipe: Mapping[str, Any] | None, paused: bool | None, next_slot: int | None) -> dict[str, Any]:
    """The columns an edit, pause or resume sets (recipe as its JSON)."""
    out: dict[str, Any] = {}
    if recipe is not None:
        out["recipe"] = json.dumps(dict(recipe), sort_keys=True)
    if paused is not None:
        out["paused"] = int(paused)
    if next_slot is not None:
        out["next_slot"] = int(next_slot)
    return out

"""What a schedule does when its slots are due: pure functions of its
recipe, its progress (``next_slot``: the first slot not yet handled) and
now, so every rule is tested on an injected clock.

* **Missed runs** (``--missed``): ``once`` (default) queues one catch-up
  for the latest due slot however many passed; ``skip`` queues a slot only
  if it is seen within GRACE_S of its time (else waits for the next);
  ``all`` queues one job per due slot, the latest MAX_CATCH_UP of them,
  and counts the rest as dropped.
* **Overlap** (``--overlap``), while the previous occurrence is still
  queued or running: ``skip`` (default) records the slot as not run;
  ``queue`` runs it after the previous ends; ``parallel`` runs it beside;
  ``replace`` ends the previous, then runs it.
* **Jitter** (``--jitter D``): each occurrence starts a fixed offset in
  [0, D) after it is queued, the same on a machine every time (a hash of the
  schedule's name and the machine's id), so catch-ups after a resume do not
  all start in the same second.
"""

from __future__ import annotations

from typing import NamedTuple

from sloth_daemon.backends.rules import sha256_hex
from sloth_daemon.daemon.schedules import slots
from sloth_daemon.daemon.schedules.recipe import Recipe
from sloth_daemon.durations import format_duration

GRACE_S = 60  # a slot seen this late is on time (the daemon was busy, not asleep)
MAX_CATCH_UP = 100  # --missed all: jobs for one sleep at most
NEVER_S = 100 * 366 * 86400
QUEUE, SKIP, AFTER, REPLACE = "queue", "skip", "after", "replace"


class Plan(NamedTuple):
    """What is due: the slots to queue (oldest first), a slot recorded as
    not run (``skipped``) with ``note``, where progress moves to, and how
    many slots were coalesced (``missed``) or dropped beyond the cap."""

    queue: list[int]
    next_slot: int | None
    missed: int = 0
    dropped: int = 0
    note: str = ""
    skipped: int | None = None


def plan(recipe: Recipe, next_slot: int, now: int) -> Plan | None:
    """The plan for slots due by ``now``, or None if none is."""
    if next_slot > now:
        return None
    due, count = slots.latest(recipe, next_slot, now, MAX_CATCH_UP if recipe.missed == "all" else 1)
    after = slots.next_after(recipe, now) or now + NEVER_S  # a cron that matches no later date: parked
    if not due:  # nothing matched in between (a stale next_slot): just move on
        return Plan([], after)
    last = due[-1]
    late = now - last > GRACE_S
    if recipe.missed == "all":
        return Plan(due, after, dropped=count - len(due), note=_dropped(count - len(due)))
    if recipe.missed == "skip" and late:
        return Plan([], after, missed=count, skipped=last,
                    note=f"missed by {format_duration(now - last)}: not run (--missed skip){_more(count)}")
    note = f"catch-up, {format_duration(now - last)} late{_more(count)}" if late or count > 1 else ""
    return Plan([last], after, missed=count - 1, note=note)


def _more(count: int) -> str:
    return f"; {count - 1} earlier slot(s) missed too" if count > 1 else ""


def _dropped(n: int) -> str:
    return f"{n} older slot(s) dropped beyond the cap of {MAX_CATCH_UP}" if n else ""


def overlap(mode: str, previous_active: bool) -> str:
    """What to do with an occurrence: QUEUE it, SKIP it, queue it AFTER the
    previous, or REPLACE the previous (end it, then run this after it)."""
    if not previous_active or mode == "parallel":
        return QUEUE
    return {"skip": SKIP, "queue": AFTER, "replace": REPLACE}[mode]


def jitter_s(name: str, machine: str, most_s: float) -> float:
    """The fixed offset in [0, most_s) of this schedule on this machine."""
    if most_s <= 0:
        return 0.0
    return int(sha256_hex(f"{machine}\0{name}")[:16], 16) / 2**64 * most_s

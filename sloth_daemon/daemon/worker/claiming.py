"""When the worker claims, and what: due work for lanes with free slots
(due retries, delayed jobs, leases that really expired), a gated job
whose conditions hold and whose tokens and slots are free (gates.py), and
behind a young run of a full lane its successor (pipeline.py). A read-only
look comes first (an empty claim would still cost a write transaction),
and its answer is also when to look again (``next_due``, on the queue's
clock). A claim that took a job fills its lane's other free slots in one
statement more (claim_many), so the look comes once a lane, not once a job
(a claim without the look after one that took a job was tried: when nothing
more is due it costs a claim and then the look all the same, a round trip
more in the usual turn that frees one slot). Nothing is claimed while every lane is paused, the worker stops,
or a spawn failed for want of resources (limits.Postponement)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Callable

from sloth_daemon.clock import ClockReadings, Clocks
from sloth_daemon.config import Settings
from sloth_daemon.daemon.limits import Postponement
from sloth_daemon.daemon.worker.conditionwatch import ConditionWatch
from sloth_daemon.daemon.worker.gates import Gates
from sloth_daemon.daemon.worker.lanes import Lanes
from sloth_daemon.daemon.worker.leases import Renewals
from sloth_daemon.daemon.worker.lifecycle import Attempt
from sloth_daemon.daemon.worker.pipeline import Pipeline
from sloth_daemon.daemon.worker.recording import CLAIM_RETRY_S
from sloth_daemon.daemon.worker.runs import Attempts
from sloth_daemon.errors import StorageError

if TYPE_CHECKING:
    from sloth_daemon.queue import Queue

log = logging.getLogger("sloth.worker")


class Claimer:
    """State: when due work is next (``next_due``) and whether claims have
    stopped. ``begin(run, r)``: the worker's start of a run it claimed."""

    def __init__(self, queue: "Queue", running: Attempts, lanes: Lanes, gates: Gates, pipeline: Pipeline,
                 leases: Renewals, watch: ConditionWatch, postponed: Postponement, clocks: Clocks, settings: Settings,
                 *, name: str, places: list[str] | None, begin: Callable[[Attempt, ClockReadings], None]) -> None:
        self.queue, self.running, self.lanes, self.gates = queue, running, lanes, gates
        self.pipeline, self.leases, self.watch, self.postponed = pipeline, leases, watch, postponed
        self.clocks, self.settings, self.name, self.places, self.begin = clocks, settings, name, places, begin
        self.next_due: float | None = None  # the queue's clock: from the last claim
        self.stopped = False
        self.dry: set[str] = set()  # lanes whose last batch (claim_many) found fewer jobs than free slots

    def allowed(self) -> bool:
        return not (self.lanes.paused_all or self.stopped or self.postponed.holds(self.clocks.read().awake))

    def due(self, r: ClockReadings) -> bool:
        return self.next_due is not None and self.next_due <= self.leases.now(r)

    def deadline(self, r: ClockReadings) -> float | None:
        return self.next_due - self.leases.now(r) if self.next_due is not None and self.allowed() else None

    def claim(self, r: ClockReadings) -> None:
        """A turn's claims (see the module docstring)."""
        try:
            self._claim_due(r)
            self.watch.looked(r)
            if self.allowed():
                self.pipeline.claim_successors(r, self.begin, self.gates.reserved)
        except StorageError as e:  # locked by another process, disk full: claim later, do the rest now
            log.warning("not claiming for now: %s", e.message)
            self.later(r)

    def later(self, r: ClockReadings) -> None:
        """A claim the database refused (or a unit of claims it did not keep): again in CLAIM_RETRY_S."""
        self.next_due = self.leases.now(r) + CLAIM_RETRY_S

    def _claim_due(self, r: ClockReadings) -> None:
        self.next_due = None
        waiting_lanes = self.gates.lanes_waiting() if self.settings.lane_when else set()
        claimed: set[str] = set()  # lanes this turn claimed in
        while self.allowed():
            used = self.running.slots_in_use()
            blocked = self.lanes.blocked(used) | waiting_lanes
            mine = set(self.running)  # never re-issue our own live or unrecorded jobs to ourselves
            gated, reserved = self.gates.pick(blocked, mine)  # jobs with conditions, needs, slots (gates.py)
            blocked |= reserved
            due = self.queue.next_due_at(exclude_lanes=blocked, exclude_ids=mine, places=self.places)
            later = self.gates.later
            self.next_due = due if later is None or (due is not None and due < later) else later
            if gated is None and (due is None or due > self.leases.now(r)):
                return
            job = self.queue.claim(self.name, exclude_lanes=blocked, exclude_ids=mine, places=self.places,
                                   gated=None if gated is None else (gated[0].id, gated[1]))
            if job is None:
                return  # another process took it
            self.begin(Attempt(job, job.token or "", job.attempts), r)
            lane = job.lane
            free = self.lanes.concurrency(lane) - used.get(lane, 0) - (job.gate or {}).get("slots", 1)
            # the lane's other free slots in one statement; not for a lone job (a batch that found
            # nothing last time, and no second claim in the lane this turn): a round trip for nothing
            if free > 0 and gated is None and lane not in blocked and (lane not in self.dry or lane in claimed):
                more = self.queue.claim_many(self.name, free, lane=lane, places=self.places)
                (self.dry.add if len(more) < free else self.dry.discard)(lane)
                for m in more:
                    self.begin(Attempt(m, m.token or "", m.attempts), r)
            claimed.add(lane)

"""The conditions' watch (--when, a lane's when): while jobs wait on
conditions, or run under --on-lost stop or pause, the conditions are looked
at again every conditions_check_s (and at once on a power event, heard
through ``udevadm monitor`` while a power condition matters:
conditions.PowerEvents). Each look makes the next turn claim (a job that
waited may run now); a run whose conditions no longer hold is ended
(--on-lost stop: Why.CONDITION_LOST, requeued without spending a try) or
its tree paused (--on-lost pause), and continued once they hold again.
What holds and what runs where is the gates' (gates.py); this is when to
look and what to do about it.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Callable, Coroutine, Sequence

from sloth_daemon.clock import ClockReadings, Clocks
from sloth_daemon.config import Settings
from sloth_daemon.daemon.conditions import PowerEvents
from sloth_daemon.daemon.worker.gates import Gates
from sloth_daemon.daemon.worker.lifecycle import Ending, Attempt, Why
from sloth_daemon.daemon.worker.pausing import Pauser
from sloth_daemon.daemon.worker.signals import Signals
from sloth_daemon.errors import SlothError

log = logging.getLogger("sloth.worker")
POWER_EVENTS_RETRY_S = 60.0  # between starts of `udevadm monitor` (conditions.PowerEvents)


class ConditionWatch:
    """State: when it looks next, the power events' listener and its task.
    Collaborators: the gates (what holds, which runs lost theirs), the
    pauser, signals (a look makes the next turn claim; the loop wakes),
    ``end`` (the worker's end of a run) and ``spawn_task`` (a pause runs
    beside the loop)."""

    def __init__(self, gates: Gates, pauser: Pauser, signals: Signals, clocks: Clocks, settings: Settings, *,
                 end: Callable[[Attempt, Ending], None],
                 spawn_task: Callable[[Coroutine[Any, Any, None]], None]) -> None:
        self.gates, self.pauser, self.signals, self.clocks = gates, pauser, signals, clocks
        self.settings, self.end, self.spawn_task = settings, end, spawn_task
        self.next_look = clocks.read().awake  # awake clock: looked at again from then, while watched
        self.power_events = PowerEvents(lambda: self.look_now(["power"]))
        self._power_task: asyncio.Task[Any] | None = None
        self._power_retry_at = float("-inf")

    def watch(self, r: ClockReadings) -> None:
        """A turn's look, if one is due (see the module docstring)."""
        self._hear_power(self.gates.watching_power)
        if not self.gates.watching or r.awake < self.next_look:
            return
        self.next_look = r.awake + self.settings.conditions_check_s
        self.signals.look = True
        for run, why, policy in self.gates.lost():
            log.info("job %d: its conditions no longer hold (%s): %s", run.job.id, why,
                     "ending it" if policy == "stop" else "pausing it")
            ending = Ending(Why.CONDITION_LOST, why)
            if policy == "stop":
                self.end(run, ending)
            else:
                self._pause(run, ending.text)
        for run in self.gates.regained():
            self._pause(run, None)

    def looked(self, r: ClockReadings) -> None:
        """A claim just looked at the conditions: the next look in a while."""
        if self.gates.watching and self.next_look <= r.awake:
            self.next_look = r.awake + self.settings.conditions_check_s

    def deadline(self, r: ClockReadings) -> float | None:
        return self.next_look - r.awake if self.gates.watching else None

    def look_now(self, kinds: Sequence[str] = ()) -> None:
        """A power event (or a test): what ``kinds`` said is stale; look at the next turn."""
        self.gates.conditions.forget(kinds)
        self.next_look = float("-inf")
        self.signals.wake()

    def holds(self, when: Sequence[str], cwd: str | None = None) -> str | None:
        """None if the run conditions ``when`` (checks.when_list's spellings)
        hold here now, else why not ("waiting for mains power"), from the
        looks the gates keep."""
        return self.gates.conditions.first_reason(when, cwd)

    def stop(self) -> None:
        self.power_events.stop()

    def _pause(self, run: Attempt, why: str | None) -> None:
        """--on-lost pause: stop the run's tree (``why``), or continue it (None)."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:  # a turn driven by a test without an event loop
            return
        self.gates.pausing.add(run.job.id)
        self.spawn_task(self._paused(run, why))

    async def _paused(self, run: Attempt, why: str | None) -> None:
        resume = why is None
        try:
            done = await self.pauser.pause([run.job.id], resume=resume, why=why or "its conditions hold again")
            if done.jobs:
                self.gates.paused_by_condition(run.job.id, not resume)
            for _, reason in done.skipped:
                log.info("job %d not %s: %s", run.job.id, "continued" if resume else "paused", reason)
        except SlothError as e:  # the next look tries again
            log.warning("cannot %s job %d for its conditions: %s", "continue" if resume else "pause",
                        run.job.id, e.message)
        finally:
            self.gates.pausing.discard(run.job.id)
            self.signals.wake()

    def _hear_power(self, wanted: bool) -> None:
        """Power events (udevadm monitor) while a job waits on, or runs under, ac or battery."""
        if not wanted:
            self.power_events.stop()
            return
        now = self.clocks.read().awake
        if self.power_events.available and (self._power_task is None or self._power_task.done()) \
                and now >= self._power_retry_at:
            self._power_retry_at = now + POWER_EVENTS_RETRY_S  # a udevadm that exits at once is not run hot
            try:
                self._power_task = asyncio.get_running_loop().create_task(self.power_events.run())
            except RuntimeError:  # a turn driven by a test, no event loop
                pass

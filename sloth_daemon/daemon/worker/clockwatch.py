"""The clocks' watch: every clock_check_s (at once when the timerfd says
the wall clock was set, or the machine resumed) the wall, awake and boot
clocks are compared (clock.JumpDetector). A jump is told to whoever
listens (the schedules re-arm); a sleep, or the wall clock set ahead, also
calls ``after_jump`` (a shared queue's connections may be dead) and is the
worker's cue to renew its runs' leases with a ``resumed`` event
(leases.py): they slept too, they must not be run again elsewhere.

At rest (``resting()``: no run in hand, the keeper let go) where the
timerfd watches, the period is REST_FACTOR times longer: a set clock and a
resume are heard at once anyway, so the periodic check only catches what
the timerfd cannot (a stall, a zone change, a job another process queued
in the file) and need not wake an idle daemon every 5 s (docs/idle.md).
The period is read at each turn, so the first job after rest brings the
short period back at once.

Built by the composition root (daemon/main.py) and handed to the worker.
"""

from __future__ import annotations

import logging
from typing import Any, Callable

from sloth_daemon.clock import ClockReadings, Clocks, JumpDetector, JumpKind

log = logging.getLogger("sloth.worker")
REST_FACTOR = 4  # at rest with a timerfd: 5 s -> 20 s, 0.05 wake-ups/s


class ClockWatch:
    """State: the jump detector, when it next checks, the last jump and
    check (for status). ``timerfd``: the daemon hears of clock changes as
    they happen (keeper/timerfd.py), not only at the next check."""

    def __init__(self, clocks: Clocks, *, interval_s: float, timerfd: bool = False,
                 after_jump: Callable[[], None] = lambda: None,
                 resting: Callable[[], bool] = lambda: False) -> None:
        first = clocks.read()
        self.detector = JumpDetector(first)
        self.interval_s, self.timerfd, self.after_jump, self.resting = interval_s, timerfd, after_jump, resting
        self.checked_at = float("-inf")  # awake clock of the last check: the first turn checks
        self.waited_s = interval_s  # the longest period in effect since the last check (what a stall exceeds)
        self.last_jump: dict[str, Any] | None = None
        self.last_check_at: float | None = None
        self.jumps: dict[str, int] = {}  # kind -> how many (sloth metrics), since this daemon started
        self.slept_s = 0.0  # the machine's sleeps, summed
        self._on_check: list[Callable[[], None]] = []
        self._on_jump: list[Callable[[], None]] = []

    def saw(self) -> list[float | None]:
        """The clocks as last read (handed to the process that renews this one, for ``carry``)."""
        last = self.detector.last
        return [last.wall, last.awake, last.total]

    def carry(self, saw: list[float | None]) -> None:
        """The clocks as the process this one renewed (or the dormant one
        before it) last read them: the first check sees what came since (a
        sleep, a step) as if this process had been running. Not a stall:
        that process waited on purpose (dormant)."""
        wall, awake, total = saw
        if isinstance(wall, (int, float)) and isinstance(awake, (int, float)):
            self.detector.last = ClockReadings(float(wall), float(awake), None if total is None else float(total))
            self.waited_s = float("inf")

    def listen(self, *, check: Callable[[], None], jump: Callable[[], None]) -> None:
        """``check()`` at every check (the schedules' time zone), ``jump()``
        on every jump, back too (the schedules re-arm)."""
        self._on_check.append(check)
        self._on_jump.append(jump)

    def period_s(self) -> float:
        """Seconds between checks now: longer at rest where the timerfd watches (module docstring)."""
        return self.interval_s * REST_FACTOR if self.timerfd and self.resting() else self.interval_s

    @property
    def next_at(self) -> float:
        """Awake clock of the next check."""
        return self.checked_at + self.period_s()

    def soon(self) -> None:
        """The timerfd says the wall clock was set or the machine resumed: check at the next turn."""
        self.checked_at = float("-inf")

    def due(self, r: ClockReadings) -> bool:
        period = self.period_s()
        self.waited_s = max(self.waited_s, period)
        return r.awake >= self.checked_at + period

    def check(self, r: ClockReadings) -> str | None:
        """Compare the clocks now; what the runs' leases must be renewed
        for (the machine slept, the wall clock went ahead), else None."""
        jump = self.detector.check(r, expected_s=self.waited_s)
        self.checked_at, self.waited_s = r.awake, self.period_s()
        self.last_check_at = r.wall
        for check in self._on_check:
            check()
        if jump.kind is JumpKind.NONE:
            return None
        self.last_jump = {"kind": jump.kind.value, "seconds": jump.seconds, "at": r.wall,
                          "describe": jump.describe()}
        self.jumps[jump.kind.value] = self.jumps.get(jump.kind.value, 0) + 1
        if jump.kind is JumpKind.SLEPT:
            self.slept_s += jump.seconds
        log.info("clock: %s", jump.describe())
        for told in self._on_jump:
            told()
        if jump.kind is JumpKind.STEPPED and jump.seconds <= 0:
            return None
        self.after_jump()
        return jump.describe()

    def status(self) -> dict[str, Any]:
        return {"last_check_at": self.last_check_at, "check_interval_s": self.interval_s, "timerfd": self.timerfd}

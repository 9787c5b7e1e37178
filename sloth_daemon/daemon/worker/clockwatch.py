"""The clocks' watch: every clock_check_s (at once when the timerfd says
the wall clock was set, or the machine resumed) the wall, awake and boot
clocks are compared (clock.JumpDetector). A jump is told to whoever
listens (the schedules re-arm); a sleep, or the wall clock set ahead, also
calls ``after_jump`` (a shared queue's connections may be dead) and is the
worker's cue to renew its runs' leases with a ``resumed`` event
(leases.py): they slept too, they must not be run again elsewhere.

Built by the composition root (daemon/main.py) and handed to the worker.
"""

from __future__ import annotations

import logging
from typing import Any, Callable

from sloth_daemon.clock import ClockReadings, Clocks, JumpDetector, JumpKind

log = logging.getLogger("sloth.worker")


class ClockWatch:
    """State: the jump detector, when it next checks, the last jump and
    check (for status). ``timerfd``: the daemon hears of clock changes as
    they happen (keeper/timerfd.py), not only at the next check."""

    def __init__(self, clocks: Clocks, *, interval_s: float, timerfd: bool = False,
                 after_jump: Callable[[], None] = lambda: None) -> None:
        first = clocks.read()
        self.detector = JumpDetector(first)
        self.interval_s, self.timerfd, self.after_jump = interval_s, timerfd, after_jump
        self.next_at = first.awake  # awake clock: the first turn checks
        self.last_jump: dict[str, Any] | None = None
        self.last_check_at: float | None = None
        self.jumps: dict[str, int] = {}  # kind -> how many (sloth metrics), since this daemon started
        self.slept_s = 0.0  # the machine's sleeps, summed
        self._on_check: list[Callable[[], None]] = []
        self._on_jump: list[Callable[[], None]] = []

    def listen(self, *, check: Callable[[], None], jump: Callable[[], None]) -> None:
        """``check()`` at every check (the schedules' time zone), ``jump()``
        on every jump, back too (the schedules re-arm)."""
        self._on_check.append(check)
        self._on_jump.append(jump)

    def soon(self) -> None:
        """The timerfd says the wall clock was set or the machine resumed: check at the next turn."""
        self.next_at = float("-inf")

    def due(self, r: ClockReadings) -> bool:
        return r.awake >= self.next_at

    def check(self, r: ClockReadings) -> str | None:
        """Compare the clocks now; what the runs' leases must be renewed
        for (the machine slept, the wall clock went ahead), else None."""
        jump = self.detector.check(r, expected_s=self.interval_s)
        self.next_at = r.awake + self.interval_s
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

"""Clocks. The queue reads wall time only through a ``Clock``; tests use ManualClock.

``ClockReadings`` and ``JumpDetector`` classify what happened between two
checks: the machine slept, the wall clock was stepped, or this process stalled.
They are pure (fed readings), so they are unit-tested on any OS.
"""

from __future__ import annotations

import enum
import sys
import time
from dataclasses import dataclass
from typing import Callable, Protocol


class Clock(Protocol):
    def now(self) -> float:
        """Wall time, epoch seconds."""
        ...


class SystemClock:
    def now(self) -> float:
        return time.time()


class ManualClock:
    """A clock that moves only when told to. For tests: no sleeping out leases."""

    def __init__(self, start: float = 0.0) -> None:
        self._t = float(start)

    def now(self) -> float:
        return self._t

    def advance(self, seconds: float) -> float:
        self._t += float(seconds)
        return self._t

    def set(self, t: float) -> None:
        self._t = float(t)


@dataclass(frozen=True)
class ClockReadings:
    """One simultaneous read of the three clocks that matter.

    wall:  CLOCK_REALTIME (jumps on resume and when set).
    awake: a monotonic clock that stops while the machine sleeps
           (Linux CLOCK_MONOTONIC; macOS mach_absolute_time = time.monotonic()).
    total: a monotonic clock that keeps counting during sleep
           (Linux CLOCK_BOOTTIME; macOS CLOCK_MONOTONIC_RAW), or None if unknown.
    """

    wall: float
    awake: float
    total: float | None


def _total_clock_id(platform: str) -> int | None:
    if platform.startswith("linux"):
        return getattr(time, "CLOCK_BOOTTIME", None)
    if platform == "darwin":
        # On macOS time.monotonic() is mach_absolute_time, which stops in sleep;
        # CLOCK_MONOTONIC_RAW (mach_continuous_time based) does not.
        return getattr(time, "CLOCK_MONOTONIC_RAW", None)
    return None


def _awake_reader(platform: str) -> Callable[[], float]:
    if platform.startswith("linux") and hasattr(time, "CLOCK_MONOTONIC"):
        cid = time.CLOCK_MONOTONIC
        return lambda: time.clock_gettime(cid)
    return time.monotonic


class Clocks(Protocol):
    """The three clocks the worker and the resume detector read, as one object
    (injected: the daemon gets SystemClocks, in-process tests ManualClocks).
    ``now()`` is the wall clock, so a Clocks can serve as a Queue's Clock."""

    def read(self) -> ClockReadings: ...

    def now(self) -> float: ...


class SystemClocks:
    """Reads the real clocks of this machine."""

    def __init__(self, platform: str = sys.platform) -> None:
        self.platform = platform
        self._awake = _awake_reader(platform)
        self._total_id = _total_clock_id(platform)

    def read(self) -> ClockReadings:
        total = time.clock_gettime(self._total_id) if self._total_id is not None else None
        return ClockReadings(wall=time.time(), awake=self._awake(), total=total)

    def now(self) -> float:
        return time.time()


class ManualClocks:
    """Clocks that move only when told to, and the way real ones do:
    ``advance`` (time passes awake), ``suspend`` (the machine sleeps: wall and
    total move, awake does not), ``step`` (someone sets the wall clock)."""

    def __init__(self, wall: float = 1000.0, awake: float = 100.0, total: float | None = 100.0) -> None:
        self.wall, self.awake, self.total = float(wall), float(awake), total

    def read(self) -> ClockReadings:
        return ClockReadings(self.wall, self.awake, self.total)

    def now(self) -> float:
        return self.wall

    def advance(self, seconds: float) -> None:
        self.wall += seconds
        self.awake += seconds
        if self.total is not None:
            self.total += seconds

    def suspend(self, seconds: float) -> None:
        self.wall += seconds
        if self.total is not None:
            self.total += seconds

    def step(self, seconds: float) -> None:
        self.wall += seconds


class JumpKind(str, enum.Enum):
    NONE = "none"
    SLEPT = "slept"  # the machine was suspended
    STEPPED = "stepped"  # the wall clock was set (forward or back)
    STALLED = "stalled"  # this process did not run (SIGSTOP, swap storm, debugger)


@dataclass(frozen=True)
class Jump:
    kind: JumpKind
    seconds: float  # slept / stepped (signed) / stalled seconds
    wall_delta: float

    @property
    def forward(self) -> bool:
        """True if wall time moved ahead of what the awake clock explains."""
        return self.kind is not JumpKind.NONE and self.wall_delta > 0

    def describe(self) -> str:
        if self.kind is JumpKind.SLEPT:
            return f"machine slept {self.seconds:.0f}s"
        if self.kind is JumpKind.STEPPED:
            return f"wall clock stepped {self.seconds:+.0f}s"
        if self.kind is JumpKind.STALLED:
            return f"daemon stalled {self.seconds:.0f}s"
        return "no jump"


class JumpDetector:
    """Compares successive clock readings and classifies the gap.

    ``expected_s`` is how long the caller meant to wait between checks; an
    awake gap much larger than that (with no suspend) means we were stalled.
    """

    def __init__(self, first: ClockReadings, threshold_s: float = 2.0) -> None:
        self.last = first
        self.threshold_s = threshold_s

    def check(self, now: ClockReadings, expected_s: float) -> Jump:
        prev, self.last = self.last, now
        d_wall = now.wall - prev.wall
        d_awake = now.awake - prev.awake
        th = self.threshold_s
        if now.total is not None and prev.total is not None:
            d_total = now.total - prev.total
            slept = d_total - d_awake
            if slept > th:
                return Jump(JumpKind.SLEPT, slept, d_wall)
            step = d_wall - d_total
        else:
            # Without a suspend-aware clock a sleep and a forward step look alike;
            # both are handled the same way, so call it a sleep if forward.
            step = d_wall - d_awake
            if step > th:
                return Jump(JumpKind.SLEPT, step, d_wall)
        if abs(step) > th:
            return Jump(JumpKind.STEPPED, step, d_wall)
        if d_awake > expected_s + max(th, expected_s):
            return Jump(JumpKind.STALLED, d_awake - expected_s, d_wall)
        return Jump(JumpKind.NONE, 0.0, d_wall)

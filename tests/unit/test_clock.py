"""Clock readings are classified without sleeping: fed readings, not real time."""

import sys
import time

import pytest

from sloth_daemon import clock
from sloth_daemon.clock import ClockReadings, JumpDetector, JumpKind, ManualClock


def R(wall, awake, total):
    return ClockReadings(wall=wall, awake=awake, total=total)


def test_manual_clock_moves_only_when_told():
    c = ManualClock(100)
    assert c.now() == 100
    assert c.advance(5) == 105
    c.set(42.5)
    assert c.now() == 42.5


def test_quiet_interval_is_no_jump():
    d = JumpDetector(R(1000, 10, 10))
    j = d.check(R(1005, 15, 15), expected_s=5)
    assert j.kind is JumpKind.NONE and not j.forward


def test_suspend_is_a_sleep_of_the_boottime_minus_monotonic_gap():
    d = JumpDetector(R(1000, 10, 10))
    j = d.check(R(1000 + 3605, 15, 10 + 3605), expected_s=5)
    assert j.kind is JumpKind.SLEPT and j.seconds == pytest.approx(3600)
    assert j.forward and "slept 3600s" in j.describe()


def test_wall_step_without_suspend_is_a_step_either_way():
    d = JumpDetector(R(1000, 10, 10))
    fwd = d.check(R(1000 + 5 + 120, 15, 15), expected_s=5)
    assert fwd.kind is JumpKind.STEPPED and fwd.seconds == pytest.approx(120) and fwd.forward
    back = d.check(R(1125 + 5 - 300, 20, 20), expected_s=5)
    assert back.kind is JumpKind.STEPPED and back.seconds == pytest.approx(-300) and not back.forward


def test_stall_is_when_all_clocks_moved_much_more_than_we_meant_to_wait():
    d = JumpDetector(R(1000, 10, 10))
    j = d.check(R(1060, 70, 70), expected_s=5)  # SIGSTOP for a minute
    assert j.kind is JumpKind.STALLED and j.seconds == pytest.approx(55)


def test_without_a_suspend_aware_clock_a_forward_gap_counts_as_sleep():
    d = JumpDetector(R(1000, 10, None))
    j = d.check(R(1000 + 905, 15, None), expected_s=5)
    assert j.kind is JumpKind.SLEPT and j.seconds == pytest.approx(900)


def test_small_jitter_below_threshold_is_ignored():
    d = JumpDetector(R(1000, 10, 10), threshold_s=2)
    assert d.check(R(1006.5, 15, 15.2), expected_s=5).kind is JumpKind.NONE


def test_platform_clock_choice():
    assert clock._total_clock_id("linux") == getattr(time, "CLOCK_BOOTTIME", None)
    # macOS: time.monotonic stops in sleep; CLOCK_MONOTONIC_RAW does not
    assert clock._total_clock_id("darwin") == getattr(time, "CLOCK_MONOTONIC_RAW", None)
    assert clock._total_clock_id("win32") is None
    assert clock._awake_reader("darwin") is time.monotonic


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux clocks")
def test_system_clocks_read_three_clocks_here():
    r = clock.SystemClocks().read()
    assert r.total is not None and r.total >= r.awake - 0.01  # read one after the other
    assert abs(r.wall - time.time()) < 5

"""The clock watch at rest (daemon/worker/clockwatch.py, docs/idle.md): where
the timerfd watches, an idle daemon checks its clocks REST_FACTOR times less
often, and still sees every jump: at once when the timerfd fires
(``soon``), else at the next, longer check; the short period is back as soon
as it is not resting; the longer wait is no stall. Manual clocks."""

from __future__ import annotations

from sloth_daemon.clock import ManualClocks
from sloth_daemon.daemon.worker.clockwatch import REST_FACTOR, ClockWatch


def rig(*, timerfd: bool = True) -> tuple[ManualClocks, ClockWatch, dict[str, bool], list[str]]:
    clocks = ManualClocks(wall=10_000.0)
    state = {"resting": True}
    jumps: list[str] = []
    watch = ClockWatch(clocks, interval_s=5.0, timerfd=timerfd, resting=lambda: state["resting"],
                       after_jump=lambda: jumps.append("after"))
    assert watch.due(clocks.read())  # the first turn checks
    watch.check(clocks.read())
    return clocks, watch, state, jumps


def test_at_rest_with_a_timerfd_the_check_waits_longer_and_a_turn_not_resting_brings_the_short_period_back():
    clocks, watch, state, _ = rig()
    assert REST_FACTOR > 1 and watch.period_s() == 5.0 * REST_FACTOR
    clocks.advance(5.0)
    assert not watch.due(clocks.read())  # 5 s: not yet, at rest
    clocks.advance(5.0 * REST_FACTOR - 5.0)
    assert watch.due(clocks.read())
    assert watch.check(clocks.read()) is None and watch.last_jump is None  # the long wait is no stall
    clocks.advance(6.0)
    state["resting"] = False  # a job came: 6 s since the last check is past the short period
    assert watch.due(clocks.read())
    assert watch.check(clocks.read()) is None and watch.last_jump is None


def test_without_a_timerfd_rest_changes_nothing():
    clocks, watch, _, _ = rig(timerfd=False)
    assert watch.period_s() == 5.0
    clocks.advance(5.0)
    assert watch.due(clocks.read())


def test_a_resume_at_rest_is_seen_at_once_when_the_timerfd_fires_and_at_the_next_check_without_it():
    clocks, watch, _, jumps = rig()
    clocks.advance(3.0)
    clocks.suspend(3600)
    watch.soon()  # the timerfd fired (the kernel's timerfd_resume)
    assert watch.due(clocks.read())
    assert watch.check(clocks.read()) is not None and watch.last_jump["kind"] == "slept" and jumps == ["after"]

    clocks.advance(2.0)
    clocks.step(900)  # the wall clock set ahead, the timerfd missed it: the rest check sees it
    assert not watch.due(clocks.read())
    clocks.advance(5.0 * REST_FACTOR)
    assert watch.due(clocks.read())
    assert watch.check(clocks.read()) is not None and watch.last_jump["kind"] == "stepped"


def test_a_stall_is_still_a_stall_beyond_the_period_in_effect():
    clocks, watch, state, _ = rig()
    state["resting"] = False
    assert watch.due(clocks.read()) is False
    clocks.advance(60.0)  # SIGSTOP'd a minute: more than twice the rest period planned at the last check
    assert watch.due(clocks.read())
    watch.check(clocks.read())
    assert watch.last_jump is not None and watch.last_jump["kind"] == "stalled"

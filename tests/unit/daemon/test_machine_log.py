"""The daemon's record of itself and its machine (daemon/machine_log.py)
on manual clocks and a real SQLite queue: a sleep the clock watch sees is
recorded, a wall clock set by hand or a stall is not; the up row's stamp
is written at most every STAMP_EVERY_S; a write that fails is logged and
dropped, never raised into the worker's turn."""

from __future__ import annotations

import logging

from sloth_daemon.clock import ManualClocks
from sloth_daemon.daemon.machine_log import STAMP_EVERY_S, MachineLog
from sloth_daemon.daemon.worker.clockwatch import ClockWatch
from sloth_daemon.errors import StorageBusy
from sloth_daemon.queue import Queue


def rig(tmp_path):
    clocks = ManualClocks(wall=10_000.0)
    q = Queue(tmp_path / "q.db", clocks)
    watch = ClockWatch(clocks, interval_s=5.0)
    record = MachineLog(q, "lap", watch, lambda: clocks.read().awake)
    watch.listen(check=record.check, jump=record.jump)
    return clocks, q, watch, record


def rows(q):
    return [(r["kind"], r["start_at"], r["end_at"], r["detail"]) for r in q.machine_events(0.0)]


def test_a_sleep_is_recorded_a_step_or_a_stall_is_not_and_the_stamp_is_sparing(tmp_path):
    clocks, q, watch, record = rig(tmp_path)
    record.start()
    watch.check(clocks.read())
    clocks.advance(5)
    watch.check(clocks.read())
    assert rows(q) == [("up", 10_000.0, 10_000.0, "running")]  # 5 s on: no stamp yet
    clocks.advance(STAMP_EVERY_S)
    watch.check(clocks.read())
    assert rows(q)[0][2] == 10_065.0
    clocks.step(3600)  # someone set the clock an hour ahead
    watch.check(clocks.read())
    clocks.advance(500)  # the daemon did not run for 500 s (SIGSTOP): a stall
    watch.check(clocks.read())
    assert [r[0] for r in rows(q)] == ["up"]
    clocks.suspend(7200)
    watch.check(clocks.read())
    sleep = [r for r in rows(q) if r[0] == "sleep"]
    assert sleep == [("sleep", 14_165.0, 21_365.0, "machine slept 7200s")]
    assert rows(q)[0][2] == 21_365.0  # awake again: the up row reaches past the sleep
    record.stop("signal SIGTERM")
    assert rows(q)[0][3] == "stopped: signal SIGTERM"


def test_a_write_that_fails_is_logged_and_dropped(tmp_path, monkeypatch, caplog):
    clocks, q, watch, record = rig(tmp_path)
    record.start()

    def busy(*a, **kw):
        raise StorageBusy("the queue file is locked by another process")

    monkeypatch.setattr(q, "machine_slept", busy)
    monkeypatch.setattr(q, "machine_seen", busy)
    watch.check(clocks.read())
    clocks.suspend(600)
    with caplog.at_level(logging.WARNING, logger="sloth.daemon"):
        assert watch.check(clocks.read()) == "machine slept 600s"  # the worker still hears of the sleep
        record.stop("signal SIGTERM")
    assert "a sleep was not recorded: the queue file is locked" in caplog.text
    assert "not stamped" in caplog.text

"""The worker on a queue shared by several machines, in-process: the
queue's clock is another machine's (the database server's: here a SQLite
queue on a ManualClock of its own, set ten minutes apart from ours), the
worker claims only what is placed here, and renewals are timed on this
machine's boot clock. No subprocess, no sleeping."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sloth_daemon.clock import ManualClock, ManualClocks
from sloth_daemon.config import Settings
from sloth_daemon.errors import StorageError
from sloth_daemon.queue import Queue
from sloth_daemon.daemon.worker.clockwatch import ClockWatch
from sloth_daemon.daemon.worker.runs import RENEW_RETRY_S, ran_here, worker_name
from sloth_daemon.daemon.shared.member import ServerTime
from sloth_daemon.daemon.worker.loop import Worker
from tests.unit.daemon.test_worker import FakeSpawner

LEASE = 30.0


class World:
    """This machine's clocks and the server's, moving together."""

    def __init__(self, tmp_path: Path, skew: float) -> None:
        self.clocks = ManualClocks(wall=100_000.0, awake=50.0, total=50.0)
        self.server = ManualClock(100_000.0 - skew)  # our wall clock is `skew` seconds ahead of the server's
        self.q = Queue(tmp_path / "q.db", self.server, lease_s=LEASE)
        self.sp = FakeSpawner()
        self.time = ServerTime()
        self.time.sample(self.clocks.read(), self.server.now())
        self.jumps: list[str] = []
        clock = ClockWatch(self.clocks, interval_s=60.0, after_jump=lambda: self.jumps.append("jump"))
        self.w = Worker(self.q, Settings(lease_s=LEASE, clock_check_s=60.0), self.sp, clocks=self.clocks,
                        log_path=lambda j, a: tmp_path / f"{j}.{a}.log", instance="t1", host="a", places=["", "a"],
                        clock=clock, queue_time=self.time.now)

    def advance(self, s: float) -> None:
        self.clocks.advance(s)
        self.server.advance(s)


@pytest.fixture(params=[600.0, -600.0], ids=["ten-minutes-ahead", "ten-minutes-behind"])
def world(request: Any, tmp_path: Path):
    w = World(tmp_path, request.param)
    yield w
    w.q.close()


def test_a_delayed_job_is_claimed_when_the_server_says_it_is_due(world):
    jid = world.q.enqueue(["x"], not_before=world.server.now() + 30)
    world.w.turn()
    assert not world.sp.reqs and world.w.next_wake_s() == pytest.approx(30.0)
    world.advance(29.9)
    world.w.turn()
    assert not world.sp.reqs
    world.advance(0.1)
    world.w.turn()
    assert world.sp.key_of(jid)


def test_renewals_come_a_third_into_the_lease_by_the_boot_clock_and_never_spin(world):
    jid = world.q.enqueue(["sleep"])
    world.w.turn()
    world.sp.start(jid)
    world.w.turn()
    first = world.q.get(jid).lease_until
    assert first == world.server.now() + LEASE  # the server's time, whatever ours says
    assert world.w.next_wake_s() == pytest.approx(1.0)  # its identity is written next; not 0 (spinning)
    world.advance(1.0)
    world.w.turn()
    assert world.w.next_wake_s() == pytest.approx(LEASE / 3 - 1.0)  # the renewal, not +-600 s off
    world.advance(LEASE / 3)
    world.w.turn()
    assert world.q.get(jid).lease_until == world.server.now() + LEASE
    assert [k for k, _ in world.sp.trusted] == [world.sp.key_of(jid)]
    assert "reclaimed" not in [e.kind for e in world.q.events(jid)]


def test_only_jobs_placed_here_or_anywhere_are_claimed(world):
    ids = [world.q.enqueue_many([{"command": ["x"], "place": p}])[0] for p in ("b", "gpu", "a", "")]
    world.w.settings = Settings(lease_s=LEASE, default_concurrency=9)
    world.w.lanes.settings = world.w.settings
    world.w.turn()
    assert sorted(r.job_id for r in world.sp.reqs.values()) == sorted(ids[2:])
    assert world.w.status()["places"] == ["", "a"] and world.w.status()["host"] == "a"


def test_a_renewal_the_server_does_not_take_is_tried_again_soon_not_every_turn(world, monkeypatch):
    jid = world.q.enqueue(["sleep"])
    world.w.turn()
    world.sp.start(jid)
    world.advance(LEASE / 3)

    def down(*a: Any, **k: Any) -> Any:
        raise StorageError("cannot connect to PostgreSQL: the network is down")

    monkeypatch.setattr(world.q, "heartbeat", down)
    world.w.turn()
    assert world.w.next_wake_s() == pytest.approx(RENEW_RETRY_S)
    assert world.sp.trusted == []  # the keeper's trust runs out: it fences the job


def test_a_resume_makes_connections_afresh_before_renewing(world, monkeypatch):
    jid = world.q.enqueue(["sleep"])
    world.w.turn()
    world.sp.start(jid)
    order: list[str] = []
    renew = world.q.renew_after_resume
    world.w.clock.after_jump = lambda: order.append("afresh")
    monkeypatch.setattr(world.q, "renew_after_resume", lambda *a, **k: order.append("renew") or renew(*a, **k))
    world.clocks.suspend(600)
    world.server.advance(600)
    world.w.clock_changed()
    world.w.turn()
    assert order == ["afresh", "renew"]


def test_an_earlier_attempt_is_ended_first_only_if_it_ran_on_this_host():
    here = {"pid": 1, "worker": worker_name("x", host="a", pid=9)}
    there = {"pid": 1, "worker": worker_name("x", host="b", pid=9)}
    assert ran_here(here, "a") is here and ran_here(there, "a") is None
    assert ran_here({"pid": 1}, "a") == {"pid": 1}  # from before names were recorded: ours
    assert ran_here(None, "a") is None

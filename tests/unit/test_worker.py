"""The worker loop, driven in-process: a real queue file, ManualClocks, and a
fake spawner that records what it was asked and lets the test say when a
process started or ended. No subprocess, no sleeping."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from sloth_daemon.clock import ManualClocks
from sloth_daemon.config import Settings
from sloth_daemon.queue import Queue
from sloth_daemon.spawner import Outcome, RunSink, SpawnRequest
from sloth_daemon.worker import Worker, is_daemon_on_host, worker_name

LEASE = 30.0


@dataclass
class FakeSpawner:
    reqs: dict[str, SpawnRequest] = field(default_factory=dict)
    sinks: dict[str, RunSink] = field(default_factory=dict)
    kills: list[tuple[str, str]] = field(default_factory=list)
    trusted: list[tuple[str, float]] = field(default_factory=list)
    next_pid: int = 1000

    def spawn(self, req: SpawnRequest, sink: RunSink) -> None:
        self.reqs[req.key] = req
        self.sinks[req.key] = sink

    def kill(self, key: str, reason: str, grace_s: float) -> None:
        self.kills.append((key, reason))

    def trust(self, items: list[tuple[str, float]]) -> None:
        self.trusted += items

    def tap(self, key: str) -> Any:
        return None

    # ------------------------------------------------ what the test plays
    def key_of(self, job_id: int) -> str:
        return next(k for k, r in reversed(self.reqs.items()) if r.job_id == job_id)

    def start(self, job_id: int) -> None:
        self.next_pid += 1
        self.sinks[self.key_of(job_id)].started(self.next_pid, {"pid": self.next_pid})

    def exit(self, job_id: int, code: int | None, reason: str | None = None) -> None:
        self.sinks[self.key_of(job_id)].exited(Outcome(code, reason))


@pytest.fixture
def clocks() -> ManualClocks:
    return ManualClocks(wall=1000.0, awake=50.0, total=50.0)


@pytest.fixture
def env(tmp_path: Path, clocks: ManualClocks):
    made: list[Queue] = []

    def make(**settings: Any) -> tuple[Worker, Queue, FakeSpawner]:
        s = Settings(**{"lease_s": LEASE, "clock_check_s": 5.0, **settings})
        q = Queue(tmp_path / "q.db", clocks, lease_s=s.lease_s, max_attempts=s.max_attempts)
        made.append(q)
        sp = FakeSpawner()
        w = Worker(q, s, sp, clocks=clocks, log_path=lambda j, a: tmp_path / f"{j}.{a}.log", instance="t1")
        return w, q, sp

    yield make
    for q in made:
        q.close()


def test_claim_run_settle(env, clocks):
    w, q, sp = env()
    a = q.enqueue(["echo", "hi"])
    w.turn()
    req = sp.reqs[sp.key_of(a)]
    assert (req.job_id, req.attempt, req.argv, req.timeout_s) == (a, 1, ["echo", "hi"], None)
    assert req.env["SLOTH_JOB_TOKEN"] == req.key and req.env["SLOTH_JOB_ID"] == str(a)
    sp.start(a)
    assert q.get(a).runner["pid"] == sp.next_pid and q.get(a).runner["worker"] == w.name
    sp.exit(a, 0)
    assert q.get(a).state == "claimed"  # an exit is recorded by the next turn, not inside the callback
    w.turn()
    job = q.get(a)
    assert (job.state, job.exit_code, job.message) == ("done", 0, "exit 0")
    assert not w.running


def test_a_lanes_next_job_is_claimed_before_the_last_result_is_written(env):
    w, q, sp = env()
    a, b = q.enqueue(["a"]), q.enqueue(["b"])
    w.turn()
    assert [r.job_id for r in sp.reqs.values()] == [a]
    sp.start(a)
    sp.exit(a, 0)
    order: list[str] = []
    claim, complete = q.claim, q.complete
    q.claim = lambda *x, **k: order.append("claim") or claim(*x, **k)  # type: ignore[method-assign]
    q.complete = lambda *x, **k: order.append("complete") or complete(*x, **k)  # type: ignore[method-assign]
    w.turn()
    assert order == ["claim", "complete"]
    assert [r.job_id for r in sp.reqs.values()] == [a, b]


def test_failure_retries_with_backoff_then_fails(env, clocks):
    w, q, sp = env(max_attempts=2)
    a = q.enqueue(["false"])
    w.turn()
    sp.start(a)
    sp.exit(a, 3)
    w.turn()
    job = q.get(a)
    assert (job.state, job.not_before, job.message) == ("queued", clocks.wall + 2, "exit 3")
    w.turn()
    assert len(sp.reqs) == 1  # not due yet
    assert w.next_wake_s() == pytest.approx(2.0)
    clocks.advance(2)
    w.turn()
    sp.start(a)
    sp.exit(a, -9)
    w.turn()
    assert (q.get(a).state, q.get(a).message) == ("failed", "killed by SIGKILL")


def test_spawn_failure_is_recorded_with_the_spawners_retry_verdict(env):
    w, q, sp = env()
    a = q.enqueue(["nope"])
    w.turn()
    sp.sinks[sp.key_of(a)].spawn_failed("command not found: nope", False)
    job = q.get(a)
    assert (job.state, job.message) == ("failed", "command not found: nope")
    assert not w.running


def test_heartbeats_at_a_third_of_the_lease_and_tells_the_spawner(env, clocks):
    w, q, sp = env()
    a = q.enqueue(["sleep"])
    w.turn()
    sp.start(a)
    first = q.get(a).lease_until
    clocks.advance(LEASE / 3 - 1)
    w.turn()
    assert q.get(a).lease_until == first and not sp.trusted
    clocks.advance(1)
    w.turn()
    assert q.get(a).lease_until == clocks.wall + LEASE
    assert sp.trusted == [(sp.key_of(a), clocks.total + LEASE)]


def test_never_reissues_its_own_expired_lease_to_itself(env, clocks):
    """A stalled daemon (no turn for longer than the lease) must renew its own
    live job, not claim it again as if its holder were dead."""
    w, q, sp = env()
    a = q.enqueue(["sleep"])
    w.turn()
    sp.start(a)
    clocks.advance(LEASE * 3)  # stalled: awake time passed too, so no jump is seen as a sleep
    w.turn()
    assert len(sp.reqs) == 1
    evs = q.events(a)
    assert [e.kind for e in evs] == ["claimed", "started", "resumed"]
    assert "stalled" in evs[-1].message
    assert q.get(a).lease_until == clocks.wall + LEASE


def test_resume_renews_own_live_jobs_first_then_claims_due_work(env, clocks):
    w, q, sp = env()
    a = q.enqueue(["long"])
    w.turn()
    sp.start(a)
    delayed = q.enqueue(["later"], lane="other", not_before=clocks.wall + 600)
    calls: list[str] = []
    renew, heartbeat, claim = q.renew_after_resume, q.heartbeat, q.claim
    q.renew_after_resume = lambda *x, **k: calls.append("renew") or renew(*x, **k)  # type: ignore[method-assign]
    q.heartbeat = lambda *x, **k: calls.append("heartbeat") or heartbeat(*x, **k)  # type: ignore[method-assign]
    q.claim = lambda *x, **k: calls.append("claim") or claim(*x, **k)  # type: ignore[method-assign]
    clocks.suspend(3600)  # the laptop slept an hour; the awake clock did not move
    w.clock_changed()  # what the timerfd does on resume
    w.turn()
    assert calls == ["renew", "claim"]  # own job renewed (so no heartbeat needed) before claiming
    assert [e.kind for e in q.events(a)][-1] == "resumed"
    assert w.last_jump and w.last_jump["kind"] == "slept"
    assert sp.key_of(delayed)  # due at once after the sleep, not an hour of awake time later
    assert q.get(a).state == "claimed" and len(sp.reqs) == 2


def test_a_missed_resume_is_still_safe_the_wall_clock_heartbeat_renews_before_claims(env, clocks):
    w, q, sp = env()
    a = q.enqueue(["long"])
    w.turn()
    sp.start(a)
    calls: list[str] = []
    heartbeat, claim = q.heartbeat, q.claim
    q.heartbeat = lambda *x, **k: calls.append("heartbeat") or heartbeat(*x, **k)  # type: ignore[method-assign]
    q.claim = lambda *x, **k: calls.append("claim") or claim(*x, **k)  # type: ignore[method-assign]
    q.enqueue(["other"], lane="b")
    clocks.suspend(3600)  # no timerfd, and the awake clock says no clock check is due yet
    w.turn()
    assert calls == ["heartbeat", "claim"]
    assert [e.kind for e in q.events(a)] == ["claimed", "started"]  # kept, not reclaimed


def test_a_lease_lost_to_someone_else_ends_our_process(env, clocks):
    w, q, sp = env()
    a = q.enqueue(["sleep"])
    w.turn()
    sp.start(a)
    q.cancel(a)  # e.g. another client of the same file
    clocks.advance(LEASE / 3)
    w.turn()
    assert sp.kills == [(sp.key_of(a), "lease lost")]
    sp.exit(a, -15, "lease lost")
    w.turn()
    assert q.get(a).state == "cancelled" and not w.running


def test_lanes_limit_concurrency_and_pause_persists(env, tmp_path, clocks):
    w, q, sp = env(lanes={"default": 1, "two": 2})
    ids = [q.enqueue(["x"], lane="two") for _ in range(3)] + [q.enqueue(["y"])]
    w.turn()
    assert sorted(r.job_id for r in sp.reqs.values()) == [ids[0], ids[1], ids[3]]
    w.pause("two")
    sp.start(ids[0])
    sp.exit(ids[0], 0)
    w.turn()
    assert ids[2] not in {r.job_id for r in sp.reqs.values()}
    w2 = Worker(q, w.settings, FakeSpawner(), clocks=clocks, log_path=w.log_path, instance="t2")
    assert w2.lanes.paused == {"two"}  # survives a restart
    w.resume("two")
    w.turn()
    assert ids[2] in {r.job_id for r in sp.reqs.values()}


def test_cancel_of_a_running_job_ends_its_tree_and_leaves_it_cancelled(env):
    w, q, sp = env()
    a = q.enqueue(["sleep"])
    w.turn()
    sp.start(a)
    w.cancel(a)
    assert sp.kills == [(sp.key_of(a), "cancelled")]
    with pytest.raises(Exception, match="still being stopped"):
        w.retry(a)
    sp.exit(a, -15, "cancelled")
    w.turn()
    assert q.get(a).state == "cancelled"
    w.retry(a)
    assert q.get(a).state == "queued"


def test_shutdown_interrupts_and_requeues_refunded_even_a_run_not_yet_started(env):
    w, q, sp = env(lanes={"default": 2})
    a, b = q.enqueue(["a"]), q.enqueue(["b"])
    w.turn()
    sp.start(a)  # b never reports a start (still ending an old process, say)

    async def go() -> None:
        task = asyncio.ensure_future(w.shutdown())
        await asyncio.sleep(0)
        assert sorted(r for _, r in sp.kills) == ["interrupted", "interrupted"]
        sp.exit(a, -15, "interrupted")
        sp.exit(b, None, "interrupted")
        await asyncio.wait_for(task, 5)

    asyncio.run(go())
    for jid in (a, b):
        job = q.get(jid)
        assert (job.state, job.attempts) == ("queued", 0)
        assert [e.kind for e in q.events(jid)][-1] == "interrupted"


def test_worker_name_is_built_and_recognised_in_one_place():
    name = worker_name("abcd", host="box", pid=42)
    assert name == "sloth-daemon:box:42:abcd"
    assert is_daemon_on_host(name, host="box") and not is_daemon_on_host(name, host="other")
    assert not is_daemon_on_host(None, host="box") and not is_daemon_on_host("lib-worker", host="box")


def test_default_concurrency_applies_to_the_default_lane_too(env, tmp_path):
    """Issue 14, item 10: `default_concurrency = 3` in the config file, no
    [lanes] table: the `default` lane runs three at once, as any unlisted lane."""
    from sloth_daemon import config

    f = tmp_path / "config.toml"
    f.write_text("default_concurrency = 3\n")
    s = config.load(f)
    w, q, sp = env(default_concurrency=s.default_concurrency, lanes=s.lanes)
    ids = [q.enqueue(["sleep", "1"]) for _ in range(4)] + [q.enqueue(["x"], lane="other") for _ in range(4)]
    w.turn()
    started = sorted(r.job_id for r in sp.reqs.values())
    assert started == ids[:3] + ids[4:7]
    assert w.status()["lanes"]["default"]["concurrency"] == 3

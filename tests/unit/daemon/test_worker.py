"""The worker loop, driven in-process: a real queue file, ManualClocks, and a
fake spawner that records what it was asked and lets the test say when a
process started or ended. No subprocess, no sleeping."""

from __future__ import annotations

import asyncio
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from sloth_daemon.clock import ManualClocks
from sloth_daemon.config import Settings
from sloth_daemon.queue import Queue
from sloth_daemon.daemon.worker.spawner import Outcome, RunSink, SpawnRequest
from sloth_daemon.daemon.worker.runs import is_daemon_on_host, trust_until, worker_name
from sloth_daemon.daemon.worker.loop import Worker

LEASE = 30.0


@dataclass
class FakeSpawner:
    reqs: dict[str, SpawnRequest] = field(default_factory=dict)
    sinks: dict[str, RunSink] = field(default_factory=dict)
    kills: list[tuple[str, str]] = field(default_factory=list)
    kill_grace: list[float] = field(default_factory=list)
    trusted: list[tuple[str, float]] = field(default_factory=list)
    acked: list[str] = field(default_factory=list)
    unspawned: list[str] = field(default_factory=list)
    next_pid: int = 1000
    pipelines: bool = False  # holds a run behind another (SpawnRequest.after), as the keeper does

    def spawn(self, req: SpawnRequest, sink: RunSink) -> None:
        self.reqs[req.key] = req
        self.sinks[req.key] = sink

    def unspawn(self, key: str) -> None:
        self.unspawned.append(key)

    def kill(self, key: str, reason: str, grace_s: float) -> None:
        self.kills.append((key, reason))
        self.kill_grace.append(grace_s)

    def trust(self, items: list[tuple[str, float]]) -> None:
        self.trusted += items

    def ack(self, keys: list[str]) -> None:
        self.acked += keys

    def attach(self, key: str, sink: RunSink) -> None:
        self.sinks[key] = sink

    def tap(self, key: str) -> Any:
        return None

    # ------------------------------------------------ what the test plays
    def key_of(self, job_id: int) -> str:
        return next(k for k, r in reversed(self.reqs.items()) if r.job_id == job_id)

    def start(self, job_id: int) -> None:
        self.next_pid += 1
        self.sinks[self.key_of(job_id)].started(self.next_pid, {"pid": self.next_pid})

    def exit(self, job_id: int, code: int | None, reason: str | None = None, by: str | None = None) -> None:
        self.sinks[self.key_of(job_id)].exited(Outcome(code, reason, killed_by=by))

    def after_of(self, job_id: int) -> int | None:
        """The job the spawn of ``job_id`` was to wait for, if any."""
        after = self.reqs[self.key_of(job_id)].after
        return None if after is None else self.reqs[after].job_id


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
        q.on_side_change = w.side_change  # as the composition root does (daemon/main.py)
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
    assert req.full_env()["SLOTH_JOB_TOKEN"] == req.key and req.full_env()["SLOTH_JOB_ID"] == str(a)
    sp.start(a)
    assert q.get(a).runner is None  # a short job's process is written with its outcome
    sp.exit(a, 0)
    assert q.get(a).state == "running"  # an exit is recorded by the next turn, not inside the callback
    w.turn()
    job = q.get(a)
    assert (job.state, job.exit_code, job.message) == ("done", 0, "exit 0")
    assert job.runner["pid"] == sp.next_pid and job.runner["worker"] == w.name
    assert [e.kind for e in q.events(a)] == ["claimed", "started", "done"]  # one transaction for the last two
    assert not w.running


def test_the_jobs_of_one_add_reach_the_spawner_with_one_environment_object(env):
    """The keeper client names an environment by its object (env_ref): the
    jobs of one `sloth add` must arrive as one object, or every spawn
    request carries the whole environment again (it did: a per-job copy)."""
    w, q, sp = env(default_concurrency=3)
    ids = q.enqueue_many([{"command": ["true"], "env": {"A": "1", "B": "2"}} for _ in range(3)])
    other = q.enqueue(["true"], env={"A": "1", "B": "3"})
    w.turn()
    envs = [sp.reqs[sp.key_of(i)].env for i in ids]
    assert envs[0] is envs[1] is envs[2] and envs[0]["B"] == "2"
    sp.exit(ids[0], 0)
    w.turn()
    assert sp.reqs[sp.key_of(other)].env["B"] == "3" and sp.reqs[sp.key_of(other)].env is not envs[0]


def test_a_process_that_runs_a_while_has_its_identity_written_by_a_turn(env, clocks):
    w, q, sp = env()
    a = q.enqueue(["sleep"])
    w.turn()
    sp.start(a)
    w.turn()
    assert q.get(a).runner is None
    assert w.next_wake_s() == pytest.approx(1.0)  # RECORD_RUNNER_AFTER_S
    clocks.advance(1.0)
    w.turn()
    assert q.get(a).runner["pid"] == sp.next_pid
    assert [e.kind for e in q.events(a)] == ["claimed", "started"]


def test_outcomes_that_end_together_share_one_fsync_and_are_told_only_once_durable(env, monkeypatch):
    w, q, sp = env(lanes={"default": 3})
    ids = [q.enqueue(["x"]) for _ in range(3)]
    w.turn()
    told: list[int] = []
    w.signals.on_change = lambda job: told.append(job.id) if job.state == "done" else None
    durable: list[bool] = []
    complete = q.complete

    def spy(*a, **k):
        durable.append(k["durable"])
        assert not told, "a watcher heard of an outcome before it was durable"
        return complete(*a, **k)
    monkeypatch.setattr(q, "complete", spy)
    complete_many = q.complete_many

    def spy_many(items, **k):  # the turn's plain completions in one call (recording.py)
        durable.extend([k["durable"]] * len(items))
        assert not told, "a watcher heard of an outcome before it was durable"
        return complete_many(items, **k)
    monkeypatch.setattr(q, "complete_many", spy_many)
    syncs: list[int] = []
    sync = q.sync
    monkeypatch.setattr(q, "sync", lambda: (syncs.append(len(told)), sync())[1])
    for jid in ids:
        sp.start(jid)
        sp.exit(jid, 0)
    w.turn()
    # one transaction for the turn (recording.py), then one fsync, then told
    assert durable == [False, False, False] and syncs == [0] and sorted(told) == ids
    assert sorted(sp.acked) == sorted(sp.key_of(j) for j in ids)


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


def test_a_lanes_free_slots_are_claimed_in_one_batch_and_a_lone_job_pays_for_no_batch(env):
    """A burst fills a lane's free slots with one claim and one batch
    (claim_many: one statement on PostgreSQL), not a claim per slot; a lone
    job after a batch that came back short is claimed alone (no statement
    for nothing), and a second claim in the lane in one turn batches again."""
    w, q, sp = env(lanes={"default": 4})
    batches: list[int] = []
    many = q.claim_many
    q.claim_many = lambda *x, **k: batches.append(x[1]) or many(*x, **k)  # type: ignore[method-assign]
    ids = [q.enqueue(["true"]) for _ in range(6)]
    w.turn()
    assert [r.job_id for r in sp.reqs.values()] == ids[:4] and batches == [3]
    for j in ids[:4]:
        sp.start(j)
        sp.exit(j, 0)
    w.signals.look = True
    w.turn()
    assert [r.job_id for r in sp.reqs.values()][4:] == ids[4:] and batches == [3, 3]  # came back short: dry
    for j in ids[4:]:
        sp.start(j)
        sp.exit(j, 0)
    lone = q.enqueue(["true"])
    w.signals.look = True
    w.turn()
    assert [r.job_id for r in sp.reqs.values()][-1] == lone and batches == [3, 3]  # no batch for a lone job
    sp.start(lone)
    sp.exit(lone, 0)
    more = [q.enqueue(["true"]) for _ in range(5)]
    w.signals.look = True
    w.turn()
    assert [r.job_id for r in sp.reqs.values()][-4:] == more[:4] and batches == [3, 3, 2]


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
    w.turn()
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
    assert sp.trusted == [(sp.key_of(a), trust_until(clocks.read(), LEASE))]
    assert sp.trusted[0][1] < clocks.total + LEASE  # the trust ends before the lease could


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
    assert [e.kind for e in evs] == ["claimed", "started", "resumed"]  # in the order it happened
    assert "stalled" in evs[2].message
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
    assert w.clock.last_jump and w.clock.last_jump["kind"] == "slept"
    assert sp.key_of(delayed)  # due at once after the sleep, not an hour of awake time later
    assert q.get(a).state == "running" and len(sp.reqs) == 2


def test_a_resume_whose_renewal_fails_is_said_by_the_renewal_that_succeeds(env, clocks):
    """The machine woke with its queue unreachable (a shared queue's network
    not back yet): the renewal after the sleep failed, and the heartbeat that
    later succeeded wrote no `resumed` event, so the history never said the
    run slept (test_several_machines, now and then in CI)."""
    from sloth_daemon.errors import StorageError

    w, q, sp = env()
    a = q.enqueue(["long"])
    w.turn()
    sp.start(a)
    renew = q.renew_after_resume

    def unreachable(*x, **k):
        raise StorageError("cannot reach the queue")

    q.renew_after_resume = unreachable  # type: ignore[method-assign]
    clocks.suspend(3600)
    w.clock_changed()
    w.turn()
    assert "resumed" not in [e.kind for e in q.events(a)]
    q.renew_after_resume = renew  # type: ignore[method-assign]  # the network is back
    assert w.leases.renew_soon(a)  # the next renewal, now (no clock moved: no stall to see)
    w.turn()
    said = [e.message for e in q.events(a) if e.kind == "resumed"]
    assert len(said) == 1 and "slept" in said[0] and q.get(a).state == "running", said
    assert w.leases.renew_soon(a)
    w.turn()
    assert [e.kind for e in q.events(a)].count("resumed") == 1  # said once


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
    w.signals.wake()  # as the socket's add does
    clocks.suspend(3600)  # no timerfd, and the awake clock says no clock check is due yet
    w.turn()
    assert calls == ["heartbeat", "claim"]
    assert "reclaimed" not in [e.kind for e in q.events(a)]  # kept, not reclaimed


def test_a_turn_for_a_deadline_alone_runs_no_claim_queries_yet_finds_foreign_work_at_the_clock_check(env, clocks):
    """Turns woken by a heartbeat, an fsync or a start only look for work
    when something may have changed (a wake, a due time, a requeued
    result); a job another process put in the file is still found, at the
    next clock check."""
    w, q, sp = env()
    w.turn()
    looked: list[int] = []
    nd = q.next_due_at
    q.next_due_at = lambda *x, **k: looked.append(1) or nd(*x, **k)  # type: ignore[method-assign]
    w.turn()
    assert looked == []
    foreign = q.enqueue(["x"])  # no wake: another process's write
    w.turn()
    assert looked == [] and not sp.reqs
    clocks.advance(5.0)  # clock_check_s
    w.turn()
    assert looked and sp.key_of(foreign)


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
    w.actions.pause("two")
    sp.start(ids[0])
    sp.exit(ids[0], 0)
    w.turn()
    assert ids[2] not in {r.job_id for r in sp.reqs.values()}
    w2 = Worker(q, w.settings, FakeSpawner(), clocks=clocks, log_path=w.log_path, instance="t2")
    assert w2.lanes.paused == {"two"}  # survives a restart
    w.actions.resume("two")
    w.turn()
    assert ids[2] in {r.job_id for r in sp.reqs.values()}


def test_cancel_of_a_running_job_ends_its_tree_and_leaves_it_cancelled(env):
    w, q, sp = env()
    a = q.enqueue(["sleep"])
    w.turn()
    sp.start(a)
    asyncio.run(w.actions.cancel(a))
    assert sp.kills == [(sp.key_of(a), "cancelled")]
    with pytest.raises(Exception, match="still being stopped"):
        w.actions.retry(a, kill_grace_s=w.settings.kill_grace_s)
    sp.exit(a, -15, "cancelled")
    w.turn()
    assert q.get(a).state == "cancelled"
    w.actions.retry(a, kill_grace_s=w.settings.kill_grace_s)
    assert q.get(a).state == "queued"


def test_shutdown_interrupts_and_requeues_refunded_and_gives_back_a_run_not_yet_started(env):
    w, q, sp = env(lanes={"default": 2})
    a, b = q.enqueue(["a"]), q.enqueue(["b"])
    w.turn()
    sp.start(a)  # b never reports a start (still ending an old process, say)

    async def go() -> None:
        task = asyncio.ensure_future(w.shutdown(keep_jobs=False))
        await asyncio.sleep(0)
        assert sp.unspawned == [sp.key_of(b)] and not sp.kills  # first: what became of b?
        sp.sinks[sp.key_of(b)].taken_back()  # never started (KeeperSpawner drops such a spawn unsent)
        await asyncio.sleep(0.01)
        assert sp.kills == [(sp.key_of(a), "interrupted")]
        sp.exit(a, -15, "interrupted", "request")
        await asyncio.wait_for(task, 5)

    asyncio.run(go())
    job = q.get(a)
    assert (job.state, job.attempts, job.tries) == ("queued", 1, 0)
    assert [e.kind for e in q.events(a)][-1] == "interrupted"
    assert (q.get(b).state, q.get(b).attempts, [e.kind for e in q.events(b)]) == ("queued", 0, [])
    assert sorted(sp.acked) == sorted(sp.key_of(j) for j in (a, b))  # the keeper may forget them


def test_worker_name_is_built_and_recognised_in_one_place():
    name = worker_name("abcd", host="box", pid=42)
    assert name == "sloth-daemon:box:42:abcd"
    assert is_daemon_on_host(name, host="box") and not is_daemon_on_host(name, host="other")
    assert not is_daemon_on_host(None, host="box") and not is_daemon_on_host("lib-worker", host="box")


# ---------------------------------------------- runs that outlive the daemon
def _claimed_by_old_daemon(q, *cmds):
    """Jobs claimed by a previous daemon of this host (it died; its runs may live on)."""
    import socket

    ids = [q.enqueue(list(c)) for c in cmds]
    return [q.claim(f"sloth-daemon:{socket.gethostname()}:1:old") for _ in ids]


def _held(job, state="running", outcome=None, pid=77):
    return {"key": job.token, "job_id": job.id, "attempt": job.attempts, "pid": pid,
            "state": state, "outcome": outcome}


def test_adopts_what_the_keeper_still_holds_running_or_ended(env, clocks):
    w, q, sp = env()
    run_on, ended = _claimed_by_old_daemon(q, ["long"], ["quick"])
    held = [_held(run_on), _held(ended, "exited", {"returncode": 0, "ended_at": clocks.wall - 5})]
    asyncio.run(w.reconcile(held))
    for job in (run_on, ended):
        assert [e.kind for e in q.events(job.id)][-1] == "adopted"
        assert q.get(job.id).worker == w.name
    assert sp.trusted and sp.trusted[0][0] == run_on.token  # trusted again: it keeps running
    assert not sp.reqs  # nothing started anew
    w.turn()
    assert q.get(ended.id).state == "done" and q.get(ended.id).attempts == 1  # recorded, not re-run
    assert sp.acked == [ended.token]
    assert q.get(run_on.id).state == "running" and w.running[run_on.id].adopted
    sp.sinks[run_on.token].exited(Outcome(3))
    w.turn()
    assert (q.get(run_on.id).state, q.get(run_on.id).message) == ("queued", "exit 3")


def test_runs_the_keeper_holds_that_are_not_ours_are_ended_or_forgotten(env):
    w, q, sp = env()
    cancelled, gone = _claimed_by_old_daemon(q, ["a"], ["b"])
    q.cancel(cancelled.id)
    q.cancel(gone.id)
    asyncio.run(w.reconcile([_held(cancelled), _held(gone, "exited", {"returncode": 0})]))
    assert sp.kills == [(cancelled.token, "lease lost")]
    assert sp.acked == [gone.token]
    assert not w.running


def test_a_job_no_keeper_knows_is_given_back_without_spending_a_try(env, clocks):
    w, q, sp = env(max_attempts=1)
    (lost,) = _claimed_by_old_daemon(q, ["sleep", "9"])
    asyncio.run(w.reconcile([]))
    ev = q.events(lost.id)[-1]
    assert ev.kind == "abandoned" and "supervision was lost" in ev.message and "not counted" in ev.message
    w.turn()
    assert sp.key_of(lost.id)  # re-run at once, although max_attempts is 1
    assert (q.get(lost.id).attempts, q.get(lost.id).tries) == (2, 1)


def test_a_keeper_lost_mid_run_gives_its_runs_back_and_keeps_recorded_ends(env):
    w, q, sp = env(lanes={"default": 2})
    a, b = q.enqueue(["a"]), q.enqueue(["b"])
    w.turn()
    sp.start(a)
    sp.start(b)
    sp.exit(b, 0)  # heard before the keeper died: recorded as it ended
    asyncio.run(w.reconcile([]))  # a new keeper answered, knowing nothing
    assert [e.kind for e in q.events(a)][-1] == "abandoned" and a not in w.running
    w.turn()
    assert q.get(b).state == "done"


def test_frozen_after_a_sleep_is_renewed_and_thawed_or_ended_if_the_lease_is_gone(env, clocks):
    w, q, sp = env(lanes={"default": 2})
    a, b = q.enqueue(["a"]), q.enqueue(["b"])
    w.turn()
    sp.start(a)
    sp.start(b)
    q.cancel(b)  # someone else's doing while we slept
    clocks.suspend(600)
    sp.sinks[sp.key_of(a)].frozen("slept past its trust")
    sp.sinks[sp.key_of(b)].frozen("slept past its trust")
    assert [e.kind for e in q.events(a)][-1] == "resumed"
    assert sp.trusted[-1] == (sp.key_of(a), trust_until(clocks.read(), LEASE))  # thaws it
    assert sp.kills == [(sp.key_of(b), "fenced: its lease was lost while the machine slept")]


def test_a_fenced_run_is_given_back_not_failed(env):
    w, q, sp = env(max_attempts=1)
    a = q.enqueue(["a"])
    w.turn()
    sp.start(a)
    sp.sinks[sp.key_of(a)].exited(Outcome(-9, "fenced: no lease renewal for 29s", killed_by="fence"))
    w.turn()
    job = q.get(a)
    assert (job.state, job.tries) == ("queued", 0)
    assert [e.kind for e in q.events(a)][-1] == "fenced"


def test_fence_refunds_are_bounded_like_crash_refunds_so_a_lease_too_short_cannot_loop(env, clocks):
    """Every run fenced (a lease its job cannot keep): the first
    MAX_CRASH_REFUNDS fences give their try back, later ones count, with a
    backoff, until the job fails -- instead of running again without end."""
    from sloth_daemon.backends.rules import MAX_CRASH_REFUNDS

    w, q, sp = env(max_attempts=2, backoff_cap_s=60.0)
    a = q.enqueue(["a"])
    kinds = []
    for run in range(1, 20):
        w.turn()
        if q.get(a).state != "running":
            break
        sp.start(a)
        sp.sinks[sp.key_of(a)].exited(Outcome(-15, "fenced: no lease renewal for 3s", killed_by="fence"))
        w.turn()
        kinds.append(q.events(a)[-1].kind)
        clocks.advance(120)  # past any backoff
    job = q.get(a)
    assert (job.state, job.attempts, job.tries, job.refunds) == ("failed", MAX_CRASH_REFUNDS + 2, 2, MAX_CRASH_REFUNDS)
    assert kinds == ["fenced"] * (MAX_CRASH_REFUNDS + 1) + ["failed"]
    messages = [e.message for e in q.events(a) if e.kind in ("fenced", "failed")]
    assert f"not counted as a try (1 of {MAX_CRASH_REFUNDS} forgiven)" in messages[0]
    assert "counted as a try (3 crashes or fences already forgiven); retry 2/2 in 2s" in messages[-2]
    assert messages[-1].endswith("no attempts left")
    q.retry(a)
    assert (q.get(a).tries, q.get(a).refunds) == (0, 0)  # a user retry forgives again


def test_an_outcome_the_database_refuses_is_kept_and_retried_never_rerun(env, clocks, monkeypatch):
    from sloth_daemon.errors import StorageError

    w, q, sp = env()
    a = q.enqueue(["a"])
    w.turn()
    sp.start(a)
    sp.exit(a, 0)
    real = q.complete
    monkeypatch.setattr(q, "complete", lambda *x, **k: (_ for _ in ()).throw(StorageError("disk full")))
    w.turn()
    assert q.get(a).state == "running" and not sp.acked
    st = w.status()
    assert st["pending_outcomes"] == [{"id": a, "attempt": 1, "tries": 1, "error": "disk full"}]
    clocks.advance(LEASE * 2)  # its lease runs out while the disk is full
    w.turn()
    assert len(sp.reqs) == 1  # never re-issued to ourselves
    monkeypatch.setattr(q, "complete", real)
    clocks.advance(60)
    w.turn()
    assert q.get(a).state == "done" and q.get(a).attempts == 1 and sp.acked == [sp.key_of(a)]
    assert w.status()["pending_outcomes"] == []


def test_a_turn_whose_one_commit_fails_sends_no_claim_and_keeps_its_outcomes(env, clocks, monkeypatch):
    """A turn's claims and outcomes are one transaction (recording.py). If
    its commit fails (a full disk), none of it is in the queue: the job it
    claimed must not be started (nothing sent to the spawner, still queued),
    the outcome it wrote is kept and written again later, and only then told."""
    from sloth_daemon.backends.sqlite import db

    w, q, sp = env()
    a, b = q.enqueue(["a"]), q.enqueue(["b"])
    w.turn()
    sp.start(a)
    sp.exit(a, 0)
    real = db.GuardedConnection.execute
    fail = [1]

    def execute(self, sql, *args):
        if sql == "COMMIT" and fail[0]:
            fail[0] -= 1
            raise sqlite3.OperationalError("database or disk is full")
        return real(self, sql, *args)
    monkeypatch.setattr(db.GuardedConnection, "execute", execute)
    w.turn()  # claims b and records a's outcome: one commit, refused
    assert not fail[0] and list(sp.reqs.values())[-1].job_id == a  # b was not sent
    assert (q.get(b).state, q.get(b).attempts, q.get(a).state) == ("queued", 0, "running")
    assert not sp.acked and [o["id"] for o in w.status()["pending_outcomes"]] == [a]
    assert b not in w.running
    clocks.advance(60)
    w.turn()
    assert q.get(a).state == "done" and sp.acked == [sp.key_of(a)]
    assert q.get(b).state == "running" and sp.key_of(b) in sp.reqs and q.get(b).attempts == 1


def test_a_turn_that_breaks_halfway_leaves_no_claim_behind_it(env, clocks, monkeypatch):
    """A bug in the middle of a turn rolls its transaction back: a job it
    had claimed is neither running in the queue nor held by the worker
    (else its lane's slot would stay taken by a run nobody started)."""
    w, q, sp = env()
    a = q.enqueue(["a"])
    monkeypatch.setattr(w.recorder, "write_outcomes", lambda awake, **kw: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        w.turn()
    assert q.get(a).state == "queued" and not w.running and not sp.reqs
    monkeypatch.undo()
    clocks.advance(1.0)  # claims wait a moment after a failed turn
    w.turn()
    assert q.get(a).state == "running" and sp.key_of(a)


def two_ended(env):
    """A worker with two slots whose two runs have just ended, unrecorded."""
    w, q, sp = env(default_concurrency=2)
    a, b = q.enqueue(["a"]), q.enqueue(["b"])
    w.turn()
    for j in (a, b):
        sp.start(j)
        sp.exit(j, 0)
    return w, q, sp, a, b


def test_a_turn_that_breaks_after_writing_an_outcome_never_acks_it(env, clocks, monkeypatch):
    """A bug after one outcome was written in the turn's transaction rolls
    it back: that outcome must be written again, not acknowledged to the
    keeper as if it were in the queue (found in review)."""
    from sloth_daemon.daemon.worker import outcomes

    w, q, sp, a, b = two_ended(env)
    real, calls = outcomes.record, []

    def record(queue, run, outcome, **kw):
        calls.append(run.job.id)
        if len(calls) == 2:
            raise RuntimeError("a bug in the second outcome")
        return real(queue, run, outcome, **kw)
    monkeypatch.setattr(outcomes, "record", record)
    monkeypatch.setattr(outcomes, "plain_completion", lambda run, outcome: None)  # each by record(), in turn
    with pytest.raises(RuntimeError):
        w.turn()
    assert q.get(calls[0]).state == "running" and not sp.acked
    monkeypatch.undo()
    clocks.advance(60)
    w.turn()
    assert (q.get(a).state, q.get(b).state) == ("done", "done") and sorted(sp.acked) == sorted(
        [sp.key_of(a), sp.key_of(b)])


def test_a_turn_whose_batch_of_outcomes_breaks_after_writing_acks_none_and_writes_them_again(env, clocks, monkeypatch):
    """The turn's plain completions go in one complete_many: a bug after
    it wrote them rolls the turn back whole; none is acknowledged to the
    keeper, and the next turn writes them all."""
    w, q, sp, a, b = two_ended(env)
    real = q.complete_many

    def broken(items, **kw):
        real(items, **kw)
        raise RuntimeError("a bug after the batch")
    monkeypatch.setattr(q, "complete_many", broken)
    with pytest.raises(RuntimeError):
        w.turn()
    assert (q.get(a).state, q.get(b).state) == ("running", "running") and not sp.acked
    monkeypatch.undo()
    clocks.advance(60)
    w.turn()
    assert (q.get(a).state, q.get(b).state) == ("done", "done") and sorted(sp.acked) == sorted(
        [sp.key_of(a), sp.key_of(b)])


def test_a_failed_fsync_after_a_turns_commit_keeps_its_claims_and_tells_nothing_yet(env, clocks, monkeypatch):
    """The turn's commit is in; only the fsync that makes its outcomes
    durable failed: the claim stands (its job is started), the outcome waits
    untold and is made durable by the next try (found in review: the whole
    turn was undone, leaving a claimed job nobody ran)."""
    from sloth_daemon.errors import StorageError

    w, q, sp = env()
    a, b = q.enqueue(["a"]), q.enqueue(["b"])
    w.turn()
    sp.start(a)
    sp.exit(a, 0)
    real, fail = q.sync, [1]

    def sync():
        if fail[0]:
            fail[0] -= 1
            raise StorageError("cannot make the queue's writes durable: EIO")
        return real()
    monkeypatch.setattr(q, "sync", sync)
    w.turn()
    assert q.get(b).state == "running" and b in w.running and sp.key_of(b) in sp.reqs
    assert q.get(a).state == "done" and not sp.acked  # written, not yet durable: untold
    clocks.advance(60)
    w.turn()
    assert sp.acked == [sp.key_of(a)]


def test_an_outcome_whose_lease_was_lost_does_not_make_the_others_durable(env, clocks, monkeypatch):
    """The last outcome of a batch found its lease gone (nothing written):
    the ones before it still need their fsync before they are told (found
    in review, older than the one-transaction turn)."""
    w, q, sp, a, b = two_ended(env)
    q.cancel(b)  # behind the worker's back: b's write is refused (lease lost)
    syncs = []
    real = q.sync
    monkeypatch.setattr(q, "sync", lambda: (syncs.append(1), real())[1])
    w.turn()
    assert sp.key_of(a) in sp.acked and syncs


# ------------------------------------------------------------ issue 9
def test_a_dependent_queued_by_a_result_is_claimed_in_the_same_turn(env):
    w, q, sp = env()
    changed: list[tuple[int, str]] = []
    w.signals.on_change = lambda job: changed.append((job.id, job.state.value))
    a = q.enqueue(["a"])
    (b,) = q.enqueue_many([{"command": ["b"], "after": [a]}])
    w.turn()
    sp.start(a)
    sp.exit(a, 0)
    w.turn()  # records a's result: b is queued (and the worker told and woken) ...
    assert (b, "queued") in changed and w.signals.event.is_set()
    w.turn()  # ... and the next turn, at once, starts it
    assert sp.key_of(b)


def test_exit_127_is_not_retried_but_a_listed_code_is(env):
    w, q, sp = env(max_attempts=3)
    a = q.enqueue(["typo"])
    (b,) = q.enqueue_many([{"command": ["flaky"], "no_retry_exit": [], "lane": "b"}])
    w.turn()
    sp.start(a)
    sp.exit(a, 127)
    sp.start(b)
    sp.exit(b, 127)
    w.turn()
    assert (q.get(a).state.value, q.get(a).message) == ("failed", "exit 127 (command not found)")
    assert "not retried" in q.events(a)[-1].message
    assert q.get(b).state.value == "queued"  # no_retry_exit: [] retries everything


def test_cancel_many_and_kill_end_running_trees_kill_now_without_grace(env):
    w, q, sp = env(lanes={"default": 3})
    a, b, c = q.enqueue(["a"]), q.enqueue(["b"]), q.enqueue(["c"])
    w.turn()
    for j in (a, b, c):
        sp.start(j)
    res = asyncio.run(w.actions.cancel_many([a]))
    assert [j.id for j in res.jobs] == [a] and sp.kills == [(sp.key_of(a), "cancelled")]
    res = asyncio.run(w.actions.kill([b, c], now=True))
    assert sorted(j.id for j in res.jobs) == [b, c]
    assert [r for _, r in sp.kills] == ["cancelled", "killed", "killed"]
    assert sp.kill_grace[-1] == 0.0 and sp.kill_grace[0] == w.settings.kill_grace_s
    sp.exit(b, -9, "killed")
    w.turn()
    assert q.get(b).state.value == "cancelled" and q.get(b).message == "killed by user"
    queued = q.enqueue(["q"])
    assert asyncio.run(w.actions.kill([queued])).skipped == [(queued, f"job {queued} is queued, not running")]


def test_lane_set_takes_effect_at_once_running_jobs_untouched_and_survives_a_restart(env, clocks):
    w, q, sp = env()
    ids = [q.enqueue([str(i)], lane="v") for i in range(4)]
    w.turn()
    assert len(sp.reqs) == 1
    sp.start(ids[0])
    w.set_lane("v", 3)
    w.turn()
    assert len(sp.reqs) == 3 and not sp.kills
    w.set_lane("v", 1)  # lowering never kills: the two extra runs finish
    w.turn()
    assert len(sp.reqs) == 3 and not sp.kills
    w2 = Worker(q, w.settings, FakeSpawner(), clocks=clocks, log_path=w.log_path, instance="t2")
    assert w2.lanes.concurrency("v") == 1
    w.set_lane("v", 0)  # pauses, keeps the number
    assert w.lanes.is_paused("v") and w.lanes.concurrency("v") == 1


def test_apply_settings_changes_defaults_and_lanes_now(env):
    w, q, sp = env()
    notes = w.apply_settings(Settings(lease_s=LEASE, max_attempts=7, lanes={"default": 2}))
    assert notes == [] and w.lanes.concurrency("default") == 2
    assert q.get(q.enqueue(["x"])).max_attempts == 7


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


# ----------------------------------------------- group commit with a delay
def _delayed_commits(tmp_path, clocks) -> tuple[Queue, FakeSpawner, Worker, list[int]]:
    """A worker whose group commit waits 5 ms, and the ids of the jobs told done (in order)."""
    q = Queue(tmp_path / "q.db", clocks, lease_s=LEASE)
    sp = FakeSpawner()
    w = Worker(q, Settings(lease_s=LEASE), sp, clocks=clocks, log_path=lambda j, a: tmp_path / f"{j}.{a}.log",
               instance="t1", commit_delay_s=0.005)
    told: list[int] = []
    w.signals.on_change = lambda job: told.append(job.id) if job.state.value == "done" else None
    return q, sp, w, told


def test_outcomes_share_a_delayed_fsync_and_are_told_only_after_it(tmp_path, clocks, monkeypatch):
    """The daemon's group commit: an outcome is written at once (no fsync),
    the lane's next job starts in the same turn, and nobody hears of the
    result (no ack to the keeper, no watcher) until the fsync, up to
    commit_delay_s later, that the outcomes ending meanwhile share (the
    first outcome after a quiet spell begins no burst: synced at once). A
    sync that fails is tried again later; the outcome stays untold until then."""
    from sloth_daemon.errors import StorageError

    q, sp, w, told = _delayed_commits(tmp_path, clocks)
    syncs: list[str] = []
    real_sync = q.sync

    def sync() -> None:
        syncs.append("fail" if len(syncs) == 2 else "ok")
        if syncs[-1] == "fail":
            raise StorageError("EIO")
        real_sync()

    monkeypatch.setattr(q, "sync", sync)
    first, a, b, c = q.enqueue(["first"]), q.enqueue(["a"]), q.enqueue(["b"]), q.enqueue(["c"])
    w.turn()
    sp.start(first)
    sp.exit(first, 0)
    w.turn()  # the first outcome after a quiet spell begins no burst: synced at once (a claimed meanwhile)
    assert syncs == ["ok"] and told == [first]
    told.clear()
    sp.acked.clear()
    sp.start(a)
    sp.exit(a, 0)
    w.turn()  # a's outcome written; b claimed and started in the same turn; no fsync yet
    assert q.get(a).state.value == "done" and sp.key_of(b) and syncs == ["ok"] and not sp.acked and not told
    assert w.next_wake_s() == pytest.approx(0.005)
    sp.start(b)
    sp.exit(b, 0)
    w.turn()  # b's outcome too, within the delay: still one fsync to come
    assert syncs == ["ok"] and not told
    clocks.advance(0.005)
    w.turn()
    assert syncs == ["ok", "ok"] and sp.acked == [sp.key_of(a), sp.key_of(b)] and told == [a, b]  # one fsync, both
    sp.start(c)
    sp.exit(c, 0)
    w.turn()
    clocks.advance(0.005)
    w.turn()  # this fsync fails: c stays untold
    assert syncs == ["ok", "ok", "fail"] and told == [a, b] and sp.key_of(c) not in sp.acked
    clocks.advance(0.01)
    w.turn()  # alone now, but a failed fsync waits its retry time all the same
    assert syncs == ["ok", "ok", "fail"]
    clocks.advance(1.0)
    w.turn()
    assert syncs == ["ok", "ok", "fail", "ok"] and told == [a, b, c] and sp.key_of(c) in sp.acked
    q.close()


def test_a_lone_outcome_is_synced_and_told_in_its_own_turn(tmp_path, clocks, monkeypatch):
    """Nothing else held (no run running, claimed or pending) can end within
    the delay to share the fsync: `add --wait -- true` hears of its end at
    once, not commit_delay_s later (issue 30). With another run held, the
    delay stands (the test above)."""
    q, sp, w, told = _delayed_commits(tmp_path, clocks)
    syncs: list[int] = []
    real_sync = q.sync
    monkeypatch.setattr(q, "sync", lambda: (syncs.append(1), real_sync())[1])
    a = q.enqueue(["a"])
    w.turn()
    sp.start(a)
    sp.exit(a, 0)
    w.turn()  # no clock advanced: the same turn that wrote it synced it
    assert syncs == [1] and told == [a] and sp.acked == [sp.key_of(a)]
    assert w.recorder.commits.due_at is None
    # a long job runs (held: it could end any time), a short one ends a while after the last outcome:
    # it began no burst, so it is synced at once too
    w.set_lane("default", 2)
    long, short = q.enqueue(["sleep", "600"]), q.enqueue(["true"])
    w.turn()
    sp.start(long)
    sp.start(short)
    clocks.advance(1.0)
    sp.exit(short, 0)
    w.turn()
    assert syncs == [1, 1] and told == [a, short]
    q.close()


# ------------------------------------------- a run's history, in the order it happened (issue 28, item 9)
class PausingSpawner(FakeSpawner):
    """The keeper's pause and resume, answered when the test says (``answer``)."""

    def __init__(self) -> None:
        super().__init__()
        self.asked: asyncio.Future[dict[str, Any]] | None = None

    async def pause(self, keys: list[str], *, resume: bool = False) -> dict[str, Any]:
        self.asked = asyncio.get_running_loop().create_future()
        return await self.asked

    def answer(self, key: str, resume: bool) -> None:
        assert self.asked is not None
        self.asked.set_result({"runs": {key: {"resumed" if resume else "paused": True, "processes": 1,
                                              "paused_s": 2.5}}})


def test_a_pause_in_the_first_second_reads_after_started_and_a_resume_that_meets_the_end_before_done(
        tmp_path, clocks):
    """The keeper continues the tree and the job ends at once: its exit
    reaches the worker (and a turn) before the resume's answer reaches the
    pauser. Both the `continued` event and the order are kept."""
    async def play() -> list[str]:
        sp = PausingSpawner()
        s = Settings(lease_s=LEASE, clock_check_s=5.0)
        q = Queue(tmp_path / "q.db", clocks, lease_s=s.lease_s, max_attempts=s.max_attempts)
        w = Worker(q, s, sp, clocks=clocks, log_path=lambda j, a: tmp_path / f"{j}.{a}.log", instance="t1")
        try:
            a = q.enqueue(["sleep", "2"])
            w.turn()
            sp.start(a)  # its identity (the `started` event) is written later by a turn ...
            clocks.advance(0.2)
            pausing = asyncio.ensure_future(w.pause_jobs([a]))  # ... but a pause comes first
            await asyncio.sleep(0)
            sp.answer(sp.key_of(a), False)
            assert [j.id for j in (await pausing).jobs] == [a]
            clocks.advance(2.5)
            resuming = asyncio.ensure_future(w.pause_jobs([a], resume=True))
            await asyncio.sleep(0)
            sp.exit(a, 0)  # continued, it ended at once: the news is in before the answer
            w.turn()
            sp.answer(sp.key_of(a), True)
            assert [j.id for j in (await resuming).jobs] == [a]
            w.turn()
            assert q.get(a).state == "done"
            return [e.kind for e in q.events(a)]
        finally:
            q.close()

    assert asyncio.run(play()) == ["claimed", "started", "paused", "continued", "done"]


def test_a_note_from_the_keeper_after_the_first_second_is_written_after_started(env, clocks):
    w, q, sp = env()
    a = q.enqueue(["sleep", "2"])
    w.turn()
    sp.start(a)
    sp.sinks[sp.key_of(a)].noted("keep-awake", "keep-awake unavailable: no bus")
    clocks.advance(0.1)
    sp.exit(a, 0)
    w.turn()
    assert [e.kind for e in q.events(a)] == ["claimed", "started", "keep-awake", "done"]


def test_an_adopted_run_whose_start_was_never_written_reads_started_before_adopted(env, clocks):
    """The daemon that started it died within its first second (before the
    `started` event is written): the next daemon writes it from the
    keeper's word, at the time it happened, before `adopted`."""
    w, q, sp = env()
    run_on, ended = _claimed_by_old_daemon(q, ["long"], ["quick"])
    held = []
    for job, pid in ((run_on, 77), (ended, 78)):
        h = _held(job, pid=pid)
        h["identity"] = {"pid": pid, "start": 5.0 + pid, "boot_id": "b", "exact": True, "started_at": clocks.wall - 1}
        held.append(h)
    held[1].update(state="exited", outcome={"returncode": 0, "ended_at": clocks.wall - 0.5})
    asyncio.run(w.reconcile(held))
    w.turn()
    for job in (run_on, ended):
        assert [e.kind for e in q.events(job.id)][:3] == ["claimed", "started", "adopted"]
        assert q.get(job.id).runner["pid"] in (77, 78)
    assert q.get(ended.id).state == "done"
    assert [e.kind for e in q.events(ended.id)].count("started") == 1


def test_a_note_for_a_run_whose_lease_just_ended_is_recorded_against_its_attempt(env):
    """A cancel ends the lease at once; the keeper's last word on the run
    (its keep-awake, said as the process ends) comes after: it is history
    of that attempt, written, not dropped."""
    w, q, sp = env()
    a = q.enqueue(["sleep"])
    w.turn()
    sp.start(a)
    asyncio.run(w.actions.cancel(a))
    sp.sinks[sp.key_of(a)].noted("keep-awake", "kept awake by systemd-inhibit (pid 9) while it ran")
    sp.exit(a, -15, "cancelled")
    w.turn()
    events = q.events(a)
    assert [e.kind for e in events] == ["claimed", "started", "cancelled", "keep-awake", "ended"], events
    assert events[3].attempt == 1 and "while it ran" in events[3].message


def test_a_sleep_or_a_lost_keeper_in_a_runs_first_second_reads_after_its_start(env, clocks):
    """Every event of a run that started reads after `started`: the resume
    after a sleep, and the giving back when its keeper was lost."""
    w, q, sp = env(lanes={"default": 2})
    a, b = q.enqueue(["long"]), q.enqueue(["other"])
    w.turn()
    sp.start(a)
    sp.start(b)
    clocks.suspend(3600)
    w.clock_changed()
    w.turn()
    assert [e.kind for e in q.events(a)] == ["claimed", "started", "resumed"]
    asyncio.run(w.reconcile([]))  # a new keeper answered, knowing nothing of either
    assert [e.kind for e in q.events(b)][:3] == ["claimed", "started", "resumed"]
    assert [e.kind for e in q.events(b)][-1] == "abandoned"

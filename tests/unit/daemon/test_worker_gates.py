"""The worker with gated jobs (issue 24), driven in-process: a real queue
file, ManualClocks, the fake spawner of test_worker.py and a fake machine
(power, load) the test changes. No subprocess, no sleeping."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sloth_daemon.clock import ManualClocks
from sloth_daemon.config import Settings
from sloth_daemon.daemon.conditions import Conditions, Observer, Power
from sloth_daemon.daemon.gpus import GpuProbe
from sloth_daemon.daemon.resources import Resources
from sloth_daemon.daemon.worker.loop import Worker
from sloth_daemon.queue import Queue
from tests.unit.daemon.test_worker import FakeSpawner


class Machine(Observer):
    def __init__(self) -> None:
        super().__init__(platform="linux")
        self.on_mains, self.load_now, self.reads = False, 0.5, 0

    def power(self) -> Power:
        self.reads += 1
        return Power(self.on_mains, 50.0)

    def load(self) -> float:
        return self.load_now


@pytest.fixture
def clocks() -> ManualClocks:
    return ManualClocks(wall=1000.0, awake=50.0, total=50.0)


@pytest.fixture
def env(tmp_path: Path, clocks: ManualClocks):
    made: list[Queue] = []

    def make(resources: dict[str, tuple[str, ...]] | None = None, **settings: Any):
        s = Settings(**{"lease_s": 30.0, "clock_check_s": 1000.0, "default_concurrency": 4, **settings})
        q = Queue(tmp_path / "q.db", clocks, lease_s=s.lease_s)
        made.append(q)
        sp, m = FakeSpawner(), Machine()
        w = Worker(q, s, sp, clocks=clocks, log_path=lambda j, a: tmp_path / f"{j}.{a}.log", instance="t1",
                   conditions=Conditions(m, max_age_s=s.conditions_check_s, clock=lambda: clocks.read().awake),
                   resources=Resources(resources or {}, detect=list),
                   gpus=GpuProbe(which=lambda name: None))  # this machine's nvidia-smi, if any, is not the test's
        return w, q, sp, m

    yield make
    for q in made:
        q.close()


def started(sp: FakeSpawner) -> list[int]:
    return [r.job_id for r in sp.reqs.values()]


def test_a_waiting_job_wakes_the_worker_every_check_and_none_wakes_it_otherwise(env, clocks):
    w, q, sp, m = env(conditions_check_s=30.0)
    clocks.advance(61)
    w.turn()  # the first prune done: the next is an hour away
    assert w.next_wake_s() > 900  # idle: only the clock check (1000 s here) and the prune
    (j,) = q.enqueue_many([{"command": ["x"], "when": ["ac"]}])
    w.signals.wake()
    w.turn()
    assert started(sp) == [] and q.get(j).wait_reason == "waiting for mains power"
    assert w.next_wake_s() == pytest.approx(30.0)  # one look every conditions_check_s
    reads = m.reads
    clocks.advance(10)
    w.signals.wake()
    w.turn()  # a wake-up for anything else does not look at the machine again
    assert m.reads == reads
    m.on_mains = True
    clocks.advance(20)
    w.turn()
    assert started(sp) == [j] and q.get(j).wait_reason is None
    sp.start(j)
    sp.exit(j, 0)
    w.turn()
    w.turn()
    assert w.gates.watching is False and w.next_wake_s() > 900  # nothing waits: no look


def test_a_gated_job_takes_its_turn_by_priority_among_ungated_ones(env):
    w, q, sp, m = env(default_concurrency=1)
    m.on_mains = True
    low, gated, high = q.enqueue_many([{"command": ["low"]}, {"command": ["g"], "when": ["ac"], "priority": 5},
                                       {"command": ["high"], "priority": 9}])
    order = []
    for _ in range(3):
        w.turn()
        (jid,) = [r.job_id for r in sp.reqs.values() if r.job_id not in order]
        order.append(jid)
        sp.start(jid)
        sp.exit(jid, 0)
        w.turn()
    assert order == [high, gated, low]


def test_gpu_jobs_waiting_on_a_gpu_busy_outside_sloth_hold_back_no_cpu_job(tmp_path, clocks):
    """The rule (docs/gpus.md) at the worker's turn, a reading injected: nine
    GPU jobs wait (both GPUs busy outside sloth), reserving GPUs only; a CPU
    job and a licence job queued after them start in the same turn."""
    from sloth_daemon.daemon.gpus import App, Reading, parse_gpus

    uuids = ("GPU-a", "GPU-b")
    reading = Reading(clocks.read().awake, parse_gpus("0, GPU-a, 81920, 3512, 78000\n1, GPU-b, 81920, 3512, 78000\n"),
                      [App(4242, uuids[0], 3000 << 20), App(4243, uuids[1], 3000 << 20)], {})
    probe = GpuProbe(which=lambda name: "/usr/bin/nvidia-smi", clock=lambda: clocks.read().awake)
    probe.reading = reading
    s = Settings(lease_s=30.0, clock_check_s=1000.0, default_concurrency=3)
    q = Queue(tmp_path / "q.db", clocks, lease_s=s.lease_s)
    sp = FakeSpawner()
    try:
        w = Worker(q, s, sp, clocks=clocks, log_path=lambda j, a: tmp_path / f"{j}.{a}.log", instance="t1",
                   resources=Resources({"gpu": ("0", "1"), "licence": ("0",)}, detect=list), gpus=probe)
        gpu_jobs = q.enqueue_many([{"command": ["g"], "needs": {"gpu": 1}}] * 8 + [{"command": ["h"], "needs": {"gpu": 0.5}}])
        cpu, lic = q.enqueue_many([{"command": ["c"]}, {"command": ["l"], "needs": {"licence": 1}}])
        w.turn()
        assert sorted(started(sp)) == [cpu, lic]
        assert q.get(gpu_jobs[0]).wait_reason.startswith("waiting for gpu 0 busy outside sloth (2.9G by pid 4242")
        assert w.gates.gpu_waiting  # the GPUs are looked at again every check_s (gpuwatch.py)
    finally:
        q.close()


def test_a_big_job_reserves_the_free_tokens_so_small_ones_behind_it_wait(env):
    w, q, sp, m = env(resources={"gpu": ("0", "1", "2")})
    first = q.enqueue_many([{"command": ["a"], "needs": {"gpu": 2}}])[0]
    w.turn()
    assert started(sp) == [first] and q.get(first).tokens == {"gpu": ["0", "1"]}
    sp.start(first)
    big, small = q.enqueue_many([{"command": ["big"], "needs": {"gpu": 2}},
                                 {"command": ["small"], "needs": {"gpu": 1}}])
    w.signals.wake()
    w.turn()
    assert started(sp) == [first], "gpu 2 is free, but the older big job waits for it"
    assert q.get(big).wait_reason == "waiting for gpu: 2 wanted, 1 of 3 free"
    # status says gpu 2 is free; the small job says why it does not take it (issue 28, item 1)
    assert q.get(small).wait_reason == "waiting for gpu: 1 wanted, 0 of 3 free (1 kept for a job before it)"
    sp.exit(first, 0)
    w.turn()
    w.turn()
    assert started(sp)[1] == big and q.get(big).tokens == {"gpu": ["0", "1"]}
    assert sp.reqs[sp.key_of(big)].full_env()["CUDA_VISIBLE_DEVICES"] == "0,1"
    assert started(sp)[2:] == [small] and q.get(small).tokens == {"gpu": ["2"]}


def test_on_lost_stop_ends_the_run_and_gives_its_try_back(env, clocks):
    w, q, sp, m = env(conditions_check_s=5.0)
    m.on_mains = True
    (j,) = q.enqueue_many([{"command": ["x"], "when": ["ac"], "on_lost": "stop", "max_attempts": 1}])
    w.turn()
    sp.start(j)
    m.on_mains = False
    clocks.advance(5)
    w.turn()
    assert sp.kills == [(sp.key_of(j), "condition lost: mains power")]
    sp.exit(j, None, reason="killed", by="daemon")
    w.turn()
    job = q.get(j)
    assert (job.state.value, job.tries) == ("queued", 0)
    assert q.events(j)[-1].kind == "condition_lost"


def test_a_continue_run_is_left_alone_when_its_condition_goes(env, clocks):
    w, q, sp, m = env(conditions_check_s=5.0)
    m.on_mains = True
    (j,) = q.enqueue_many([{"command": ["x"], "when": ["ac"]}])
    w.turn()
    sp.start(j)
    m.on_mains = False
    clocks.advance(5)
    w.turn()
    assert sp.kills == [] and w.gates.watching is False  # nothing to watch for: no wake-ups either


def test_slots_count_against_the_lane(env):
    w, q, sp, m = env(default_concurrency=3)
    a, b = q.enqueue_many([{"command": ["a"], "slots": 2}, {"command": ["b"], "slots": 2}])
    c = q.enqueue(["c"])
    w.turn()
    assert started(sp) == [a] and w.running.slots_in_use() == {"default": 2}
    assert q.get(b).wait_reason == "waiting for 2 free slots in lane default (1 of 3 free)"
    assert c not in started(sp), "the lane is held for b, the older job"


def test_conditions_hold_answers_for_schedules(env):
    w, q, sp, m = env()
    assert w.watch.holds(["ac"]) == "waiting for mains power"
    m.on_mains = True
    w.watch.look_now(["power"])
    assert w.watch.holds(["ac", "load<2"]) is None
    m.load_now = 3.0
    w.watch.look_now()
    assert w.watch.holds(["ac", "load<2"]) == "waiting for load below 2 (now 3.00)"


def test_an_expired_gated_lease_is_reclaimed_only_while_its_conditions_hold(env, clocks):
    w, q, sp, m = env()
    a, b = q.enqueue_many([{"command": ["a"], "when": ["ac"]}, {"command": ["b"], "when": ["ac"]}])
    q.claim("gone", gated=(a, None), lease_s=5)  # a daemon that died with its keeper
    clocks.advance(10)
    w.turn()
    assert started(sp) == [], "on battery: neither the queued job nor the expired lease"
    m.on_mains = True
    w.watch.look_now()
    w.turn()
    assert sorted(started(sp)) == [a, b]
    assert [e.kind for e in q.events(a)][-1] == "reclaimed"


def test_an_expired_gated_lease_with_no_queued_job_of_its_gate_is_found_at_the_clock_check(env, clocks):
    w, q, sp, m = env(clock_check_s=5.0)
    m.on_mains = True
    (a,) = q.enqueue_many([{"command": ["a"], "when": ["ac"]}])
    q.claim("gone", gated=(a, None), lease_s=5)
    w.turn()
    clocks.advance(10)
    w.turn()
    assert started(sp) == [a]


def test_a_job_queued_later_behind_the_same_gate_is_told_why_it_waits(env):
    """The reason was written per gate only when it changed: a second
    --needs gpu=1 job added while the first already waited was listed as
    "due" (no reason) for as long as it waited."""
    w, q, sp, m = env(resources={"gpu": ("0",)})
    first = q.enqueue_many([{"command": ["a"], "needs": {"gpu": 1}}])[0]
    w.turn()
    sp.start(first)
    early = q.enqueue_many([{"command": ["b"], "needs": {"gpu": 1}}])[0]
    w.signals.wake()
    w.turn()
    assert q.get(early).wait_reason == "waiting for gpu: 1 wanted, 0 of 1 free"
    late = q.enqueue_many([{"command": ["c"], "needs": {"gpu": 1}}])[0]
    w.signals.wake()
    w.turn()
    assert q.get(late).wait_reason == "waiting for gpu: 1 wanted, 0 of 1 free"


def test_a_job_this_machine_can_never_run_reserves_nothing_and_is_held_with_why(env):
    """Issue 28, items 1-3: a two-gpu job on a one-gpu machine (queued
    behind add's back: by another machine, or before a reload) is held at
    the claim, saying why; the one-gpu jobs behind it run. A lane's slots
    are judged alike."""
    w, q, sp, m = env(resources={"gpu": ("0",)})
    big, small = q.enqueue_many([{"command": ["big"], "needs": {"gpu": 2}, "priority": 9},
                                 {"command": ["small"], "needs": {"gpu": 1}}])
    wide = q.enqueue_many([{"command": ["wide"], "slots": 5}])[0]
    w.signals.wake()
    w.turn()
    assert started(sp) == [small]  # big reserved nothing
    assert q.get(big).state.value == "held" and "has 1 gpu token" in (q.get(big).wait_reason or "")
    assert q.get(wide).state.value == "held" and "runs 4 job(s) at once" in (q.get(wide).wait_reason or "")
    assert [e.kind for e in q.events(big)][-1] == "held"


def test_a_reload_sweeps_what_it_made_impossible_and_forgets_why_when_it_fits_again(env):
    w, q, sp, m = env(resources={"gpu": ("0", "1")})
    w.actions.pause(None)
    (big,) = q.enqueue_many([{"command": ["big"], "needs": {"gpu": 2}}])
    notes = w.apply_settings(Settings(lease_s=30.0, clock_check_s=1000.0, default_concurrency=4,
                                      resources={"gpu": ("0",)}))
    assert notes == [f"held job {big}: --needs gpu=2: this machine has 1 gpu token(s)"]
    assert q.get(big).state.value == "held"
    notes = w.apply_settings(Settings(lease_s=30.0, clock_check_s=1000.0, default_concurrency=4,
                                      resources={"gpu": ("0", "1")}))
    assert notes == [f"job {big} can run now: `sloth release {big}`"]
    assert q.get(big).state.value == "held" and q.get(big).wait_reason is None

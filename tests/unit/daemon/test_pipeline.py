"""Pipelining (pipeline.py), driven in-process: the real worker and queue
file, ManualClocks, and the fake spawner of test_worker.py playing a keeper
that can hold a run behind another. No subprocess, no sleeping.

A keeper holding J behind R starts J the moment R ends; the test plays that
as "R exits, J starts" (sp.exit, sp.start)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from sloth_daemon.errors import IllegalTransition
from sloth_daemon.daemon.worker.pipeline import DEPTH, DEPTH_MIN, HOLD_S, HOT_FACTOR, HOT_MAX_S, HOT_S, PACE_S
from sloth_daemon.queue import Queue
from sloth_daemon.daemon.worker.spawner import Outcome
from tests.unit.daemon.test_worker import FakeSpawner, LEASE, clocks, env  # noqa: F401 (fixtures)


@pytest.fixture
def pipe(env):  # noqa: F811
    """A worker whose spawner pipelines; one slot unless told."""
    def make(**settings: Any):
        w, q, sp = env(**{"lanes": {"default": 1}, **settings})
        sp.pipelines = True
        return w, q, sp
    return make


def spawned(sp: FakeSpawner) -> list[tuple[int, int | None]]:
    """(job, the job its spawn waits for) in the order they were sent."""
    return [(r.job_id, sp.after_of(r.job_id)) for r in sp.reqs.values()]


def kinds(q: Queue, job_id: int) -> list[str]:
    return [e.kind for e in q.events(job_id)]


def unstarted(reason: str, by: str | None = None) -> Outcome:
    """What the keeper reports for a held run it dropped before it started."""
    return Outcome(None, reason, killed_by=by, started=False)


def test_a_full_lanes_next_jobs_wait_in_the_spawner_behind_the_run_DEPTH_deep(pipe):
    """DEPTH_MIN deep while the lane's runs' time is not known; DEPTH deep
    once its runs are heard as short as a `true` in a burst."""
    w, q, sp = pipe()
    ids = [q.enqueue(["true"]) for _ in range(DEPTH + 3)]
    w.turn()
    assert 2 <= DEPTH_MIN < DEPTH
    chain = [(ids[0], None)] + [(ids[i], ids[i - 1]) for i in range(1, DEPTH_MIN + 1)]
    assert spawned(sp) == chain  # sent with the first
    st = w.status()
    assert [r["id"] for r in st["running"]] == [ids[0]]
    assert [(p["id"], p["after"]) for p in st["pending"]] == chain[1:]
    assert w.running.slots_in_use() == {"default": 1} and st["lanes"]["default"]["running"] == 1
    sp.start(ids[0])
    sp.exit(ids[0], 0)
    sp.start(ids[1])  # the keeper started it the moment the first ended
    w.turn()
    assert q.get(ids[0]).state == "done"
    # a short run heard: the chain is kept DEPTH deep
    assert spawned(sp)[DEPTH_MIN + 1:] == [(ids[i], ids[i - 1]) for i in range(DEPTH_MIN + 1, DEPTH + 2)]
    assert len(w.status()["pending"]) == DEPTH
    assert [e for e in kinds(q, ids[1])] == ["claimed"]
    sp.exit(ids[1], 0)
    w.turn()
    assert (q.get(ids[1]).state, kinds(q, ids[1])) == ("done", ["claimed", "started", "done"])
    assert spawned(sp)[DEPTH + 2:] == [(ids[DEPTH + 2], ids[DEPTH + 1])]


@pytest.mark.parametrize("run_s, deep", [(0.0, DEPTH), (HOLD_S / DEPTH, DEPTH), (HOLD_S / 20, 20),
                                         (HOT_S * 0.9, DEPTH_MIN)])
def test_a_lane_holds_about_HOLD_S_of_its_usual_runs_in_the_spawner(pipe, clocks, run_s, deep):  # noqa: F811
    """A chain as deep as a `true`'s would hold a lane of longer jobs
    (still short enough to pipeline) away from every other worker of a
    shared queue for long: the chain holds about HOLD_S of the lane's usual
    run, DEPTH_MIN at least."""
    w, q, sp = pipe()
    ids = [q.enqueue(["x"]) for _ in range(DEPTH + 3)]
    w.turn()
    assert w.pipeline.depth_cap("default") == DEPTH_MIN  # not known yet
    sp.start(ids[0])
    clocks.advance(run_s)
    sp.exit(ids[0], 0)
    sp.start(ids[1])
    w.turn()
    assert w.pipeline.depth_cap("default") == deep == w.status()["pipeline"]["depth_now"]["default"]
    assert len(w.status()["pending"]) == deep


def test_a_chain_held_deep_for_short_runs_gives_back_its_tail_once_the_lanes_runs_grow_longer(pipe, clocks):  # noqa: F811
    """A chain claimed DEPTH deep while the lane ran `true` holds its jobs
    whatever they turn out to take (each up to hot_s): 64 jobs of 45 ms
    held 2.9 s by one machine of a shared queue while another one's slot
    stood idle (PostgreSQL, two daemons: 63 to 1). On a shared queue,
    once the lane's usual run is heard longer, what a chain holds beyond
    depth_cap goes back to the queue (the last first), as never claimed;
    the rest stays. On a queue no other machine claims from it stays."""
    w, q, sp = pipe()
    assert not w.pipeline.shared  # SQLite
    w.pipeline.shared = True  # as on PostgreSQL (tests/acceptance/test_pg_pipelining.py: the real thing)
    ids = [q.enqueue(["x"]) for _ in range(DEPTH + 20)]
    w.turn()
    sp.start(ids[0])
    sp.exit(ids[0], 0)  # a `true`: the lane holds DEPTH now
    sp.start(ids[1])
    w.turn()
    assert len(w.status()["pending"]) == DEPTH and sp.unspawned == []
    clocks.advance(HOT_S * 0.9)  # young all along: no take-back for age
    sp.exit(ids[1], 0)
    sp.start(ids[2])
    w.turn()
    cap = w.pipeline.depth_cap("default")
    assert DEPTH_MIN <= cap < DEPTH // 2
    held = [p["id"] for p in w.status()["pending"]]
    beyond = held[cap:]
    assert sp.unspawned == [sp.key_of(j) for j in reversed(beyond)]  # the last first
    for j in reversed(beyond):
        sp.sinks[sp.key_of(j)].taken_back()
    w.turn()
    assert [p["id"] for p in w.status()["pending"]] == held[:cap]
    for j in beyond:
        job = q.get(j)
        assert (job.state, job.attempts, job.tries, kinds(q, j)) == ("queued", 0, 0, [])
    sp.exit(ids[2], 0)
    sp.start(held[0])
    w.turn()  # not claimed again beyond the cap
    assert len(w.status()["pending"]) <= w.pipeline.depth_cap("default")


def test_on_a_queue_no_other_machine_claims_from_a_chain_keeps_its_tail(pipe, clocks):  # noqa: F811
    """SQLite: the tail would be claimed again by the same daemon, after
    each longer run of a mixed lane (15% more daemon CPU, measured)."""
    w, q, sp = pipe()
    ids = [q.enqueue(["x"]) for _ in range(DEPTH + 20)]
    w.turn()
    sp.start(ids[0])
    sp.exit(ids[0], 0)
    sp.start(ids[1])
    w.turn()
    clocks.advance(HOT_S * 0.9)
    sp.exit(ids[1], 0)
    sp.start(ids[2])
    w.turn()
    assert w.pipeline.depth_cap("default") < DEPTH // 2
    assert sp.unspawned == [] and len(w.status()["pending"]) == DEPTH - 1


def test_a_held_run_takes_a_slot_once_the_run_before_it_ended_so_nothing_starts_beside_it(pipe):
    w, q, sp = pipe(lanes={"default": 1, "other": 1})
    ids = [q.enqueue(["true"]) for _ in range(4)]
    w.turn()
    sp.start(ids[0])
    sp.exit(ids[0], 0)  # the keeper starts ids[1] now; the worker has not heard of that yet
    w.turn()
    assert w.running.slots_in_use() == {"default": 1} and w.status()["pending"][0]["id"] == ids[2]
    # nothing was spawned to start at once; the chain grew behind the held one
    assert spawned(sp) == [(ids[0], None), (ids[1], ids[0]), (ids[2], ids[1]), (ids[3], ids[2])]


def test_a_run_that_is_no_longer_young_gets_no_successor(pipe, clocks):  # noqa: F811
    w, q, sp = pipe()
    a = q.enqueue(["sleep", "9"])
    w.turn()
    sp.start(a)
    clocks.advance(HOT_S * 1.01)
    b = q.enqueue(["true"])
    w.signals.wake()
    w.turn()
    assert spawned(sp) == [(a, None)] and q.get(b).state == "queued"


def test_held_runs_are_taken_back_after_HOT_S_as_if_never_claimed(pipe, clocks):  # noqa: F811
    w, q, sp = pipe()
    long, b, c = q.enqueue(["sleep", "9"]), q.enqueue(["true"]), q.enqueue(["true"])
    w.turn()
    sp.start(long)
    assert w.next_wake_s() == pytest.approx(HOT_S)
    clocks.advance(HOT_S * 1.01)
    w.turn()
    assert sp.unspawned == [sp.key_of(c), sp.key_of(b)]  # the last first
    for j in (c, b):
        sp.sinks[sp.key_of(j)].taken_back()
    w.turn()
    for j in (b, c):
        job = q.get(j)
        assert (job.state, job.attempts, job.tries, job.token, job.worker) == ("queued", 0, 0, None, None)
        assert kinds(q, j) == []  # nothing ran: no trace
        assert j not in w.running
    assert sorted(sp.acked) == sorted([sp.key_of(b), sp.key_of(c)])
    assert w.status()["pending"] == [] and q.get(long).state == "running"
    sp.exit(long, 0)
    w.turn()
    assert spawned(sp)[3:] == [(b, None)]  # claimed again: an ordinary start (the lane's last run was long)
    assert kinds(q, b) == ["claimed"] and q.get(b).attempts == 1


def test_a_take_back_that_comes_too_late_leaves_an_ordinary_run(pipe, clocks):  # noqa: F811
    w, q, sp = pipe()
    a, b = q.enqueue(["x"]), q.enqueue(["y"])
    w.turn()
    sp.start(a)
    clocks.advance(HOT_S * 1.01)
    w.turn()
    assert sp.unspawned == [sp.key_of(b)]
    sp.exit(a, 0)  # ... but the keeper had started b: the answer says so, no taken_back
    sp.start(b)
    w.turn()
    assert q.get(b).state == "running" and w.running[b].live
    sp.exit(b, 0)
    w.turn()
    assert kinds(q, b) == ["claimed", "started", "done"]


def answering(coro: Any, *plays: Any) -> Any:
    """Run ``coro`` (a worker action) while the test plays the keeper: each
    of ``plays`` once the action has sent its questions."""
    async def go() -> Any:
        task = asyncio.ensure_future(coro)
        await asyncio.sleep(0)
        for play in plays:
            play()
        return await asyncio.wait_for(task, 5)
    return asyncio.run(go())


def test_a_cancel_of_held_runs_asks_the_keeper_first_and_records_what_it_answered(pipe):
    """b and c wait behind a. The cancel records nothing of them before the
    keeper says: it dropped b unstarted (b is cancelled as never claimed),
    and it had started c a moment ago (c is recorded started, then
    cancelled, its tree ended, and how it ended)."""
    w, q, sp = pipe()
    a, b, c = (q.enqueue([x]) for x in "abc")
    w.turn()
    sp.start(a)

    def keeper() -> None:
        assert sp.unspawned == [sp.key_of(b), sp.key_of(c)] and not sp.kills
        assert (q.get(b).state, q.get(c).state) == ("running", "running")  # nothing recorded yet
        sp.sinks[sp.key_of(b)].taken_back()
        sp.start(c)  # it was started before the question came: its started came first
    res = answering(w.actions.cancel_many([b, c]), keeper)
    assert sorted(j.id for j in res.jobs) == [b, c] and not res.skipped
    assert (q.get(b).state, q.get(b).attempts, kinds(q, b)) == ("cancelled", 0, ["cancelled"])
    assert kinds(q, c) == ["claimed", "started", "cancelled"] and sp.kills == [(sp.key_of(c), "cancelled")]
    sp.exit(c, 0)  # it ended by itself before the kill reached it
    w.turn()
    assert kinds(q, c) == ["claimed", "started", "cancelled", "ended"] and q.get(c).state == "cancelled"
    assert q.events(c)[-1].message == "exit 0; it ended by itself"
    assert q.get(a).state == "running"


def test_a_held_run_dropped_for_a_cancel_is_not_given_back_and_claimed_again_before_the_cancel(pipe):
    """The keeper dropped b; turns of the worker run before the cancel is
    back (a ended: the slot is free). b's claim must wait for the cancel,
    not go back to the queue to be claimed and started again meanwhile."""
    w, q, sp = pipe()
    a, b = q.enqueue(["a"]), q.enqueue(["b"])
    w.turn()
    sp.start(a)

    def keeper_then_turns() -> None:
        sp.sinks[sp.key_of(b)].taken_back()
        sp.exit(a, 0)
        w.turn()
        w.turn()
    res = answering(w.actions.cancel_many([b]), keeper_then_turns)
    assert [j.id for j in res.jobs] == [b]
    assert [r.job_id for r in sp.reqs.values()].count(b) == 1  # never sent again
    assert (q.get(b).state, kinds(q, b)) == ("cancelled", ["cancelled"]) and q.get(a).state == "done"


def test_a_kill_of_a_held_run_that_ended_meanwhile_records_it_as_it_ended(pipe):
    w, q, sp = pipe()
    a, b = q.enqueue(["a"]), q.enqueue(["b"])
    w.turn()
    sp.start(a)

    def keeper() -> None:
        sp.exit(a, 0)
        sp.start(b)
        sp.exit(b, 0)  # all before the keeper read the question
    res = answering(w.actions.kill([b]), keeper)
    assert res.jobs == [] and res.skipped == [(b, f"job {b} is done")]
    assert (q.get(b).state, kinds(q, b)) == ("done", ["claimed", "started", "done"]) and not sp.kills


def test_a_cancel_the_keeper_does_not_answer_changes_nothing_and_says_so(pipe, monkeypatch):
    import sloth_daemon.daemon.worker.withdrawal as wd

    monkeypatch.setattr(wd, "WITHDRAW_WAIT_S", 0.01)
    w, q, sp = pipe()
    a, b, c = (q.enqueue([x]) for x in "abc")
    w.turn()
    sp.start(a)
    res = asyncio.run(w.actions.cancel_many([a, b]))
    assert [j.id for j in res.jobs] == [a] and res.skipped[0][0] == b and "nothing was changed" in res.skipped[0][1]
    assert q.get(b).state == "running" and w.running[b].pending and not w.running[b].cancelling
    with pytest.raises(IllegalTransition, match="has not said whether it started"):
        asyncio.run(w.actions.cancel(c))
    assert q.get(c).state == "running"


def test_a_held_run_fenced_by_the_keeper_goes_back_to_the_queue_untouched(pipe):
    w, q, sp = pipe(max_attempts=1)
    _a, b = q.enqueue(["a"]), q.enqueue(["b"])
    w.turn()
    sp.sinks[sp.key_of(b)].exited(unstarted("fenced before it started: no lease renewal for 29s", "fence"))
    w.turn()
    job = q.get(b)
    assert (job.state, job.attempts, job.tries, kinds(q, b)) == ("queued", 0, 0, [])


def test_a_held_run_that_fails_to_start_is_a_spawn_failure(pipe):
    w, q, sp = pipe()
    a, b = q.enqueue(["a"]), q.enqueue(["nope"])
    w.turn()
    sp.start(a)
    sp.exit(a, 0)
    sp.sinks[sp.key_of(b)].spawn_failed("command not found: nope", False)
    w.turn()
    assert (q.get(b).state, q.get(b).message) == ("failed", "command not found: nope")


def test_pause_lane_set_and_reload_take_held_runs_back(pipe):
    w, q, sp = pipe(lanes={"default": 1, "v": 1})
    _a, b = q.enqueue(["a"]), q.enqueue(["b"])
    _v1, v2 = q.enqueue(["v"], lane="v"), q.enqueue(["v"], lane="v")
    w.turn()
    assert {j for j, after in spawned(sp) if after} == {b, v2}
    w.set_lane("v", 1)
    assert sp.unspawned == [sp.key_of(v2)]
    w.actions.pause("default")
    assert sp.unspawned == [sp.key_of(v2), sp.key_of(b)]
    w.apply_settings(w.settings)
    assert len(sp.unspawned) == 2  # each is asked once


def test_shutdown_interrupting_withdraws_held_runs_first_and_leaves_them_untouched(pipe):
    w, q, sp = pipe()
    a, b, c = q.enqueue(["a"]), q.enqueue(["b"]), q.enqueue(["c"])
    w.turn()
    sp.start(a)

    async def go() -> None:
        task = asyncio.ensure_future(w.shutdown(keep_jobs=False))
        await asyncio.sleep(0)
        assert sp.unspawned == [sp.key_of(b), sp.key_of(c)] and not sp.kills
        sp.exit(a, 0)  # a ended by itself and the keeper started b, then read the questions
        sp.start(b)
        sp.sinks[sp.key_of(c)].taken_back()
        await asyncio.sleep(0.01)
        assert sp.kills == [(sp.key_of(b), "interrupted")]  # a had ended: not interrupted
        sp.exit(b, -15, "interrupted", "request")
        await asyncio.wait_for(task, 5)

    asyncio.run(go())
    assert (q.get(a).state, kinds(q, a)) == ("done", ["claimed", "started", "done"])  # as it ran
    assert (q.get(b).state, q.get(b).tries, kinds(q, b)) == ("queued", 0, ["claimed", "started", "interrupted"])
    assert (q.get(c).state, q.get(c).attempts, kinds(q, c)) == ("queued", 0, [])


def test_shutdown_keeping_jobs_takes_held_runs_back_and_leaves_the_running_one(pipe):
    w, q, sp = pipe()
    a, b = q.enqueue(["a"]), q.enqueue(["b"])
    w.turn()
    sp.start(a)

    async def go() -> None:
        task = asyncio.ensure_future(w.shutdown(keep_jobs=True))
        await asyncio.sleep(0)
        assert sp.unspawned == [sp.key_of(b)] and not sp.kills
        sp.sinks[sp.key_of(b)].taken_back()
        await asyncio.wait_for(task, 5)

    asyncio.run(go())
    assert (q.get(b).state, kinds(q, b)) == ("queued", [])
    assert q.get(a).state == "running"


def test_a_held_runs_lease_is_renewed_and_a_lost_one_drops_it(pipe, clocks):  # noqa: F811
    w, q, sp = pipe()
    a, b = q.enqueue(["a"]), q.enqueue(["b"])
    w.turn()
    sp.start(a)
    w.running[b].withdraw()  # no take-back in this test
    clocks.advance(LEASE / 3)
    w.turn()
    assert {k for k, _ in sp.trusted} == {sp.key_of(a), sp.key_of(b)}
    q.cancel(b)  # by another client of the file
    clocks.advance(LEASE / 3)
    w.turn()
    assert (sp.key_of(b), "lease lost") in sp.kills


def test_no_pipelining_without_a_spawner_that_can_take_it(env):  # noqa: F811
    """(Every queue engine can unclaim: the contract says so, backends/contract.py.)"""
    w, q, sp = env()
    ids = [q.enqueue(["x"]) for _ in range(3)]
    w.turn()
    assert spawned(sp) == [(ids[0], None)]  # sp.pipelines is False: the worker waits, as before


def test_an_old_keeper_daemon_never_holds_a_run_it_cannot_start_in_order(pipe):
    """The keeper's connection was lost and the new keeper does not know
    `after`: a held spawn still in the worker's hands is given back."""
    w, q, sp = pipe()
    _a, b = q.enqueue(["a"]), q.enqueue(["b"])
    w.turn()
    sp.sinks[sp.key_of(b)].taken_back()  # what KeeperSpawner does with `after` and no such keeper
    w.turn()
    assert (q.get(b).state, kinds(q, b)) == ("queued", [])


def test_adopted_held_runs_are_linked_behind_their_run_and_taken_back(pipe, clocks):  # noqa: F811
    import socket

    w, q, sp = pipe()
    old = f"sloth-daemon:{socket.gethostname()}:1:old"
    a_id, b_id = q.enqueue(["a"]), q.enqueue(["b"])
    a, b = q.claim(old), q.claim(old)
    held = [{"key": a.token, "job_id": a.id, "attempt": 1, "pid": 77, "state": "running"},
            {"key": b.token, "job_id": b.id, "attempt": 1, "pid": None, "state": "pending", "after": a.token}]
    asyncio.run(w.reconcile(held))
    assert w.running[b_id].pending and w.running.slots_in_use() == {"default": 1}
    assert w.status()["pending"][0]["after"] == a_id
    w.turn()
    assert sp.unspawned == [b.token]  # its predecessor is not young: back to the queue



def test_a_held_run_dropped_unstarted_moves_the_one_behind_it_up(pipe, clocks):  # noqa: F811
    """As in the keeper: c waited for b, b was cancelled unstarted, so c now
    waits for a: still pending (no slot), still renewed and taken back."""
    w, q, sp = pipe()
    a, b, c = (q.enqueue([x]) for x in "abc")
    w.turn()
    sp.start(a)
    answering(w.actions.cancel(b), sp.sinks[sp.key_of(b)].taken_back)
    w.turn()
    assert w.running[c].pending and w.running[c].after is w.running[a]
    assert w.running.slots_in_use() == {"default": 1} and [p["after"] for p in w.status()["pending"]] == [a]
    clocks.advance(HOT_S * 1.01)
    w.turn()
    assert sp.unspawned == [sp.key_of(b), sp.key_of(c)]  # b: the cancel's question; c: taken back
    sp.sinks[sp.key_of(c)].taken_back()
    w.turn()
    assert (q.get(c).state, kinds(q, c)) == ("queued", []) and q.get(b).state == "cancelled"


def test_a_run_being_taken_back_never_gets_a_successor(pipe):
    """The keeper may have dropped it already: a spawn after a run it does
    not know would start at once, beside the one that runs."""
    w, q, sp = pipe(max_attempts=1)
    a, b = q.enqueue(["a"]), q.enqueue(["b"])
    w.turn()
    sp.start(a)
    w.set_lane("default", 1)  # takes b back while a is still young
    assert sp.unspawned == [sp.key_of(b)]
    c = q.enqueue(["c"])
    w.signals.wake()
    w.turn()
    assert all(after != b for _, after in spawned(sp)) and q.get(c).state == "queued"
    sp.sinks[sp.key_of(b)].taken_back()
    w.turn()
    assert q.get(b).state == "queued" and w.status()["pending"] == []


def test_an_adopted_held_run_goes_back_without_a_trace_of_the_adoption(pipe):
    import socket

    w, q, sp = pipe()
    old = f"sloth-daemon:{socket.gethostname()}:1:old"
    q.enqueue(["a"])
    b_id = q.enqueue(["b"])
    a, b = q.claim(old), q.claim(old, reclaim=False)
    held = [{"key": a.token, "job_id": a.id, "attempt": 1, "pid": 77, "state": "running"},
            {"key": b.token, "job_id": b.id, "attempt": 1, "pid": None, "state": "pending", "after": a.token}]
    asyncio.run(w.reconcile(held))
    assert sp.unspawned == [b.token]  # taken back at once
    sp.sinks[b.token].taken_back()
    w.turn()
    job = q.get(b_id)
    assert (job.state, job.attempts, job.worker, kinds(q, b_id)) == ("queued", 0, None, [])
    assert kinds(q, a.id) == ["claimed", "adopted"]


def test_an_adopted_held_run_whose_predecessor_is_not_ours_is_taken_back_and_holds_a_slot(pipe):
    import socket

    w, q, sp = pipe()
    old = f"sloth-daemon:{socket.gethostname()}:1:old"
    b_id = q.enqueue(["b"])
    b = q.claim(old)
    held = [{"key": "gone", "job_id": 99, "attempt": 1, "pid": 77, "state": "running"},
            {"key": b.token, "job_id": b.id, "attempt": 1, "pid": None, "state": "pending", "after": "gone"}]
    asyncio.run(w.reconcile(held))
    assert ("gone", "lease lost") in sp.kills and sp.unspawned == [b.token]
    assert not w.running[b_id].pending and w.running.slots_in_use() == {"default": 1}  # it may be starting


def test_after_a_run_longer_than_HOT_S_a_lane_waits_for_a_short_one_before_holding_again(pipe, clocks):  # noqa: F811
    """Jobs longer than the lane's hot time would have every successor
    claimed and taken back again, for nothing: such a lane runs one job at
    a time as before until a run ends within it."""
    w, q, sp = pipe()
    ids = [q.enqueue(["x"]) for _ in range(DEPTH_MIN + 4)]
    w.turn()
    sp.start(ids[0])
    clocks.advance(HOT_S * 0.9)
    sp.exit(ids[0], 0)  # within HOT_S: short
    sp.start(ids[1])
    w.turn()
    assert spawned(sp)[DEPTH_MIN + 1:] == [(ids[DEPTH_MIN + 1], ids[DEPTH_MIN])]  # a short lane: the chain goes on
    clocks.advance(HOT_MAX_S * 1.01)
    sp.exit(ids[1], 0)  # a long one ended: ids[2] had started, the keeper starts it
    sp.start(ids[2])
    w.turn()
    assert len(spawned(sp)) == DEPTH_MIN + 2  # nothing more held behind ids[2] (what is held stays)
    sp.exit(ids[2], 0)  # short again
    sp.start(ids[3])
    w.turn()
    assert spawned(sp)[DEPTH_MIN + 2:] == [(ids[DEPTH_MIN + 2], ids[DEPTH_MIN + 1]),
                                           (ids[DEPTH_MIN + 3], ids[DEPTH_MIN + 2])]


def test_on_a_loaded_machine_runs_heard_longer_than_HOT_S_keep_their_successors(pipe, clocks):  # noqa: F811
    """Under load a `true` is heard running for 30-100 ms: a lane whose runs
    usually take that long holds its successors for HOT_FACTOR times its
    usual run before taking them back (with a fixed HOT_S a fifth of the
    successors were claimed and given back again), and a head the keeper
    has not yet been heard to start is not old at all (HOT_MAX_S from its
    claim); a run far longer than usual still has them taken back."""
    w, q, sp = pipe()
    ids = [q.enqueue(["true"]) for _ in range(2 * DEPTH_MIN)]
    w.turn()
    clocks.advance(HOT_S * 3)  # the keeper, busy, has not started the head yet: it is not a long run
    w.turn()
    assert sp.unspawned == [] and w.status()["pending"]
    sp.start(ids[0])
    clocks.advance(HOT_S * 0.9)
    sp.exit(ids[0], 0)
    sp.start(ids[1])
    w.turn()
    assert w.pipeline.hot_s("default") == pytest.approx(HOT_FACTOR * HOT_S * 0.9)
    clocks.advance(HOT_S * 1.6)  # older than HOT_S, as a loaded machine hears a `true`
    w.turn()
    assert sp.unspawned == []  # its chain stays
    sp.exit(ids[1], 0)
    sp.start(ids[2])
    w.turn()
    assert all(q.get(j).state == "running" for j in ids[2:DEPTH_MIN + 2])  # none given back
    clocks.advance(w.pipeline.hot_s("default") * 1.01)  # far longer than this lane's runs: taken back
    w.turn()
    assert sp.unspawned and HOT_S < w.pipeline.hot_s("default") <= HOT_MAX_S


def test_turns_are_paced_only_while_the_keeper_holds_runs_to_start(pipe):
    """A burst: the worker may wait PACE_S between turns, to record several
    ends and claim several successors in one transaction. A lone job (or
    the last of a burst) is never kept waiting."""
    w, q, sp = pipe()
    a = q.enqueue(["true"])
    w.turn()
    assert not w.pipeline.paced()  # one job: nothing held behind it
    ids = [q.enqueue(["true"]) for _ in range(3)]
    sp.start(a)
    w.turn()
    assert w.pipeline.paced() and [p["id"] for p in w.status()["pending"]] == ids
    for prev, nxt in zip([a] + ids, ids + [None]):
        sp.exit(prev, 0)
        if nxt is not None:
            sp.start(nxt)
        w.turn()
        assert w.pipeline.paced() == bool(w.status()["pending"])
    assert not w.pipeline.paced() and q.get(ids[-1]).state == "done"


def test_a_run_that_ends_with_nothing_behind_it_ends_the_pace(pipe, monkeypatch):
    """The pace lets ends gather while the keeper has runs in hand; a run
    that ends with nothing behind it (its slot ran dry: a burst's last job)
    ends the pace at once: its outcome, and the lane's next claim, wait for
    no PACE_S. An end with a successor to start keeps the pace."""
    import sloth_daemon.daemon.worker.loop as loop_mod

    monkeypatch.setattr(loop_mod, "PACE_S", 60.0)  # longer than the test: only a hurry ends it
    w, q, sp = pipe()
    a = q.enqueue(["true"])
    w.turn()
    b = q.enqueue(["true"])
    sp.start(a)
    w.turn()
    assert w.pipeline.paced()

    async def go() -> None:
        pace = asyncio.ensure_future(w._pace())
        await asyncio.sleep(0.01)
        sp.exit(a, 0)  # b starts behind it: the pace goes on
        sp.start(b)
        await asyncio.sleep(0.01)
        assert not pace.done() and not w.signals.hurry.is_set()
        sp.exit(b, 0)  # nothing behind b
        await asyncio.wait_for(pace, 5)

    asyncio.run(go())
    w.turn()
    assert q.get(b).state == "done" and not w.pipeline.paced()


def test_a_pending_run_dropped_unstarted_with_a_successor_keeps_the_pace(pipe):
    """A run in the middle of a chain that ends without starting (fenced,
    its start failed) hands its successor on to the run in front: nothing
    ran dry, so the pace goes on; the chain's last one dropped ends it."""
    w, q, sp = pipe()
    a = q.enqueue(["true"])
    w.turn()
    b, c = q.enqueue(["true"]), q.enqueue(["true"])
    sp.start(a)
    w.turn()
    assert sp.after_of(c) == b and w.pipeline.paced()
    w.signals.hurry.clear()
    sp.sinks[sp.key_of(b)].exited(unstarted("fenced before it started", "fence"))
    assert not w.signals.hurry.is_set()  # c waits behind a now
    sp.sinks[sp.key_of(c)].spawn_failed("command not found", False)
    assert w.signals.hurry.is_set()  # nothing behind a any more


def test_a_chain_of_true_outlasts_several_paced_turns():
    """The worker refills a chain once a paced turn (PACE_S, its work, its
    fsync: ~2-3 paces in all): a chain of `true` (~1.2 ms each in the
    keeper, quiet) must hold more than that or the keeper waits for the
    worker. 8 held `true` behind a 3 ms pace ran dry before 16% of the
    starts (perf sched, docs/benchmarks.md); DEPTH and PACE_S are set
    together."""
    true_s = 0.0012
    assert DEPTH * true_s >= 4 * PACE_S
    assert HOLD_S / DEPTH >= 2 * true_s  # a `true` lane gets the whole DEPTH, even heard late

"""A run's progress and what each run cost (issue 31, docs/progress.md), on
both engines through the contract: the latest progress on the running
attempt's row only, a cost per attempt kept with it, past runs' times for
estimates, bad values refused with nothing written.

Contract tests: each runs against SQLite and PostgreSQL on a ManualClock.
"""

from __future__ import annotations

import pytest

from sloth_daemon.errors import BadRequest, LeaseLost

COST = {"cpu_s": 1.25, "peak_rss_bytes": 200 << 20, "wall_s": 2.5, "ended": "exit 0", "covers": "rusage"}


def test_progress_is_the_running_attempts_latest_only(q, clock):
    jid = q.enqueue(["true"])
    job = q.claim("w")
    assert job.progress is None
    got = q.set_progress(jid, job.token, {"fraction": 0.25, "source": "line", "eta_s": None, "at": 5.0})
    assert got.progress == {"fraction": 0.25, "source": "line", "eta_s": None, "at": 5.0}
    q.set_progress(jid, job.token, {"fraction": 0.5, "source": "tqdm", "eta_s": 30, "at": 6.0})
    assert q.get(jid).progress == {"fraction": 0.5, "source": "tqdm", "eta_s": 30.0, "at": 6.0}
    assert q.get(jid).to_dict()["progress"]["fraction"] == 0.5
    assert [j.progress["fraction"] for j in q.listing(now=clock.now()).jobs] == [0.5]
    q.fail(jid, job.token, message="exit 1")
    assert q.get(jid).progress is None  # no longer running: none
    clock.advance(1000)
    again = q.claim("w")
    assert again.id == jid and again.progress is None  # a new attempt never shows the last one's


def test_progress_needs_the_lease_and_a_sound_value(q):
    jid = q.enqueue(["true"])
    job = q.claim("w")
    with pytest.raises(LeaseLost):
        q.set_progress(jid, "not-the-token", {"fraction": 0.5, "source": "line"})
    for bad in ({"fraction": 1.5, "source": "line"}, {"fraction": float("nan"), "source": "line"},
                {"fraction": 0.5, "source": "guess"}, {"fraction": True, "source": "line"},
                {"fraction": 0.5, "source": "line", "eta_s": -1}):
        with pytest.raises(BadRequest):
            q.set_progress(jid, job.token, bad)
    assert q.get(jid).progress is None


def test_each_attempts_cost_is_kept_with_it(q, clock):
    jid = q.enqueue(["true"])
    job = q.claim("w")
    q.record_cost(jid, 1, {**COST, "ended": "exit 1"})
    q.fail(jid, job.token, message="exit 1")
    clock.advance(1000)
    job = q.claim("w")
    q.record_cost(jid, 2, COST, durable=True)
    q.complete(jid, job.token)
    runs = q.costs([jid, 999])[jid]
    assert [r["attempt"] for r in runs] == [1, 2]
    assert runs[0]["cost"]["ended"] == "exit 1"
    assert runs[1]["cost"] == COST
    q.record_cost(jid, 2, {**COST, "cpu_s": 3.0})  # the keeper said it again (a restart): replaced
    assert q.costs([jid])[jid][1]["cost"]["cpu_s"] == 3.0
    q.record_cost(999, 1, COST)  # a job that is gone takes nothing
    assert q.costs([999]) == {}


def test_a_bad_cost_is_refused_and_nothing_written(q):
    jid = q.enqueue(["true"])
    for bad in ({**COST, "cpu_s": -1}, {**COST, "peak_rss_bytes": 1.5}, {**COST, "covers": "guess"}, "x"):
        with pytest.raises(BadRequest):
            q.record_cost(jid, 1, bad)
    assert q.costs([jid]) == {}


def test_past_runs_times_by_key_label_command_and_schedule(q, clock):
    def run(wall: float, **kw: object) -> int:
        jid = q.enqueue(["make", "it"], **kw)
        job = q.claim("w")
        assert job.id == jid
        q.record_cost(jid, job.attempts, {**COST, "wall_s": wall})
        q.complete(jid, job.token)
        clock.advance(1)
        return jid

    run(10, label="nightly")
    run(20, label="nightly")
    run(30, key="schedule:backup:100")
    run(40, key="schedule:backup:200")
    jid = q.enqueue(["make", "it"], label="nightly")  # failed runs do not count
    job = q.claim("w")
    q.record_cost(jid, 1, {**COST, "wall_s": 999})
    q.fail(jid, job.token, retry=False)
    assert sorted(q.run_times("label", "nightly")) == [10, 20]
    assert sorted(q.run_times("key", "schedule:backup:", prefix=True)) == [30, 40]
    assert q.run_times("key", "schedule:backup:200") == [40]
    assert sorted(q.run_times("command", '["make", "it"]')) == [10, 20, 30, 40]
    with pytest.raises(BadRequest):
        q.run_times("cwd; DROP TABLE jobs", "x")


def test_a_cost_written_in_a_unit_is_kept_whatever_becomes_of_its_outcome(q, clock):
    """In a unit (the worker's turn) a run's cost travels with its outcome
    (on PostgreSQL in the outcome's statement): kept when the outcome is
    written, when the outcome is refused (a lost lease: the cost is a fact
    of the run), when the outcome settles jobs waiting for it (a
    transaction), and when no outcome follows before the unit ends."""
    done, lost, waited, alone = (q.enqueue([x]) for x in ("done", "lost", "waited", "alone"))
    q.enqueue_many([{"command": ["after"], "after": [waited]}])
    held = {j: q.claim("w", lanes=["default"]) for j in (done, lost, waited, alone)}
    assert {j: h.id for j, h in held.items()} == {j: j for j in held}
    with q.unit():
        for j in (done, lost, waited, alone):
            q.record_cost(j, 1, {**COST, "cpu_s": float(j)})
        q.complete(done, held[done].token)
        with pytest.raises(LeaseLost):
            q.complete(lost, held[done].token)
        q.complete(waited, held[waited].token)
    assert (q.get(done).state, q.get(lost).state, q.get(waited).state) == ("done", "running", "done")
    costs = q.costs([done, lost, waited, alone])
    assert {j: [r["cost"]["cpu_s"] for r in costs[j]] for j in costs} == {j: [float(j)] for j in held}


def test_complete_many_writes_each_outcome_under_its_own_token_and_refuses_only_the_stale(q, clock):
    """A batch of outcomes (the worker's turn, one statement on
    PostgreSQL): a stale token, a job gone, one never claimed each change
    nothing of their own and leave the others written, their error in
    their place; a job others wait for is ended as complete() ends it (its
    dependent queued); each run's cost is kept whatever became of its
    outcome; each written job's process and events in order."""
    from sloth_daemon.backends.contract import Completion
    from sloth_daemon.errors import IllegalTransition, JobNotFound, LeaseLost

    a, stale, waited, b, never = (q.enqueue([x]) for x in ("a", "stale", "waited", "b", "never"))
    after = q.enqueue_many([{"command": ["after"], "after": [waited]}])[0]
    held = {j: q.claim("w", lanes=["default"]) for j in (a, stale, waited, b)}
    assert {j: h.id for j, h in held.items()} == {j: j for j in held}
    runner = {"pid": 4242, "started_at": clock.now() - 1}
    with q.unit():
        for j in (a, stale, waited, b):
            q.record_cost(j, 1, {**COST, "cpu_s": float(j)})
        got = q.complete_many([
            Completion(a, held[a].token, "ok", 0, clock.now() - 0.5, runner),
            Completion(stale, held[a].token, "ok", 0),  # another job's token
            Completion(waited, held[waited].token, "ok", 0, None, runner),
            Completion(999, "t"),
            Completion(never, "t"),
            Completion(b, held[b].token, "fine", 3),
        ], durable=False)
    assert [type(x).__name__ for x in got] == ["Job", "LeaseLost", "Job", "JobNotFound", "IllegalTransition", "Job"]
    assert isinstance(got[1], LeaseLost) and isinstance(got[3], JobNotFound) and isinstance(got[4], IllegalTransition)
    assert [(x.id, x.state.value) for x in (got[0], got[2], got[5])] == [(a, "done"), (waited, "done"), (b, "done")]
    assert q.get(stale).state.value == "running" and q.get(stale).token == held[stale].token
    assert q.get(never).state.value == "queued" and q.get(after).state.value == "queued"
    assert (q.get(b).exit_code, q.get(b).message, q.get(a).runner["pid"]) == (3, "fine", 4242)
    assert [e.kind for e in q.events(a)] == ["claimed", "started", "done"]
    assert [e.kind for e in q.events(b)] == ["claimed", "done"]
    assert [e.kind for e in q.events(stale)] == ["claimed"]
    costs = q.costs([a, stale, waited, b])
    assert {j: [r["cost"]["cpu_s"] for r in costs[j]] for j in costs} == {j: [float(j)] for j in held}
    assert q.complete_many([]) == []
    again = q.complete_many([Completion(stale, held[stale].token), Completion(stale, held[stale].token)])
    assert type(again[0]).__name__ == "Job" and isinstance(again[1], LeaseLost)  # one job twice: once


def test_complete_many_of_one_job_twice_keeps_its_runs_cost(q, clock):
    """One job twice in a batch is written as complete() each (the second
    stale): its run's cost, recorded before in the unit, is still kept."""
    from sloth_daemon.backends.contract import Completion

    j = q.enqueue(["x"])
    held = q.claim("w", lanes=["default"])
    with q.unit():
        q.record_cost(j, 1, COST)
        got = q.complete_many([Completion(j, held.token), Completion(j, held.token)], durable=False)
    assert type(got[0]).__name__ == "Job" and isinstance(got[1], LeaseLost)
    assert [r["cost"]["cpu_s"] for r in q.costs([j])[j]] == [COST["cpu_s"]]

"""The runs counted from the queue's history, alike on both engines
(backends/run_tally.py): outcome and duration of each run, and counts that
never go back when `sloth prune` deletes the history they came from."""

from __future__ import annotations

from sloth_daemon.backends import open_read_only, run_tally


def _run(q, clock, *, lane: str = "default", took: float, ok: bool = True, retry: bool = True) -> int:
    jid = q.enqueue(["x"], lane=lane) if lane != "default" else q.enqueue(["x"])
    job = q.claim("w", lanes=[lane]) if lane != "default" else q.claim("w")
    assert job is not None and job.id == jid
    began = clock.now()
    clock.advance(took)
    runner = {"pid": 1, "started_at": began}
    if ok:
        q.complete(jid, job.token, message="exit 0", exit_code=0, ended_at=clock.now(), runner=runner)
    else:
        q.fail(jid, job.token, message="exit 1", exit_code=1, ended_at=clock.now(), runner=runner, retry=retry)
    return jid


def test_runs_by_lane_and_outcome_with_durations(q, clock):
    _run(q, clock, took=0.005)
    _run(q, clock, took=2.0)
    _run(q, clock, took=30.0, ok=False, retry=False)
    _run(q, clock, lane="gpu", took=0.5)
    t = q.run_tally()
    done, failed, gpu = t[("default", "done")], t[("default", "failed")], t[("gpu", "done")]
    assert (done.n, done.timed, round(done.sum_s, 3)) == (2, 2, 2.005)
    assert done.le[:4] == [1, 1, 1, 2]  # 0.01, 0.1, 1, 10 s
    assert (failed.n, failed.le[3], failed.le[4]) == (1, 0, 1)  # 30 s: over 10 s, within 60 s
    assert (gpu.n, gpu.le[1], gpu.le[2]) == (1, 0, 1)
    assert set(t) == {("default", "done"), ("default", "failed"), ("gpu", "done")}


def test_a_run_still_running_is_not_counted_and_one_whose_lease_was_lost_is(q, clock):
    jid = q.enqueue(["x"])
    job = q.claim("w")
    q.set_runner(jid, job.token, {"pid": 1, "started_at": clock.now()})
    assert q.run_tally() == {}
    clock.advance(1000)  # its lease (100 s) expired for good: the next claim takes it again
    again = q.claim("w2")
    assert again is not None and again.id == jid
    lost = q.run_tally()[("default", "lost")]
    assert (lost.n, lost.timed) == (1, 0)


def test_pruning_the_history_never_takes_a_count_back(q, clock, queue_target):
    for took in (0.5, 5.0, 50.0):
        _run(q, clock, took=took)
    _run(q, clock, took=1.0, ok=False, retry=False)
    before = q.run_tally()
    clock.advance(10)
    assert q.prune(0) == 4
    assert q.counts()["done"] == 0
    assert q.run_tally() == before  # the pruned runs are kept as a tally, in the prune's transaction
    _run(q, clock, took=0.05)
    clock.advance(10)
    assert q.prune(0) == 1
    after = q.run_tally()
    assert after[("default", "done")].n == 4 and after[("default", "done")].le[1] == 1
    assert after[("default", "failed")] == before[("default", "failed")]
    assert q.prune(0, dry_run=True) == 0 and q.run_tally() == after
    with open_read_only(queue_target) as ro:  # the CLI without a daemon reads the same
        assert ro.run_tally() == after


def test_the_oldest_queued_job_of_each_lane(q, clock):
    q.enqueue(["a"])
    clock.advance(5)
    q.enqueue(["b"])
    q.enqueue(["c"], lane="x", not_before=65.0)
    assert q.oldest_queued() == {"default": 0.0, "x": 65.0}


def test_a_record_of_another_bucket_list_is_read_as_far_as_it_fits():
    t = run_tally.from_meta([["l", "done", 3, 3, 1.5, [1, 2]]])
    assert t[("l", "done")].le == [1, 2] + [3] * (len(run_tally.BUCKETS) - 2)
    assert run_tally.from_meta(None) == {}

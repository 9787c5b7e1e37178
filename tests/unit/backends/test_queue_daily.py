"""The queue's round-2 contract: dependencies (blocked jobs), requests on many
jobs, listings with totals, the lanes table and the read-only view. A real
SQLite file and a ManualClock, as in test_queue.py."""

from __future__ import annotations

import sqlite3

import pytest

from sloth_daemon.backends import open_read_only
from sloth_daemon.errors import BadRequest, IllegalTransition, JobNotFound, StorageError
from sloth_daemon.models import JobState
from tests.support.queues import sql


def run(q, jid: int, *, ok: bool = True, retry: bool = False):
    job = q.claim("w", lanes=[q.get(jid).lane])
    assert job is not None and job.id == jid, (job, jid)
    if ok:
        return q.complete(jid, job.token)
    return q.fail(jid, job.token, message="exit 1", retry=retry)


@pytest.fixture
def side(q):
    seen: list[tuple[int, str]] = []
    q.on_side_change = lambda job: seen.append((job.id, job.state.value))
    return seen


# ------------------------------------------------------------ dependencies
def test_a_blocked_job_is_never_claimed_and_is_queued_when_its_last_prerequisite_is_done(q, clock, side):
    a, b = q.enqueue(["a"]), q.enqueue(["b"])
    (c,) = q.enqueue_many([{"command": ["c"], "after": [a, b], "priority": 9}])
    assert q.get(c).state is JobState.BLOCKED and q.get(c).after == [a, b]
    assert q.next_due_at() == 0 and q.claim("w").id == a  # c's priority 9 does not matter while blocked
    q.complete(a, q.get(a).token)
    assert q.get(c).state is JobState.BLOCKED and side == []
    clock.set(50)
    run(q, b)
    job = q.get(c)
    assert (job.state, job.not_before) == (JobState.QUEUED, 50)  # due from when it became ready
    assert side == [(c, "queued")]
    assert [(e.kind, e.message) for e in q.events(c)] == [("ready", f"job {b} is done; nothing left to wait for")]
    assert [p["id"] for p in q.prereqs(c)] == [a, b] and q.dependents(a) == [c]


def test_a_failed_prerequisite_cancels_what_needs_it_done_down_the_chain(q, side):
    a = q.enqueue(["a"])
    b, c, d = q.enqueue_many([{"command": ["b"], "after": [a]},
                              {"command": ["c"], "after_previous": "after"},
                              {"command": ["d"], "after_any": [a]}])
    run(q, a, ok=False)
    assert [q.get(i).state.value for i in (b, c, d)] == ["cancelled", "cancelled", "queued"]
    assert sorted(side) == [(b, "cancelled"), (c, "cancelled"), (d, "queued")]
    assert q.get(b).message == f"not run: job {a}, which it runs after, failed"
    assert q.get(c).message == f"not run: job {b}, which it runs after, was cancelled"
    assert q.get(c).finished_at is not None


def test_a_retried_failure_does_not_release_its_dependents(q, clock):
    a = q.enqueue(["a"])
    (b,) = q.enqueue_many([{"command": ["b"], "after": [a]}])
    run(q, a, ok=False, retry=True)
    assert q.get(a).state is JobState.QUEUED and q.get(b).state is JobState.BLOCKED


def test_cancelling_a_prerequisite_cascades_in_one_transaction(q, side):
    a = q.enqueue(["a"])
    chain = q.enqueue_many([{"command": [str(i)], **({"after": [a]} if i == 0 else {"after_previous": "after"})}
                            for i in range(500)])
    q.cancel(a)
    assert {q.get(i).state for i in chain} == {JobState.CANCELLED} and len(side) == 500


def test_prerequisites_already_ended_decide_at_once(q):
    done, failed = q.enqueue(["d"]), q.enqueue(["f"])
    run(q, done)
    run(q, failed, ok=False)
    x, y, z = q.enqueue_many([{"command": ["x"], "after": [done]},
                              {"command": ["y"], "after": [failed]},
                              {"command": ["z"], "after_any": [failed]}])
    assert [q.get(i).state.value for i in (x, y, z)] == ["queued", "cancelled", "queued"]
    assert [e.kind for e in q.events(y)] == ["cancelled"]


def test_bad_prerequisites_refuse_the_whole_batch(q):
    a = q.enqueue(["a"])
    for specs, err in [
        ([{"command": ["x"]}, {"command": ["y"], "after": [999]}], JobNotFound),
        ([{"command": ["x"], "after": [a], "after_any": [a]}], BadRequest),
        ([{"command": ["x"], "after": ["1"]}], BadRequest),
        ([{"command": ["x"], "after": [0]}], BadRequest),
        ([{"command": ["x"], "after_previous": "after"}], BadRequest),  # nothing before it
        ([{"command": ["x"]}, {"command": ["y"], "after_previous": "soon"}], BadRequest),
        ([{"command": ["x"], "retry_exit": [0]}], BadRequest),
        ([{"command": ["x"], "no_retry_exit": [256]}], BadRequest),
    ]:
        with pytest.raises(err):
            q.enqueue_many(specs)
    assert [j.id for j in q.jobs()] == [a]


def test_retrying_a_job_whose_prerequisite_is_unfinished_blocks_it_again(q):
    a = q.enqueue(["a"])
    (b,) = q.enqueue_many([{"command": ["b"], "after": [a]}])
    run(q, a, ok=False)
    assert q.get(b).state is JobState.CANCELLED
    assert q.retry(b).state is JobState.QUEUED  # a failed: retrying b is the user's say-so
    q.cancel(b)
    q.retry(a)
    assert q.retry(b).state is JobState.BLOCKED  # a runs again: b waits for it
    assert "waits for job" in q.events(b)[-1].message
    run(q, a)
    assert q.get(b).state is JobState.QUEUED


def test_a_key_dedupes_against_a_blocked_job_too(q):
    a = q.enqueue(["a"])
    (b,) = q.enqueue_many([{"command": ["b"], "after": [a], "key": "k"}])
    assert q.enqueue(["other"], key="k") == b


def test_exit_code_rules_are_stored_and_default_to_126_127(q):
    a, b, c = q.enqueue_many([{"command": ["a"]}, {"command": ["b"], "retry_exit": [3, 1, 3]},
                              {"command": ["c"], "no_retry_exit": []}])
    ja, jb, jc = q.get(a), q.get(b), q.get(c)
    assert (ja.retry_exit, ja.no_retry_exit) == (None, [126, 127])
    assert not ja.retries_exit(127) and ja.retries_exit(2)
    assert jb.retry_exit == [1, 3] and jb.retries_exit(3) and not jb.retries_exit(2)
    assert jc.retries_exit(127)


# ----------------------------------------------------- requests on many
def test_cancel_many_by_ids_reports_what_it_left_alone(q, side):
    a, b, c = q.enqueue(["a"]), q.enqueue(["b"]), q.enqueue(["c"], lane="c")
    (d,) = q.enqueue_many([{"command": ["d"], "after": [a]}])
    run(q, c)
    res = q.cancel_many([a, c, d, b])
    assert [j.id for j in res.jobs] == [a, d, b]  # d went with a, and counts as done
    assert res.skipped == [(c, f"job {c} is done")]
    with pytest.raises(JobNotFound):
        q.cancel_many([b, 12345])
    assert q.get(b).state is JobState.CANCELLED


def test_cancel_many_leaves_out_the_excluded_and_a_cancelled_runs_end_is_noted(q):
    """The daemon asks the keeper about some runs before cancelling their
    jobs (exclude), and notes how a run of a cancelled job ended."""
    a, b = q.enqueue(["a"], lane="x"), q.enqueue(["b"], lane="x")
    claimed = q.claim("w", lanes=["x"])
    assert claimed is not None and claimed.id == a
    res = q.cancel_many(lane="x", exclude=[b])
    assert [j.id for j in res.jobs] == [a] and res.skipped == [] and q.get(b).state is JobState.QUEUED
    assert [j.id for j in q.cancel_many([a, b], exclude={a, b}).jobs] == []
    job = q.note_ended(a, 1, "exit 0; it ended by itself")
    assert job.state is JobState.CANCELLED and job.attempts == 1
    last = q.events(a)[-1]
    assert (last.kind, last.attempt, last.message) == ("ended", 1, "exit 0; it ended by itself")
    assert [e.kind for e in q.events(a)] == ["claimed", "cancelled", "ended"]
    with pytest.raises(JobNotFound):
        q.note_ended(a + 100, 1, "exit 0")


def test_cancel_and_retry_by_selection(q):
    x1, x2 = q.enqueue(["1"], lane="x"), q.enqueue(["2"], lane="x")
    y = q.enqueue(["3"], lane="y")
    run(q, x1, ok=False)
    assert [j.id for j in q.cancel_many(lane="x").jobs] == [x2]
    assert [j.id for j in q.cancel_many(lane="y", states=["running"]).jobs] == []
    with pytest.raises(BadRequest):
        q.cancel_many(lane="x", states=["done"])
    with pytest.raises(BadRequest):
        q.cancel_many()
    res = q.retry_many(lane="x")  # default: failed ones
    assert [j.id for j in res.jobs] == [x1] and q.get(x2).state is JobState.CANCELLED
    assert [j.id for j in q.retry_many(states=["cancelled"], busy={x2}).jobs] == []
    assert q.get(y).state is JobState.QUEUED


def test_restart_copies_the_spec_as_a_new_job(q, clock):
    a = q.enqueue(["make"], lane="b", priority=3, label="build", env={"A": "1"}, cwd="/w", key="k")
    blocked = q.enqueue(["z"])
    clock.set(10)
    run(q, a)
    res = q.restart([a, blocked])
    (new,) = res.jobs
    assert res.skipped == [(blocked, f"job {blocked} is queued; only finished jobs can be restarted")]
    assert (new.command, new.lane, new.priority, new.label, new.env, new.cwd, new.key) == (
        ["make"], "b", 3, "build", {"A": "1"}, "/w", "k")
    assert (new.state, new.attempts, new.not_before) == (JobState.QUEUED, 0, 10)
    assert q.events(a)[-1].message == f"queued again as job {new.id}"
    assert q.restart([a]).skipped == [(a, f"job {new.id} with the same key 'k' is still active")]


def test_prune_by_state_and_lane_with_a_dry_run(q, clock):
    ids = [q.enqueue([str(i)], lane="ab"[i % 2]) for i in range(4)]
    for i in ids[:3]:
        run(q, i, ok=i != ids[0])
    clock.advance(100)
    assert q.prune(0, states=["failed"], dry_run=True) == 1
    assert q.prune(0, lane="b", dry_run=True) == 1
    assert q.prune(0, states=["done"], lane="a") == 1  # ids[2]
    assert sorted(j.id for j in q.jobs()) == [ids[0], ids[1], ids[3]]
    with pytest.raises(BadRequest):
        q.prune(0, states=["queued"])


# ------------------------------------------------------------- listings
def test_listing_orders_running_queued_blocked_finished_with_totals(q, clock):
    clock.set(100)
    old = q.enqueue(["old"])
    run(q, old)
    later = q.enqueue(["later"], not_before=500, priority=9)
    low, high = q.enqueue(["low"]), q.enqueue(["high"], priority=5)
    (blk,) = q.enqueue_many([{"command": ["b"], "after": [low]}])
    running = q.claim("w", lanes=["default"])
    assert running.id == high
    page = q.listing(now=clock.now())
    assert [j.id for j in page.jobs] == [high, low, later, blk, old]
    assert (page.total, page.counts["queued"], page.counts["blocked"]) == (5, 2, 1)
    assert [j.id for j in q.listing(limit=2, offset=1, now=clock.now()).jobs] == [low, later]
    assert q.listing(limit=2, offset=1, now=clock.now()).to_dict()["left_out"] == 2
    assert [j.id for j in q.listing(states=["claimed"], now=clock.now()).jobs] == [high]
    assert q.listing(finished_limit=0, now=clock.now()).total == 5
    assert [j.id for j in q.listing(lane="nope", now=clock.now()).jobs] == []
    with pytest.raises(ValueError):
        q.listing(states=["bogus"], now=0)


def test_lanes_table_and_lane_counts(q):
    q.enqueue(["a"], lane="video")
    b = q.enqueue(["b"], lane="video")
    q.enqueue_many([{"command": ["c"], "lane": "gpu", "after": [b]}])
    assert set(q.lane_rows()) == {"video", "gpu"}
    q.set_lane("video", 3, config_was=1)
    assert q.lane_rows()["video"]["concurrency"] == 3 and q.lane_rows()["video"]["config_was"] == 1
    q.claim("w")
    assert q.lane_counts() == {"video": {"blocked": 0, "queued": 1, "held": 0, "running": 1},
                               "gpu": {"blocked": 1, "queued": 0, "held": 0, "running": 0}}
    q.forget_lane("gpu")
    assert set(q.lane_rows()) == {"video"}


# ------------------------------------------------------------ read-only
def test_read_only_view_reads_and_never_writes(q, queue_target):
    a = q.enqueue(["a"])
    with open_read_only(queue_target) as ro:
        assert ro.get(a).command == ["a"] and ro.counts()["queued"] == 1
        assert [j.id for j in ro.listing(now=0).jobs] == [a] and ro.lane_rows().keys() == {"default"}
        with pytest.raises((sqlite3.OperationalError, StorageError), match="read-?only"):
            sql(ro, "DELETE FROM jobs")  # the database itself refuses
    assert q.get(a).state is JobState.QUEUED


def test_read_only_view_never_creates_a_file(tmp_path):
    with pytest.raises(FileNotFoundError):
        open_read_only(tmp_path / "none.db")
    assert not (tmp_path / "none.db").exists()


def test_read_only_view_refuses_another_schema(tmp_path):
    import sqlite3

    from sloth_daemon.backends.sqlite import db

    path = tmp_path / "old.db"
    conn = sqlite3.connect(path, isolation_level=None)
    db.migrate(conn, 3)
    conn.close()
    with pytest.raises(StorageError, match="schema v3"):
        open_read_only(path)


def test_illegal_single_transitions_still_raise(q):
    a = q.enqueue(["a"])
    run(q, a)
    with pytest.raises(IllegalTransition):
        q.cancel(a)
    with pytest.raises(IllegalTransition) as e:
        q.retry(a)
    assert "sloth restart" in e.value.hint


def test_latest_is_the_newest_job_or_the_newest_that_ran(q, queue_target):
    """What `sloth wait`, `show` and `logs` mean with no id (issue 28 #14, issue 30)."""
    assert q.latest() is None and q.latest(ran=True) is None
    a = q.enqueue(["a"])
    run(q, a)
    b = q.enqueue(["b"], not_before=3600)  # the newest, not started
    assert (q.latest(), q.latest(ran=True)) == (b, a)
    with open_read_only(queue_target) as ro:
        assert (ro.latest(), ro.latest(ran=True)) == (b, a)


@pytest.mark.backends("postgres")
def test_on_a_shared_queue_latest_is_of_the_jobs_a_machine_queued(make_queue, queue_target):
    """Each daemon's connections name it (PgOptions.origin); every job they
    insert, a restart's copy too, records it in jobs.origin."""
    from sloth_daemon.backends.postgres.db import PgOptions

    mine, theirs = make_queue(options=PgOptions(origin="a")), make_queue(options=PgOptions(origin="b"))
    a = mine.enqueue(["a"])
    run(mine, a)
    b = theirs.enqueue(["b"])
    run(theirs, b)
    assert (mine.latest(origin="a"), mine.latest(origin="b"), mine.latest()) == (a, b, b)
    (copy,) = [j.id for j in theirs.restart([a]).jobs]
    assert mine.latest(origin="b") == copy and mine.latest(origin="a", ran=True) == a
    assert mine.latest(origin="c") is None

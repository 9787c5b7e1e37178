"""Lease queue core: transitions, leases, ordering, validation and storage errors.

The contract tests (those using ``q``/``make_queue``) run against every
backend: a real SQLite file in tmp_path and a real PostgreSQL database, on a
ManualClock (see conftest.py); no test sleeps, and none asserts on elapsed
time. The storage tests at the end are about the SQLite file.
"""

from __future__ import annotations

import json
import math
import os
import sqlite3
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sloth_daemon.backends.sqlite import db
from sloth_daemon.errors import BadRequest, IllegalTransition, JobNotFound, LeaseLost, StorageError
from sloth_daemon.models import JobState
from sloth_daemon.queue import Queue
from tests.support.queues import in_transaction, make_inserts_fail, sql

QUEUED, CLAIMED, DONE, FAILED, CANCELLED = (
    JobState.QUEUED, JobState.CLAIMED, JobState.DONE, JobState.FAILED, JobState.CANCELLED,
)


def snapshot(q: Queue, job_id: int):
    """Everything observable about one job: its row and its event log."""
    return q.get(job_id), q.events(job_id)


def kinds(q: Queue, job_id: int) -> list[str]:
    return [e.kind for e in q.events(job_id)]


def row_count(q: Queue, table: str = "jobs") -> int:
    return sql(q, f"SELECT count(*) FROM {table}")[0][0]


def claim_order(q: Queue, **kw) -> list[int]:
    out = []
    while (j := q.claim("w", **kw)) is not None:
        out.append(j.id)
    return out


# ------------------------------------------------------------------ leases
def test_seed_expired_lease_is_reissued_only_after_lease_until(q, clock):
    jid = q.enqueue(["echo", "hi"])
    first = q.claim("w1")
    assert (first.id, first.state, first.attempts, first.worker) == (jid, CLAIMED, 1, "w1")
    assert first.lease_until == 100
    assert kinds(q, jid) == ["claimed"]

    clock.set(100)  # lease_until == now: not expired yet (strict)
    assert q.claim("w2") is None
    assert q.get(jid).token == first.token

    clock.set(101)
    second = q.claim("w2")
    assert second is not None and second.id == jid
    assert second.state == CLAIMED and second.attempts == 2
    assert second.token != first.token and second.worker == "w2"
    assert second.lease_until == 201
    ev = q.events(jid)
    assert [e.kind for e in ev] == ["claimed", "reclaimed"]
    assert (ev[-1].at, ev[-1].attempt) == (101, 2)
    assert "w1" in ev[-1].message  # says whose lease expired
    assert q.claim("w3") is None  # reissued once, not twice


@pytest.mark.parametrize(
    "max_attempts, cap, delays",
    [
        (4, 300, [2, 4, 8]),  # 2, 4, 8 s
        (5, 5, [2, 4, 5, 5]),  # 8 and 16 capped at 5
    ],
)
def test_fail_backs_off_exponentially_capped_then_fails(make_queue, clock, max_attempts, cap, delays):
    q = make_queue(max_attempts=max_attempts, backoff_cap_s=cap)
    jid = q.enqueue(["false"])
    for attempt, delay in enumerate(delays, start=1):
        job = q.claim("w")
        assert job is not None and (job.id, job.attempts) == (jid, attempt)
        t0 = clock.now()
        back = q.fail(jid, job.token, message="boom", exit_code=1)
        assert back.state == QUEUED and back.not_before == t0 + delay
        assert back.token is None and back.lease_until is None and back.exit_code == 1
        clock.set(t0 + delay - 0.001)
        assert q.claim("w") is None, "a retry must not be claimable before its not_before"
        assert q.next_due_at() == t0 + delay
        clock.set(t0 + delay)  # exactly not_before: due
    last = q.claim("w")
    assert last is not None and last.attempts == max_attempts
    out = q.fail(jid, last.token, message="boom")
    assert out.state == FAILED and out.attempts == max_attempts
    assert out.finished_at == clock.now() and out.token is None
    assert kinds(q, jid) == ["claimed", "failed"] * max_attempts
    clock.advance(10_000)
    assert q.claim("w") is None and q.next_due_at() is None


def test_fail_without_retry_fails_at_once(q):
    jid = q.enqueue(["x"])
    job = q.claim("w")
    out = q.fail(jid, job.token, message="bad config", retry=False, exit_code=2)
    assert (out.state, out.attempts, out.exit_code, out.message) == (FAILED, 1, 2, "bad config")
    assert q.claim("w") is None


def test_backoff_with_many_attempts_does_not_overflow(make_queue, clock):
    q = make_queue(max_attempts=2000, backoff_cap_s=1)
    jid = q.enqueue(["x"])
    sql(q, "UPDATE jobs SET attempts = 1100 WHERE id = ?", (jid,))
    job = q.claim("w")
    out = q.fail(jid, job.token)
    assert out.state == QUEUED and out.not_before == clock.now() + 1


def test_unclaim_undoes_a_claim_as_if_it_never_happened_but_keeps_a_reclaim(q, clock):
    """A claim whose run never started (pipelining took it back): queued,
    attempts and tries back, no token, lease or worker, and its history
    without the claim. A reclaim's event stays: that lease did run out (so
    the daemon only undoes plain claims: ``claim(reclaim=False)``)."""
    a = q.enqueue(["a"])
    before = q.get(a)
    job = q.claim("w")
    back = q.unclaim(a, job.token)
    assert (back.state, back.attempts, back.tries, back.token, back.worker, back.lease_until) == \
        (QUEUED, 0, 0, None, None, None)
    assert back.not_before == before.not_before and kinds(q, a) == []
    with pytest.raises((LeaseLost, IllegalTransition)):  # that token holds nothing any more
        q.unclaim(a, job.token)
    first = q.claim("w")
    clock.advance(q.get(a).lease_s + 1)  # its holder is gone: the next claim is a reclaim ...
    assert q.claim("w2", reclaim=False) is None  # ... which a claim that may be undone never makes
    again = q.claim("w2")
    q.unclaim(a, again.token)
    job = q.get(a)
    assert (job.state, job.attempts, job.tries, job.token) == (QUEUED, 1, 1, None)
    assert kinds(q, a) == ["claimed", "reclaimed"] and first.token != again.token
    assert q.claim("w3").attempts == 2


def test_stale_token_cannot_act_after_reclaim(q, clock):
    jid = q.enqueue(["x"])
    old = q.claim("w1")
    clock.set(101)
    new = q.claim("w2")
    assert new.id == jid
    before = snapshot(q, jid)
    ops = {
        "heartbeat": lambda: q.heartbeat(jid, old.token),
        "heartbeat+lease": lambda: q.heartbeat(jid, old.token, lease_s=5),
        "complete": lambda: q.complete(jid, old.token, exit_code=0),
        "fail": lambda: q.fail(jid, old.token, message="x"),
        "fail-no-retry": lambda: q.fail(jid, old.token, retry=False),
        "release": lambda: q.release(jid, old.token),
        "set_runner": lambda: q.set_runner(jid, old.token, {"pid": 1}),
        "renew_after_resume": lambda: q.renew_after_resume(jid, old.token, "slept"),
    }
    for name, op in ops.items():
        clock.advance(1)  # a write would show in updated_at
        with pytest.raises(LeaseLost):
            op()
        assert snapshot(q, jid) == before, name
    assert q.complete(jid, new.token).state == DONE  # the current holder is unaffected


def test_complete_of_an_id_that_is_no_int_is_job_not_found_and_writes_nothing(q, clock):
    """complete checks the lease in its update (no read first): an id given
    as text or a bool is still no job (SQLite would match "5" to job 5)."""
    jid = q.enqueue(["x"])
    job = q.claim("w1")
    before = snapshot(q, jid)
    for bad in (str(jid), True, float(jid)):
        clock.advance(1)
        with pytest.raises(JobNotFound):
            q.complete(bad, job.token, exit_code=0)  # type: ignore[arg-type]
        assert snapshot(q, jid) == before, bad
    with pytest.raises(JobNotFound):
        q.complete(jid + 1000, job.token)
    assert q.complete(jid, job.token, runner={"pid": 7, "started_at": 100.5}).state == DONE
    assert kinds(q, jid)[-2:] == ["started", "done"]  # the start before the end, with it


def test_lapsed_but_unreclaimed_lease_can_be_renewed(q, clock):
    jid = q.enqueue(["x"])
    job = q.claim("w1")
    clock.set(150)  # lease ended at 100; nobody claimed since
    hb = q.heartbeat(jid, job.token)
    assert (hb.state, hb.token, hb.attempts, hb.lease_until) == (CLAIMED, job.token, 1, 250)
    assert q.claim("w2") is None  # renewed: not up for grabs
    clock.set(260)
    hb = q.heartbeat(jid, job.token, lease_s=5)
    assert hb.lease_until == 265
    assert q.complete(jid, job.token).state == DONE
    assert kinds(q, jid) == ["claimed", "done"]


def test_renew_after_resume_and_set_runner(q, clock):
    jid = q.enqueue(["x"])
    job = q.claim("w")
    clock.set(500)
    out = q.renew_after_resume(jid, job.token, "machine slept 400s")
    assert out.lease_until == 600 and out.token == job.token
    out = q.set_runner(jid, job.token, {"pid": 42, "start": 1.5})
    assert out.runner == {"pid": 42, "start": 1.5}
    assert kinds(q, jid) == ["claimed", "resumed", "started"]
    # the next attempt sees the previous runner so the caller can check it is gone
    clock.set(700)
    again = q.claim("w2")
    assert again.attempts == 2 and again.runner == {"pid": 42, "start": 1.5}


@pytest.mark.parametrize("max_attempts", [1, 2])
def test_expired_lease_on_last_attempt_fails_with_lease_expired(make_queue, clock, max_attempts):
    q = make_queue(max_attempts=max_attempts)
    jid = q.enqueue(["x"], priority=5)
    other = q.enqueue(["y"])
    job = q.claim("w1")
    assert job.id == jid
    for n in range(2, max_attempts + 1):
        clock.advance(101)
        job = q.claim(f"w{n}")
        assert (job.id, job.attempts) == (jid, n)
    clock.advance(101)
    # the lost job is failed and the search goes on to the next due job
    nxt = q.claim("wz")
    assert nxt is not None and nxt.id == other
    lost = q.get(jid)
    assert lost.state == FAILED and lost.attempts == max_attempts
    assert lost.token is None and lost.finished_at == clock.now()
    ev = q.events(jid)
    assert ev[-1].kind == "lease_expired" and ev[-1].attempt == max_attempts
    assert [e.kind for e in ev].count("lease_expired") == 1
    q.complete(other, nxt.token)
    clock.advance(100_000)
    assert q.claim("w") is None and q.get(jid).state == FAILED
    assert q.next_due_at() is None


def test_release_gives_the_try_back_and_is_due_now(make_queue, clock):
    q = make_queue(max_attempts=3)
    jid = q.enqueue(["x"])
    job = q.claim("w")
    clock.set(2)
    q.fail(jid, job.token)  # attempt 1 used; due at 4
    clock.set(4)
    job = q.claim("w")
    assert job.attempts == 2
    clock.set(10)
    out = q.release(jid, job.token, message="daemon stopping")
    assert (out.state, out.attempts, out.tries, out.not_before) == (QUEUED, 2, 1, 10)
    assert out.token is None and out.lease_until is None
    ev = q.events(jid)[-1]
    assert (ev.kind, ev.attempt, ev.message, ev.at) == ("interrupted", 2, "daemon stopping", 10)
    with pytest.raises(LeaseLost):  # the released token is stale
        q.complete(jid, job.token)
    again = q.claim("w")
    # a run of its own (its own log), but the interruption was free: try 2, not 3
    assert again.id == jid and (again.attempts, again.tries) == (3, 2)


def test_release_of_first_attempt_then_stale_token_is_lease_lost(q):
    jid = q.enqueue(["x"])
    job = q.claim("w")
    out = q.release(jid, job.token)
    assert (out.attempts, out.tries, out.state) == (1, 0, QUEUED)
    before = snapshot(q, jid)
    for op in (q.heartbeat, q.complete, q.fail):
        with pytest.raises(LeaseLost):
            op(jid, job.token)
    assert snapshot(q, jid) == before


# ------------------------------------------------------------- ordering
def test_higher_priority_first(q):
    low, high, mid = q.enqueue(["a"]), q.enqueue(["b"], priority=5), q.enqueue(["c"], priority=1)
    neg = q.enqueue(["d"], priority=-3)
    assert claim_order(q) == [high, mid, low, neg]


def test_within_priority_by_not_before_then_id(q, clock):
    clock.set(100)
    a = q.enqueue(["a"], not_before=50)
    b = q.enqueue(["b"], not_before=30)
    c = q.enqueue(["c"], not_before=30)
    d = q.enqueue(["d"])  # due now (100)
    e = q.enqueue(["e"], not_before=10)
    assert claim_order(q) == [e, b, c, a, d]


def test_delayed_high_priority_job_does_not_block_due_ones(q, clock):
    later = q.enqueue(["a"], priority=9, not_before=60)
    now = q.enqueue(["b"], priority=0)
    assert q.claim("w").id == now
    assert q.claim("w") is None
    clock.set(60)
    assert q.claim("w").id == later


def test_expired_lease_competes_by_priority(q, clock):
    lost = q.enqueue(["a"], priority=1)
    q.claim("w1")
    clock.set(200)
    hi = q.enqueue(["b"], priority=2)
    lo = q.enqueue(["c"], priority=0)
    assert [q.claim("w").id for _ in range(3)] == [hi, lost, lo]
    assert kinds(q, lost) == ["claimed", "reclaimed"]


def test_lanes_filter_claim(q, clock):
    a = q.enqueue(["a"], lane="a", priority=5)
    b1 = q.enqueue(["b1"], lane="b")
    b2 = q.enqueue(["b2"], lane="b", priority=1)
    d = q.enqueue(["d"])
    assert q.claim("w", lanes=[]) is None
    assert q.claim("w", lanes=["nope"]) is None
    assert claim_order(q, lanes=["b"]) == [b2, b1]
    assert claim_order(q, lanes=["default", "zzz"]) == [d]
    # an expired lease is only reclaimed by a claim on its lane
    clock.set(500)
    assert claim_order(q, lanes=["a", "default"]) == [a, d]  # d's lease (100) expired too
    assert claim_order(q, lanes=["b"]) == [b2, b1]
    assert [q.get(i).attempts for i in (a, b1, b2, d)] == [1, 2, 2, 2]


def test_exclude_lanes_skips_queued_and_expired_jobs(q, clock):
    a = q.enqueue(["a"], lane="a", priority=9)
    b = q.enqueue(["b"], lane="b")
    assert q.next_due_at(exclude_lanes={"a", "b"}) is None
    assert q.claim("w", exclude_lanes={"a", "b"}) is None
    assert q.claim("w", exclude_lanes={"a"}).id == b
    assert q.claim("w", lanes=["a", "b"], exclude_lanes={"b"}).id == a
    clock.set(500)  # both leases expired
    assert q.next_due_at(exclude_lanes={"a", "b"}) is None
    assert q.next_due_at(exclude_lanes={"b"}) == math.nextafter(100, math.inf)
    assert q.claim("w", exclude_lanes={"a"}).id == b
    assert q.claim("w", exclude_lanes={"b"}).id == a


def test_claim_without_lanes_picks_best_across_lanes(q):
    ids = {ln: q.enqueue([ln], lane=ln, priority=p) for ln, p in (("x", 1), ("y", 3), ("z", 2))}
    assert claim_order(q) == [ids["y"], ids["z"], ids["x"]]


def test_claim_lease_override(q, clock):
    q.enqueue(["x"], lease_s=7)
    q.enqueue(["y"])
    assert q.claim("w").lease_until == 7  # the job's own lease
    assert q.claim("w", lease_s=3).lease_until == 3
    for bad in (0, -1, math.nan, "5", True):
        with pytest.raises(BadRequest):  # refused whether or not a job is due
            q.claim("w", lease_s=bad)
    z = q.enqueue(["z"])
    with pytest.raises(BadRequest):
        q.claim("w", lease_s=0)
    assert q.get(z).state == QUEUED and kinds(q, z) == []


# ----------------------------------------------------------- idempotency
def test_idempotency_key_while_active_then_new_job_after_done(q):
    a = q.enqueue(["x"], key="k")
    assert q.enqueue(["other", "cmd"], key="k") == a
    assert row_count(q) == 1
    job = q.claim("w")
    assert q.enqueue(["x"], key="k") == a  # still active while claimed
    assert row_count(q) == 1
    q.complete(a, job.token)
    b = q.enqueue(["x"], key="k")
    assert b != a and row_count(q) == 2
    assert q.get(b).state == QUEUED and q.get(a).state == DONE
    assert q.enqueue(["x"], key="other") not in (a, b)


@pytest.mark.parametrize("end", ["cancel", "fail"])
def test_idempotency_key_is_free_after_failed_or_cancelled(make_queue, end):
    q = make_queue(max_attempts=1)
    a = q.enqueue(["x"], key="k")
    if end == "cancel":
        q.cancel(a)
    else:
        job = q.claim("w")
        q.fail(a, job.token)
    assert q.enqueue(["x"], key="k") != a


def test_enqueue_many_dedups_keys_within_the_batch_and_keeps_order(q):
    existing = q.enqueue(["e"], key="e")
    ids = q.enqueue_many([
        {"command": ["a"]},
        {"command": ["b"], "key": "k"},
        {"command": ["c"]},
        {"command": ["d"]},
        {"command": ["b2"], "key": "k"},
        {"command": ["e2"], "key": "e"},
        {"command": ["f"]},
    ])
    assert ids[1] == ids[4] and ids[5] == existing
    assert len(set(ids)) == 6 and row_count(q) == 6  # existing + a, b, c, d, f
    for jid, cmd in zip(ids, ["a", "b", "c", "d", "b", "e", "f"]):
        assert q.get(jid).command == [cmd]


def test_enqueue_many_ids_after_the_newest_jobs_were_pruned(q, clock):
    first = q.enqueue_many([{"command": [str(i)]} for i in range(5)])
    for jid in first[3:]:
        q.cancel(jid)
    clock.set(10)
    assert q.prune(1) == 2  # the highest ids are gone; AUTOINCREMENT never reuses them
    ids = q.enqueue_many([{"command": ["a"]}, {"command": ["b"]}, {"command": ["c"]}])
    assert ids == [first[-1] + 1, first[-1] + 2, first[-1] + 3]
    assert [q.get(i).command for i in ids] == [["a"], ["b"], ["c"]]


def test_enqueue_stores_every_field(q, clock):
    clock.set(5)
    jid = q.enqueue(
        ["prog", "--flag", "ünï", "a\"b"], max_attempts=7, lease_s=12.5, not_before=40,
        priority=-2, lane="gpu", key="kk", cwd="/tmp", env={"A": "1", "B": ""},
        timeout_s=9, label="nightly", shell=True,
    )
    j = q.get(jid)
    assert j.command == ["prog", "--flag", "ünï", "a\"b"]
    assert (j.max_attempts, j.lease_s, j.not_before, j.priority, j.lane) == (7, 12.5, 40, -2, "gpu")
    assert (j.key, j.cwd, j.env, j.timeout_s, j.label, j.shell) == (
        "kk", "/tmp", {"A": "1", "B": ""}, 9, "nightly", True)
    assert (j.state, j.attempts, j.created_at, j.updated_at) == (QUEUED, 0, 5, 5)
    assert (j.token, j.lease_until, j.finished_at, j.runner) == (None, None, None, None)
    d = q.get(q.enqueue(["y"]))
    assert (d.max_attempts, d.lease_s, d.lane, d.priority, d.not_before) == (3, 100, "default", 0, 5)


# One queue serves every example: each adds its own job and reads it back.
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.text(min_size=0, max_size=8).filter(lambda s: "\x00" not in s), min_size=1, max_size=4))
def test_command_round_trips_as_json(q, argv):
    jid = q.enqueue(argv)
    assert q.get(jid).command == argv
    stored = sql(q, "SELECT command FROM jobs WHERE id = ?", (jid,))[0][0]
    assert stored == json.dumps(argv)


# ---------------------------------------------------------- user actions
def test_cancel_queued(q):
    jid = q.enqueue(["x"])
    out = q.cancel(jid, message="nope")
    assert out.state == CANCELLED and out.finished_at == 0
    assert kinds(q, jid) == ["cancelled"]
    assert q.claim("w") is None


def test_cancel_claimed_then_holder_gets_lease_lost(q, clock):
    jid = q.enqueue(["x"])
    job = q.claim("w")
    clock.set(3)
    out = q.cancel(jid)
    assert out.state == CANCELLED and out.token is None and out.lease_until is None
    before = snapshot(q, jid)
    for op in (lambda: q.heartbeat(jid, job.token), lambda: q.complete(jid, job.token),
               lambda: q.fail(jid, job.token), lambda: q.release(jid, job.token)):
        clock.advance(1)
        with pytest.raises(LeaseLost):
            op()
        assert snapshot(q, jid) == before
    clock.set(10_000)
    assert q.claim("w") is None  # a cancelled job is never reclaimed


@pytest.mark.parametrize("end", ["done", "failed", "cancelled"])
def test_cancel_finished_is_illegal_and_changes_nothing(make_queue, end):
    q = make_queue(max_attempts=1)
    jid = q.enqueue(["x"])
    if end == "cancelled":
        q.cancel(jid)
    else:
        job = q.claim("w")
        (q.complete if end == "done" else q.fail)(jid, job.token)
    before = snapshot(q, jid)
    with pytest.raises(IllegalTransition):
        q.cancel(jid)
    assert snapshot(q, jid) == before


@pytest.mark.parametrize("end", ["failed", "cancelled"])
def test_retry_requeues_with_fresh_tries(make_queue, clock, end):
    q = make_queue(max_attempts=2)
    jid = q.enqueue(["x"])
    job = q.claim("w")
    if end == "failed":
        q.fail(jid, job.token, retry=False)
    else:
        q.cancel(jid)
    clock.set(50)
    out = q.retry(jid)
    assert (out.state, out.attempts, out.tries, out.not_before, out.finished_at) == (QUEUED, 1, 0, 50, None)
    assert out.token is None and out.lease_until is None
    assert q.events(jid)[-1].kind == "retried"
    before = snapshot(q, jid)
    with pytest.raises(LeaseLost):  # queued with 0 tries, but that token was issued
        q.complete(jid, job.token)
    assert snapshot(q, jid) == before
    again = q.claim("w")
    assert again.id == jid and (again.attempts, again.tries) == (2, 1) and again.token != job.token
    with pytest.raises(LeaseLost):  # the token of the earlier run stays dead
        q.heartbeat(jid, job.token)


@pytest.mark.parametrize("state", ["queued", "claimed", "done"])
def test_retry_of_active_or_done_is_illegal(q, state):
    jid = q.enqueue(["x"])
    if state != "queued":
        job = q.claim("w")
        if state == "done":
            q.complete(jid, job.token)
    before = snapshot(q, jid)
    with pytest.raises(IllegalTransition):
        q.retry(jid)
    assert snapshot(q, jid) == before


def test_retry_blocked_while_another_job_with_the_key_is_active(q):
    a = q.enqueue(["x"], key="k")
    q.cancel(a)
    b = q.enqueue(["x"], key="k")
    assert b != a
    before = snapshot(q, a)
    with pytest.raises(IllegalTransition) as ei:
        q.retry(a)
    assert str(b) in ei.value.message
    assert snapshot(q, a) == before
    job = q.claim("w")
    with pytest.raises(IllegalTransition):  # claimed is active too
        q.retry(a)
    q.complete(b, job.token)
    assert q.retry(a).state == QUEUED


def test_prune_deletes_only_old_finished_jobs_and_their_events(make_queue, clock):
    q = make_queue(max_attempts=1)
    done = q.enqueue(["done"])
    q.complete(done, q.claim("w").token)  # finished at 0
    clock.set(50)
    failed = q.enqueue(["failed"])
    q.fail(failed, q.claim("w").token)  # finished at 50
    clock.set(90)
    cancelled = q.enqueue(["cancelled"])
    q.cancel(cancelled)  # finished at 90
    old_claimed = q.enqueue(["c"])  # active jobs are never pruned, however old
    assert q.claim("w").id == old_claimed
    old_queued = q.enqueue(["q"])
    clock.set(100)
    assert q.prune(30) == 2  # finished before t=70
    for gone in (done, failed):
        with pytest.raises(JobNotFound):
            q.get(gone)
    remaining = {j.id for j in q.jobs()}
    assert remaining == {cancelled, old_queued, old_claimed}
    ev_jobs = {r[0] for r in sql(q, "SELECT DISTINCT job_id FROM events")}
    assert ev_jobs == {cancelled, old_claimed}
    assert q.prune(10) == 0  # cancelled at 90 is exactly 10 s old: not older
    assert q.prune(0) == 1
    assert q.get(old_queued).state == QUEUED and q.get(old_claimed).state == CLAIMED
    with pytest.raises(BadRequest):
        q.prune(-1)


# ----------------------------------------------------------- bad requests
@pytest.mark.parametrize("bad_id", [10_000, 0, -1, "1", 1.0, None, True])
def test_unknown_ids_raise_job_not_found(q, bad_id):
    jid = q.enqueue(["x"])
    tok = q.claim("w").token
    before = snapshot(q, jid)
    for op in (
        lambda: q.get(bad_id), lambda: q.events(bad_id), lambda: q.cancel(bad_id),
        lambda: q.retry(bad_id), lambda: q.heartbeat(bad_id, tok), lambda: q.complete(bad_id, tok),
        lambda: q.fail(bad_id, tok), lambda: q.release(bad_id, tok),
        lambda: q.set_runner(bad_id, tok, {"pid": 1}), lambda: q.renew_after_resume(bad_id, tok, "m"),
    ):
        with pytest.raises(JobNotFound):
            op()
    assert snapshot(q, jid) == before


def test_lease_ops_on_a_never_claimed_job_are_illegal(q, clock):
    jid = q.enqueue(["x"])
    before = snapshot(q, jid)
    for op in (q.heartbeat, q.complete, q.fail, q.release):
        clock.advance(1)
        with pytest.raises(IllegalTransition):
            op(jid, "0123456789abcdef")
    assert snapshot(q, jid) == before


def test_wrong_token_and_double_complete(q, clock):
    jid = q.enqueue(["x"])
    job = q.claim("w")
    before = snapshot(q, jid)
    with pytest.raises(LeaseLost):
        q.complete(jid, "not-the-token")
    with pytest.raises(LeaseLost):
        q.complete(jid, None)
    assert snapshot(q, jid) == before
    q.complete(jid, job.token)
    done = snapshot(q, jid)
    clock.advance(1)
    for op in (q.complete, q.fail, q.heartbeat, q.release):
        with pytest.raises(LeaseLost):
            op(jid, job.token)
    assert snapshot(q, jid) == done


BAD_SPECS = [
    {"command": "echo hi"},
    {"command": []},
    {"command": ()},
    {"command": None},
    {},
    {"command": ["echo", 1]},
    {"command": [b"echo"]},
    {"command": ["echo", "a\x00b"]},
    {"command": ["x"], "env": {"A": 1}},
    {"command": ["x"], "env": {1: "a"}},
    {"command": ["x"], "env": "A=1"},
    {"command": ["x"], "env": ["A=1"]},
    {"command": ["x"], "env": {"A": "a\x00b"}},
    {"command": ["x"], "env": {"A\x00": "b"}},
    {"command": ["x"], "env": {"A=B": "c"}},
    {"command": ["x"], "env": {"": "c"}},
    {"command": ["x"], "max_attempts": 0},
    {"command": ["x"], "max_attempts": "3"},
    {"command": ["x"], "max_attempts": 2.5},
    {"command": ["x"], "max_attempts": True},
    {"command": ["x"], "max_attempts": 2**70},
    {"command": ["x"], "lease_s": 0},
    {"command": ["x"], "lease_s": -5},
    {"command": ["x"], "lease_s": math.nan},
    {"command": ["x"], "lease_s": math.inf},
    {"command": ["x"], "lease_s": "60"},
    {"command": ["x"], "not_before": math.nan},
    {"command": ["x"], "not_before": "soon"},
    {"command": ["x"], "priority": 1.5},
    {"command": ["x"], "priority": "1"},
    {"command": ["x"], "priority": 2**63},
    {"command": ["x"], "lane": ""},
    {"command": ["x"], "lane": 3},
    {"command": ["x"], "lane": "a\x00"},
    {"command": ["x"], "key": ""},
    {"command": ["x"], "key": 5},
    {"command": ["x"], "cwd": b"/tmp"},
    {"command": ["x"], "cwd": "/tmp\x00"},
    {"command": ["x"], "label": 1},
    {"command": ["x"], "timeout_s": 0},
    {"command": ["x"], "timeout_s": "1"},
    {"command": ["x"], "surprise": 1},
]


@pytest.mark.parametrize("spec", BAD_SPECS, ids=[repr(s)[:60] for s in BAD_SPECS])
def test_bad_enqueue_is_bad_request_and_writes_nothing(q, spec):
    q.enqueue(["keep"], key="k")
    with pytest.raises(BadRequest):
        q.enqueue_many([spec])
    if "command" in spec and set(spec) <= {"command", "env", "max_attempts", "lease_s",
                                           "not_before", "priority", "lane", "key", "cwd",
                                           "label", "timeout_s"}:
        with pytest.raises(BadRequest):
            q.enqueue(**spec)
    assert row_count(q) == 1 and row_count(q, "events") == 0


def test_enqueue_many_is_all_or_nothing(q):
    good = {"command": ["ok"]}
    with pytest.raises(BadRequest):
        q.enqueue_many([good, {"command": ["ok2"], "key": "k"}, good, {"command": []}, good])
    assert row_count(q) == 0
    assert q.enqueue_many([]) == []
    jid = q.enqueue(["x"], key="k")  # the key was never taken
    assert row_count(q) == 1 and q.get(jid).command == ["x"]


def test_enqueue_many_rolls_back_on_a_database_error(q):
    make_inserts_fail(q, "boom")  # the third insert fails inside the transaction
    with pytest.raises(StorageError):
        q.enqueue_many([{"command": ["a"]}, {"command": ["b"], "key": "x"},
                        {"command": ["c"], "label": "boom"}, {"command": ["d"]}])
    assert row_count(q) == 0
    assert not in_transaction(q)


# ------------------------------------------------------------ next_due_at
def test_next_due_at(q, clock):
    assert q.next_due_at() is None
    clock.set(10)
    a = q.enqueue(["a"], lane="a", not_before=50)
    q.enqueue(["b"], lane="b", not_before=20)
    assert q.next_due_at() == 20
    assert q.next_due_at(["a"]) == 50
    assert q.next_due_at(["zzz"]) is None
    assert q.next_due_at([]) is None
    clock.set(50)
    job = q.claim("w", lanes=["a"])  # lease until 150
    assert job.id == a
    assert q.next_due_at(["a"]) == math.nextafter(150, math.inf)  # just after lease_until
    assert q.next_due_at() == 20  # lane b is overdue: due time is in the past
    clock.set(q.next_due_at(["a"]))
    again = q.claim("w", lanes=["a"])  # due at exactly that time
    assert again is not None and again.id == a and again.attempts == 2


def test_next_due_at_takes_the_soonest_lease_in_the_lanes(q, clock):
    x = q.enqueue(["x"], lane="x", lease_s=300)
    y = q.enqueue(["y"], lane="y", lease_s=100)
    assert {q.claim("w").id, q.claim("w").id} == {x, y}
    assert q.next_due_at() == math.nextafter(100, math.inf)
    assert q.next_due_at(["x"]) == math.nextafter(300, math.inf)
    assert q.next_due_at(["y", "x"]) == math.nextafter(100, math.inf)
    q.enqueue(["z"], lane="x", not_before=200)
    assert q.next_due_at(["x"]) == 200
    clock.set(math.nextafter(100, math.inf))
    assert q.claim("w").id == y


def test_next_due_at_is_now_for_a_due_job(q, clock):
    clock.set(7)
    q.enqueue(["a"])
    assert q.next_due_at() == 7


def test_counts_list_and_running(q):
    a, b, c = q.enqueue(["a"]), q.enqueue(["b"]), q.enqueue(["c"])
    q.claim("w")
    q.cancel(c)
    assert q.counts() == {"blocked": 0, "queued": 1, "held": 0, "running": 1, "done": 0, "failed": 0, "cancelled": 1}
    assert [j.id for j in q.running()] == [a] and q.claimed() == q.running()
    assert [j.id for j in q.jobs(state="queued")] == [b]
    assert [j.id for j in q.jobs(limit=2)] == [b, c]


# ---------------------------------------------------------------- storage
def test_missing_parent_folder_is_created(tmp_path):
    path = tmp_path / "x" / "y" / "z" / "queue.db"
    with Queue(path) as q:
        q.enqueue(["x"])
    assert path.is_file()
    con = sqlite3.connect(path)
    assert con.execute("PRAGMA user_version").fetchone()[0] == db.SCHEMA_VERSION
    assert con.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    con.close()


@pytest.mark.backends("sqlite")
def test_connect_is_durable_wal_full(q, clock):
    c = q.engine.store.conn

    def sync() -> int:
        return c.execute("PRAGMA synchronous").fetchone()[0]

    assert c.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert sync() == 2  # FULL
    assert c.execute("PRAGMA foreign_keys").fetchone()[0] == 1
    # Each commit runs under its own mode (the connection keeps the last
    # one, so a run of non-durable commits sets it once): FULL for whatever
    # must survive a power cut, NORMAL for claims and renewals.
    jid = q.enqueue(["x"])
    assert sync() == 2
    job = q.claim("w")
    assert sync() == 1
    q.heartbeat(jid, job.token)
    assert sync() == 1
    with pytest.raises(LeaseLost):
        q.heartbeat(jid, "stale")
    q.complete(jid, job.token)
    assert sync() == 2 and not c.in_transaction
    q.enqueue(["y"])
    assert sync() == 2


def test_parent_is_a_regular_file_gives_storage_error(tmp_path):
    f = tmp_path / "not-a-dir"
    f.write_text("x")
    with pytest.raises(StorageError):
        Queue(f / "queue.db")
    with pytest.raises(StorageError):
        Queue(f / "sub" / "queue.db")
    assert f.read_text() == "x"


def test_path_under_dev_null_gives_storage_error():
    if not os.path.exists("/dev/null"):
        pytest.skip("no /dev/null")
    with pytest.raises(StorageError):
        Queue("/dev/null/sloth/queue.db")


def test_unwritable_dir_gives_storage_error_even_for_root():
    # procfs refuses new files to everyone, root included.
    if not sys.platform.startswith("linux") or not os.path.isdir("/proc/self"):
        pytest.skip("needs Linux procfs")
    with pytest.raises(StorageError):
        Queue("/proc/sloth-test-queue.db")
    with pytest.raises(StorageError):
        Queue("/proc/self/sloth-test/queue.db")


def test_wal_file_that_cannot_be_created_gives_storage_error(tmp_path):
    # root-proof stand-in for "cannot write in the data dir": the -wal path is taken
    d = tmp_path / "data"
    d.mkdir()
    (d / "queue.db-wal").mkdir()
    with pytest.raises(StorageError):
        Queue(d / "queue.db")


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() == 0,
                    reason="root ignores directory permissions")
def test_read_only_data_dir_gives_storage_error(tmp_path):
    d = tmp_path / "ro"
    d.mkdir()
    d.chmod(0o500)
    try:
        with pytest.raises(StorageError):
            Queue(d / "queue.db")
        with pytest.raises(StorageError):
            Queue(d / "sub" / "queue.db")
    finally:
        d.chmod(0o700)


def test_newer_schema_gives_storage_error_and_is_left_alone(db_path):
    Queue(db_path).close()
    con = sqlite3.connect(db_path)
    con.execute(f"PRAGMA user_version = {db.SCHEMA_VERSION + 1}")
    con.close()
    with pytest.raises(StorageError) as ei:
        Queue(db_path)
    assert "newer" in ei.value.message
    con = sqlite3.connect(db_path)
    assert con.execute("PRAGMA user_version").fetchone()[0] == db.SCHEMA_VERSION + 1
    con.close()


def test_non_sqlite_file_gives_storage_error_and_is_left_alone(tmp_path):
    path = tmp_path / "queue.db"
    junk = b"this is not a database, it is a shopping list\n" * 200
    path.write_bytes(junk)
    with pytest.raises(StorageError):
        Queue(path)
    assert path.read_bytes() == junk


def test_exclude_ids_never_reissues_those_expired_leases(make_queue, clock):
    """The daemon passes its own running jobs: after a stall it renews them
    rather than handing them to itself a second time."""
    q = make_queue(lease_s=10)
    a = q.enqueue(["a"])
    job = q.claim("daemon")
    clock.set(50)  # the lease lapsed while the holder was stopped
    assert q.next_due_at(exclude_ids={a}) is None
    assert q.claim("daemon", exclude_ids={a}) is None
    q.heartbeat(a, job.token)  # the holder is still the holder
    assert q.get(a).attempts == 1
    clock.set(100)
    assert q.claim("other").id == a  # without the exclusion it is re-issued


# ------------------------------------------------ runs, tries and refunds
def test_attempts_count_runs_and_tries_the_budget(make_queue, clock):
    """An interruption gives its try back but stays a run: every run gets its
    own attempt number (and so its own log file)."""
    q = make_queue(max_attempts=1)
    jid = q.enqueue(["x"])
    first = q.claim("w")
    q.release(jid, first.token)
    second = q.claim("w")
    assert (second.attempts, second.tries) == (2, 1)
    out = q.fail(jid, second.token)
    assert (out.state, out.attempts, out.tries) == (FAILED, 2, 1)


def test_a_crash_of_sloth_is_forgiven_a_bounded_number_of_times(make_queue, clock):
    from sloth_daemon.backends.rules import MAX_CRASH_REFUNDS

    q = make_queue(max_attempts=1)
    jid = q.enqueue(["x"])
    job = q.claim("w")
    for n in range(1, MAX_CRASH_REFUNDS + 1):
        out = q.abandon(jid, job.token, message="daemon crashed", refund=True)
        assert (out.tries, out.refunds) == (0, n)
        assert f"{n} of {MAX_CRASH_REFUNDS} forgiven" in q.events(jid)[-1].message
        clock.advance(1)
        job = q.claim("w")
        assert job is not None and q.events(jid)[-1].kind == "reclaimed"
        assert (job.attempts, job.tries) == (n + 1, 1)
    out = q.abandon(jid, job.token, message="daemon crashed", refund=True)
    assert (out.tries, out.refunds) == (1, MAX_CRASH_REFUNDS)
    assert "counted as a try" in q.events(jid)[-1].message
    clock.advance(1)
    assert q.claim("w") is None  # the lease expired on its last try: failed, not run again
    assert q.get(jid).state == FAILED and q.events(jid)[-1].kind == "lease_expired"
    q.retry(jid)
    assert (q.get(jid).tries, q.get(jid).refunds) == (0, 0)  # a user retry forgives again


def test_a_fence_is_forgiven_as_a_crash_is_and_shares_its_bound(make_queue, clock):
    """A fenced run gives its try back only while crashes and fences
    forgiven stay under MAX_CRASH_REFUNDS; past it the fence counts (with a
    backoff) and the last try fails the job. Interruptions stay free."""
    from sloth_daemon.backends.rules import MAX_CRASH_REFUNDS

    q = make_queue(max_attempts=2, backoff_cap_s=300)
    jid = q.enqueue(["x"])
    job = q.claim("w")
    q.abandon(jid, job.token, message="daemon crashed", refund=True)  # one crash forgiven
    clock.advance(1)
    for n in range(2, MAX_CRASH_REFUNDS + 1):
        job = q.claim("w")
        out = q.release(jid, job.token, message="fenced: no lease renewal for 3s", kind="fenced")
        assert (out.state, out.tries, out.refunds) == (JobState.QUEUED, 0, n)
        assert q.events(jid)[-1].message.endswith(f"not counted as a try ({n} of {MAX_CRASH_REFUNDS} forgiven)")
    job = q.claim("w")
    out = q.release(jid, job.token, message="interrupted: daemon stopping")  # not bounded
    assert (out.tries, out.refunds) == (0, MAX_CRASH_REFUNDS)
    job = q.claim("w")
    out = q.release(jid, job.token, message="fenced: no lease renewal for 3s", kind="fenced")
    assert (out.state, out.tries, out.refunds, out.not_before) == (JobState.QUEUED, 1, MAX_CRASH_REFUNDS, clock.now() + 2)
    ev = q.events(jid)[-1]
    assert ev.kind == "fenced" and "counted as a try" in ev.message and "retry 2/2 in 2s" in ev.message
    clock.advance(2)
    job = q.claim("w")
    out = q.release(jid, job.token, message="fenced: no lease renewal for 3s", kind="fenced")
    assert (out.state, out.tries) == (JobState.FAILED, 2)
    assert q.events(jid)[-1].message.endswith("no attempts left")


def test_an_abandoned_lease_without_refund_counts_as_a_try(make_queue, clock):
    q = make_queue(max_attempts=2)
    jid = q.enqueue(["x"])
    job = q.claim("w")
    out = q.abandon(jid, job.token, message="holder gone")
    assert (out.tries, out.refunds) == (1, 0)
    clock.advance(1)
    assert q.claim("w").tries == 2


def test_adopt_renews_the_lease_renames_the_holder_and_says_so(make_queue, clock):
    q = make_queue(lease_s=10)
    jid = q.enqueue(["x"])
    job = q.claim("old-daemon")
    clock.advance(25)  # lapsed while no daemon ran; nobody took it: still ours by its token
    out = q.adopt(jid, job.token, "new-daemon", message="by new-daemon; pid 7 kept running")
    assert (out.worker, out.lease_until, out.attempts) == ("new-daemon", clock.now() + 10, 1)
    ev = q.events(jid)[-1]
    assert (ev.kind, ev.attempt, ev.message) == ("adopted", 1, "by new-daemon; pid 7 kept running")
    q.complete(jid, job.token)  # the same token goes on holding it
    with pytest.raises(LeaseLost):
        q.adopt(jid, job.token, "w", message="again")


def test_an_outcome_can_carry_its_process_and_be_made_durable_later(make_queue, clock):
    """The daemon writes a short job's process identity with its outcome (one
    transaction), and commits a batch of outcomes with one fsync (durable
    only for the last, or flush())."""
    q = make_queue()
    a, b = q.enqueue(["a"]), q.enqueue(["b"])
    ja, jb = q.claim("w"), q.claim("w")
    clock.advance(1)
    runner = {"pid": 42, "started_at": clock.now() - 0.5}
    out = q.complete(a, ja.token, message="exit 0", runner=runner, durable=False)
    assert out.runner["pid"] == 42 and out.state == DONE
    ev = q.events(a)
    assert [e.kind for e in ev] == ["claimed", "started", "done"]
    assert ev[1].at == clock.now() - 0.5 and ev[1].message == "pid 42"
    q.fail(b, jb.token, message="exit 1", runner={"pid": 43}, durable=False)
    q.flush()
    assert q.get(b).runner["pid"] == 43 and [e.kind for e in q.events(b)][-2:] == ["started", "failed"]


def test_set_paused_marks_the_run_paused_until_continued_or_claimed_again(q, clock):
    """issue 24 item 3: the row says paused while the paused run holds the
    job; a stale token changes nothing; a new claim is never paused."""
    jid = q.enqueue(["x"])
    job = q.claim("w")
    assert job.paused is False
    out = q.set_paused(jid, job.token, True, "3 process(es) stopped")
    assert out.paused is True and q.get(jid).paused is True
    assert kinds(q, jid)[-1] == "paused"
    assert q.set_paused(jid, job.token, False, "after 5s paused").paused is False
    assert kinds(q, jid)[-1] == "continued"
    q.set_paused(jid, job.token, True, "again")
    with pytest.raises(LeaseLost):
        q.set_paused(jid, "not-the-token", False, "stale")
    assert q.get(jid).paused is True
    clock.set(1000)  # the lease lapses; the next claim is a new run, not paused
    again = q.claim("w2")
    assert again.id == jid and again.paused is False
    with pytest.raises(JobNotFound):
        q.set_paused(99999, again.token, True, "m")


def test_a_pause_is_recorded_at_the_time_the_keeper_made_it_never_later_than_now(q, clock):
    """issue 28 item 9: a resume written after the job's end (its answer
    came second) still reads before `done`: it carries when it happened."""
    jid = q.enqueue(["x"])
    job = q.claim("w")
    q.set_paused(jid, job.token, True, "stopped")
    before = q.events(jid)[-1].at
    q.set_paused(jid, job.token, False, "after 1s paused", at=before - 5)
    assert q.events(jid)[-1].at == pytest.approx(before - 5, abs=1e-3)
    q.set_paused(jid, job.token, True, "again", at=before + 10**9)  # a clock ahead: never later than now
    assert q.events(jid)[-1].at < before + 10**8


def test_a_word_on_a_run_whose_lease_ended_is_kept_against_its_attempt(q, clock):
    """issue 28 item 9: a cancelled run's last words (how it ended, its
    keep-awake) are written for its attempt, never dropped."""
    jid = q.enqueue(["x"])
    q.claim("w")
    q.cancel(jid)
    q.note_ended(jid, 1, "kept awake by systemd-inhibit (pid 9) while it ran", kind="keep-awake")
    q.note_ended(jid, 1, "killed by SIGTERM")
    assert [(e.kind, e.attempt) for e in q.events(jid)][-3:] == [("cancelled", 1), ("keep-awake", 1), ("ended", 1)]
    assert q.get(jid).state == "cancelled"


def test_keep_awake_and_limits_are_kept_with_the_job_and_by_a_restart(q, clock):
    """issue 24 items 2 and 4: what the keeper is to hold is stored with the job."""
    limits = {"mem": 100 << 20, "nice": 10, "io": "idle"}
    jid = q.enqueue_many([{"command": ["x"], "keep_awake": True, "limits": limits}, {"command": ["y"]}])
    job, plain = q.get(jid[0]), q.get(jid[1])
    assert job.keep_awake is True and job.limits == limits
    assert plain.keep_awake is False and plain.limits is None
    with pytest.raises(BadRequest):
        q.enqueue_many([{"command": ["x"], "limits": {"mem": 5}}])
    with pytest.raises(BadRequest):
        q.enqueue_many([{"command": ["x"], "keep_awake": "yes"}])
    claimed = q.claim("w")
    q.complete(claimed.id, claimed.token)
    new = q.restart([jid[0]]).jobs[0]
    assert new.keep_awake is True and new.limits == limits


def test_claim_many_leases_a_lanes_due_jobs_at_once_each_with_its_own_token(q, clock):
    """A batch of plain claims (the daemon's successors, a lane's free
    slots): the lane's due queued jobs in the claim's order, each leased as
    claim(reclaim=False) leases it -- its own fencing token, so each is
    ended, unclaimed or fenced alone -- never a job of another lane, a
    delayed one, or an expired lease; what is left is claimed later."""
    low = q.enqueue(["low"], lane="a")
    high = q.enqueue(["high"], lane="a", priority=5)
    later = q.enqueue(["later"], lane="a", not_before=50)
    other = q.enqueue(["other"], lane="b")
    rest = [q.enqueue([f"r{i}"], lane="a") for i in range(3)]
    got = q.claim_many("w", 3, lane="a")
    assert [j.id for j in got] == [high, low, rest[0]]
    assert all((j.state, j.attempts, j.tries, j.worker, j.lease_until) == (CLAIMED, 1, 1, "w", 100) for j in got)
    assert len({j.token for j in got}) == 3 and all(j.token for j in got)
    assert [kinds(q, j.id) for j in got] == [["claimed"]] * 3
    q.complete(high, got[0].token)
    with pytest.raises(LeaseLost):  # one job's token holds no other job
        q.complete(low, got[0].token)
    q.unclaim(low, got[1].token)  # undone alone
    assert q.get(rest[0]).state == CLAIMED and q.get(low).state == QUEUED
    assert [j.id for j in q.claim_many("w", 10, lane="a")] == [low, rest[1], rest[2]]
    assert q.claim_many("w", 10, lane="a") == [] and q.get(later).state == QUEUED
    clock.advance(q.get(rest[1]).lease_s + 1)  # leases run out: a batch never reclaims them
    assert [j.id for j in q.claim_many("w2", 10, lane="a")] == [later] and q.get(other).state == QUEUED
    assert [j.id for j in q.claim_many("w2", 10, lane="a", places=["elsewhere"])] == []
    for bad in (-1, 1.5, True, "2", 10_001):
        with pytest.raises(BadRequest):
            q.claim_many("w", bad, lane="a")
    assert q.claim_many("w", 0, lane="a") == []


@pytest.mark.parametrize("token", [["a"], {"a": 1}, 5, b"x"])
def test_complete_under_a_token_that_is_no_text_is_lease_lost_and_writes_nothing(q, clock, token):
    """Not a database error (SQLite cannot bind a list): the token does not
    hold the lease, as any other wrong token."""
    jid = q.enqueue(["x"])
    q.claim("w")
    before = snapshot(q, jid)
    with pytest.raises(LeaseLost):
        q.complete(jid, token)
    assert snapshot(q, jid) == before


def test_commands_of_every_character_come_back_as_added(q):
    """Quotes, backslashes, braces, commas, an empty word, characters
    outside ASCII and long words: the command read back is the one added
    (PostgreSQL takes the commands as a binary array: enqueue.py)."""
    commands = [["sh", "-c", 'echo "a\\\\b" {x,y} \'q\''], ["", " ", "NULL", "{}", ","],
                ["é" * 5000, "\\" * 3000, '"' * 3000, "日本語 ☃"], ["a\tb\nc"]]
    ids = q.enqueue_many([{"command": c} for c in commands])
    assert [q.get(i).command for i in ids] == commands

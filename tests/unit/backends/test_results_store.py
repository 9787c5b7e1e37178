"""Results kept with their attempts and a job's own backoff and rules, on
both engines (issue 33 items 3 and 5): keep_result / results, the job's
``rules`` stored and read back, the per-job --backoff in fail()."""

from __future__ import annotations

import pytest

from sloth_daemon.daemon.worker.handing import RESULTS_SHOWN, one_result, shown_results
from sloth_daemon.errors import BadRequest, JobNotFound


def fail_times(q, clock, jid: int, n: int) -> None:
    """Claim and fail job ``jid`` ``n`` times, keeping a result for each attempt."""
    for _ in range(n):
        clock.advance(10_000)
        job = q.claim("w")
        assert job is not None and job.id == jid
        q.keep_result(jid, job.attempts, f'{{"try": {job.attempts}}}')
        q.fail(jid, job.token, message="exit 1", rule="retry rule: test")


def test_results_are_kept_per_attempt_first_one_wins_and_reads_are_bounded(q, clock):
    jid = q.enqueue(["x"], max_attempts=30)
    fail_times(q, clock, jid, 12)
    q.keep_result(jid, 1, '{"try": "again"}')  # an outcome offered twice (a crash): the first stays
    assert [r["result"] for r in q.results([jid])[jid]] == [{"try": i} for i in range(1, 13)]
    assert [r["attempt"] for r in q.results([jid], attempts=(3, 4))[jid]] == [3, 4]
    job = q.get(jid).to_dict()
    assert [r["attempt"] for r in shown_results(q, job)] == list(range(13 - RESULTS_SHOWN, 13))
    assert one_result(q, jid) == {"id": jid, "attempt": 12, "attempts": 12, "found": True, "result": {"try": 12}}
    assert one_result(q, jid, 1)["result"] == {"try": 1}
    with pytest.raises(BadRequest):
        one_result(q, jid, 13)
    with pytest.raises(JobNotFound):
        one_result(q, 999)
    q.keep_result(999, 1, "{}")  # a job pruned meanwhile keeps nothing, raises nothing
    assert q.results([999]) == {}
    assert "retry rule: test" in q.events(jid)[-1].message and q.get(jid).message == "exit 1"


def test_a_jobs_rules_are_stored_and_its_backoff_is_its_own(q, clock):
    plain = q.enqueue(["x"], not_before=1e9)  # not due: the claims below take the other
    own = q.enqueue_many([{"command": ["x"], "rules": {"backoff_s": 5, "backoff_cap_s": 7, "stall_s": 60,
                                                       "fail_on": "loss: nan", "retry_on": ["mem"]}}])[0]
    assert q.get(plain).rules is None
    assert q.get(own).rules == {"backoff_cap_s": 7.0, "backoff_s": 5.0, "fail_on": "loss: nan", "retry_on": ["mem"],
                                "stall_s": 60.0}
    waits = []
    for _ in range(3):  # the third of its 3 tries fails it
        job = q.claim("w")
        assert job is not None and job.id == own
        after = q.fail(own, job.token, message="exit 1")
        waits.append(after.not_before - clock.now())
        clock.advance(100)
    assert waits[:2] == [5.0, 7.0] and q.get(own).state.value == "failed"  # 5 s, then 10 capped at 7
    restarted = q.restart([own]).jobs[0]
    assert restarted.rules == q.get(own).rules  # a restart keeps them


def test_a_backoff_base_alone_longer_than_the_queues_cap_is_waited(q, clock):
    """`--backoff 10m` (a BASE alone: the cap is the config's backoff_cap_s,
    5 min by default) retried after the config's cap, not the 10 minutes
    asked and shown ('backoff 10m..backoff_cap_s'). A base alone above the
    cap is the least wait: each retry waits it."""
    jid = q.enqueue_many([{"command": ["x"], "rules": {"backoff_s": 600}}])[0]  # the queue's cap: 300 s
    waits = []
    for _ in range(2):
        job = q.claim("w")
        assert job is not None and job.id == jid
        waits.append(q.fail(jid, job.token, message="exit 1").not_before - clock.now())
        clock.advance(1000)
    assert waits == [600.0, 600.0]

"""Gates in the queue's contract (issue 24): a job with run conditions,
needs or slots is never taken by urgency alone; the claimer lists the
gates, reads their heads and hands back the one it may run, which is leased
only when at least as urgent as the best ungated job. Both engines."""

from __future__ import annotations

import pytest

from sloth_daemon.errors import BadRequest
from sloth_daemon.models import JobState

AC = '{"when":["ac"]}'
GPU = '{"needs":{"gpu":1}}'


def test_a_gated_job_is_out_of_every_plain_claim_and_due_time(q):
    q.enqueue_many([{"command": ["g"], "when": ["ac"], "priority": 9}])
    assert q.claim("w") is None
    assert q.next_due_at() is None  # not "due now": a worker would spin on it
    assert q.lane_counts()["default"]["queued"] == 1  # but it is counted
    assert q.lane_busy("default")


def test_gates_lists_each_gate_once_in_canonical_form(q):
    q.enqueue_many([{"command": ["a"], "when": ["ac"]}, {"command": ["b"], "when": [" AC "]},
                    {"command": ["c"], "needs": {"gpu": 1}}, {"command": ["d"]},
                    {"command": ["e"], "when": ["battery >= 40", "ac", "ac"], "on_lost": "stop"}])
    assert q.gates() == sorted([AC, GPU, '{"when":["ac","battery>=40"],"on_lost":"stop"}'])
    assert q.get(1).gate == {"when": ["ac"]} and q.get(4).gate is None


def test_gated_heads_are_one_per_gate_and_lane_most_urgent_first(q, clock):
    clock.set(100)
    ids = q.enqueue_many([
        {"command": ["a1"], "when": ["ac"]}, {"command": ["a2"], "when": ["ac"], "priority": 2},
        {"command": ["a3"], "when": ["ac"], "lane": "x"},
        {"command": ["g1"], "needs": {"gpu": 1}, "priority": 5},
        {"command": ["later"], "needs": {"gpu": 1}, "priority": 7, "not_before": 500},
    ])
    heads, later = q.gated_heads([AC, GPU])
    assert [j.id for j in heads] == [ids[3], ids[1], ids[2]]
    assert later == 500
    heads, _ = q.gated_heads([AC], exclude_lanes=["x"])
    assert [j.id for j in heads] == [ids[1]]
    assert q.gated_heads([]) == ([], None)


def test_claim_takes_the_gated_job_only_when_at_least_as_urgent(q, clock):
    clock.set(100)
    plain, gated = q.enqueue_many([{"command": ["p"], "priority": 5}, {"command": ["g"], "needs": {"gpu": 1}}])
    job = q.claim("w", gated=(gated, {"gpu": ["1"]}))
    assert job.id == plain  # priority 5 beats the gated job's 0
    job = q.claim("w", gated=(gated, {"gpu": ["1"]}))
    assert job.id == gated and job.tokens == {"gpu": ["1"]} and job.state is JobState.RUNNING
    assert q.get(gated).tokens == {"gpu": ["1"]}  # kept with the run: an adopting daemon reads it
    assert q.events(gated)[-1].message == "by w; holds gpu 1"
    assert q.claim("w", gated=(gated, {"gpu": ["0"]})) is None  # running now: not claimable again


def test_a_gated_job_that_is_not_due_or_gone_is_not_claimed(q, clock):
    clock.set(100)
    (g,) = q.enqueue_many([{"command": ["g"], "when": ["ac"], "not_before": 200}])
    assert q.claim("w", gated=(g, None)) is None
    assert q.claim("w", gated=(10**9, None)) is None  # no such job
    (plain,) = q.enqueue_many([{"command": ["p"]}])
    assert q.claim("w", gated=(plain, None)).id == plain  # an ungated id: just the ordinary pick


def test_an_expired_gated_lease_is_offered_as_a_head_and_reclaimed_through_the_gate(q, clock):
    clock.set(100)
    (g,) = q.enqueue_many([{"command": ["g"], "needs": {"gpu": 1}, "lease_s": 10}])
    first = q.claim("w1", gated=(g, {"gpu": ["0"]}))
    clock.set(200)
    assert q.claim("w2") is None  # never reclaimed without its gate
    heads, _ = q.gated_heads([])
    assert [j.id for j in heads] == [g] and heads[0].state is JobState.RUNNING
    again = q.claim("w2", gated=(g, {"gpu": ["1"]}))
    assert again.id == g and again.token != first.token and again.tokens == {"gpu": ["1"]}
    assert [e.kind for e in q.events(g)][-1] == "reclaimed"
    assert q.events(g)[-1].message.startswith("by w2; holds gpu 1; lease of w1 ran out")


def test_set_waiting_says_why_on_every_queued_job_of_the_gate_and_a_claim_clears_it(q, clock):
    clock.set(100)
    a, b, c = q.enqueue_many([{"command": ["a"], "when": ["ac"]}, {"command": ["b"], "when": ["ac"]},
                              {"command": ["c"], "when": ["online"]}])
    assert q.set_waiting(AC, "waiting for mains power") == 2
    assert q.set_waiting(AC, "waiting for mains power") == 0  # unchanged: nothing written
    assert [q.get(i).wait_reason for i in (a, b, c)] == ["waiting for mains power"] * 2 + [None]
    assert q.claim("w", gated=(a, None)).wait_reason is None
    assert q.set_waiting(AC, None) == 1 and q.get(b).wait_reason is None


def test_a_retry_and_a_restart_keep_the_gate(q, clock):
    clock.set(100)
    (g,) = q.enqueue_many([{"command": ["g"], "when": ["ac"], "max_attempts": 1}])
    job = q.claim("w", gated=(g, None))
    q.fail(g, job.token, message="exit 1")
    assert q.get(g).state is JobState.FAILED
    assert q.restart([g]).jobs[0].gate == {"when": ["ac"]}


@pytest.mark.parametrize("spec, words", [
    ({"when": "ac"}, "list"), ({"when": ["sunny"]}, "not a condition"), ({"when": ["battery>=140"]}, "0 to 100"),
    ({"when": ["idle=0s"]}, "1s to 7d"), ({"when": ["disk>=lots"]}, "size"), ({"when": ["load<-1"]}, "above 0"),
    ({"needs": {"GPU!": 1}}, "resource name"), ({"needs": {"gpu": 0}}, "count"), ({"needs": ["gpu"]}, "object"),
    ({"slots": 0}, "at least 1"), ({"slots": 10**6}, "at most"), ({"on_lost": "explode", "when": ["ac"]}, "one of"),
    ({"on_lost": "stop"}, "this job has none"),
])
def test_bad_gates_are_refused_and_nothing_is_queued(q, spec, words):
    with pytest.raises(BadRequest) as e:
        q.enqueue_many([{"command": ["x"], **spec}])
    assert words in str(e.value.message), e.value.message
    assert q.counts()["queued"] == 0


def test_hold_never_holds_a_gates_waiting_jobs_with_why_and_forgets_it_when_told(q, clock):
    """Issue 28, items 1-3: the jobs of a gate a machine can never meet
    (of a lane, of a place) are held with why, queued and held alike (an
    event for those that were queued); told None, the held ones forget it."""
    big = '{"needs":{"gpu":2}}'
    a, b, other_lane, elsewhere, user_held = q.enqueue_many([
        {"command": ["a"], "needs": {"gpu": 2}}, {"command": ["b"], "needs": {"gpu": 2}},
        {"command": ["c"], "needs": {"gpu": 2}, "lane": "x"}, {"command": ["d"], "needs": {"gpu": 2}, "place": "m2"},
        {"command": ["e"], "needs": {"gpu": 2}}])
    q.hold([user_held])
    assert q.held_gates() == [big]
    assert q.hold_never(big, "no", lane="default", place="") == [a, b, user_held]
    assert [q.get(j).state for j in (a, b, other_lane, elsewhere)] == [JobState.HELD, JobState.HELD,
                                                                       JobState.QUEUED, JobState.QUEUED]
    assert q.get(a).wait_reason == "no" and q.get(user_held).wait_reason == "no"
    assert q.events(a)[-1].kind == "held" and "no" in q.events(a)[-1].message
    assert [e.kind for e in q.events(user_held)].count("held") == 1  # held already: no second event
    assert q.hold_never(big, None, lane=None, place=None) == [a, b, user_held]
    assert q.get(a).state == JobState.HELD and q.get(a).wait_reason is None
    q.unhold([b])  # a release clears a reason too
    assert q.get(b).state == JobState.QUEUED and q.get(b).wait_reason is None

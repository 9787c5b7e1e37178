"""Where a job may run (its place), on both backends: a claim takes only
the places it asks for, due times and expired leases follow the same rule,
and listings filter by host. A daemon of a shared queue claims with its own
places ("" anywhere, its host, its tags); one machine's daemon asks for none."""

from __future__ import annotations

import pytest

from sloth_daemon.errors import BadRequest
from sloth_daemon.daemon.worker.runs import worker_name


def test_a_job_keeps_the_place_it_was_given(q):
    anywhere = q.enqueue(["a"])
    star = q.enqueue_many([{"command": ["b"], "place": "*"}])[0]
    pinned = q.enqueue_many([{"command": ["c"], "place": "laptop"}])[0]
    assert [q.get(i).place for i in (anywhere, star, pinned)] == ["", "", "laptop"]
    assert q.get(pinned).to_dict()["place"] == "laptop"


@pytest.mark.parametrize("bad", ["two words", "a:b", "x" * 65, 7, "ünï"])
def test_a_place_that_is_no_name_is_refused(q, bad):
    with pytest.raises(BadRequest, match="place"):
        q.enqueue_many([{"command": ["x"], "place": bad}])
    assert q.counts()["queued"] == 0


def test_a_claim_takes_only_its_places(q):
    other = q.enqueue_many([{"command": ["x"], "place": "desk", "priority": 9}])[0]
    gpu = q.enqueue_many([{"command": ["x"], "place": "gpu", "priority": 5}])[0]
    mine = q.enqueue_many([{"command": ["x"], "place": "laptop"}])[0]
    free = q.enqueue(["x"], priority=-1)
    places = ["", "laptop", "gpu"]
    got = [q.claim("w", places=places) for _ in range(4)]
    assert [j.id if j else None for j in got] == [gpu, mine, free, None]
    assert q.next_due_at(places=places) is not None  # the leases it holds
    assert q.claim("w2", places=["desk"]).id == other


def test_any_place_is_the_default(q):
    ids = [q.enqueue_many([{"command": ["x"], "place": p}])[0] for p in ("a", "b", "")]
    assert sorted(q.claim("w").id for _ in ids) == sorted(ids)


def test_an_expired_lease_goes_only_to_a_claimer_of_its_place(q, clock):
    pinned = q.enqueue_many([{"command": ["x"], "place": "laptop"}])[0]
    assert q.claim("laptop-daemon", places=["", "laptop"]).id == pinned
    clock.advance(101)  # the lease (100 s) ran out: the laptop is gone
    assert q.claim("desk-daemon", places=["", "desk"]) is None
    assert q.next_due_at(places=["", "desk"]) is None
    job = q.claim("laptop-daemon-2", places=["laptop"])
    assert job.id == pinned and job.attempts == 2


def test_due_times_follow_the_places(q, clock):
    q.enqueue_many([{"command": ["x"], "place": "desk", "not_before": 50.0}])
    q.enqueue_many([{"command": ["x"], "place": "laptop", "not_before": 80.0}])
    assert q.next_due_at(places=["", "laptop"]) == 80.0
    assert q.next_due_at(places=["", "desk"]) == 50.0
    assert q.next_due_at(places=["nowhere"]) is None
    assert q.next_due_at() == 50.0


def test_places_must_be_a_list(q):
    with pytest.raises(BadRequest, match="places must be a list"):
        q.claim("w", places="laptop")


def test_listing_by_host_shows_what_runs_ran_or_waits_there(q):
    pinned = q.enqueue_many([{"command": ["x"], "place": "laptop"}])[0]
    ran = q.enqueue(["y"])
    elsewhere = q.enqueue(["z"])
    job = q.claim(worker_name("abc", host="laptop", pid=7), places=[""])
    assert job.id == ran
    q.claim(worker_name("def", host="laptop2", pid=8), places=[""])  # a prefix of no use
    got = q.listing(host="laptop", now=0.0)
    assert sorted(j.id for j in got.jobs) == sorted([pinned, ran]) and got.total == 2
    assert got.counts["running"] == 1 and got.counts["queued"] == 1
    assert elsewhere not in [j.id for j in q.listing(host="laptop", lane="default", now=0.0).jobs]
    assert q.listing(host="nowhere", now=0.0).total == 0

"""Batches with a handle (issue 33, item 1) on both engines: the record of
an add gets an id and a name, its jobs carry them, and a batch is found by
id or by the newest of its name, with its counts by state."""

from __future__ import annotations

import pytest

from sloth_daemon.backends.contract import Handle
from sloth_daemon.errors import BatchNotFound, IllegalTransition
from tests.support.queues import sql


def test_a_batch_with_a_handle_gets_an_id_its_jobs_carry_and_counts_by_state(q):
    ids = q.enqueue_many([{"command": ["a"]}, {"command": ["b"]}, {"command": ["c"]}], batch="t1",
                         handle=Handle("sweep"))
    job = q.get(ids[0])
    assert job.batch is not None and job.batch["name"] == "sweep"
    assert job.to_dict()["batch"] == {"id": job.batch["id"], "name": "sweep"}
    assert {q.get(i).batch["id"] for i in ids} == {job.batch["id"]}
    q.cancel(ids[2])
    found = q.batch_find("sweep")
    assert found["id"] == job.batch["id"] and found["total"] == 3
    assert found["counts"] == {"queued": 2, "cancelled": 1}
    assert q.batch_find(str(job.batch["id"]))["name"] == "sweep"
    assert q.batch_members(job.batch["id"]) == ids
    assert q.batch_members(job.batch["id"], ["cancelled"]) == [ids[2]]
    assert q.batch_ids("t1") == ids  # the idempotency record is the same record


def test_a_name_means_the_newest_batch_of_that_name_and_an_unknown_one_is_an_error(q):
    first = q.enqueue_many([{"command": ["a"]}], batch="t1", handle=Handle("nightly"))
    second = q.enqueue_many([{"command": ["b"]}], batch="t2", handle=Handle("nightly"))
    found = q.batch_find("nightly")
    assert found["id"] == q.get(second[0]).batch["id"] != q.get(first[0]).batch["id"]
    assert found["same_name"] == 2
    with pytest.raises(BatchNotFound, match="no batch named 'nope'"):
        q.batch_find("nope")
    with pytest.raises(BatchNotFound):
        q.batch_find("999999")


def test_a_plain_add_is_no_batch_with_a_handle_and_a_token_is_never_queued_twice(q):
    ids = q.enqueue_many([{"command": ["a"]}], batch="t1")
    assert q.get(ids[0]).batch is None
    rec = sql(q, "SELECT id FROM batches WHERE token = ?", ("t1",))[0][0]
    with pytest.raises(BatchNotFound):
        q.batch_find(str(rec))
    with pytest.raises(IllegalTransition):
        q.enqueue_many([{"command": ["b"]}], batch="t1", handle=Handle())
    assert q.active_batches() == []


def test_status_lists_the_batches_with_unfinished_jobs_newest_first(q):
    a = q.enqueue_many([{"command": ["a"]}], handle=Handle("one"))
    b = q.enqueue_many([{"command": ["b"]}, {"command": ["c"]}], handle=Handle())
    assert [x["id"] for x in q.active_batches()] == [q.get(b[0]).batch["id"], q.get(a[0]).batch["id"]]
    q.cancel(a[0])
    assert [(x["name"], x["total"]) for x in q.active_batches()] == [(None, 2)]


def test_a_handle_record_is_kept_while_its_jobs_are(q, clock):
    ids = q.enqueue_many([{"command": ["a"]}], batch="t1", handle=Handle("keep"))
    q.enqueue_many([{"command": ["b"]}], batch="t2")
    clock.advance(3 * 86400)
    q.prune(86400)  # nothing finished: the jobs stay, so does the handle's record
    assert q.batch_find("keep")["total"] == 1
    assert q.batch_ids("t2") is None  # a plain record goes after a day, as before
    q.cancel(ids[0])
    clock.advance(3 * 86400)
    q.prune(86400)
    with pytest.raises(BatchNotFound):
        q.batch_find("keep")


def test_an_array_member_keeps_its_values(q):
    ids = q.enqueue_many([{"command": ["a"], "member": {"index": 1, "value": "x", "args": {"lr": "0.1"}}}],
                         handle=Handle())
    assert q.get(ids[0]).member == {"index": 1, "value": "x", "args": {"lr": "0.1"}}
    with pytest.raises(Exception, match="member"):
        q.enqueue_many([{"command": ["a"], "member": {"index": 0}}])


# ---------------------------------------------------------------- key policies (issue 33, item 4)
def _add(q, on_dup, **kw):
    return q.enqueue_many([{"command": ["x"], "key": "k", "on_dup": on_dup, **kw}])[0]


def test_keep_gives_back_the_unfinished_job_with_the_key(q):
    a = _add(q, "keep")
    assert _add(q, "keep") == a and _add(q, None) == a


def test_fail_refuses_and_queues_nothing(q):
    a = _add(q, "fail")
    with pytest.raises(IllegalTransition, match=f"job {a} has key 'k' and is queued \\(--on-dup fail\\)"):
        _add(q, "fail")
    assert [j.id for j in q.jobs()] == [a]


def test_replace_cancels_the_waiting_one_and_queues_the_new(q):
    a = _add(q, "replace")
    b = _add(q, "replace")
    assert b != a and q.get(a).state == "cancelled" and "replaced" in q.get(a).message
    assert q.get(b).state == "queued" and q.get(b).after_any == []
    assert f"cancelled job {a}" in [e for e in q.events(b) if e.kind == "key"][0].message


def test_replace_of_a_running_one_waits_behind_it_and_never_beside_it(q):
    a = _add(q, "replace")
    claimed = q.claim("w")
    assert claimed.id == a
    b = _add(q, "replace")
    assert q.get(a).state == "running"  # its tree must end first: the daemon's part
    assert q.get(b).state == "blocked" and q.get(b).after_any == [a]
    c = _add(q, "replace")  # the one waiting is replaced, the running one is still waited for
    assert q.get(b).state == "cancelled" and q.get(c).after_any == [a]
    q.cancel(a)
    assert q.get(c).state == "queued"


def test_append_queues_each_after_the_last(q):
    a = _add(q, "append")
    b = _add(q, "append")
    c = _add(q, "append")
    assert [q.get(i).after_any for i in (a, b, c)] == [[], [a], [b]]
    assert [q.get(i).state for i in (a, b, c)] == ["queued", "blocked", "blocked"]
    assert _add(q, "keep") == a  # keep: the first of them
    q.cancel(a)
    assert q.get(b).state == "queued" and q.get(c).state == "blocked"


def test_a_head_is_still_unique(q):
    """Jobs added behind one share its key; two heads never do (the index)."""
    a = _add(q, "append")
    _add(q, "append")
    assert sql(q, "SELECT count(*) FROM jobs WHERE key = ? AND key_behind IS NULL", ("k",))[0][0] == 1
    with pytest.raises(Exception, match="(?i)unique"):  # sqlite3 or psycopg, raw
        sql(q, "UPDATE jobs SET key_behind = NULL WHERE key = ?", ("k",))
    assert q.get(a).state == "queued"

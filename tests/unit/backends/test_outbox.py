"""The outbox on both engines (contract.Outbox, docs/telling.md): a run's
start and end write one message per channel that wants it, in the
transaction of the transition (whichever path made it); the sender's
lease, its outcomes, and the user's retry and drop."""

from __future__ import annotations

import pytest

from sloth_daemon.errors import BadRequest
from tests.support.queues import sql

PING = "https://hc.example/ping/0f1e2d3c"
HOOK = "https://hooks.example/T1/secret-path"


def add(q, cmd, **kw):
    return q.enqueue_many([{"command": [cmd], **kw}])[0]


def told(q):
    return sorted((m.job_id, m.attempt, m.event, m.channel["kind"]) for m in q.outbox.messages(("pending",)))


def test_each_start_and_end_writes_one_message_per_channel_that_wants_it(q, clock):
    jid = add(q, "x", ping=PING, webhook=HOOK, webhook_on=["failed"], max_attempts=2)
    run = q.claim("w")
    assert told(q) == []  # a claim is not a start: pipelined claims may be taken back unstarted
    q.set_runner(jid, run.token, {"pid": 1, "started_at": 0.0})
    q.fail(jid, run.token, message="exit 3", exit_code=3)
    clock.advance(10)
    run = q.claim("w")
    q.complete(jid, run.token, exit_code=0, runner={"pid": 2, "started_at": 0.0})
    assert told(q) == [(jid, 1, "retrying", "ping"), (jid, 1, "started", "ping"),
                       (jid, 2, "done", "ping"), (jid, 2, "started", "ping")]
    keys = {m.key for m in q.outbox.messages(("pending",))}
    assert f"job:{jid}:2:done" in keys and f"job:{jid}:1:started" in keys
    # the start went before the end it came with (one statement on PostgreSQL)
    ids = {(m.attempt, m.event): m.id for m in q.outbox.messages(("pending",))}
    assert ids[(2, "started")] < ids[(2, "done")]


def test_a_failure_for_good_and_a_cancelled_cascade_are_told(q):
    a = add(q, "a", webhook=HOOK, webhook_on=["failed", "cancelled"], max_attempts=1)
    b = add(q, "b", after=[a], webhook=HOOK, webhook_on=["cancelled"])
    run = q.claim("w")
    q.fail(a, run.token, message="exit 1", exit_code=1)
    assert told(q) == [(a, 1, "failed", "webhook"), (b, 0, "cancelled", "webhook")]


def test_a_second_end_after_a_retry_is_told_too(q):
    """Cancelled, retried, cancelled again with no run between: the same
    attempt, so the key must say it came after a retry, or the second end
    would be taken for the first told twice and go to no one."""
    jid = add(q, "x", webhook=HOOK, webhook_on=["cancelled"])
    q.cancel_many([jid])
    q.retry(jid)
    q.cancel_many([jid])
    q.retry(jid)
    q.cancel_many([jid])
    keys = sorted(m.key for m in q.outbox.messages(("pending",)))
    assert keys == [f"job:{jid}:0:cancelled", f"job:{jid}:0:cancelled:r1", f"job:{jid}:0:cancelled:r2"]


def test_jobs_without_channels_write_nothing_and_bad_channels_are_refused(q):
    jid = q.enqueue(["x"])
    run = q.claim("w")
    q.complete(jid, run.token, runner={"pid": 1})
    assert q.outbox_counts() == {"pending": 0, "failed": 0, "sent": 0}
    for bad in ({"ping": "ftp://x/y"}, {"webhook": "https://"}, {"webhook": HOOK, "webhook_on": ["nope"]},
                {"mail_to": "no at sign"}, {"ping": "https://a/ b"}):
        with pytest.raises(BadRequest):
            add(q, "x", **bad)
    assert len(q.jobs()) == 1


def test_the_json_of_a_job_masks_its_urls(q):
    jid = add(q, "x", ping=PING, webhook=HOOK)
    shown = str(q.get(jid).to_dict())
    assert "0f1e2d3c" not in shown and "secret-path" not in shown and "https://hc.example/***" in shown


def test_a_lease_that_runs_out_hands_the_message_to_another_sender(q, clock):
    jid = add(q, "x", ping=PING)
    run = q.claim("w")
    q.complete(jid, run.token, runner={"pid": 1})
    first = q.outbox.claim("a", limit=10, lease_s=30)
    assert [m.event for m in first] == ["started", "done"]
    assert q.outbox.claim("b", limit=10, lease_s=30) == []  # leased
    assert q.outbox.free("z") == 0
    assert q.outbox.next_at() == pytest.approx(30)
    clock.advance(31)  # a died mid-send
    again = q.outbox.claim("b", limit=10, lease_s=30)
    assert [m.id for m in again] == [m.id for m in first] and again[0].tries == 2
    assert not q.outbox.sent(first[0].id, first[0].token)  # a's token no longer holds it
    assert q.outbox.sent(again[0].id, again[0].token)
    assert q.outbox.failed_try(again[1].id, again[1].token, "HTTP 500", 10)
    assert q.outbox_counts() == {"pending": 1, "failed": 0, "sent": 1}
    assert q.outbox.claim("b", limit=10, lease_s=30) == []
    clock.advance(10)
    last = q.outbox.claim("b", limit=10, lease_s=30)
    assert q.outbox.failed_try(last[0].id, last[0].token, "HTTP 404", None)
    failed = q.outbox.messages(("failed",))
    assert [(m.event, m.last_error) for m in failed] == [("done", "HTTP 404")]
    assert q.outbox.retry([failed[0].id, 999]) == [failed[0].id]
    assert q.outbox.drop([failed[0].id, again[0].id]) == [failed[0].id]  # a sent one stays
    assert q.outbox_counts() == {"pending": 0, "failed": 0, "sent": 1}
    clock.advance(100)
    assert q.outbox.prune(50, 1000) == 1


def test_a_failed_message_is_pruned_once_it_is_old_enough(q, clock):
    chans = [{"kind": "ping", "url": PING, "on": ["missed"]}]
    q.outbox.add("schedule:a:1:missed", "missed", chans, schedule="a")
    (m,) = q.outbox.claim("s", limit=10, lease_s=30)
    assert q.outbox.failed_try(m.id, m.token, "HTTP 404", None)  # failed for good at t
    clock.advance(100)
    q.outbox.add("schedule:a:2:missed", "missed", chans, schedule="a")  # pending: never pruned
    assert q.outbox.prune(10, 101) == 0  # failed 100 s ago: kept while younger than the cut
    assert q.outbox.prune(10, 99) == 1
    assert [(x.key, x.state) for x in q.outbox.messages(("pending", "failed", "sent"))] == [
        ("schedule:a:2:missed", "pending")]


def test_add_writes_a_keyed_message_once(q):
    chans = [{"kind": "ping", "url": PING, "on": ["missed"]}, {"kind": "mail", "to": ["a@b"], "on": ["failed"]}]
    assert q.outbox.add("schedule:nightly:100:missed", "missed", chans, schedule="nightly", note="why") == 1
    assert q.outbox.add("schedule:nightly:100:missed", "missed", chans, schedule="nightly", note="why") == 0
    (m,) = q.outbox.messages()
    assert (m.schedule, m.note, m.channel["kind"]) == ("nightly", "why", "ping")
    assert sql(q, "SELECT count(*) FROM outbox")[0][0] == 1


def test_a_dead_senders_leases_are_freed_by_its_machines_next_daemon(q):
    jid = add(q, "x", ping=PING)
    run = q.claim("w")
    q.complete(jid, run.token, runner={"pid": 1})
    assert len(q.outbox.claim("host-a/1/x", limit=10, lease_s=300)) == 2
    assert q.outbox.free("host-b/") == 0
    assert q.outbox.free("host-a/") == 2
    assert len(q.outbox.claim("host-a/2/y", limit=10, lease_s=300)) == 2


def test_a_restart_keeps_its_channels(q):
    jid = add(q, "x", ping=PING, max_attempts=1)
    run = q.claim("w")
    q.fail(jid, run.token, message="exit 1", exit_code=1, runner={"pid": 1})
    (new,) = q.restart([jid]).jobs
    assert new.tell == q.get(jid).tell and new.tell[0]["url"] == PING

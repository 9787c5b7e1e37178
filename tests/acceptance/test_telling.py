"""Issue 32 with the real daemon: pings and webhooks from the outbox reach a
real receiver on loopback exactly once (it drops repeats by key) across a
kill -9 of the daemon at each step -- after the transition's commit (before
any send), during the send, after the send before it is marked sent; a hung
receiver costs no heartbeat, claim or answer of the socket (measured); and
no secret (a ping's token, a hook's path, the HMAC key) shows in any
output, log or history."""

from __future__ import annotations

import json
import time

import pytest

from tests.support.harness import TEST_CONFIG, on_one_queue
from tests.support.receiver import Receiver

pytestmark = pytest.mark.acceptance
TELL = TEST_CONFIG + '\n[tell]\ntimeout_s = "{t}"\nwebhook_secret = "HMACKEY-{s}"\n'


@pytest.fixture
def rx():
    r = Receiver()
    yield r
    r.close()


def delivered(rx, n):
    return lambda: len(rx.effects) >= n


def test_every_message_arrives_once_across_a_kill9_at_each_step(make_harness, rx):
    h = make_harness(TELL.format(t="30s", s="x"))
    h.start()
    kill9_at_each_step(h, rx)


@pytest.mark.postgres
def test_every_message_arrives_once_across_a_kill9_at_each_step_on_postgresql(make_harness, pg_fresh, rx):
    (h,) = on_one_queue(make_harness, pg_fresh(), {"m1": TELL.format(t="30s", s="x")})
    kill9_at_each_step(h, rx)


def kill9_at_each_step(h, rx):
    blocker = Receiver()
    try:
        # 1. after the commit, before any send: the sender's four threads are
        # held by a receiver that hangs, so the job's messages wait, committed.
        blocker.mode = "hang"
        for _ in range(4):
            h.add("true", ping=blocker.url + "/b")
        h.wait_for(lambda: len(blocker.requests) >= 4, what="the sender's threads all held")
        a = h.add("sh", "-c", "exit 3", webhook=rx.url + "/a", webhook_on=["failed"], ping=rx.url + "/p",
                  max_attempts=1)
        h.wait_state(a, "failed")
        time.sleep(0.3)
        assert not rx.requests  # committed, not sent
        h.kill9()
        blocker.mode = "ok"
        blocker.release.set()
        # 2. during the send: the receiver takes the request and never answers
        rx.mode = "hang"
        h.start()
        h.wait_for(lambda: rx.requests, what="job a's messages being sent")
        assert not rx.effects
        h.kill9()
        rx.release.set()
        # 3. after the send, before it is marked sent: done on the receiver's side, no answer heard
        rx.release.clear()
        rx.mode = "apply-then-hang"
        h.start()
        h.wait_for(lambda: rx.effects, what="a message received")
        h.kill9()
        rx.release.set()
        rx.mode = "ok"
        h.start()
        h.wait_for(lambda: h.call("outbox", states=["pending"])["counts"]["pending"] == 0, timeout_s=60,
                   what="the outbox empty")
        paths = sorted(e.path.split("?")[0] for e in rx.effects)
        assert paths == ["/a", "/p/3", "/p/start"], paths  # each once, though sent several times
        assert len(rx.requests) >= len(rx.effects) + 2  # one sent during a kill, one received during one
        assert h.call("outbox", states=["failed"])["messages"] == []
    finally:
        blocker.close()


def test_a_hung_receiver_costs_no_heartbeat_claim_or_answer(make_harness, rx):
    """Measured on a loaded machine: the socket's answers and the jobs' runs while every send hangs."""
    h = make_harness(TELL.format(t="20s", s="x"))
    h.start()
    rx.mode = "hang"
    long = h.add("sleep", "8", ping=rx.url + "/long", lane="slow")  # lease 3 s: renewed twice or more meanwhile
    h.wait_for(lambda: rx.requests, what="a send hanging")
    t0 = time.monotonic()
    ids = h.add_many([{"command": ["true"], "ping": rx.url + f"/j{i}"} for i in range(20)])
    worst = 0.0
    for jid in ids:
        t = time.monotonic()
        h.wait_state(jid, "done", timeout_s=30)
        worst = max(worst, time.monotonic() - t)
    ran_s = time.monotonic() - t0
    rtt = []
    for _ in range(20):
        t = time.monotonic()
        h.call("status")
        rtt.append(time.monotonic() - t)
    job = h.wait_state(long, "done", timeout_s=30)
    kinds = [e["kind"] for e in h.events(long)]
    assert job["attempts"] == 1 and "reclaimed" not in kinds and "fenced" not in kinds, kinds
    assert max(rtt) < 1.0, rtt
    assert ran_s < 15, ran_s  # 20 short jobs, while every send hangs for 20 s
    print(f"hung receiver: 20 jobs done in {ran_s:.2f}s, status rtt max {max(rtt) * 1000:.0f} ms")
    assert h.call("status")["outbox"]["pending"] > 0  # sends hang now, 20 s each to their timeout
    t = time.monotonic()
    assert h.stop() == 0
    assert time.monotonic() - t < 10  # a stop never waits for a hung receiver
    rx.release.set()


def test_no_secret_shows_in_any_output_log_or_history(make_harness, rx):
    h = make_harness(TELL.format(t="5s", s="HMACSECRET"))
    h.start()
    rx.mode = "500"  # failures are said in the log and kept with their errors
    ping, hook = rx.url + "/ping/PINGTOKEN42?k=QUERYTOKEN", rx.url + "/hook/HOOKTOKEN42"
    p = h.cli("add", "--ping", ping, "--webhook", hook, "--webhook-on", "failed,done", "--mail-to", "me@example.org",
              "--max-attempts", "2", "--", "sh", "-c", "exit 4")
    assert p.returncode == 0, p.stderr
    jid = int(p.stdout.split()[0])
    h.wait_state(jid, "failed", timeout_s=30)
    h.wait_for(lambda: len(rx.requests) >= 3, what="sends tried")
    outputs = [p.stdout, p.stderr, h.log_text(), json.dumps(h.events(jid)), json.dumps(h.job(jid))]
    for args in (["ls"], ["ls", "--json"], ["show", str(jid)], ["show", "--json", str(jid)], ["status"],
                 ["status", "--json"], ["outbox", "ls"], ["outbox", "ls", "--all", "--json"], ["config"],
                 ["config", "--json"], ["daemon", "status", "--json"], ["logs", str(jid)],
                 ["wait", "--json", str(jid)]):  # the wait's frames (streams.wire), not to_dict
        r = h.cli(*args)
        outputs += [r.stdout, r.stderr]
    text = "\n".join(outputs)
    assert "answered HTTP 500" in text and "/hook/" not in text
    for secret in ("PINGTOKEN42", "QUERYTOKEN", "HOOKTOKEN42", "HMACSECRET"):
        assert secret not in text, secret
    assert f"{rx.url}/***" in h.cli("show", str(jid)).stdout + h.cli("outbox", "ls").stdout


def test_a_lanes_channels_reach_its_jobs_through_the_daily_add(make_harness, rx):
    h = make_harness(TELL.format(t="5s", s="x") + f'\n[lanes.backup]\nping = "{rx.url}/lane"\n')
    h.start()
    p = h.cli("add", "-l", "backup", "--ping", rx.url + "/own", "--", "true")
    assert p.returncode == 0, p.stderr
    jid = int(p.stdout.split()[0])
    h.wait_state(jid, "done")
    h.wait_for(lambda: len(rx.effects) >= 4, what="both channels' start and success")
    assert sorted(e.path.split("?")[0] for e in rx.effects) == ["/lane", "/lane/start", "/own", "/own/start"]
    assert [c["url"] for c in h.job(jid)["tell"]] == [f"{rx.url}/***"] * 2


@pytest.mark.postgres
def test_on_a_shared_queue_each_message_is_sent_by_one_machine(make_harness, pg_fresh, rx):
    url = pg_fresh()
    config = TELL.format(t="5s", s="x").replace("[tell]", 'poll_s = "1s"\ndefault_concurrency = 4\n[tell]')
    m1, m2 = on_one_queue(make_harness, url, {"m1": config, "m2": config})
    # half placed on each machine: queued anywhere, one machine's chains (8-64 deep) may take all 12
    ids = m1.add_many([{"command": ["true"], "place": f"m{1 + i % 2}", "ping": rx.url + f"/j{i}"} for i in range(12)])
    for jid in ids:
        m1.wait_state(jid, "done", timeout_s=60)
    m1.wait_for(lambda: len(rx.effects) >= 24, timeout_s=60, what="every start and success")
    assert len(rx.requests) == len(rx.effects) == 24  # none sent twice
    box = m2.call("outbox", states=["sent"])
    assert box["counts"] == {"pending": 0, "failed": 0, "sent": 24}
    ran_on = {m1.job(j)["worker"].split(":")[1] for j in ids}
    assert ran_on == {"m1", "m2"}, ran_on  # both machines ran jobs, and sent their messages


def test_schedule_expect_within_is_kept_shown_and_checked(make_harness, rx):
    h = make_harness()
    h.start()
    p = h.cli("schedule", "add", "nightly", "--every", "1d", "--expect-within", "26h", "--ping", rx.url + "/hc/SEC",
              "--", "true")
    assert p.returncode == 0, p.stderr
    (s,) = h.cli_json("schedule", "ls")["schedules"]
    assert (s["expect_within_s"], s["overdue"]) == (26 * 3600, None)
    shown = h.cli("schedule", "show", "nightly").stdout
    assert "expect a success within 1d2h" in shown and "SEC" not in shown
    bad = h.cli("schedule", "edit", "nightly", "--expect-within", "10s")
    assert bad.returncode != 0 and "--expect-within 10s: at least 1m" in bad.stderr
    assert h.cli_json("schedule", "ls")["schedules"][0]["expect_within_s"] == 26 * 3600  # unchanged
    jid = int(h.cli("add", "--ping", rx.url + "/x/SEC", "--", "true").stdout.split()[0])
    assert f"tells     ping {rx.url}/*** on started" in h.cli("show", str(jid)).stdout

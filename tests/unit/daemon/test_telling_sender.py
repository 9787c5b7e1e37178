"""The outbox's sender against a real HTTP receiver on loopback, on an
injected clock (no sleeps): delivered once, retried with a capped backoff
while the receiver is down (an hour of simulated time), then all
delivered; a permanent refusal kept as failed; healthchecks' sequence for
a run that fails then succeeds; webhooks signed; both engines."""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import json

import pytest

from sloth_daemon.config import Settings
from sloth_daemon.daemon.telling import sender as sending
from sloth_daemon.daemon.telling.sender import Sender
from tests.support.receiver import Receiver


@pytest.fixture
def rx():
    r = Receiver()
    yield r
    r.close()


def make_sender(q, tmp_path, **tell):
    settings = Settings(tell={"timeout_s": 2.0, **tell})
    logs = tmp_path / "logs"
    logs.mkdir(exist_ok=True)
    return Sender(q, settings, prefix="test/", log_path=lambda j, a: logs / f"{j}.{a}.log")


def run_job(q, clock, spec, outcomes, logs=None):
    """Add the job; run it once per outcome (an exit code); return its id."""
    jid = q.enqueue_many([{"command": ["x"], "max_attempts": len(outcomes), **spec}])[0]
    for n, code in enumerate(outcomes, 1):
        clock.advance(3600)
        run = q.claim("w")
        if logs is not None:
            (logs / f"{jid}.{n}.log").write_bytes(f"run {n} says exit {code}\n".encode())
        if code == 0:
            q.complete(jid, run.token, exit_code=0, runner={"pid": n})
        else:
            q.fail(jid, run.token, message=f"exit {code}", exit_code=code, runner={"pid": n})
    return jid


def test_healthchecks_sequence_for_a_run_that_fails_then_succeeds(q, clock, tmp_path, rx):
    s = make_sender(q, tmp_path)
    run_job(q, clock, {"ping": rx.url + "/ping/abc"}, [3, 0], logs=tmp_path / "logs")
    while s.pump():
        pass
    paths = [r.path for r in rx.requests]
    rids = [p.split("rid=")[1] for p in paths]
    assert [p.split("?")[0] for p in paths] == ["/ping/abc/start", "/ping/abc/3", "/ping/abc/start", "/ping/abc"]
    assert rids[0] == rids[1] != rids[2] == rids[3]  # one rid per run, the same for its start and end
    assert rx.requests[1].body == b"run 1 says exit 3\n" and rx.requests[0].body == b""
    assert len({r.headers["idempotency-key"] for r in rx.requests}) == 4
    assert q.outbox_counts() == {"pending": 0, "failed": 0, "sent": 4}


def test_a_receiver_down_for_an_hour_gets_everything_once_it_is_back(q, clock, tmp_path, rx):
    s = make_sender(q, tmp_path)
    rx.mode = "500"
    run_job(q, clock, {"ping": rx.url + "/p", "webhook": rx.url + "/h", "webhook_on": "done"}, [0])
    start, tries = clock.now(), 0
    while clock.now() - start < 3600:
        tries += s.pump()
        due = q.outbox.next_at()
        clock.set(max(due, clock.now()) if due is not None else clock.now() + 60)
    # backoff doubled up to its cap: about 8 tries of each in the hour, not one a second
    assert 3 * 6 <= tries <= 3 * 12 and q.outbox_counts()["pending"] == 3
    assert sending.backoff_s(1) == 10 and sending.backoff_s(30) == sending.BACKOFF_CAP_S
    rx.mode = "ok"
    clock.advance(sending.BACKOFF_CAP_S)
    while s.pump():
        pass
    assert sorted(r.path.split("?")[0] for r in rx.effects) == ["/h", "/p", "/p/start"]
    assert q.outbox_counts() == {"pending": 0, "failed": 0, "sent": 3}


def test_past_its_bound_a_message_is_kept_failed_with_its_error_and_a_refusal_at_once(q, clock, tmp_path, rx):
    s = make_sender(q, tmp_path, retry_for_s=1800.0)
    rx.mode = "drop"
    run_job(q, clock, {"ping": rx.url + "/p"}, [0])
    for _ in range(50):
        s.pump()
        due = q.outbox.next_at()
        if due is None:
            break
        clock.set(max(due, clock.now()))
    failed = q.outbox.messages(("failed",))
    assert len(failed) == 2 and all("RemoteDisconnected" in (m.last_error or "") for m in failed)
    assert all(m.at + 1800 - sending.BACKOFF_CAP_S <= m.next_at <= m.at + 1800 + 1 for m in failed)
    rx.mode = "404"
    assert q.outbox.retry([failed[0].id]) == [failed[0].id]
    s.pump()
    (m,) = [m for m in q.outbox.messages(("failed",)) if m.id == failed[0].id]
    assert m.tries == 1 and "HTTP 404" in (m.last_error or "")  # a refusal is not retried


def test_a_redirect_is_followed_and_a_webhook_is_signed(q, clock, tmp_path, rx):
    s = make_sender(q, tmp_path, webhook_secret="s3cret-hmac-key")
    rx.redirect = True
    jid = run_job(q, clock, {"webhook": rx.url + "/hook", "webhook_on": "failed"}, [2])
    s.pump()
    (hit,) = rx.effects
    assert hit.path == "/moved/hook"
    sig = hmac.new(b"s3cret-hmac-key", hit.body, hashlib.sha256).hexdigest()
    assert hit.headers["x-sloth-signature"] == f"sha256={sig}"
    body = json.loads(hit.body)
    assert (body["event"], body["job"]["id"], body["exit_code"]) == ("failed", jid, 2)
    assert body["key"] == f"job:{jid}:1:failed" and hit.headers["x-sloth-event"] == "failed"
    assert "s3cret" not in hit.body.decode() and "/hook" not in json.dumps(body["job"])  # URL masked


def test_a_303_is_followed_with_a_get_and_a_307_repeats_the_post(q, clock, tmp_path, rx):
    """RFC 9110: after a 303 the receiver has taken the POST and points at its
    answer (a GET, no body); a 307 (and 301/302/308) asks for the same POST
    again, payload and all."""
    s = make_sender(q, tmp_path, webhook_secret="k")
    rx.redirect = 303
    run_job(q, clock, {"webhook": rx.url + "/hook", "webhook_on": "failed"}, [2])
    s.pump()
    assert [(r.method, r.path) for r in rx.requests] == [("POST", "/hook"), ("GET", "/moved/hook")]
    got = rx.requests[1]
    assert got.body == b"" and "x-sloth-signature" not in got.headers and "content-type" not in got.headers
    assert [m.state for m in q.outbox.messages(("pending", "failed", "sent"))] == ["sent"]
    rx.requests.clear()
    rx.redirect = 307
    run_job(q, clock, {"webhook": rx.url + "/again", "webhook_on": "failed"}, [3])
    s.pump()
    assert [(r.method, r.path) for r in rx.requests] == [("POST", "/again"), ("POST", "/moved/again")]
    assert json.loads(rx.requests[1].body)["exit_code"] == 3


def test_a_hung_receiver_costs_one_timeout_and_is_tried_again(q, clock, tmp_path, rx):
    s = make_sender(q, tmp_path)
    s.settings = dataclasses.replace(s.settings, tell={"timeout_s": 0.5})
    rx.mode = "hang"
    run_job(q, clock, {"ping": rx.url + "/p"}, [0])
    import time

    t = time.monotonic()
    s.pump()
    assert time.monotonic() - t < 5  # the start bounded by its timeout; the end waits for it (not sent)
    start, end = q.outbox.messages()
    assert start.last_error == "http://127.0.0.1:%d/***: no answer in time" % rx.server.server_address[1]
    assert end.last_error == f"waits for message {start.id} before it, not sent yet" and len(rx.requests) == 1
    assert end.next_at > start.next_at  # claimed after it, so sent after it


def test_a_secret_file_that_is_a_fifo_is_a_clear_error_not_a_thread_stuck_for_good(q, clock, tmp_path, rx):
    """open() of a FIFO waits for a writer for ever: each webhook held one
    of the sender's threads, and four of them stopped all delivery."""
    from tests.support.fifo import make_fifo, not_stuck_on

    fifo = make_fifo(tmp_path / "secret")
    s = make_sender(q, tmp_path, webhook_secret_file=str(fifo))
    run_job(q, clock, {"webhook": rx.url + "/h", "webhook_on": "done"}, [0])
    not_stuck_on(fifo, s.pump)
    (m,) = q.outbox.messages()
    assert rx.requests == [] and "is a FIFO, not a regular file" in (m.last_error or "")


def test_retry_leaves_a_message_being_sent_alone_so_it_is_not_sent_twice(q, clock, tmp_path, rx):
    """`outbox retry` of a pending message whose send is under way freed its
    lease: the sender took it again and sent it a second time, and the
    first send's mark found a token no longer its own."""
    s = make_sender(q, tmp_path)
    run_job(q, clock, {"webhook": rx.url + "/h", "webhook_on": "done"}, [0])
    (m,) = q.outbox.claim("test/other", limit=10, lease_s=60)  # a send under way
    assert q.outbox.retry([m.id]) == []
    assert s.pump() == 0 and rx.requests == []  # not taken again while it is being sent
    assert q.outbox.sent(m.id, m.token or "")  # the first send is marked: once
    assert q.outbox_counts()["sent"] == 1


def test_outbox_ops_name_a_bad_message_id_as_a_message_not_a_job(q):
    """`outbox retry 99999999999999999999` said "no job with id ...", and
    `outbox drop abc` "bad job id": the ids are the outbox's messages."""
    from sloth_daemon.daemon.telling.ops import OutboxOps
    from sloth_daemon.errors import BadRequest

    ops = OutboxOps(q.outbox, None, q.outbox_counts)
    for ids in ([2**70], [0], ["1"], [True], [], "1"):
        with pytest.raises(BadRequest, match="message") as e:
            ops.op_retry({"ids": ids})
        assert "job" not in e.value.message
    assert ops.op_drop({"ids": [2**62]}) == {"changed": [], "skipped": [2**62]}
    with pytest.raises(BadRequest, match="at most 10000 message ids"):  # each is a write on the loop
        ops.op_drop({"ids": list(range(1, 10_002))})


def test_the_cli_names_a_bad_message_id_as_a_message(tmp_path):
    import os
    import subprocess
    import sys

    env = {**os.environ, "SLOTH_HOME": str(tmp_path / "sl")}
    p = subprocess.run([sys.executable, "-m", "sloth_daemon", "outbox", "retry", "abc"], env=env,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "bad message id 'abc'" in p.stderr and "job" not in p.stderr, p.stderr


def test_a_send_still_on_its_thread_when_the_daemon_stops_is_not_recorded_on_the_closed_queue(q, clock, tmp_path,
                                                                                                rx):
    """The daemon's stop cancels the sender's loop, then closes the queue. A
    send still waiting on its receiver went on, and its record() met the
    closed database: "Task exception was never retrieved ... Cannot operate
    on a closed database" in the daemon log (the 300 s soak). Now each send
    not over is cancelled with the loop: the message stays leased, and the
    next daemon sends it again."""
    import asyncio

    s = make_sender(q, tmp_path)
    rx.mode = "hang"
    run_job(q, clock, {"ping": rx.url + "/p"}, [0])
    problems: list[dict] = []

    async def daemon_life() -> None:
        asyncio.get_running_loop().set_exception_handler(lambda loop, ctx: problems.append(ctx))
        loop_task = asyncio.create_task(s.run())
        for _ in range(200):  # until a send is on its thread (the receiver holds it)
            await asyncio.sleep(0.01)
            if rx.requests:
                break
        assert rx.requests
        loop_task.cancel()
        await asyncio.gather(loop_task, return_exceptions=True)
        q.close()  # what the daemon's stop does next
        rx.release.set()
        await asyncio.sleep(2.5)  # the thread's send ends (its 2 s timeout): before, it was recorded then

    asyncio.run(daemon_life())
    import gc

    gc.collect()  # a task whose exception nobody retrieved says so when collected
    assert not problems, problems


def test_a_jobs_backlog_to_a_slow_receiver_is_sent_once_each_and_in_order(q, clock, tmp_path, rx):
    """The sender claimed a job's messages in batches as long as any were
    due, each batch leased for its own sends (timeout x batch + 30 s), and
    chained each behind the job's sends before it, whatever their number: a
    job that failed and was retried six times left twelve pings; to a
    receiver taking 8 s an answer, the later ones waited longer than their
    lease, the sender's next claim took them again (a lease run out), and
    they went twice, out of order (a start ping after the end's: a
    healthchecks check shown running again)."""
    import asyncio

    s = make_sender(q, tmp_path, timeout_s=10.0)
    jid = run_job(q, clock, {"ping": rx.url + "/p"}, [1] * 6)
    want = [m.key for m in q.outbox.messages(("pending",))]
    assert len(want) == 12
    rx.each = lambda: clock.advance(8)  # each answer takes 8 s (on the queue's clock)

    async def life() -> None:
        loop_task = asyncio.create_task(s.run())
        for _ in range(1500):
            await asyncio.sleep(0.01)
            if q.outbox_counts()["sent"] == len(want) and not s.stats["retried"]:
                await asyncio.sleep(0.3)  # a second copy would be on its way by now
                break
        loop_task.cancel()
        await asyncio.gather(loop_task, return_exceptions=True)

    asyncio.run(life())
    keys = [r.headers["idempotency-key"].rsplit(f"job:{jid}:", 1)[1] for r in rx.requests]
    assert keys == [k.split(f"job:{jid}:", 1)[1] for k in want], " ".join(keys)
    assert q.outbox_counts() == {"pending": 0, "failed": 0, "sent": 12}


def test_a_start_that_failed_once_is_still_told_before_the_end(q, clock, tmp_path, rx):
    """A job's messages are sent one after another, its start before its
    end; but a start that failed (a 500, a timeout) was due again 10 s
    later while its end went at once: healthchecks got the success, then
    the start (the check shown running again, and down after its grace).
    A message whose subject's earlier one is due again waits with it."""
    import asyncio

    s = make_sender(q, tmp_path)
    run_job(q, clock, {"ping": rx.url + "/p"}, [0])
    rx.mode = "500"
    rx.each = lambda: setattr(rx, "mode", "ok")  # the first request is answered 500, the rest 200

    async def life() -> None:
        loop_task = asyncio.create_task(s.run())
        for _ in range(3000):  # 30 s at most (a loaded machine)
            await asyncio.sleep(0.01)
            if q.outbox_counts()["sent"] == 2:
                break
            pending = q.outbox.messages(("pending",))
            if pending and all(m.last_error for m in pending) and q.outbox.next_at() > clock.now():
                clock.set(q.outbox.next_at())  # each try recorded: the backoff passed on the injected clock
                s.wake()
        loop_task.cancel()
        await asyncio.gather(loop_task, return_exceptions=True)

    asyncio.run(life())
    assert [r.path.split("?")[0] for r in rx.requests] == ["/p/start", "/p/start", "/p"]
    assert q.outbox_counts() == {"pending": 0, "failed": 0, "sent": 2}


def test_a_message_waiting_for_one_dropped_by_hand_goes_at_its_time(q, clock, tmp_path, rx):
    """The end waits for its start while the start is due again; once the
    start is dropped (`sloth outbox drop`), the end is sent when due, not
    held for ever behind a message that will never go."""
    s = make_sender(q, tmp_path)
    rx.mode = "500"
    run_job(q, clock, {"ping": rx.url + "/p"}, [0])
    s.pump()
    start, end = q.outbox.messages()
    assert end.last_error.startswith("waits for message")
    assert q.outbox.drop([start.id]) == [start.id]
    rx.mode = "ok"
    clock.advance(60)
    assert s.pump() == 1
    assert [r.path.split("?")[0] for r in rx.requests] == ["/p/start", "/p"]
    assert q.outbox_counts() == {"pending": 0, "failed": 0, "sent": 1}


def test_the_daemons_stop_is_never_lost_to_a_wake_in_the_same_turn(q, clock, tmp_path, rx):
    """The sender waited with asyncio.wait_for(wake.wait(), timeout), which
    (Python 3.11) returns the wake and drops a cancel that comes in the same
    turn: a send ending as the daemon stopped (its wake) kept the sender's
    loop going past the stop, onto the queue the stop then closed."""
    import asyncio

    s = make_sender(q, tmp_path)
    rx.mode = "500"  # every try fails: the sender then waits for a due time (a timeout, not for ever)
    run_job(q, clock, {"ping": rx.url + "/p"}, [0])

    async def life() -> bool:
        loop_task = asyncio.create_task(s.run())
        for _ in range(3000):
            await asyncio.sleep(0.01)
            pending = q.outbox.messages(("pending",))
            if len(rx.requests) == 1 and pending and all(m.last_error for m in pending):
                break
        await asyncio.sleep(0.2)  # in its wait
        s.wake()
        loop_task.cancel()  # the stop, in the same turn
        done, _ = await asyncio.wait([loop_task], timeout=3)
        return bool(done)

    assert asyncio.run(life()), "the sender's loop went on after it was cancelled"

"""The schedules' dead-man switch on a real queue (both engines) and an
injected clock: a schedule whose conditions never hold raises its `missed`
alert once per window, with the reason, through its channels (a ping's
/fail, delivered to a real receiver) and the desktop; a success moves the
window; `schedule ls` shows it overdue."""

from __future__ import annotations

import pytest

from sloth_daemon.daemon.schedules.ops import listed
from sloth_daemon.daemon.telling.deadman import DeadMan
from tests.support.receiver import Receiver
from tests.unit.daemon.test_scheduler import H, World
from tests.unit.daemon.test_telling_sender import make_sender


@pytest.fixture
def rx():
    r = Receiver()
    yield r
    r.close()


def test_a_schedule_whose_conditions_never_hold_is_told_missed_once_per_window_with_why(q, clock, tmp_path, rx):
    w = World(q, clock)
    w.s.add("nightly", {"every_s": H, "expect_within_s": 2 * H,
                        "job": {"command": ["backup"], "when": ["ac"], "ping": rx.url + "/hc"}})
    notes: list[tuple[str, str]] = []
    dm = DeadMan(q.schedules, q.outbox, q, job=q.get, notify=lambda t, b: notes.append((t, b)), now=clock.now)
    w.at(H)
    (job,) = w.jobs("nightly")
    q.set_waiting('{"when":["ac"]}', "waiting for mains power")  # what Gates writes here
    clock.set(1.5 * H)
    assert dm.check() == 2 * H and notes == []
    w.at(2 * H + 10)
    dm.check()
    dm.check()  # the same window: told once
    assert len(notes) == 1 and notes[0][0] == "sloth: schedule nightly missed"
    assert f"job {job.id} waits: waiting for mains power" in notes[0][1] and "no success since" in notes[0][1]
    (m,) = q.outbox.messages()
    assert (m.event, m.schedule, m.key) == ("missed", "nightly", f"schedule:nightly:{2 * H}:missed")
    assert [s["overdue"] for s in listed(q.schedules, clock.now())["schedules"]] == [2 * H]
    s = make_sender(q, tmp_path)
    s.pump()
    (hit,) = rx.effects
    assert hit.path.startswith("/hc/fail?rid=") and b"waiting for mains power" in hit.body
    w.at(4 * H + 10)
    dm.check()
    assert len(notes) == 2 and q.outbox_counts()["pending"] == 1  # the next window, told once more


def test_a_success_moves_the_window(q, clock):
    w = World(q, clock)
    w.s.add("ok", {"every_s": H, "expect_within_s": 2 * H, "job": {"command": ["true"]}})
    notes: list[tuple[str, str]] = []
    dm = DeadMan(q.schedules, q.outbox, q, job=q.get, notify=lambda t, b: notes.append((t, b)), now=clock.now)
    w.at(H)
    clock.set(1.5 * H)
    run = q.claim("w")
    q.complete(run.id, run.token)
    w.at(3 * H)
    assert dm.check() == 3.5 * H and notes == []
    assert listed(q.schedules, clock.now())["schedules"][0]["overdue"] is None
    clock.set(3.5 * H + 1)
    dm.check()
    assert len(notes) == 1 and "waits for a free slot" in notes[0][1]  # the 3 H job, queued, never claimed
    w.s.pause("ok")
    clock.set(10 * H)
    dm.check()
    assert len(notes) == 1  # a paused schedule is expected to run no more


def test_a_resumed_schedule_gets_a_whole_window_not_an_alert_at_once(q, clock):
    """Paused mid-window for longer than the window, then resumed: its
    slots while paused are not caught up, so no success could have come;
    the window starts again at the resume (as at add or an edit of it),
    instead of a `missed` alert, and `schedule ls` overdue, at once."""
    w = World(q, clock)
    w.s.add("nightly", {"every_s": H, "expect_within_s": 2 * H, "job": {"command": ["true"]}})
    notes: list[tuple[str, str]] = []
    dm = DeadMan(q.schedules, q.outbox, q, job=q.get, notify=lambda t, b: notes.append((t, b)), now=clock.now)
    clock.set(H // 2)
    w.s.pause("nightly")
    clock.set(10 * H)
    w.s.resume("nightly")
    assert dm.check() == 12 * H and notes == [] and q.outbox.messages() == []
    assert listed(q.schedules, clock.now())["schedules"][0]["overdue"] is None
    clock.set(12 * H + 10)  # a whole window after the resume, still no success: told
    dm.check()
    assert len(notes) == 1


@pytest.mark.parametrize("end", ["sent", "failed", "dropped"])
def test_a_window_told_is_not_told_again_once_its_message_is_gone(q, clock, end):
    """The outbox's key was the only memory of a window told: once its
    message was pruned (sent ones after 7 days, failed ones after 30) or
    dropped (`sloth outbox drop`), the next daemon (a restart, a reload)
    told the same window again, through every channel and the desktop,
    while the schedule stayed overdue (a window can last up to a year)."""
    from sloth_daemon.daemon.telling.sender import KEEP_FAILED_S, KEEP_SENT_S

    day = 86400
    w = World(q, clock)
    w.s.add("monthly", {"every_s": day, "expect_within_s": 60 * day,
                        "job": {"command": ["true"], "ping": "https://hc.example/ping/uuid"}})
    notes: list[tuple[str, str]] = []

    def deadman() -> DeadMan:  # a daemon's: each start has its own
        return DeadMan(q.schedules, q.outbox, q, job=q.get, notify=lambda t, b: notes.append((t, b)), now=clock.now)

    clock.set(60 * day + 10)
    deadman().check()
    assert len(notes) == 1
    (m,) = q.outbox.claim("s", limit=10, lease_s=30)
    if end == "sent":
        assert q.outbox.sent(m.id, m.token)
    elif end == "failed":
        assert q.outbox.failed_try(m.id, m.token, "HTTP 404", None)
    else:
        assert q.outbox.failed_try(m.id, m.token, "HTTP 404", None) and q.outbox.drop([m.id]) == [m.id]
    clock.set(60 * day + 31 * day)  # still in the next window (it ends at 120 days)
    q.outbox.prune(KEEP_SENT_S, KEEP_FAILED_S)
    assert q.outbox.messages(("pending", "failed", "sent")) == []
    deadman().check()
    assert len(notes) == 1 and q.outbox.messages(("pending", "failed", "sent")) == []
    clock.set(120 * day + 10)  # the next window passed: told, once
    deadman().check()
    assert len(notes) == 2 and len(q.outbox.messages(("pending",))) == 1

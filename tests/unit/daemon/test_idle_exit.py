"""IdleExit's decision (daemon/idle_exit.py): what keeps the daemon, the
window of quiet, and leaving in two steps. A real SQLite queue on a manual
clock for the job states; the other views are the values the daemon's parts
would report."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from sloth_daemon.clock import ManualClocks
from sloth_daemon.daemon.idle_exit import IdleExit, Views
from sloth_daemon.queue import Queue


class Parts:
    """What the daemon's parts say, set by each test."""

    def __init__(self, queue: Queue) -> None:
        self.queue = queue
        self.runs: list[Any] = []
        self.holding = self.connections = self.requests = 0
        self.slot: int | None = None
        self.watching = False
        self.now = 0.0

    def views(self) -> Views:
        return Views(counts=self.queue.counts, runs=self.runs, keeper_holding=lambda: self.holding,
                     next_slot=lambda: self.slot, connections=lambda: self.connections,
                     requests=lambda: self.requests, watching=lambda: self.watching,
                     outbox=lambda: self.queue.outbox_counts()["pending"])


@pytest.fixture
def parts(tmp_path):
    q = Queue(tmp_path / "q.db", ManualClocks(wall=1000.0, awake=50.0, total=50.0))
    yield Parts(q)
    q.close()


def idle(parts: Parts, window_s: float = 60.0) -> IdleExit:
    return IdleExit(parts.views(), lambda: window_s, clock=lambda: parts.now)


def test_with_nothing_at_all_it_may_go_after_a_whole_window_and_not_before(parts):
    ie = idle(parts)
    assert ie.why_stay() is None
    parts.now = 59.9
    assert not ie.due()
    parts.now = 60.0
    assert ie.due()


def test_off_it_never_goes(parts):
    ie = idle(parts, 0.0)
    parts.now = 1e9
    assert not ie.due()
    assert ie.period_s() == 60.0  # looks at the setting now and then: a reload may turn it on


@pytest.mark.parametrize("what, set_it, said", [
    ("a client connected", lambda p: setattr(p, "connections", 1), "1 client(s) connected"),
    ("a request served since", lambda p: setattr(p, "requests", 7), "a request was served"),
    ("a run in hand", lambda p: p.runs.append(object()), "1 run(s) in hand"),
    ("runs the keeper holds", lambda p: setattr(p, "holding", 2), "the keeper holds 2 run(s)"),
    ("a job queued", lambda p: p.queue.enqueue_many([{"command": ["true"]}]), "1 queued"),
    ("a delayed job, due in a year", lambda p: p.queue.enqueue_many([{"command": ["true"],
                                                                        "not_before": 1000.0 + 365 * 86400}]),
     "1 queued"),
    ("conditions watched", lambda p: setattr(p, "watching", True), "run conditions watched"),
    ("a message to deliver", lambda p: p.queue.outbox.add("k", "missed", [{"kind": "ping", "url": "http://h/",
                                                                          "on": ["missed"]}]),
     "1 message(s) to deliver"),
    ("a schedule's next slot, in a week", lambda p: setattr(p, "slot", 1000 + 7 * 86400),
     "a schedule's next slot at " + time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(605800))),
])
def test_each_thing_that_needs_a_daemon_keeps_it(parts, what, set_it, said):
    ie = idle(parts)
    set_it(parts)
    parts.now = 1e6
    assert ie.why_stay() == said, what
    assert not ie.due()


def test_a_blocked_job_and_a_running_one_keep_it_a_held_or_ended_one_does_not(parts):
    q = parts.queue
    first, after = q.enqueue_many([{"command": ["a"]}, {"command": ["b"], "after": [1]}])
    ie = idle(parts)
    assert ie.why_stay() == "1 queued, 1 blocked"
    job = q.claim("w")
    assert job is not None and job.id == first
    assert ie.why_stay() == "1 blocked, 1 running"  # a lease (an expired one too) is reclaimed by a daemon
    q.complete(first, job.token or "")
    q.hold([after])
    assert ie.why_stay() is None  # held: it waits for `sloth release`, a command that starts the daemon


def test_a_queue_that_cannot_be_read_keeps_it(parts):
    from sloth_daemon.errors import StorageError

    def unreadable() -> dict[str, int]:
        raise StorageError("database is locked")

    ie = IdleExit(Views(counts=unreadable, runs=[], keeper_holding=lambda: 0, next_slot=lambda: None,
                        connections=lambda: 0, requests=lambda: 0), lambda: 1.0, clock=lambda: parts.now)
    parts.now = 100.0
    assert ie.why_stay() == "the queue cannot be read now (database is locked)"
    assert not ie.due()


def test_a_request_restarts_the_window(parts):
    ie = idle(parts)
    parts.now = 50.0
    parts.requests = 1  # `sloth ls` at 50 s
    assert not ie.due()
    parts.now = 100.0
    assert not ie.due()  # 50 s since the request
    parts.now = 110.0
    assert ie.due()


def test_the_period_is_a_quarter_window_within_bounds(parts):
    assert idle(parts, 600.0).period_s() == 30.0  # at rest with 10m: one look per 30 s
    assert idle(parts, 20.0).period_s() == 5.0
    assert idle(parts, 0.1).period_s() == 0.25


def test_leaving_closes_first_and_goes_when_nothing_came(parts):
    said: list[str] = []
    ie = idle(parts, 0.01)
    parts.now = 1.0

    async def main() -> None:
        await ie.watch(close=lambda: said.append("close"), reopen=_never, leave=said.append)

    asyncio.run(asyncio.wait_for(main(), 5))
    assert said[0] == "close" and said[1].startswith("idle exit: nothing queued")


def test_a_connection_accepted_as_it_closed_calls_the_exit_off_and_it_listens_again(parts):
    said: list[str] = []
    ie = idle(parts, 0.01)
    parts.now = 1.0

    def close() -> None:
        said.append("close")
        parts.connections = 1  # accepted just before the listener closed: served, and the daemon stays

    async def reopen() -> None:
        said.append("reopen")
        raise asyncio.CancelledError  # ends the watch for the test

    async def main() -> None:
        await ie.watch(close=close, reopen=reopen, leave=said.append)

    with pytest.raises(asyncio.CancelledError):
        asyncio.run(asyncio.wait_for(main(), 5))
    assert said == ["close", "reopen"]


async def _never() -> None:
    raise AssertionError("reopened with nothing to stay for")


# ------------------------------------------------------------- dormancy
def dormant(parts: Parts, window_s: float = 60.0, *, idle_exit_s: float = 0.0, deadline: float | None = None,
            wall: float = 10_000.0) -> IdleExit:
    views = parts.views()
    views.deadline = lambda: deadline
    return IdleExit(views, lambda: idle_exit_s, dormant_s=lambda: window_s, clock=lambda: parts.now,
                    wall=lambda: wall)


def test_dormancy_comes_after_a_whole_window_of_nothing_and_a_schedule_does_not_keep_it(parts):
    parts.slot = 20_000  # the next slot, far away: the dormant process wakes for it
    ie = dormant(parts)
    parts.now = 59.9
    assert not ie.dormant_due()
    parts.now = 60.0
    assert ie.dormant_due()
    assert ie.wake_at() == 20_000 - 15.0  # a lead before it (WAKE_LEAD_S)
    assert not ie.due()  # the idle exit (off) stays off; on, the slot would keep it


def test_dormancy_off_never_and_a_need_restarts_its_window(parts):
    assert not dormant(parts, 0.0).dormant_due()
    ie = dormant(parts)
    parts.now = 50.0
    parts.connections = 1
    assert not ie.dormant_due()
    parts.connections = 0
    parts.now = 100.0
    assert not ie.dormant_due()  # 50 s since the connection
    parts.now = 110.0
    assert ie.dormant_due()


@pytest.mark.parametrize("slot,deadline", [(10_010, None), (None, 10_005)])
def test_a_slot_or_deadline_within_the_lead_keeps_it_whole(parts, slot, deadline):
    """It would wake at once (the wake time passed): it stays, and the slot runs."""
    parts.slot = slot
    ie = dormant(parts, deadline=deadline, wall=10_000.0)
    parts.now = 1e6
    assert not ie.dormant_due()


def test_the_wake_time_is_the_earlier_of_a_slot_and_a_dead_man_deadline(parts):
    parts.slot = 30_000
    assert dormant(parts, deadline=25_000.0).wake_at() == 25_000.0 - 15.0
    parts.slot = None
    assert dormant(parts).wake_at() is None  # only a command, a signal or a write wakes it


def test_with_the_idle_exit_on_and_no_slot_it_does_not_go_dormant_the_idle_exit_ends_it(parts):
    """Dormant, nothing wakes it but a command: the idle exit's window was
    never crossed again and the process held its socket for ever."""
    ie = dormant(parts, 60.0, idle_exit_s=600.0)
    parts.now = 599.0
    assert not ie.dormant_due()
    parts.now = 600.0
    assert ie.due()
    parts.slot = 20_000  # a slot keeps it from the idle exit: dormant then
    ie = dormant(parts, 60.0, idle_exit_s=600.0)
    parts.now = 1200.0
    assert ie.dormant_due() and not ie.due()


def test_the_period_follows_the_shorter_window(parts):
    assert dormant(parts, 600.0).period_s() == 30.0
    assert dormant(parts, 8.0, idle_exit_s=600.0).period_s() == 2.0


def test_going_dormant_pauses_accepting_looks_again_and_goes_with_its_wake_time(parts):
    said: list[Any] = []
    parts.slot = 50_000
    ie = dormant(parts, 0.01)
    parts.now = 1.0

    def go(wake_at: float | None, reason: str) -> str | None:
        said.append((wake_at, reason))
        return None

    async def main() -> None:
        await ie.watch(close=_not_called, reopen=_never, leave=_not_called, pause=lambda: said.append("pause"),
                       dormant=go)

    asyncio.run(asyncio.wait_for(main(), 5))
    assert said[0] == "pause" and said[1][0] == 50_000 - 15.0
    assert said[1][1].startswith("dormant: nothing queued, running or held")


@pytest.mark.parametrize("refused", [False, True])
def test_a_request_in_the_pause_or_a_refusal_calls_dormancy_off_and_it_accepts_again(parts, refused):
    said: list[Any] = []
    ie = dormant(parts, 0.01)
    parts.now = 1.0

    def pause() -> None:
        said.append("pause")
        if not refused:
            parts.requests += 1  # served in the settle: an add, say

    def go(wake_at: float | None, reason: str) -> str | None:
        said.append("go")
        return "a keeper runs"

    async def reopen() -> None:
        said.append("reopen")
        raise asyncio.CancelledError

    async def main() -> None:
        await ie.watch(close=_not_called, reopen=reopen, leave=_not_called, pause=pause, dormant=go)

    with pytest.raises(asyncio.CancelledError):
        asyncio.run(asyncio.wait_for(main(), 5))
    assert said == (["pause", "go", "reopen"] if refused else ["pause", "reopen"])


def _not_called(*a: Any) -> None:
    raise AssertionError("the idle exit's path taken while it is off")

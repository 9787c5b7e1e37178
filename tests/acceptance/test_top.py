"""`sloth top` driven by Textual's test pilot (App.run_test) against the
real daemon in a temporary home: a running job's progress moves, a cancel
asks and is done only after yes, a resize redraws, a daemon restart while
open is survived and said, and with no daemon at all the queue file is
read read-only and that is said (issue 31, item 1). The same view on a
real pseudo-terminal: test_top_terminal.py."""

from __future__ import annotations

import asyncio
import re
import time
from typing import Any, Callable

import pytest

pytest.importorskip("textual")

from textual import events  # noqa: E402

from sloth_daemon.cli.top.app import Confirm, Help, TopApp  # noqa: E402

pytestmark = pytest.mark.acceptance

FAST_FEED = {"offline_s": 0.3, "retry_s": 0.3}  # the read-only fallback looks again sooner than a person needs


@pytest.fixture
def in_home(harness, monkeypatch):
    """The test process speaks to the harness's daemon (the app runs in it)."""
    for k in [k for k in __import__("os").environ if k.startswith("SLOTH_")]:
        monkeypatch.delenv(k)
    monkeypatch.setenv("SLOTH_HOME", str(harness.home))
    return harness


def drive(app: TopApp, body: Callable[[Any], Any], size: tuple[int, int] = (120, 36)) -> None:
    async def run() -> None:
        async with app.run_test(size=size) as pilot:
            await body(pilot)

    asyncio.run(run())


async def until(pilot: Any, pred: Callable[[], Any], timeout_s: float = 20, what: str = "") -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got = pred()
        if got:
            return got
        await pilot.pause(0.1)
    raise AssertionError(f"not within {timeout_s}s: {what}")


def one_running(h: Any) -> tuple[int, TopApp]:
    """The harness's daemon started with one job running (a `sleep 60`), and a view to drive."""
    h.start()
    jid = h.add("sleep", "60")
    h.wait_state(jid, "running")
    return jid, TopApp(feed_options=FAST_FEED)


async def selected(pilot: Any, app: TopApp, jid: int) -> None:
    await until(pilot, lambda: app.chosen == jid and app.job_detail is not None, what="the job selected")


def header(app: TopApp) -> str:
    return str(app.home.query_one("#header").render())


def row(app: TopApp, pane: str, key: Any) -> list[str] | None:
    table = app.home.query_one(f"#{pane}")
    try:
        return [str(c) for c in table.get_row(str(key))]
    except Exception:  # no such row (yet)
        return None


def log_steps(app: TopApp) -> list[int]:
    return [int(n) for n in re.findall(r"step (\d+)", str(app.home.query_one("#log").render()))]


def test_a_running_jobs_progress_elapsed_time_and_log_tail_move(in_home):
    h = in_home
    h.start()
    # Both progress conventions of issue 31 item 3 (shown when the daemon reports them), and a log line a step.
    jid = h.add("sh", "-c", "for i in $(seq 10 99); do echo SLOTH_PROGRESS 0.$i; echo step $i; sleep 0.3; done")
    h.wait_state(jid, "running")
    app = TopApp(feed_options=FAST_FEED)

    async def body(pilot: Any) -> None:
        first = await until(pilot, lambda: row(app, "running", jid), what="the running job's row")
        await until(pilot, lambda: app.chosen == jid and log_steps(app), what="its log tail in the detail pane")
        steps = log_steps(app)
        await until(pilot, lambda: log_steps(app) and max(log_steps(app)) > max(steps) + 2, what="the tail moving")
        later = await until(pilot, lambda: (r := row(app, "running", jid)) and r[1] != first[1] and r, what="elapsed")
        job = h.job(jid)
        if job.get("progress") is not None:  # reported by the daemon (item 3): the bar moves too
            await until(pilot, lambda: (r := row(app, "running", jid)) and r[2] and r[2] != later[2],
                        what="the progress bar moving")
        assert "make" not in later[-1] and "seq 10 99" in later[-1]

    drive(app, body)


def test_a_cancel_asks_and_is_done_only_after_yes(in_home):
    h = in_home
    jid, app = one_running(h)

    async def body(pilot: Any) -> None:
        await selected(pilot, app, jid)
        for answer in ("n", "enter", "escape"):  # each way of saying no; Enter, the default, is no
            await pilot.press("c")
            await until(pilot, lambda: isinstance(app.screen, Confirm), what="the question")
            assert "Cancel job" in str(app.screen.query_one("#question").render())
            await pilot.press(answer)
            await until(pilot, lambda: not isinstance(app.screen, Confirm), what="the question gone")
            assert "not done" in app.said
            await pilot.pause(0.5)
            assert h.job(jid)["state"] == "running", answer
        await pilot.press("c")
        await until(pilot, lambda: isinstance(app.screen, Confirm), what="the question")
        await pilot.press("y")
        await until(pilot, lambda: h.job(jid)["state"] == "cancelled", what="cancelled after yes")
        await until(pilot, lambda: row(app, "running", jid) is None, what="gone from the running pane")

    drive(app, body)


def test_a_resize_redraws_down_to_80x24(in_home):
    jid, app = one_running(in_home)

    async def body(pilot: Any) -> None:
        await until(pilot, lambda: row(app, "running", jid), what="the running job")
        lists, detail = app.home.query_one("#lists"), app.home.query_one("#detail")
        assert detail.region.x > lists.region.x and not app.home.has_class("narrow")  # side by side
        await pilot.resize_terminal(80, 24)
        await until(pilot, lambda: app.home.has_class("narrow"), what="the narrow layout")
        await pilot.pause(0.3)
        assert detail.region.y > lists.region.y and detail.region.right <= 80  # the detail under the lists
        assert app.home.query_one("#header").region.width <= 80
        assert header(app).startswith("daemon up") and row(app, "running", jid)
        await pilot.resize_terminal(140, 40)
        await until(pilot, lambda: not app.home.has_class("narrow"), what="wide again")

    drive(app, body)


def test_a_daemon_restart_while_open_is_survived_and_said(in_home):
    h = in_home
    h.start()
    app = TopApp(feed_options=dict(FAST_FEED, idle_s=120.0))  # only the change stream can show a new job soon

    async def body(pilot: Any) -> None:
        await until(pilot, lambda: header(app).startswith("daemon up"), what="connected")
        h.stop()
        await until(pilot, lambda: "went away" in header(app) and "read-only" in header(app), what="the loss said")
        h.start()
        await until(pilot, lambda: "restarted" in header(app) and "reconnected" in header(app), what="reconnect said")
        await until(pilot, lambda: app.feed.live, what="listening again")
        jid = h.add("sleep", "30")
        await until(pilot, lambda: row(app, "running", jid) or row(app, "next", jid), timeout_s=10,
                    what="a job added after the restart, heard on the new stream")

    drive(app, body)


def test_no_daemon_at_all_reads_the_queue_file_read_only_and_says_so(in_home):
    h = in_home
    h.start()
    bad = [h.add("sh", "-c", f"echo cannot open /data/in{i}.csv after {i} tries; exit 4", max_attempts=1)
           for i in range(3)]
    for jid in bad:
        h.wait_state(jid, "failed")
    queued = h.add("sleep", "1", not_before=time.time() + 3600)
    h.cli("schedule", "add", "hourly", "--every", "1h", "--", "true", check=True)
    h.stop()
    app = TopApp(feed_options=FAST_FEED)

    async def body(pilot: Any) -> None:
        await until(pilot, lambda: "no daemon" in header(app) and "read-only" in header(app), what="said")
        grouped = await until(pilot, lambda: row(app, "failures", bad[-1]), what="the failures grouped")
        assert grouped[0] == "3×" and grouped[1] == "exit 4: cannot open <path> after <n> tries"
        nxt = await until(pilot, lambda: row(app, "next", queued), what="the delayed job")
        assert nxt[3].startswith("delayed: starts in")
        sched = await until(pilot, lambda: row(app, "schedules", "s:hourly"), what="the schedule")
        assert re.fullmatch(r"in (59|60):\d\d", sched[1]) and sched[2] == "every 1h", sched
        await pilot.pause(1.0)
        assert not h.socket.exists() or not h.our_processes(), "top started a daemon"

    drive(app, body)


def test_the_filter_and_the_keys_that_ask_nothing(in_home):
    """`/lane:video` shows that lane's jobs only; hold, release, priority
    and pause act at once (they undo with one key), each through the daemon."""
    h = in_home
    h.start()
    h.call("lane_set", lane="video", concurrency=0, create=True)  # its jobs stay queued
    waiting = h.add("sleep", "1", lane="video")
    running = h.add("sleep", "60")
    h.wait_state(running, "running")
    app = TopApp(feed_options=FAST_FEED)

    async def body(pilot: Any) -> None:
        await until(pilot, lambda: row(app, "running", running) and row(app, "next", waiting), what="both shown")
        assert row(app, "next", waiting)[3] == "paused (lane video)"  # concurrency 0: the daemon says paused
        await pilot.press("slash", *"lane:video", "enter")
        await until(pilot, lambda: row(app, "running", running) is None, what="the default lane filtered out")
        assert row(app, "next", waiting) and "filter: lane:video" in header(app)
        app.home.query_one("#next").focus()
        await until(pilot, lambda: app.chosen == waiting and app.job_detail, what="the waiting job chosen")
        await pilot.press("h")
        await until(pilot, lambda: h.job(waiting)["state"] == "held", what="held")
        await until(pilot, lambda: (r := row(app, "next", waiting)) and r[3].startswith("held"), what="shown held")
        await until(pilot, lambda: app.job_detail.info["job"]["state"] == "held", what="the detail follows")
        await pilot.press("h")
        await until(pilot, lambda: h.job(waiting)["state"] == "queued", what="released")
        await pilot.press("plus")
        await until(pilot, lambda: h.job(waiting)["priority"] == 1, what="priority + 1")
        await pilot.press("slash")
        app.home.query_one("#filter").value = ""
        await pilot.press("enter")
        await until(pilot, lambda: row(app, "running", running), what="the filter cleared")
        app.home.query_one("#running").focus()
        await until(pilot, lambda: app.chosen == running and app.job_detail, what="the running job chosen")
        await pilot.press("p")
        await until(pilot, lambda: h.job(running).get("paused"), what="paused")
        await until(pilot, lambda: (r := row(app, "running", running)) and r[6] == "paused", what="shown paused")
        await pilot.press("k")  # kill asks first; Enter says no
        await until(pilot, lambda: isinstance(app.screen, Confirm), what="kill asks")
        await pilot.press("enter")
        await pilot.press("p")
        await until(pilot, lambda: not h.job(running).get("paused"), what="resumed")
        await pilot.press("r")  # retry is not for a running job: said, nothing sent
        await until(pilot, lambda: "not for a running job" in app.said, what="said why not")
        assert h.job(running)["state"] == "running"

    drive(app, body)


def test_the_last_sleep_is_on_the_header(home, fakeclock, monkeypatch):
    """The laptop sleeps an hour (the clock shim, tests/support/fakeclock.py):
    the daemon's clock watch sees it, and the open view says so."""
    from tests.support.harness import TEST_CONFIG, Harness

    h = Harness(home / "h", config=TEST_CONFIG, extra_env=fakeclock.env())
    monkeypatch.setenv("SLOTH_HOME", str(h.home))
    try:
        h.start()
        app = TopApp(feed_options=dict(FAST_FEED, idle_s=1.0))  # the status read again each second

        async def body(pilot: Any) -> None:
            await until(pilot, lambda: "no sleep seen" in header(app), what="nothing seen yet")
            fakeclock.jump(3600)
            await until(pilot, lambda: "last slept" in header(app), what="the sleep on the header")
            assert "3600" in header(app) or "1h" in header(app), header(app)

        drive(app, body)
    finally:
        h.reap()


def test_keys_typed_ahead_of_a_question_or_the_help_count_once(in_home):
    """A question or the help is on screen until its dismissal is handled:
    keys typed fast reach it again. The first answer counts; the view lives."""
    h = in_home
    jid, app = one_running(h)

    async def body(pilot: Any) -> None:
        await selected(pilot, app, jid)
        await pilot.press("question_mark")
        await until(pilot, lambda: isinstance(app.screen, Help), what="the help")
        for key in ("x", "c"):  # both queued before the first is handled, as a fast typist's are
            app.screen.post_message(events.Key(key, key))
        await until(pilot, lambda: not isinstance(app.screen, Help), what="the help closed")
        await pilot.press("c")
        await until(pilot, lambda: isinstance(app.screen, Confirm), what="the question")
        question = app.screen
        await pilot.press("c", "k", "question_mark")  # the view's keys do nothing while it asks
        assert app.screen is question and len(app.screen_stack) == 2
        question.action_no()  # two answers before the first is handled: the first counts
        question.action_yes()
        await until(pilot, lambda: not isinstance(app.screen, Confirm), what="the question gone")
        await pilot.pause(1.0)
        assert app.is_running and "not done" in app.said
        assert h.job(jid)["state"] == "running"

    drive(app, body)


def test_a_read_that_lands_as_the_view_is_taken_down_shows_nothing_and_raises_nothing(in_home):
    """The job's detail and its log's tail are read by worker threads and
    shown when they land; a quit while one runs takes the view's widgets
    down first (CI: NoMatches '#log' ended the app with WorkerFailed)."""
    jid, app = one_running(in_home)

    async def body(pilot: Any) -> None:
        await selected(pilot, app, jid)
        d = app.job_detail
        for wid in ("#job", "#log", "#log-narrow"):
            await app.home.query_one(wid).remove()  # as at the quit's unmount
        # from a thread, as the reads land: a tail, then a detail
        await asyncio.to_thread(app._hand_over, app._show_log, d)
        await asyncio.to_thread(app._hand_over, app._show_detail, jid, d)
        assert app.is_running

    drive(app, body)

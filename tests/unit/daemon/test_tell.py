"""Being told: desktop notifications through a recording `notify-send` found
on PATH, and real on_finish hook scripts (one that hangs is killed; a flood
is bounded). In-process on an event loop; the commands are real processes."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from pathlib import Path

import psutil
import pytest

from sloth_daemon.config import Settings
from sloth_daemon.models import Job, JobState
from sloth_daemon.daemon.tell import MAX_PENDING, Teller, notify_argv


def job(jid: int, state: str, *, lane: str = "default", message: str = "", attempts: int = 1) -> Job:
    return Job(id=jid, command=["make", "test"], state=JobState(state), attempts=attempts, max_attempts=3,
               lease_until=None, not_before=0, token=None, worker=None, message=message, created_at=1.0,
               updated_at=2.0, lane=lane, exit_code=3 if state == "failed" else 0, finished_at=time.time())


@pytest.fixture
def bin_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A recording notify-send first on PATH: each call appends its argv as a JSON line."""
    d = tmp_path / "bin"
    d.mkdir()
    log = tmp_path / "notified.jsonl"
    script = d / "notify-send"
    script.write_text(f"#!/bin/sh\n{sys.executable} -c 'import json,sys; print(json.dumps(sys.argv[1:]))' "
                      f'"$@" >> {log}\n')
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{d}:{os.environ['PATH']}")
    return d


def notified(tmp_path: Path) -> list[list[str]]:
    f = tmp_path / "notified.jsonl"
    return [json.loads(ln) for ln in f.read_text().splitlines()] if f.exists() else []


def teller(tmp_path: Path, busy: set[str] | None = None, **settings) -> Teller:
    return Teller(Settings(**settings), log_path=lambda j, a: tmp_path / f"{j}.{a}.log",
                  lane_busy=lambda lane: lane in (busy or set()))


async def settle(t: Teller, timeout_s: float = 10) -> None:
    """Until every notice and hook started so far has ended (bounded)."""
    if t._tasks:
        await asyncio.wait(set(t._tasks), timeout=timeout_s)
    assert not t._tasks, "notices still running"


def test_a_failure_is_notified_a_success_only_when_asked(tmp_path, bin_dir):
    async def go() -> None:
        t = teller(tmp_path, busy={"default"})
        t.job_changed(job(1, "running"))
        t.job_changed(job(2, "done"))
        t.job_changed(job(3, "failed", message="exit 3; no attempts left"))
        t.job_changed(job(4, "cancelled"))
        await settle(t)
        t.apply(Settings(notify=("done",)))
        t.job_changed(job(5, "done"))
        await settle(t)

    asyncio.run(go())
    calls = notified(tmp_path)
    assert calls[0] == ["-a", "sloth", "-u", "critical", "--", "sloth: job 3 failed",
                        "exit 3; no attempts left\nmake test"]
    assert calls[1] == ["-a", "sloth", "-u", "normal", "--", "sloth: job 5 done", "make test"]
    assert len(calls) == 2


def test_a_lane_that_drains_after_a_batch_is_told_once(tmp_path, bin_dir):
    busy = {"video"}

    async def go() -> None:
        t = teller(tmp_path, busy=busy, notify=("drained",))
        t.job_changed(job(1, "done", lane="video"))
        busy.clear()
        t.job_changed(job(2, "done", lane="video"))
        t.job_changed(job(2, "done", lane="video"))  # the same end reported twice: told once
        t.job_changed(job(3, "done", lane="solo"))  # a single job drains nothing worth telling
        await settle(t)

    asyncio.run(go())
    assert [c[-2] for c in notified(tmp_path)] == ["sloth: lane video drained"]


def test_the_hook_gets_the_job_as_json_on_stdin_and_its_environment(tmp_path):
    out = tmp_path / "hook.out"
    hook = tmp_path / "hook.sh"
    hook.write_text(f'#!/bin/sh\n{{ echo "$SLOTH_JOB_ID $SLOTH_JOB_STATE $SLOTH_JOB_EXIT_CODE $SLOTH_JOB_LOG"; cat; }}'
                    f' > {out}\n')
    hook.chmod(0o755)

    async def go() -> None:
        t = teller(tmp_path, notify=(), on_finish=str(hook))
        t.job_changed(job(7, "failed", message="exit 3"))
        await settle(t)

    asyncio.run(go())
    head, body = out.read_text().split("\n", 1)
    assert head == f"7 failed 3 {tmp_path / '7.1.log'}"
    sent = json.loads(body)
    assert (sent["id"], sent["state"], sent["message"], sent["log"]) == (7, "failed", "exit 3", str(tmp_path / "7.1.log"))
    assert "env" not in sent


def test_a_hook_that_hangs_is_killed_with_its_children_and_never_blocks(tmp_path):
    pids = tmp_path / "pids"
    hook = f"sleep 300 & echo $! > {pids}; echo $$ >> {pids}; wait"

    async def go() -> float:
        t = teller(tmp_path, notify=(), on_finish=hook, hook_timeout_s=0.5)
        t0 = time.monotonic()
        t.job_changed(job(1, "done"))
        assert time.monotonic() - t0 < 0.1  # only scheduled
        await settle(t)
        return time.monotonic() - t0

    took = asyncio.run(go())
    assert took < 5
    for pid in map(int, pids.read_text().split()):
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def test_a_flood_of_ends_is_bounded(tmp_path):
    async def go() -> Teller:
        t = teller(tmp_path, notify=(), on_finish="sleep 0.2", hook_timeout_s=5)
        for i in range(MAX_PENDING + 50):
            t.job_changed(job(i + 1, "done"))
        assert len(t._tasks) == MAX_PENDING
        await t.close(grace_s=0.5)
        return t

    t = asyncio.run(go())
    assert t.stats["dropped"] == 50


def test_notify_argv_per_platform():
    assert notify_argv("t", "b", urgent=True, which=lambda c: None) is None
    mac = notify_argv('say "hi"', "a\\b", urgent=False, which=lambda c: f"/usr/bin/{c}", platform="darwin")
    assert mac == ["osascript", "-e", "on run argv", "-e",
                   "display notification (item 2 of argv) with title (item 1 of argv)", "-e", "end run",
                   'say "hi"', "a\\b"]  # the text as the script's arguments: data, never code


@pytest.mark.parametrize("body", [
    '" & (do shell script "touch /tmp/pwned") & "',  # closes the string, runs a command
    '\\" & (do shell script "id") & "\\',  # a backslash to eat an escaping one
    'line one\rend tell\ndo shell script "id"\n--',  # new lines and a comment
    "-u critical", "--help", "",
])
def test_no_title_or_body_becomes_applescript_or_an_option(body):
    """Issue 20 item 10: whatever a job's command is, the script osascript
    runs is the same constant, and notify-send reads it after ``--``."""
    which = lambda c: f"/usr/bin/{c}"  # noqa: E731
    mac = notify_argv(body, body, urgent=False, which=which, platform="darwin")
    assert mac is not None and mac[:-2] == notify_argv("t", "b", urgent=False, which=which, platform="darwin")[:-2]
    assert mac[-2:] == [body, body] and all(body not in line for line in mac[1:-2] if body)
    linux = notify_argv("sloth: job 1 done", body, urgent=True, which=which, platform="linux")
    assert linux == ["/usr/bin/notify-send", "-a", "sloth", "-u", "critical", "--", "sloth: job 1 done", body]


def test_a_failing_notifier_is_said_once_per_cause_counted_and_cleared_when_it_works(tmp_path, monkeypatch, caplog):
    """issue 28 "also seen": one warning per cause (not one per job), the
    count and cause in status (doctor shows it), and a word when it works again."""
    d = tmp_path / "bin"
    d.mkdir()
    cause = tmp_path / "cause"
    cause.write_text("Cannot autolaunch D-Bus without X11 $DISPLAY")
    (d / "notify-send").write_text(f'#!/bin/sh\nc=$(cat {cause})\n[ -z "$c" ] && exit 0\necho "$c" >&2\nexit 1\n')
    (d / "notify-send").chmod(0o755)
    monkeypatch.setenv("PATH", f"{d}:/usr/bin:/bin")

    async def go() -> None:
        t = teller(tmp_path)
        for i in range(1, 4):
            t.job_changed(job(i, "failed"))
            await settle(t)
        assert t.status()["trouble"]["failed"] == 3
        cause.write_text("Failed to connect to the session bus")
        t.job_changed(job(4, "failed"))
        await settle(t)
        assert t.status()["trouble"]["failed"] == 1 and "session bus" in t.status()["trouble"]["cause"]
        cause.write_text("")
        t.job_changed(job(5, "failed"))
        await settle(t)
        assert t.status()["trouble"] is None

    with caplog.at_level("INFO", logger="sloth.tell"):
        asyncio.run(go())
    warned = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warned) == 2 and "autolaunch" in warned[0] and "session bus" in warned[1], warned
    assert any("work again" in r.getMessage() for r in caplog.records)

"""The commands a person types every day (issue 22): after a crash each one
that needs the daemon starts it, as `sloth add` does, and says so; the
readers read the file instead; a cancel by lane touches only what it can
cancel; echoes say a thing once; `sloth status` names its failures.

Real daemons (started by the commands themselves after a kill -9), a real
keeper whose job outlives every crash, the real `sloth` command line.
"""

from __future__ import annotations

import os
import re
import signal
import time

import psutil
import pytest

from tests.support.harness import Harness, alive

pytestmark = pytest.mark.acceptance

STARTED = re.compile(r"^sloth: started the daemon \(pid (\d+)\)$", re.M)


def crash(h: Harness) -> None:
    """kill -9 whichever daemon serves ``h``'s queue (the harness's own or
    one a command started); its keeper and the keeper's jobs live on."""
    pid = int(h.call("status")["pid"])
    os.kill(pid, signal.SIGKILL)
    if h.daemon is not None and h.daemon.pid == pid:
        h.daemon.wait(10)
    else:
        h.wait_for(lambda: not alive(pid), timeout_s=10, what=f"daemon {pid} gone")


def started(r) -> int:
    """The pid a command said it started the daemon with (exactly once)."""
    found = STARTED.findall(r.stderr)
    assert len(found) == 1, (r.returncode, r.stdout, r.stderr)
    assert int(found[0]) == int(psutil.Process(int(found[0])).pid)
    return int(found[0])


def answers(h: Harness) -> bool:
    try:
        h.call("ping")
        return True
    except Exception:  # noqa: BLE001 - any failure to connect: nobody serves
        return False


def test_after_a_crash_each_command_that_needs_the_daemon_starts_it_and_the_keepers_job_lives_on(harness):
    harness.start()
    harness.cli("lane", "set", "hold", "-c", "0", "--create", check=True)  # its jobs stay queued
    harness.cli("lane", "set", "default", "-c", "4", check=True)
    sleeper = harness.add("sleep", "300")
    pid = harness.wait_for(lambda: (harness.job(sleeper).get("runner") or {}).get("pid"), what="sleeper running")
    keeper = harness.keeper_pid()
    done = harness.add("sh", "-c", "echo out loud")
    harness.wait_state(done, "done")
    held = [harness.add("true", lane="hold") for _ in range(3)]

    def after_a_crash(*argv: str, stdout: str) -> None:
        crash(harness)
        assert not answers(harness)
        r = harness.cli(*argv)
        assert r.returncode == 0, (argv, r.returncode, r.stdout, r.stderr)
        assert stdout in r.stdout, (argv, r.stdout, r.stderr)
        started(r)
        assert answers(harness)
        if argv[0] == "kill":
            return
        assert alive(pid) and harness.keeper_pid() == keeper, "the keeper and its job outlive each crash"
        assert harness.job(sleeper)["state"] == "running" and harness.job(sleeper)["attempts"] == 1

    after_a_crash("cancel", str(held[0]), stdout=f"job {held[0]} cancelled")
    after_a_crash("retry", str(held[0]), stdout=f"job {held[0]} queued again")
    after_a_crash("lane", "set", "hold", "-c", "0", stdout="lane hold: concurrency")
    after_a_crash("wait", str(done), stdout=f"job {done} done")
    after_a_crash("logs", "-f", str(done), stdout="out loud")
    after_a_crash("cancel", "--lane", "hold", stdout=f"job {held[2]} cancelled")
    after_a_crash("pause", stdout="paused all lanes")
    after_a_crash("resume", stdout="resumed all lanes")
    after_a_crash("kill", str(sleeper), stdout=f"job {sleeper} killed")
    harness.wait_for(lambda: not alive(pid), what="the killed job's process gone")

    # Reading needs no daemon: the file is read, and none is started.
    time.sleep(0.01)  # every finished job ended before "now" by more than 0 s
    n = harness.call("prune", older_than_s=0, dry_run=True)["would_prune"]
    assert n >= 4  # done, two cancelled, the killed one
    crash(harness)
    for argv, out in ((("prune", "--dry-run", "--older-than", "0"), f"would prune {n} job(s)"),
                      (("prune", "--dry-run", "--state", "done", "-l", "default"), "would prune 0 job(s)"),
                      (("status",), "not running"),
                      (("lane", "ls"), "hold"), (("logs", str(done)), "out loud")):
        r = harness.cli(*argv)
        assert r.returncode == 0 and out in r.stdout, (argv, r.stdout, r.stderr)
        assert "reading the queue file (read-only)" in r.stderr and not STARTED.search(r.stderr), (argv, r.stderr)
    assert not answers(harness)
    r = harness.cli("prune", "--dry-run", "--state", "running")  # checked as the daemon checks
    assert r.returncode == 2 and "cannot prune running jobs" in r.stderr
    r = harness.cli("prune")  # deleting needs the daemon: it is started
    assert r.returncode == 0 and r.stdout.startswith("pruned 0 job(s)") and started(r)
    crash(harness)

    # SLOTH_NO_START: the command says nobody listens and starts nothing (add's --no-start, for every command).
    r = _cli(harness, ("cancel", str(held[1])), {"SLOTH_NO_START": "1"})
    assert r.returncode == 3 and "no sloth daemon is listening" in r.stderr and not STARTED.search(r.stderr)
    assert not answers(harness)
    r = harness.cli("add", "--no-start", "--", "true")
    assert r.returncode == 3 and not answers(harness)


def _cli(h: Harness, argv: tuple[str, ...], env: dict[str, str]):
    saved = dict(h.env)
    h.env.update(env)
    try:
        return h.cli(*argv)
    finally:
        h.env.clear()
        h.env.update(saved)


def test_cancel_by_lane_cancels_its_active_jobs_and_says_nothing_of_finished_ones(harness):
    harness.start()
    harness.cli("lane", "set", "work", "-c", "1", "--create", check=True)
    finished = [harness.add("true", lane="work") for _ in range(4)]
    for j in finished:
        harness.wait_state(j, "done")
    running = harness.add("sleep", "300", lane="work")
    harness.wait_state(running, "running")
    queued = [harness.add("true", lane="work") for _ in range(2)]
    blocked = harness.add("true", lane="work", after=[queued[0]])
    other = harness.add("sleep", "300")  # another lane: untouched
    harness.wait_state(other, "running")
    r = harness.cli("cancel", "--lane", "work")
    assert r.returncode == 0, (r.stdout, r.stderr)
    assert r.stderr == ""
    assert sorted(r.stdout.splitlines()) == sorted(f"job {j} cancelled" for j in [running, *queued, blocked])
    assert all(harness.job(j)["state"] == "done" for j in finished)
    assert harness.job(other)["state"] == "running"
    # Nothing left to cancel: said, and that is no failure.
    r = harness.cli("cancel", "--lane", "work")
    assert (r.returncode, r.stdout.strip(), r.stderr) == (0, "no job matched: nothing cancelled", "")
    # An id that cannot be cancelled still says why, and fails.
    r = harness.cli("cancel", str(finished[0]))
    assert r.returncode == 6 and f"job {finished[0]} is done" in r.stderr


def test_echoes_say_what_happened_once(harness):
    harness.start()
    harness.call("pause")
    a = harness.add("true")
    b = harness.add("true", after=[a])
    r = harness.cli("cancel", str(a), check=True)
    assert r.stdout.splitlines() == [f"job {a} cancelled"]
    assert harness.job(b)["state"] == "cancelled"  # it waited for job a to be done
    r = harness.cli("retry", str(a), check=True)
    assert r.stdout.splitlines() == [f"job {a} queued again"]
    r = harness.cli("retry", str(b), check=True)
    assert r.stdout.splitlines() == [f"job {b} queued again (blocked)"]  # it waits for job a again
    harness.call("resume")
    s = harness.add("sleep", "300")
    harness.wait_state(s, "running")
    r = harness.cli("kill", str(s), check=True)
    assert r.stdout.splitlines() == [f"job {s} killed"]


def test_status_names_each_failure_by_its_command_or_label(harness):
    harness.start()
    plain = harness.add("sh", "-c", "echo boom; exit 3", max_attempts=1)
    labelled = harness.add("false", label="nightly backup", max_attempts=1)
    long_one = harness.add("sh", "-c", "exit 4; " + "x" * 200, max_attempts=1)
    for j in (plain, labelled, long_one):
        harness.wait_state(j, "failed")
    lines = [ln for ln in harness.cli("status", check=True).stdout.splitlines() if ln.startswith("failed")]
    assert len(lines) == 3, lines
    by_id = {int(ln.split()[1]): ln for ln in lines}
    assert by_id[plain].endswith("sh -c 'echo boom; exit 3': exit 3"), by_id[plain]
    assert "[nightly backup] false: exit 1" in by_id[labelled], by_id[labelled]
    assert "exit 4; xxx" in by_id[long_one] and "…" in by_id[long_one] and len(by_id[long_one]) <= 110

"""A keeper stopped (SIGSTOP) past its run's trust deadline, while the job
ends by itself meanwhile: on SIGCONT it learns of the exit and of the
deadline at once. The exit comes first, and it is the job's outcome if the
kernel places it before the deadline (exitstamp.py); the job is done once
and its history says it ended while the keeper was stopped. An end the
kernel places after the deadline is fenced, and the history says that too
(issue 20, item 3: the success was recorded `fenced: no lease renewal` and
the job run again).

Real daemon, real keeper, real job processes; a 3 s lease (the shortest),
so the keeper's deadline is at most 2.5 s after it was last trusted.
"""

from __future__ import annotations

import os
import signal
import time

import psutil
import pytest

from tests.support.harness import Harness

pytestmark = pytest.mark.skipif(not os.path.exists("/proc/thread-self/sched"),
                                reason="the kernel keeps no record of when a process last ran")
PAST_TRUST_S = 3.5  # stopped this long: longer than any trust deadline of a 3 s lease


def start_held_job(h: Harness) -> tuple[int, int, int]:
    """A job that writes a mark and ends once `go` exists: (job id, its pid, the keeper's pid)."""
    h.start()
    marks = h.home / "marks"
    jid = h.add("sh", "-c", f"echo run >> {marks}; while [ ! -e {h.home / 'go'} ]; do sleep 0.02; done")
    job = h.wait_for(lambda: (j := h.job(jid))["state"] == "running" and marks.exists() and j.get("runner") and j,
                     what="the job started")
    return jid, int(job["runner"]["pid"]), h.keeper_pid()


def end_it(h: Harness, pid: int) -> None:
    (h.home / "go").touch()
    h.wait_for(lambda: psutil.Process(pid).status() == psutil.STATUS_ZOMBIE, what="the job ended (unreaped)")


def runs(h: Harness) -> int:
    return (h.home / "marks").read_text().count("run")


def test_a_job_that_ends_while_its_keeper_is_stopped_is_done_once(harness):
    jid, pid, keeper = start_held_job(harness)
    os.kill(keeper, signal.SIGSTOP)
    try:
        end_it(harness, pid)  # before any deadline: at most 2.5 s after the keeper was last trusted
        ended = time.time()
        time.sleep(PAST_TRUST_S)
    finally:
        os.kill(keeper, signal.SIGCONT)
    job = harness.wait_state(jid, "done", "queued", "failed", timeout_s=20)
    events = harness.events(jid)
    assert (job["state"], job["attempts"], runs(harness)) == ("done", 1, 1), events
    assert [e["kind"] for e in events] == ["claimed", "started", "done"], events
    done = events[-1]
    assert "exit 0" in done["message"] and "ended while the keeper was stopped" in done["message"], done
    assert done["at"] < ended + 1.0  # when it ended, not when the keeper noticed


def test_a_job_that_ends_after_its_deadline_while_its_keeper_is_stopped_is_fenced_saying_so(harness):
    jid, pid, keeper = start_held_job(harness)
    os.kill(keeper, signal.SIGSTOP)
    try:
        time.sleep(PAST_TRUST_S)
        end_it(harness, pid)  # after the deadline: nothing may vouch for what it did past it
        time.sleep(0.3)
    finally:
        os.kill(keeper, signal.SIGCONT)
    harness.wait_for(lambda: any(e["kind"] == "fenced" for e in harness.events(jid)), timeout_s=20,
                     what="the fence recorded")
    fenced = next(e for e in harness.events(jid) if e["kind"] == "fenced")
    assert "ended (exit 0) while the keeper was stopped" in fenced["message"], fenced
    assert "not counted as a try" in fenced["message"], fenced
    job = harness.wait_state(jid, "done", timeout_s=20)  # run again: `go` is there, it ends at once
    assert (job["attempts"], job["tries"], runs(harness)) == (2, 1, 2)

"""A keeper stopped (SIGSTOP) past its run's trust deadline (issue 20, item
3: a job that ended by itself meanwhile was recorded `fenced: no lease
renewal` on SIGCONT and run again).

On SIGCONT the keeper learns of everything at once. It reaps first, and an
exit it finds is the run's outcome whenever it happened, before or after
the deadline: a process that has ended overlaps nothing, and the queue's
fencing token decides whether its outcome may be recorded. Then it reads
what the daemon sent while it was stopped (renewals in its socket) before
it fences what still runs: a run the daemon kept renewing goes on; one whose
daemon was stopped too is fenced as before.

Real daemon, real keeper, real job processes; a 3 s lease (the shortest),
so the keeper's deadline is at most 2.5 s after it was last trusted.
"""

from __future__ import annotations

import os
import signal
import time

import psutil

from tests.support.harness import Harness, alive

PAST_TRUST_S = 3.5  # stopped this long: longer than any trust deadline of a 3 s lease


def start_held_job(h: Harness, **spec: float) -> tuple[int, int, int]:
    """A job that writes a mark and ends once `go` exists: (job id, its pid, the keeper's pid)."""
    h.start()
    marks = h.home / "marks"
    jid = h.add("sh", "-c", f"echo run >> {marks}; while [ ! -e {h.home / 'go'} ]; do sleep 0.02; done", **spec)
    job = h.wait_for(lambda: (j := h.job(jid))["state"] == "running" and marks.exists() and j.get("runner") and j,
                     what="the job started")
    return jid, int(job["runner"]["pid"]), h.keeper_pid()


def end_it(h: Harness, pid: int) -> None:
    (h.home / "go").touch()
    h.wait_for(lambda: psutil.Process(pid).status() == psutil.STATUS_ZOMBIE, what="the job ended (unreaped)")


def runs(h: Harness) -> int:
    return (h.home / "marks").read_text().count("run")


def done_once(h: Harness, jid: int) -> dict:
    job = h.wait_state(jid, "done", "queued", "failed", timeout_s=20)
    events = h.events(jid)
    assert (job["state"], job["attempts"], runs(h)) == ("done", 1, 1), events
    assert [e["kind"] for e in events] == ["claimed", "started", "done"], events
    return events[-1]


def test_a_job_that_ends_while_its_keeper_is_stopped_is_done_once(harness):
    jid, pid, keeper = start_held_job(harness)
    os.kill(keeper, signal.SIGSTOP)
    try:
        end_it(harness, pid)  # before any deadline: at most 2.5 s after the keeper was last trusted
        time.sleep(PAST_TRUST_S)
    finally:
        os.kill(keeper, signal.SIGCONT)
    done = done_once(harness, jid)
    assert "exit 0" in done["message"] and "ended while the keeper was stopped" in done["message"], done


def test_a_job_that_ends_after_its_deadline_while_its_keeper_is_stopped_is_done_once(harness):
    jid, pid, keeper = start_held_job(harness)
    os.kill(keeper, signal.SIGSTOP)
    try:
        time.sleep(PAST_TRUST_S)
        end_it(harness, pid)  # after the deadline: it has ended all the same, and the lease is still ours
        time.sleep(0.3)
    finally:
        os.kill(keeper, signal.SIGCONT)
    done = done_once(harness, jid)
    assert "exit 0" in done["message"] and "after its trust deadline" in done["message"], done


def test_a_run_its_daemon_kept_renewing_goes_on_after_its_keeper_is_stopped(harness):
    # A 6 s lease: renewed every 2 s, trusted 5.5 s past each renewal, SIGTERM
    # 1 s before that. With the shortest lease (3 s) a daemon delayed 1 s by
    # a loaded machine (CI's four workers on two CPUs) sends its last renewal
    # too late for the keeper's check and the fence is right; at 6 s only a
    # delay over 2.5 s does that.
    jid, pid, keeper = start_held_job(harness, lease_s=6.0)
    os.kill(keeper, signal.SIGSTOP)
    try:
        time.sleep(6.0)  # past the deadline of any renewal before the stop; the daemon renews meanwhile
    finally:
        os.kill(keeper, signal.SIGCONT)
    time.sleep(1.0)  # what a fence would take (SIGTERM, SIGKILL at the deadline: passed)
    assert alive(pid) and harness.job(jid)["state"] == "running", (harness.events(jid), harness.log_text()[-3000:])
    (harness.home / "go").touch()
    done = done_once(harness, jid)
    assert done["message"] == "exit 0", done


def test_a_run_is_fenced_when_its_daemon_was_stopped_with_its_keeper(harness):
    jid, pid, keeper = start_held_job(harness)
    daemon = harness.daemon.pid  # type: ignore[union-attr]
    os.kill(daemon, signal.SIGSTOP)
    try:
        os.kill(keeper, signal.SIGSTOP)
        try:
            time.sleep(PAST_TRUST_S)  # no renewal is sent, none waits
        finally:
            os.kill(keeper, signal.SIGCONT)
        harness.wait_for(lambda: not alive(pid), timeout_s=10, what="the run fenced")
    finally:
        os.kill(daemon, signal.SIGCONT)
    harness.wait_for(lambda: any(e["kind"] == "fenced" for e in harness.events(jid)), timeout_s=20,
                     what="the fence recorded")
    fenced = next(e for e in harness.events(jid) if e["kind"] == "fenced")
    assert "no lease renewal" in fenced["message"], fenced
    (harness.home / "go").touch()
    job = harness.wait_state(jid, "done", timeout_s=20)  # run again: `go` is there, it ends at once
    assert (job["attempts"], runs(harness)) == (2, 2), harness.events(jid)

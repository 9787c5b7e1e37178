"""A failed attempt's leftovers never overlap its retry.

The job's work runs in a double-forked, setsid grandchild (tests/support/
probe_job.py --detach): it leaves the job's process group and tree. When the
job's own process dies (here: SIGKILL from outside, as an OOM kill would),
the attempt has failed and will be retried -- but the grandchild is still
at work. The keeper ends what the attempt left running (found by the run's
token) before it reports the attempt over, so the retry never runs beside
it (the probe's flock would record a collision). A job that succeeds may
leave background processes on purpose: those are left alone.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import psutil

from tests.support.harness import alive

PROBE = str(Path(__file__).resolve().parents[1] / "support" / "probe_job.py")


def _started(rec: Path, n: int) -> list[list[str]]:
    try:
        lines = (rec / "starts").read_text().splitlines()
    except FileNotFoundError:
        return []
    return [ln.split() for ln in lines][:n] if len(lines) >= n else []


def test_a_failed_attempts_escaped_grandchild_is_ended_before_the_retry(harness, home):
    rec = home / "rec"
    rec.mkdir()
    harness.start()
    jid = harness.add(sys.executable, PROBE, str(rec), "--detach", "1", "--hold", "30")
    (first,) = harness.wait_for(lambda: _started(rec, 1), what="the first attempt at work")
    root = int(first[3])
    worker = [p for p in psutil.process_iter(["environ"]) if p.pid != root and p.pid != os.getpid()
              and (p.info["environ"] or {}).get("SLOTH_JOB_TOKEN") == first[2]
              and PROBE in " ".join(p.cmdline())]
    assert worker and all(p.ppid() != root for p in worker)  # escaped: not the root's child
    os.kill(root, signal.SIGKILL)
    harness.wait_for(lambda: _started(rec, 2), timeout_s=60, what="the retry")
    assert not (rec / "collisions").exists(), (rec / "collisions").read_text()
    assert not any(alive(p.pid) for p in worker)  # ended before the retry started
    events = [e["kind"] for e in harness.events(jid)]
    assert events.count("claimed") == 2 and "failed" in events


def test_a_successful_job_may_leave_a_background_process(harness, home):
    """`sloth add -- start-my-server`: what a job that exits 0 leaves running
    is the user's, not killed."""
    pidfile = home / "bg.pid"
    harness.start()
    jid = harness.add("sh", "-c", f"(setsid sleep 300 & echo $! > {pidfile}); exit 0")
    harness.wait_state(jid, "done")
    pid = int(harness.wait_for(lambda: pidfile.exists() and pidfile.read_text().strip(), what="the pid"))
    try:
        assert alive(pid)
    finally:
        os.kill(pid, signal.SIGKILL)

"""Jobs outlive the daemon (issue 10): a restart hands them over untouched,
nothing runs unwatched while no daemon is alive, and a stalled daemon's jobs
are stopped before their lease could be handed to anyone else.

Real daemon, real keeper, real job processes; a foreign claimer is a library
Queue on the same file, as another worker would be.
"""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path

import psutil
import pytest

from sloth_daemon.queue import Queue
from tests.support.harness import Harness, alive

pytestmark = pytest.mark.acceptance

# A job that counts out loud, notes any signal it gets, and exits with the
# code it was given: output continuity and "not signalled" are checkable.
COUNTER = r"""
import signal, sys, time
n, code, mark, gate = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
def note(sig, _frame):
    with open(mark, "a") as f:
        f.write(f"{sig}\n")
for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1):
    signal.signal(s, note)
import os
for i in range(n):
    print(i, flush=True)
    while i == n // 2 and not os.path.exists(gate):  # halfway: wait until the test lets go
        time.sleep(0.02)
    time.sleep(0.01)
sys.exit(code)
"""


def test_a_restart_during_eight_running_jobs_signals_none_reruns_none_and_keeps_their_output(harness, home):
    # A 10 s lease: the new daemon must be up and renewing before the keeper's
    # trust lapses, and on a loaded machine (CI's four workers on two CPUs) a
    # start with its imports takes 1-2 s, too close to a 3 s lease's 2.5 s.
    config = harness.home.joinpath("config.toml")
    config.write_text(config.read_text().replace('lease_s = "3s"', 'lease_s = "10s"') + "\n[lanes]\ndefault = 8\n")
    harness.start()
    script, gate, marks = home / "counter.py", home / "go", home / "signals"
    script.write_text(COUNTER)
    codes = [0, 3, 0, 7, 0, 1, 0, 42]
    ids = [harness.add(sys.executable, str(script), "200", str(c), str(marks), str(gate)) for c in codes]
    for jid in ids:
        harness.wait_for(lambda j=jid: harness.job(j)["runner"], what=f"job {jid} running")
    pids = {jid: harness.job(jid)["runner"]["pid"] for jid in ids}
    old = harness.daemon
    r = harness.cli("daemon", "restart", check=True)
    assert "8 running job(s) handed over" in r.stdout
    assert old is not None and old.wait(30) == 0
    assert all(alive(p) for p in pids.values())  # same processes, still running
    gate.touch()
    for jid, code in zip(ids, codes):
        job = harness.wait_state(jid, "done", "queued", "failed", timeout_s=60)
        assert job["exit_code"] == code and job["attempts"] == 1, job
        kinds = [e["kind"] for e in harness.events(jid)]
        assert kinds.count("adopted") == 1 and "reclaimed" not in kinds and kinds.count("started") == 1
        out = Path(harness.call("logs", id=jid, attempt=1)["path"]).read_text().split()
        assert out == [str(i) for i in range(200)], f"job {jid}: output not continuous"
    assert not marks.exists(), f"jobs were signalled: {marks.read_text()}"


def test_a_timeout_fires_while_no_daemon_runs(harness, home):
    harness.start()
    jid = harness.add("sleep", "300", timeout_s=1.5, max_attempts=1)
    pid = harness.wait_for(lambda: harness.job(jid)["runner"], what="job running")["pid"]
    harness.kill9()
    harness.wait_for(lambda: not alive(pid), timeout_s=20, what="the keeper's timeout to end the job")
    harness.start()
    job = harness.wait_state(jid, "failed")
    assert job["message"].startswith("timed out after 1.5s") and job["attempts"] == 1


def test_a_stalled_daemons_job_is_stopped_before_a_foreign_claimer_can_take_it(home):
    """SIGSTOP the daemon past its job's lease. The keeper must end the job
    before the lease expires, so a foreign worker that claims the job the
    moment it can finds the first run already gone; after SIGCONT the daemon
    neither runs it again nor undoes the foreign claim."""
    h = Harness(home / "h", config='lease_s = "3s"\nclock_check_s = "1s"\nkill_grace_s = "1s"\n')
    try:
        daemon = h.start()
        jid = h.add("sleep", "300", lane="x")
        pid = h.wait_for(lambda: h.job(jid)["runner"], what="job running")["pid"]
        daemon.send_signal(signal.SIGSTOP)
        q = Queue(h.home / "queue.db")
        try:
            deadline = time.monotonic() + 30
            job = None
            while job is None and time.monotonic() < deadline:
                job = q.claim("foreign-worker", lanes=["x"])
                if job is None:
                    time.sleep(0.01)
            assert job is not None and job.id == jid, "the lease never expired"
            assert not alive(pid), "a foreign worker could claim the job while its first run still ran"
            assert [e.kind for e in q.events(jid)][-1] == "reclaimed"
        finally:
            daemon.send_signal(signal.SIGCONT)
        h.wait_for(lambda: "fenced" in h.log_text() or h.call("status")["running"] == [],
                   what="the daemon to hear its run was fenced")
        time.sleep(1.0)  # a daemon that wrongly re-ran or released it would do so by now
        assert q.get(jid).worker == "foreign-worker" and q.get(jid).state.value == "running"
        assert h.call("status")["running"] == []
        q.complete(jid, job.token)
        q.close()
    finally:
        h.reap()


def test_the_keeper_holds_an_outcome_when_the_database_refuses_it_and_the_next_daemon_records_it(harness, home):
    """A job ends while its outcome cannot be written; the daemon is then
    killed. The keeper still holds the outcome (not acknowledged), so the next
    daemon records it: the job is not run again."""
    harness.start()
    gate = home / "go"
    jid = harness.add("sh", "-c", f"while [ ! -e {gate} ]; do sleep 0.02; done; echo ran >> {home}/ran")
    harness.wait_for(lambda: harness.job(jid)["runner"], what="job running")
    db = harness.home / "queue.db"
    import sqlite3

    lock = sqlite3.connect(db, isolation_level=None, timeout=1)
    lock.execute("BEGIN IMMEDIATE")  # a foreign writer holds the write lock: the result cannot be written
    try:
        gate.touch()
        harness.wait_for(lambda: any(p["id"] == jid for p in harness.call("status").get("pending_outcomes", [])),
                         timeout_s=60, what="the outcome to be held as pending")
        harness.kill9()
    finally:
        lock.execute("ROLLBACK")
        lock.close()
    harness.start()
    job = harness.wait_state(jid, "done")
    assert job["attempts"] == 1 and (home / "ran").read_text() == "ran\n"
    assert psutil.pid_exists(harness.keeper_pid())

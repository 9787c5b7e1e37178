"""Issue 13: outcomes are written without a per-job fsync on the loop (group
commit in a thread, durability.py), yet a result is recorded for good before
anyone hears of it. Here: `sloth wait` returns, and at that instant the
daemon and its keeper are killed -9 (what a crash leaves); after a restart
the job is still done, with one run -- never queued again, never re-run.

(A power cut cannot be staged here; the order "fsync returns, then tell" is
what tests/unit/test_worker.py's group-commit test holds the worker to.)"""

from __future__ import annotations

import psutil

from tests.support.harness import alive


def test_a_job_wait_reported_done_is_still_done_after_a_crash_right_then(harness):
    harness.start()
    for round_ in range(3):
        ids = harness.add_many([{"command": ["sh", "-c", f"echo {round_}-{i}"]} for i in range(5)])
        keeper = psutil.Process(harness.keeper_pid())
        p = harness.cli("wait", *map(str, ids))
        harness.daemon.kill()  # at once: no chance to write anything more
        keeper.kill()
        harness.daemon.wait(10)
        harness.wait_for(lambda: not alive(keeper.pid), timeout_s=10, what="the keeper gone")
        assert p.returncode == 0, p.stderr
        harness.start()
        for jid in ids:
            job = harness.job(jid)
            assert (job["state"], job["attempts"]) == ("done", 1), job
            assert [e["kind"] for e in harness.events(jid)].count("claimed") == 1

"""The keeper takes no process for the daemon on its word (issue 20 item 8).

A real daemon and its real keeper run a job; a second process of the same
uid connects to the keeper and says hello as the daemon, naming the
daemon's pid, then asks for the daemon-only ops; and, while no daemon is
attached (it stopped, leaving its job to the keeper), one that names
itself. On 1d80a5b both were taken for the daemon (they got the run list,
and the real daemon was dropped). The daemon is the process that holds
its data dir's instance lock, and the kernel says which that is.
"""

from __future__ import annotations

import json

import pytest

from tests.support import impostor

pytestmark = pytest.mark.acceptance


def test_a_forged_hello_is_refused_and_the_daemon_and_its_job_carry_on(harness):
    harness.start()
    gate = harness.home / "go"
    job = harness.add("sh", "-c", f"while [ ! -e {gate} ]; do sleep 0.05; done; echo finished")
    harness.wait_state(job, "running")
    daemon_pid, keeper_pid = harness.call("status")["pid"], harness.keeper_pid()

    replies = impostor.run(harness.home / "run" / "keeper.sock", daemon_pid, "kill", "ack", "spawn",
                           env=harness.env)
    hello, *ops = replies
    assert hello["ok"] is False and hello["error"]["code"] == "impostor", hello
    assert "runs" not in json.dumps(hello) and f"not pid {daemon_pid}" in hello["error"]["message"]
    assert [r["error"]["code"] for r in ops] == ["not_attached"] * 3

    gate.touch()  # the job ends by itself: its exit reaches the daemon over the connection it kept
    done = harness.wait_state(job, "done", "failed")
    assert done["state"] == "done" and done["attempts"] == 1
    assert harness.keeper_pid() == keeper_pid
    assert "lost the connection to the keeper" not in harness.log_text()
    keeper_log = (harness.home / "logs" / "keeper.log").read_text()
    assert "refused a hello from pid" in keeper_log and "reconnected" not in keeper_log


def test_while_no_daemon_is_attached_a_process_that_does_not_hold_its_lock_cannot_attach(harness):
    harness.start()
    gate = harness.home / "go"
    job = harness.add("sh", "-c", f"while [ ! -e {gate} ]; do sleep 0.05; done; echo finished")
    harness.wait_state(job, "running")
    assert harness.stop() == 0  # SIGTERM: the job stays with the keeper, no daemon attached

    hello, ack = impostor.run(harness.home / "run" / "keeper.sock", "self", "ack", env=harness.env)
    assert hello["ok"] is False and hello["error"]["code"] == "not_the_daemon", hello
    assert "does not hold the daemon's lock" in hello["error"]["message"] and "runs" not in json.dumps(hello)
    assert ack["error"]["code"] == "not_attached"

    harness.start()  # the real one holds the lock: it attaches and adopts the job
    gate.touch()
    done = harness.wait_state(job, "done", "failed")
    assert done["state"] == "done" and done["attempts"] == 1

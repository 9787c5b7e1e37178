"""Issue 20, item 5, for the keeper: a keeper started on a data folder where
its journal or lock was replaced with a FIFO (the daemon checks them when
it starts, but the keeper is started again later, after it idled out)
never blocks on it: with a FIFO journal it serves, its outcomes held in
memory only; with a FIFO lock it exits at once and says why. The real
keeper process over its real socket (keeper_rig)."""

from __future__ import annotations

import os
import signal
import subprocess

from tests.support.keeper_rig import wait_for


def test_a_keeper_with_a_fifo_journal_serves_and_runs_jobs(rig):
    os.mkfifo(rig.paths.keeper_journal)
    proc = rig.start()
    w = rig.wire(hello=False)
    assert w.request("hello", role="daemon", pid=os.getpid(), name="test")["ok"]  # the old keeper hung in open
    w.call("spawn", **rig.job("a", "sh", "-c", "exit 3"))
    assert w.event("exited", "a")["outcome"]["returncode"] == 3
    assert (f"cannot open the journal {rig.paths.keeper_journal}: it is a FIFO, not a regular file; "
            "outcomes are held in memory only") in rig.keeper_log()
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(10) is not None


def test_a_keeper_with_a_fifo_lock_exits_at_once_saying_why(rig):
    os.mkfifo(rig.paths.keeper_lock)
    proc = rig.start(wait=False)
    try:
        code = proc.wait(10)
    except subprocess.TimeoutExpired:
        raise AssertionError("the keeper hung on its FIFO lock") from None
    assert code == 1
    wait_for(lambda: "keeper.lock: it is a FIFO, not a regular file" in rig.keeper_log(), timeout_s=5,
             what="the keeper's reason on stderr")

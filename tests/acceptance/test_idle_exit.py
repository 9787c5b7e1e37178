"""The daemon exits when it has nothing to do (``idle_exit_s``, issue 34
item 1) and every command brings it back: nothing lost, nothing run late.

Real daemon, real keeper, real CLI in a temporary home; a window of 1 s.
"""

from __future__ import annotations

import random
import subprocess
import threading
import time

from sloth_daemon.cli.launcher import lock_holder
from sloth_daemon.paths import resolve
from tests.support.harness import TEST_CONFIG, Harness, alive

WINDOW = 'idle_exit_s = "1s"\nkeeper_linger_s = "200ms"\n'


def idle(make_harness, name: str = "h") -> Harness:
    return make_harness(TEST_CONFIG + WINDOW, name)


def exits_idle(h: Harness, proc: subprocess.Popen[bytes] | None = None, timeout_s: float = 30) -> None:
    """``proc`` (the harness's daemon) exits by itself, cleanly, as an idle exit:
    its socket removed, its lock free, its keeper gone."""
    proc = proc or h.daemon
    assert proc is not None
    keeper = h.call("status")["keeper"]["pid"]
    assert proc.wait(timeout_s) == 0, h.log_text()
    assert "idle exit: nothing queued, running, held or scheduled for 1s (idle_exit_s)" in h.log_text()
    assert not h.socket.exists()
    assert lock_holder(_paths(h)) is None
    assert keeper is None or not alive(keeper)


def gone_by_itself(h: Harness, pid: int, timeout_s: float = 30) -> None:
    """A daemon a command started (not our child) has left: its lock is free."""
    h.wait_for(lambda: not alive(pid) and lock_holder(_paths(h)) is None, timeout_s, "the daemon's idle exit")
    assert not h.socket.exists()


def _paths(h: Harness):
    return resolve({"SLOTH_HOME": str(h.home)})


def daemon_pid(h: Harness) -> int:
    return int(h.call("status")["pid"])


def test_an_idle_daemon_stays_while_a_job_runs_then_exits_and_add_wait_ls_bring_it_back(make_harness):
    h = idle(make_harness)
    h.start()
    jid = h.add("sleep", "2.5")  # runs past two windows: it must stay for it
    h.wait_state(jid, "running")
    time.sleep(1.5)
    assert h.daemon is not None and h.daemon.poll() is None
    assert h.wait_state(jid, "done")["attempts"] == 1
    exits_idle(h)

    ls = h.cli("ls", check=True).stdout  # from the queue file: no daemon needed
    assert str(jid) in ls and "done" in ls
    assert lock_holder(_paths(h)) is None  # ls started none

    added = h.cli("add", "--", "sh", "-c", "echo back", check=True)
    assert "started the daemon" in added.stderr
    again = int(added.stdout.split()[-1])
    assert h.cli("wait", str(again), check=True).returncode == 0
    assert h.job(again)["state"] == "done" and h.job(again)["attempts"] == 1
    first = daemon_pid(h)
    gone_by_itself(h, first)

    waited = h.cli("wait", str(jid), check=True)  # a wait while it is away: answered, it starts one
    assert waited.returncode == 0
    second = daemon_pid(h)
    assert second != first
    gone_by_itself(h, second)


def test_a_delayed_job_keeps_it_until_it_ran(make_harness):
    h = idle(make_harness)
    h.start()
    due = time.time() + 4  # four windows away: a daemon that left would run it late (or never)
    jid = h.add("true", not_before=due)
    assert h.daemon is not None
    time.sleep(2.5)
    assert h.daemon.poll() is None, h.log_text()
    job = h.wait_state(jid, "done", timeout_s=30)
    assert job["attempts"] == 1
    ran = [e for e in h.events(jid) if e["kind"] in ("claimed", "started")]
    assert ran and min(e["at"] for e in ran) < due + 3  # on time: claimed by the daemon that stayed
    exits_idle(h)


def test_a_schedule_keeps_it_and_its_slot_runs_then_paused_it_lets_it_go(make_harness):
    h = idle(make_harness)
    h.start()
    h.cli("schedule", "add", "tick", "--every", "3s", "--", "true", check=True)
    assert h.daemon is not None
    h.wait_for(lambda: h.job(1)["state"] == "done", 30, "the schedule's first slot run")  # job 1: its first
    time.sleep(2)  # two windows with nothing queued but a schedule: it stays
    assert h.daemon.poll() is None, "left with a schedule enabled"
    h.cli("schedule", "pause", "tick", check=True)
    exits_idle(h)


def test_commands_around_the_moment_it_leaves_are_each_served_and_every_job_runs_once(make_harness):
    """Adds at random moments around the window's end (the daemon leaving,
    or just gone): no command fails, every job runs exactly once, first try."""
    h = idle(make_harness)
    h.start()
    rng = random.Random(34)
    ids: list[int] = []
    errors: list[BaseException] = []

    def add_around_the_exit() -> None:
        try:
            for _ in range(6):
                time.sleep(rng.uniform(0.8, 1.8))
                p = h.cli("add", "--", "true", check=True)
                ids.append(int(p.stdout.split()[-1]))
        except BaseException as e:  # noqa: BLE001 - reported by the test's thread
            errors.append(e)

    adders = [threading.Thread(target=add_around_the_exit) for _ in range(2)]
    for t in adders:
        t.start()
    for t in adders:
        t.join(180)
    assert not errors, errors
    assert len(ids) == 12 and len(set(ids)) == 12
    for jid in ids:
        h.cli("wait", str(jid), check=True)
        job = h.job(jid)
        assert job["state"] == "done" and job["attempts"] == 1, job
    assert "idle exit" in "".join(p.read_text(errors="replace") for p in h.home.rglob("*.log"))


def test_a_run_the_keeper_kept_that_is_not_ours_in_the_queue_does_not_keep_it_once_ended(make_harness):
    """The daemon died (kill -9) while its job ran, and the queue no longer
    has that job claimed (as when a daemon wrote its outcome and died
    before its ack). The next daemon ends the kept run as not its own
    (adoption's disown) and acknowledges its end: then nothing is held,
    and it leaves after its window."""
    import sqlite3

    h = idle(make_harness)
    h.start()
    jid = h.add("sleep", "30")
    h.wait_state(jid, "running")
    h.kill9()  # the keeper keeps the run
    with sqlite3.connect(h.home / "queue.db") as c:
        c.execute("UPDATE jobs SET state = 'done', exit_code = 0, token = NULL, worker = NULL WHERE id = ?", (jid,))
    h.start()
    h.wait_for(lambda: "is not ours in the queue; ending it" in h.log_text(), 30, "the kept run disowned")
    exits_idle(h)


def test_a_run_that_ended_while_no_daemon_was_there_is_recorded_and_then_keeps_it_no_more(make_harness):
    """The daemon died (kill -9) while its job ran; the job ended in the
    keeper meanwhile. The next daemon adopts its outcome, records it and
    acknowledges it: then nothing is held, and it leaves after its window."""
    h = idle(make_harness)
    h.start()
    jid = h.add("sleep", "1")
    h.wait_state(jid, "running")
    h.kill9()  # the keeper keeps the run, and its outcome once it ends
    time.sleep(1.5)
    h.start()
    assert h.wait_state(jid, "done")["attempts"] == 1
    exits_idle(h)

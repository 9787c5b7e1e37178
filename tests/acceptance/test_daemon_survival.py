"""The daemon survives crashes, restarts, SIGTERM and a sleeping laptop."""

import signal
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from sloth_daemon.queue import Queue
from tests.support.harness import Harness, alive

pytestmark = pytest.mark.acceptance
PROBE = str(Path(__file__).resolve().parents[1] / "support" / "probe_job.py")


def probe(harness, d: Path, **opts: str) -> int:
    argv = [sys.executable, PROBE, str(d)]
    for k, v in opts.items():
        argv += [f"--{k.replace('_', '-')}", str(v)]
    return harness.add(*argv)


def starts(d: Path) -> list[list[str]]:
    p = d / "starts"
    return [ln.split() for ln in p.read_text().splitlines()] if p.exists() else []


def start_a_long_probe(harness, home: Path, hold_first: float = 300) -> tuple[int, int]:
    """Start the daemon and one probe job that holds on its first start;
    return the job id and the pid of that first run once it is running."""
    harness.start()
    jid = probe(harness, home, hold_first=hold_first, hold=0.2)
    first = harness.wait_for(lambda: (s := starts(home)) and len(s) == 1 and s, what="first start")
    return jid, int(first[0][3])


def test_kill9_of_the_daemon_leaves_the_job_running_and_the_next_daemon_adopts_it(harness, home):
    jid, first_pid = start_a_long_probe(harness, home, hold_first=3)
    harness.kill9()
    assert alive(first_pid)  # the keeper, not the daemon, is its parent
    harness.start()
    job = harness.wait_state(jid, "done", timeout_s=30)
    kinds = [e["kind"] for e in harness.events(jid)]
    assert job["attempts"] == 1 and "adopted" in kinds and "reclaimed" not in kinds
    assert [s[1] for s in starts(home)] == ["1"]  # ran once
    assert not (home / "collisions").exists()


def test_a_job_that_ends_while_no_daemon_runs_is_recorded_with_its_real_exit_not_rerun(harness, home):
    harness.start()
    gate = home / "go"
    wait = f"while [ ! -e {gate} ]; do sleep 0.02; done"
    ok = harness.add("sh", "-c", f"{wait}; echo ok >> {home}/ran", lane="a")
    bad = harness.add("sh", "-c", f"{wait}; echo bad >> {home}/ran; exit 3", max_attempts=1, lane="b")
    for jid in (ok, bad):
        harness.wait_for(lambda j=jid: harness.job(j)["runner"], what=f"job {jid} started")
    harness.kill9()
    gate.touch()
    harness.wait_for(lambda: (home / "ran").exists() and len((home / "ran").read_text().split()) == 2,
                     what="both jobs ended with no daemon")
    ended_by = time.time()
    time.sleep(0.5)  # the restart comes well after the ends: their recorded times must be theirs
    harness.start()
    done, failed = harness.wait_state(ok, "done"), harness.wait_state(bad, "failed")
    assert (done["exit_code"], failed["exit_code"], failed["message"]) == (0, 3, "exit 3")
    assert done["attempts"] == failed["attempts"] == 1
    assert done["finished_at"] <= ended_by and failed["finished_at"] <= ended_by
    assert sorted((home / "ran").read_text().split()) == ["bad", "ok"]  # nothing ran again


def test_a_reboot_that_takes_the_keeper_too_reruns_the_job_once_never_two_at_once(harness, home):
    """When the job's own supervision is gone too (here: kill -9 of the daemon
    and the keeper; its process is left as an orphan), the next daemon ends
    the orphan and runs the job again -- without spending a try."""
    jid, first_pid = start_a_long_probe(harness, home)
    harness.kill9_all()
    assert alive(first_pid)
    harness.start()
    job = harness.wait_state(jid, "done", timeout_s=30)
    assert (job["attempts"], job["tries"], job["refunds"]) == (2, 1, 1)
    ev = harness.events(jid)
    kinds = [e["kind"] for e in ev]
    assert "abandoned" in kinds and "reclaimed" in kinds
    assert "not counted" in next(e["message"] for e in ev if e["kind"] == "abandoned")
    assert not (home / "collisions").exists()
    assert [s[1] for s in starts(home)] == ["1", "2"]
    assert not alive(first_pid)


def test_leftover_without_recorded_identity_is_found_by_its_token(harness, home):
    """The daemon and keeper died between spawning a job and writing down its pid."""
    jid, first_pid = start_a_long_probe(harness, home)
    harness.kill9_all()
    with sqlite3.connect(harness.home / "queue.db") as c:
        c.execute("UPDATE jobs SET runner = NULL WHERE id = ?", (jid,))
    harness.start()
    harness.wait_state(jid, "done", timeout_s=30)
    assert not (home / "collisions").exists()
    assert not alive(first_pid)


def test_second_daemon_refuses_and_names_the_first(harness):
    first = harness.start()
    p = subprocess.run([sys.executable, "-m", "sloth_daemon", "daemon", "run"], env=harness.env,
                       capture_output=True, text=True, timeout=30)
    assert p.returncode != 0
    assert f"pid {first.pid}" in p.stderr and "already running" in p.stderr
    assert harness.call("ping")["pong"] is True  # the first one still serves


def test_stale_socket_file_from_a_dead_daemon_is_replaced(harness):
    harness.start()
    harness.kill9()
    assert harness.socket.exists()  # left behind by kill -9
    harness.start()
    assert harness.call("ping")["pong"]


def test_daemon_stop_and_sigint_interrupt_and_requeue_without_using_the_failure_budget(harness, home):
    jid, pid = start_a_long_probe(harness, home)
    keeper = harness.keeper_pid()
    assert harness.stop(signal.SIGINT) == 0
    assert not alive(pid)
    harness.wait_for(lambda: not alive(keeper), what="the keeper leaves with the daemon")
    q = Queue(harness.home / "queue.db")
    job = q.get(jid)
    assert (job.state.value, job.attempts, job.tries) == ("queued", 1, 0)
    assert q.events(jid)[-1].kind == "interrupted"
    q.close()
    harness.start()
    job = harness.wait_state(jid, "done")
    assert (job["attempts"], job["tries"]) == (2, 1)


def test_sigterm_hands_running_jobs_over_to_the_next_daemon(harness, home):
    """What systemctl restart and launchctl kickstart -k send: the job is not
    signalled, keeps running, and the next daemon takes it over."""
    jid, pid = start_a_long_probe(harness, home, hold_first=3)
    assert harness.stop(signal.SIGTERM) == 0
    assert alive(pid)
    harness.start()
    job = harness.wait_state(jid, "done", timeout_s=30)
    assert job["attempts"] == 1 and "adopted" in [e["kind"] for e in harness.events(jid)]
    assert [s[1] for s in starts(home)] == ["1"]


def test_simulated_sleep_keeps_running_job_and_handles_due_work_at_once(home, fakeclock):
    h = Harness(home / "h", config="lease_s = \"3s\"\nclock_check_s = \"1s\"\nkill_grace_s = \"2s\"\n",
                extra_env=fakeclock.env())
    try:
        h.start()
        # a running job that will sleep with the laptop
        running = probe(h, home, hold_first=300)
        h.wait_for(lambda: len(starts(home)) == 1, what="running job started")
        # a delayed job due in 30 minutes, and a foreign library worker's job
        # leased for 10 minutes whose holder then dies
        delayed = h.add("true", not_before=_daemon_now(h) + 1800, lane="later")
        q = Queue(h.home / "queue.db")
        foreign = q.enqueue(["true"], lane="foreign")
        leased = q.claim("library-worker", lease_s=600, lanes=["foreign"])
        assert leased is not None and leased.id == foreign
        q.close()
        time.sleep(1.5)
        assert h.job(delayed)["state"] == "queued"
        fakeclock.jump(3600)  # the laptop slept an hour
        h.wait_state(delayed, "done", timeout_s=10)
        h.wait_state(foreign, "done", timeout_s=10)
        job = h.job(running)
        assert job["state"] == "running" and job["attempts"] == 1
        ev = h.events(running)
        resumed = [e for e in ev if e["kind"] == "resumed"]
        assert resumed and "slept 3600s" in resumed[0]["message"]
        assert "reclaimed" not in [e["kind"] for e in ev]
        assert [e["kind"] for e in h.events(foreign)][:2] == ["claimed", "reclaimed"]
        assert len(starts(home)) == 1 and not (home / "collisions").exists()
        st = h.call("status")
        assert st["last_jump"]["kind"] == "slept"
        # the job's own environment carries no trace of the daemon's shim
        assert "LD_PRELOAD" not in psutil.Process(int(starts(home)[0][3])).environ()
    finally:
        h.reap()


def test_readiness_and_watchdog_reach_the_notify_socket(harness, home):
    sock_path = home / "notify.sock"
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    srv.bind(str(sock_path))
    srv.settimeout(20)
    try:
        proc = harness.start(wait=False, env={"NOTIFY_SOCKET": str(sock_path), "WATCHDOG_USEC": "1000000"})
        msgs = []
        while not any(m.startswith(b"READY=1") or b"\nREADY=1" in m for m in msgs):
            msgs.append(srv.recv(4096))
        # READY comes once the socket answers
        assert harness.call("ping")["pong"]
        t0 = time.monotonic()
        pings = 0
        while pings < 4:
            if b"WATCHDOG=1" in srv.recv(4096):
                pings += 1
        elapsed = time.monotonic() - t0
        # WATCHDOG_USEC=1s: pings every 0.5 s, so 4 take about 1.5-2 s; a
        # bound loose enough for a loaded CI box but that catches a wrong rate
        assert 1.0 <= elapsed <= 6.0
        harness.stop()
        assert proc.returncode == 0
    finally:
        srv.close()


def _daemon_now(h) -> float:
    # The daemon may run on a shifted clock: read its idea of now via status.
    st = h.call("status")
    return st["started_at"] + st["uptime_s"]



def test_a_job_that_ends_while_the_daemon_is_stopped_past_its_lease_is_not_run_again(home, fakeclock):
    """The daemon starts a lane's next job before writing the last result; the
    job that just ended, its lease long lapsed, must not be that next job."""
    h = Harness(home / "h", config='lease_s = "3s"\n', extra_env=fakeclock.env())
    try:
        daemon = h.start()
        go, runs = home / "go", home / "runs"
        jid = h.add("sh", "-c", f"while [ ! -e {go} ]; do sleep 0.02; done; echo ran >> {runs}")
        h.wait_for(lambda: h.job(jid)["runner"], what="job started")
        daemon.send_signal(signal.SIGSTOP)
        try:
            fakeclock.jump(3600)  # the lease lapses while nobody can heartbeat it
            go.touch()  # the job may end now, or be frozen by the keeper until the daemon renews it
            time.sleep(1.0)
        finally:
            daemon.send_signal(signal.SIGCONT)
        job = h.wait_state(jid, "done")
        assert job["attempts"] == 1
        assert "reclaimed" not in [e["kind"] for e in h.events(jid)]
        assert runs.read_text() == "ran\n"
    finally:
        h.reap()

"""The daemon runs jobs unattended: exit codes, backoff, timeouts, lanes, cancel, pause."""

import time
from pathlib import Path

import pytest

from tests.support.harness import alive

pytestmark = pytest.mark.acceptance


def test_job_runs_and_output_lands_in_its_log(harness):
    harness.start()
    jid = harness.add("sh", "-c", "echo out; echo err >&2")
    job = harness.wait_state(jid, "done")
    assert job["attempts"] == 1 and job["exit_code"] == 0 and job["message"] == "exit 0"
    log = Path(harness.call("logs", id=jid)["path"])
    assert log.read_text() == "out\nerr\n" or sorted(log.read_text().split()) == ["err", "out"]
    kinds = [e["kind"] for e in harness.events(jid)]
    assert kinds == ["claimed", "started", "done"]


def test_exit_codes_map_to_retry_with_backoff_then_failed(harness):
    harness.start()
    jid = harness.add("sh", "-c", "exit 3", max_attempts=2)
    job = harness.wait_state(jid, "failed", timeout_s=30)
    assert job["attempts"] == 2 and job["exit_code"] == 3
    ev = harness.events(jid)
    fails = [e for e in ev if e["kind"] == "failed"]
    assert [e["attempt"] for e in fails] == [1, 2]
    assert "exit 3" in fails[0]["message"] and "retry 2/2 in 2s" in fails[0]["message"]
    assert "no attempts left" in fails[1]["message"]
    claims = [e for e in ev if e["kind"] == "claimed"]
    # the retry was not started before its backoff had passed
    assert claims[1]["at"] - fails[0]["at"] >= 2.0


def test_killed_by_signal_is_a_failure_saying_which(harness):
    harness.start()
    jid = harness.add("sh", "-c", "kill -KILL $$", max_attempts=1)
    job = harness.wait_state(jid, "failed")
    assert "killed by SIGKILL" in job["message"]


def test_missing_command_fails_without_retry(harness):
    harness.start()
    jid = harness.add("no-such-command-sloth-test", max_attempts=3)
    job = harness.wait_state(jid, "failed")
    assert job["attempts"] == 1 and "command not found" in job["message"]


def test_timeout_kills_the_whole_tree_including_a_setsid_grandchild(harness, home):
    harness.start()
    gc = home / "gc.pid"
    script = (
        f"setsid sh -c 'echo $$ > {gc}; exec sleep 300' & "
        "sleep 300"
    )
    jid = harness.add("sh", "-c", script, timeout_s=1.5, max_attempts=1)
    harness.wait_for(lambda: gc.exists() and gc.read_text().strip(), what="grandchild pid")
    gpid = int(gc.read_text())
    job = harness.wait_state(jid, "failed", timeout_s=30)
    assert "timed out after" in job["message"]
    root = job["runner"]["pid"]
    for pid in (gpid, root):
        harness.wait_for(lambda p=pid: not alive(p), timeout_s=10, what=f"pid {pid} gone")


def test_cancel_of_a_running_job_ends_its_tree(harness, home):
    harness.start()
    jid = harness.add("sh", "-c", "sleep 300")
    job = harness.wait_for(lambda: (j := harness.job(jid))["runner"] and j, what="started")
    pid = job["runner"]["pid"]
    assert harness.call("cancel", id=jid)["job"]["state"] == "cancelled"
    harness.wait_for(lambda: not alive(pid), timeout_s=10, what="job process gone")
    assert harness.job(jid)["state"] == "cancelled"
    ended = harness.wait_for(lambda: (ev := harness.events(jid))[-1]["kind"] == "ended" and ev, what="its end noted")
    assert [e["kind"] for e in ended] == ["claimed", "started", "cancelled", "ended"]
    assert ended[-1]["message"] == "killed by SIGTERM; its process tree was ended"


def test_lanes_run_side_by_side_and_limit_concurrency(harness, home):
    harness.start()
    marker = home / "m"
    a1 = harness.add("sh", "-c", f"touch {marker}.a1; sleep 300", lane="a")
    a2 = harness.add("sh", "-c", "true", lane="a")
    b1 = harness.add("sh", "-c", f"touch {marker}.b1", lane="b")
    harness.wait_state(b1, "done")  # lane b ran although lane a is busy
    harness.wait_for(lambda: Path(f"{marker}.a1").exists(), what="a1 started")
    # Lane a has one slot: a2 may be held behind a young a1 (pipeline.py:
    # claimed, no process) but goes back to the queue, never started.
    harness.wait_for(lambda: harness.job(a2)["state"] == "queued", what="a2 queued behind a1")
    assert "started" not in [e["kind"] for e in harness.events(a2)]
    harness.call("cancel", id=a1)
    harness.wait_state(a2, "done")


def test_priority_orders_jobs_within_a_lane(harness, home):
    harness.start()
    harness.call("pause")
    out = home / "order"
    ids = [harness.add("sh", "-c", f"echo {n} >> {out}", priority=p) for n, p in (("low", 0), ("high", 5), ("mid", 2))]
    harness.call("resume")
    for i in ids:
        harness.wait_state(i, "done")
    assert out.read_text().split() == ["high", "mid", "low"]


def test_pause_stops_new_claims_but_running_jobs_carry_on(harness, home):
    harness.start()
    flag = home / "go"
    running = harness.add("sh", "-c", f"while [ ! -e {flag} ]; do sleep 0.05; done", lane="x")
    harness.wait_for(lambda: harness.job(running)["runner"], what="started")
    harness.call("pause", lane="x")
    queued = harness.add("true", lane="x")
    other = harness.add("true", lane="y")
    harness.wait_state(other, "done")  # other lanes are not paused
    flag.touch()
    harness.wait_state(running, "done")  # the running job carried on
    time.sleep(0.5)
    assert harness.job(queued)["state"] == "queued"
    st = harness.call("status")
    assert st["lanes"]["x"]["paused"] is True
    harness.call("resume", lane="x")
    harness.wait_state(queued, "done")


def test_pause_survives_a_daemon_restart(harness):
    harness.start()
    harness.call("pause")
    assert harness.stop() == 0
    harness.start()
    jid = harness.add("true")
    time.sleep(0.5)
    assert harness.job(jid)["state"] == "queued"
    assert harness.call("status")["paused_all"] is True
    harness.call("resume")
    harness.wait_state(jid, "done")


def test_log_is_capped_keeping_head_and_tail(harness, home):
    (harness.home / "config.toml").write_text(
        (harness.home / "config.toml").read_text() + "\nlog_cap_bytes = 4096\n")
    harness.start()
    jid = harness.add("sh", "-c", "echo FIRST; i=0; while [ $i -lt 2000 ]; do echo line $i; i=$((i+1)); done; echo LAST")
    harness.wait_state(jid, "done")
    text = Path(harness.call("logs", id=jid)["path"]).read_text()
    assert text.startswith("FIRST\n") and text.rstrip().endswith("LAST")
    assert "bytes cut here" in text
    assert len(text) < 4096 + 300


def test_job_environment_is_captured_and_daemon_hooks_do_not_leak(harness, home):
    harness.start(env={"LD_PRELOAD": "", "SLOTH_DEBUG": "1", "NOTIFY_SOCKET": "/nonexistent"})
    out = home / "env"
    jid = harness.add("sh", "-c", f"env > {out}")
    harness.wait_state(jid, "done")
    env = dict(l.split("=", 1) for l in out.read_text().splitlines() if "=" in l)
    assert env["SLOTH_JOB_ID"] == str(jid) and env["SLOTH_JOB_ATTEMPT"] == "1"
    assert env["SLOTH_HOME"] == str(harness.home)  # captured from the client
    for k in ("LD_PRELOAD", "SLOTH_DEBUG", "NOTIFY_SOCKET"):
        assert k not in env



def test_wait_on_many_jobs_sees_every_one_finish(harness):
    """More jobs than a stream's backlog: the wait must not lose the last change."""
    harness.start()
    harness.call("pause")
    ids = harness.add_many([{"command": ["true"]} for _ in range(1500)])
    from sloth_daemon.cli.client import Client

    with Client(harness.socket, timeout_s=120) as c:
        c.sock.sendall(b"")  # connected before the jobs run
        harness.call("resume")
        res = c.call("wait", ids=ids)
    assert len(res["jobs"]) == 1500 and {j["state"] for j in res["jobs"]} == {"done"}


def test_retry_is_refused_while_a_cancelled_run_is_still_ending(harness, home):
    (harness.home / "config.toml").write_text('kill_grace_s = "3s"\n[lanes]\ndefault = 2\n')
    harness.start()
    jid = harness.add("sh", "-c", "trap '' TERM; while :; do sleep 0.05; done")
    pid = harness.wait_for(lambda: (harness.job(jid)["runner"] or {}).get("pid"), what="started")
    harness.call("cancel", id=jid)
    p = harness.cli("retry", str(jid))
    assert p.returncode == 6 and "still being stopped" in p.stderr
    harness.wait_for(lambda: not alive(pid), timeout_s=20, what="old tree gone")
    harness.wait_for(lambda: harness.cli("retry", str(jid)).returncode == 0, what="retry accepted")
    new = harness.wait_for(lambda: (harness.job(jid)["runner"] or {}).get("pid") not in (None, pid)
                           and harness.job(jid), what="re-run started")
    st = harness.call("status")
    assert [r["id"] for r in st["running"]] == [jid]  # tracked: cancel still works
    harness.call("cancel", id=jid)
    harness.wait_for(lambda: not alive(new["runner"]["pid"]), timeout_s=20, what="re-run ended")


def test_a_full_disk_under_the_log_does_not_stop_timeouts_or_cancels(harness):
    harness.start()
    harness.call("pause")
    slow = harness.add("sh", "-c", "echo hi; sleep 300", timeout_s=1, max_attempts=1)
    other = harness.add("sh", "-c", "echo hi; sleep 300")
    jobs_dir = Path(harness.call("status")["paths"]["jobs_log_dir"])
    for jid in (slow, other):
        (jobs_dir / f"{jid}.1.log").symlink_to("/dev/full")  # every write: ENOSPC
    harness.call("resume")
    job = harness.wait_state(slow, "failed", timeout_s=30)
    assert "timed out" in job["message"]
    assert not alive(job["runner"]["pid"])
    run = harness.wait_for(lambda: harness.job(other)["runner"], what="second job started")
    assert harness.call("cancel", id=other)["job"]["state"] == "cancelled"
    harness.wait_for(lambda: not alive(run["pid"]), timeout_s=20, what="cancelled tree gone")
    assert harness.call("ping")["pong"]


def test_an_unopenable_log_loses_output_not_the_job_and_its_history_says_so(harness):
    harness.start()
    harness.call("pause")
    jid = harness.add("sh", "-c", "echo twelve bytes")  # 13 with the newline
    logs = Path(harness.call("status")["paths"]["jobs_log_dir"])  # this queue's own log folder
    (logs / f"{jid}.1.log").mkdir(parents=True)  # a folder, not a file
    harness.call("resume")
    job = harness.wait_state(jid, "done", timeout_s=30)
    assert job["attempts"] == 1
    assert job["message"].startswith("exit 0; 13 bytes of output lost: cannot create ")
    assert "Is a directory" in job["message"]
    assert job["message"] in [e["message"] for e in harness.events(jid) if e["kind"] == "done"]
    for argv in (["logs", str(jid)], ["logs", "-f", str(jid)]):  # an error with a hint, not a traceback
        p = harness.cli(*argv)
        assert p.returncode == 1 and "Traceback" not in p.stderr, p.stderr
        assert "cannot read the log" in p.stderr and "not a regular file" in p.stderr
    assert harness.daemon.poll() is None

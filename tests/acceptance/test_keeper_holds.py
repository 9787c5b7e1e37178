"""What the keeper holds for a run's whole life (issue 24, items 2 and 4),
on the real daemon and keeper through the real CLI.

Keep-awake: a fake ``systemd-inhibit`` first on the daemon's PATH records
its pid and argv and then runs the command it was given (``cat`` on the
keeper's pipe), as the real one does: it is seen held while the job runs
and gone after the job ends, after a kill, after the daemon is killed -9
and the job then ends, and when the keeper itself is killed -9. The real
``systemd-inhibit`` here has no logind bus: the job runs anyway and its
history says keep-awake was unavailable.

Limits: --mem by setrlimit(RLIMIT_DATA) (this machine has no user systemd
bus and its cgroup v2 hierarchy has no controllers: probe says so) kills a
job allocating past it, its history says "exceeded --mem", and it is
retried only if asked (--retry-on mem); --nice and --io are seen in /proc and ionice;
--cpus, which needs a delegated cgroup here absent, is refused at add.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from sloth_daemon.keeper import resource_limits
from tests.support.harness import TEST_CONFIG, Harness, alive
from tests.support.inhibit import with_fake_inhibit

pytestmark = pytest.mark.acceptance

def holders(record: Path) -> list[tuple[int, str]]:
    if not record.exists():
        return []
    return [(int(line.split(" ", 1)[0]), line.split(" ", 1)[1]) for line in record.read_text().splitlines()]


def held(h: Harness, record: Path, n: int = 1) -> int:
    """The pid of the n-th holder, once it runs and holds (its child runs cat)."""
    def look() -> int | None:
        found = holders(record)
        if len(found) < n or not alive(found[n - 1][0]):
            return None
        pid = found[n - 1][0]
        return pid if [c.name() for c in psutil.Process(pid).children()] == ["cat"] else None
    return h.wait_for(look, timeout_s=10, what="the inhibitor held")


def add(h: Harness, *args: str) -> int:
    return int(h.cli("add", *args, check=True).stdout.split()[0])


def test_keep_awake_is_held_while_the_job_runs_and_released_when_it_ends(harness):
    h = harness
    record = with_fake_inhibit(h)
    h.start()
    job = add(h, "--keep-awake", "--", "sleep", "2")
    pid = held(h, record)
    assert h.job(job)["state"] == "running"
    argv = holders(record)[0][1]
    assert argv == f"--what=sleep:idle --who=sloth --why=job {job} --mode=block cat"
    h.wait_for(lambda: [e for e in h.events(job) if e["kind"] == "keep-awake"], what="the history's word")
    assert f"awake     attempt 1: kept awake by systemd-inhibit (pid {pid})" in h.cli("show", str(job)).stdout
    h.wait_state(job, "done", timeout_s=15)
    h.wait_for(lambda: not alive(pid), timeout_s=5, what="the inhibitor released")
    said = [e["message"] for e in h.events(job) if e["kind"] == "keep-awake"]
    assert said == [f"kept awake by systemd-inhibit (pid {pid})"], said  # once: held, seen while it ran


def test_keep_awake_is_released_when_the_job_is_killed(harness):
    h = harness
    record = with_fake_inhibit(h)
    h.start()
    job = add(h, "--keep-awake", "--", "sleep", "300")
    pid = held(h, record)
    assert h.cli("kill", str(job)).returncode == 0
    h.wait_state(job, "cancelled", timeout_s=15)
    h.wait_for(lambda: not alive(pid), timeout_s=5, what="the inhibitor released")


def test_keep_awake_outlives_a_daemon_killed_and_ends_with_the_job(harness):
    h = harness
    record = with_fake_inhibit(h)
    h.start()
    flag = h.home / "go"
    job = add(h, "--keep-awake", "--shell", "--", f"while [ ! -e {flag} ]; do sleep 0.1; done")
    pid = held(h, record)
    h.kill9()
    assert alive(pid)  # the keeper holds it with the job
    h.start()
    h.wait_for(lambda: h.call("status")["running"], what="the job adopted")
    assert alive(pid) and len(holders(record)) == 1  # the same holder, not a second one
    flag.touch()
    h.wait_state(job, "done", timeout_s=15)
    h.wait_for(lambda: not alive(pid), timeout_s=5, what="the inhibitor released")


def test_keep_awake_never_outlives_its_keeper(harness):
    h = harness
    record = with_fake_inhibit(h)
    h.start()
    add(h, "--keep-awake", "--", "sleep", "300")
    pid = held(h, record)
    keeper = psutil.Process(h.keeper_pid())
    h.kill9()
    keeper.kill()
    h.wait_for(lambda: not alive(pid), timeout_s=10, what="the inhibitor gone with its keeper")


@pytest.mark.skipif(not os.path.exists("/usr/bin/systemd-inhibit") or os.path.exists("/run/dbus/system_bus_socket"),
                    reason="needs systemd-inhibit without a logind bus, as on this CI machine")
def test_keep_awake_where_nothing_can_hold_it_is_refused_at_add_and_doctor_says_so(make_harness):
    """Issue 30: accepted, `doctor` said keep-awake ok, `show` said "kept
    awake while it runs", and a short job's history said nothing. Now one
    rule: refused at add (the job's own option, a lane's setting, a
    schedule), with why; doctor warns; nothing is queued."""
    h = make_harness(TEST_CONFIG + "[lanes.render]\nkeep_awake = true\n")
    h.start()
    p = h.cli("add", "--keep-awake", "--", "true")
    assert p.returncode == 2 and "--keep-awake cannot be had on this machine" in p.stderr, p.stderr
    assert "systemd-inhibit cannot reach logind" in p.stderr and "Failed to connect to bus" in p.stderr
    p = h.cli("add", "--lane", "render", "--", "true")
    assert p.returncode != 0 and "[lanes.render] keep_awake cannot be had" in p.stderr, p.stderr
    p = h.cli("schedule", "add", "nightly", "--every", "1h", "--keep-awake", "--", "true")
    assert p.returncode != 0 and "--keep-awake cannot be had" in p.stderr, p.stderr
    assert sum((h.call("status")["counts"] or {}).values()) == 0
    assert h.cli("add", "--", "true").returncode == 0  # the rest of the queue is untouched
    checks = {c["name"]: c for c in json.loads(h.cli("doctor", "--json").stdout)["checks"]}
    awake = checks["keep-awake"]
    assert awake["status"] == "warn" and "refused at add" in awake["detail"], awake
    assert "logind" in awake["hint"], awake


def test_every_keep_awake_run_says_once_what_it_had_even_a_short_one(harness):
    """A job of a few ms had no line (the holder had not failed yet when it
    ended). Now each run's history says one thing of it, before its end."""
    h = harness
    with_fake_inhibit(h)
    h.start()
    short = add(h, "--keep-awake", "--", "true")
    h.wait_state(short, "done", timeout_s=15)
    said = [e["message"] for e in h.events(short) if e["kind"] == "keep-awake"]
    assert len(said) == 1 and said[0].startswith(("kept awake by systemd-inhibit",
                                                   "not kept awake: the job ended before")), said
    kinds = [e["kind"] for e in h.events(short)]
    assert kinds.index("keep-awake") < kinds.index("done"), kinds
    assert f"awake     attempt 1: {said[0]}" in h.cli("show", str(short), check=True).stdout


def test_a_lock_refused_when_taken_is_said_and_the_job_runs_anyway(harness):
    """logind answers (so add accepts) but refuses the lock itself (a policy):
    the run's history says so, long run or short, and the job is done."""
    h = harness
    with_fake_inhibit(h, FAKE_REFUSE="1")
    h.start()
    long, short = add(h, "--keep-awake", "--", "sleep", "1"), add(h, "--keep-awake", "--", "true")
    for job in (long, short):
        assert h.wait_state(job, "done", timeout_s=15)["message"] == "exit 0"
    said = [e["message"] for e in h.events(long) if e["kind"] == "keep-awake"]
    assert said == ["keep-awake unavailable: systemd-inhibit exited 1: Failed to inhibit: Access denied"], said
    said = [e["message"] for e in h.events(short) if e["kind"] == "keep-awake"]
    assert len(said) == 1 and said[0].startswith(("keep-awake unavailable", "not kept awake")), said


# ------------------------------------------------------------------ limits
ALLOC = "b = bytearray(500 * 1024 * 1024); print('allocated', len(b))"


def test_a_job_allocating_past_its_memory_limit_fails_says_so_and_is_retried_only_if_asked(make_harness):
    h = make_harness(TEST_CONFIG.replace('backoff_cap_s = "60s"', 'backoff_cap_s = "200ms"'))
    h.start()
    job = add(h, "--mem", "100M", "--max-attempts", "2", "--retry-on", "mem", "--", sys.executable, "-c", ALLOC)
    failed = h.wait_state(job, "failed", timeout_s=30)
    assert failed["attempts"] == 2, failed  # not by default: it would fail again (test_watchdogs.py)
    fails = [e["message"] for e in h.events(job) if e["kind"] in ("failed", "retry", "retrying", "error")]
    assert "exceeded --mem 100M" in failed["message"], (failed["message"], fails)
    log = h.cli("logs", str(job), check=True).stdout
    assert "MemoryError" in log and "allocated" not in log
    # the same job without the limit allocates: it was the limit
    free = add(h, "--", sys.executable, "-c", ALLOC)
    assert h.wait_state(free, "done", "failed", timeout_s=30)["state"] == "done"


def test_nice_and_io_class_are_applied_and_show_says_how(harness):
    h = harness
    h.start()
    job = add(h, "--nice", "10", "--io", "idle", "--mem", "1G", "--", "sleep", "300")
    pid = h.wait_for(lambda: (h.job(job).get("runner") or {}).get("pid"), what="its pid")
    with open(f"/proc/{pid}/stat", "rb") as f:
        fields = f.read().rsplit(b")", 1)[1].split()
    assert int(fields[16]) == 10  # nice: field 19 of /proc/PID/stat
    assert subprocess.run(["ionice", "-p", str(pid)], capture_output=True, text=True).stdout.strip() == "idle"
    shown = h.cli("show", str(job), check=True).stdout
    assert f"limits    mem 1G via {resource_limits.probe()['mem']}; nice 10 via setpriority; io idle via ioprio_set" in shown
    h.cli("kill", str(job), check=True)


def test_a_limit_that_cannot_be_applied_here_is_refused_at_add(harness):
    h = harness
    if resource_limits.probe()["cpus"] is not None:
        pytest.skip("this machine has a delegated cgroup v2: --cpus applies")
    h.start()
    p = h.cli("add", "--cpus", "1.5", "--", "true")
    assert p.returncode != 0 and "--cpus cannot be applied on this machine" in p.stderr, p.stderr
    p = h.cli("add", "--io", "realtime", "--", "true")
    assert p.returncode != 0 and "io class" in p.stderr
    p = h.cli("add", "--mem", "lots", "--", "true")
    assert p.returncode != 0 and "512M or 2G" in p.stderr
    assert h.call("status")["counts"] == {} or sum(h.call("status")["counts"].values()) == 0


def test_lane_limits_from_config_apply_to_its_jobs(make_harness):
    h = make_harness(TEST_CONFIG + '[lanes.small]\nconcurrency = 2\nmem = "100M"\nnice = 5\n')
    h.start()
    job = add(h, "--lane", "small", "--", "sleep", "300")
    pid = h.wait_for(lambda: (h.job(job).get("runner") or {}).get("pid"), what="its pid")
    assert psutil.Process(pid).nice() == 5
    limits = h.job(job)["limits"]
    assert limits["mem"] == 100 << 20 and limits["nice"] == 5 and limits["mem_via"] == "rlimit"
    assert h.cli("lane", "ls", "--json", check=True).stdout.count('"small"') >= 1
    h.cli("kill", str(job), check=True)

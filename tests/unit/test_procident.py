"""Process identity (pid + start time + boot id) and tree killing, on real processes."""

import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from sloth_daemon import procident

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc")


def test_identity_matches_a_live_process_and_not_a_reused_pid():
    p = subprocess.Popen(["sleep", "30"])
    try:
        ident = procident.identity(p.pid)
        assert ident["pid"] == p.pid and ident["exact"] is True
        assert procident.is_same_process(ident)
        assert not procident.is_same_process({**ident, "start": ident["start"] + 1})  # pid reused
        assert not procident.is_same_process({**ident, "boot_id": "another-boot"})  # rebooted
    finally:
        p.kill()
        p.wait()
    assert not procident.is_same_process(ident)


def test_start_ticks_parse_a_comm_with_spaces_and_parens(tmp_path):
    exe = tmp_path / "a b) (c"
    exe.symlink_to("/bin/sleep")
    p = subprocess.Popen([str(exe), "30"])
    try:
        ticks = procident._linux_start_ticks(p.pid)
        assert ticks is not None and procident.start_stamp(p.pid) == ticks
        # the same start time psutil computes, in clock ticks since boot
        hz = os.sysconf("SC_CLK_TCK")
        assert abs(psutil.Process(p.pid).create_time() - (psutil.boot_time() + ticks / hz)) < 2
    finally:
        p.kill()
        p.wait()


def test_kill_identity_ends_a_tree_with_a_setsid_grandchild(tmp_path):
    gc = tmp_path / "gc"
    # not our child's child only: the grandchild leaves the session
    p = subprocess.Popen(["sh", "-c", f"setsid sh -c 'echo $$ > {gc}; exec sleep 300' & sleep 300"],
                         start_new_session=True)
    try:
        deadline = time.monotonic() + 10
        while not (gc.exists() and gc.read_text().strip()) and time.monotonic() < deadline:
            time.sleep(0.01)
        gpid = int(gc.read_text())
        ident = procident.identity(p.pid)
        assert procident.kill_identity_blocking(ident, grace_s=2) is True
        p.wait(5)
        deadline = time.monotonic() + 5
        while psutil.pid_exists(gpid) and psutil.Process(gpid).status() != psutil.STATUS_ZOMBIE:
            assert time.monotonic() < deadline, "grandchild survived"
            time.sleep(0.01)
    finally:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_find_by_env_finds_a_job_by_its_token():
    env = dict(os.environ, SLOTH_JOB_TOKEN="tok-unit-test-123")
    p = subprocess.Popen(["sleep", "30"], env=env)
    try:
        found = procident.find_by_env_values("SLOTH_JOB_TOKEN", {"tok-unit-test-123", "other"})
        assert list(found) == ["tok-unit-test-123"]
        assert [q.pid for q in found["tok-unit-test-123"]] == [p.pid]
        procident.end_all(found["tok-unit-test-123"], grace_s=2)
        p.wait(5)  # psutil may have reaped it already (then the code reads 0)
        assert not psutil.pid_exists(p.pid)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def test_kill_identity_of_nothing_is_false():
    assert procident.kill_identity_blocking({"pid": 999999999, "start": 1, "boot_id": procident.boot_id(),
                                             "exact": True}, grace_s=0.1) is False

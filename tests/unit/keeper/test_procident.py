"""Process identity (pid + start time + boot id) and tree killing, on real processes."""

import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from sloth_daemon.keeper import procident

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


def test_a_start_stamp_known_from_the_uptime_around_a_spawn_is_the_one_proc_says():
    """The spawn's shortcut (procident.uptime_ticks): two readings that agree
    name the tick the process started in, exactly as /proc/PID/stat does; a
    spawn that crossed a tick is read from /proc instead. Hundreds of real
    spawns: a shortcut one tick off would make a live job look gone."""
    agreed = 0
    for i in range(300):
        before = procident.uptime_ticks()
        p = subprocess.Popen(["true"])
        after = procident.uptime_ticks()
        try:
            if before == after:
                agreed += 1
                assert float(before) == procident.start_stamp(p.pid)
        finally:
            p.wait()
    assert agreed > 200  # a spawn takes well under a tick
    assert procident.uptime_ticks() == pytest.approx(procident.stamp_now(), abs=2)  # the same clock


def test_the_spawn_shortcut_turns_itself_off_where_uptime_is_not_the_start_clock(monkeypatch):
    """LXCFS gives a container an /proc/uptime of its own while /proc/PID/stat
    counts from the host's boot: the shortcut is checked against /proc on
    the first spawns and, at a mismatch, never used again."""
    from sloth_daemon.keeper import stamps

    monkeypatch.setattr(stamps, "_shortcut", {"on": True, "checks_left": 3})
    p = subprocess.Popen(["sleep", "5"])
    try:
        real = procident.start_stamp(p.pid)
        assert procident.spawn_stamp(p.pid, int(real), int(real)) == real  # agrees: checked, trusted
        assert procident.spawn_stamp(p.pid, int(real) + 1, int(real) + 1) == real  # a container's clock
        assert stamps._shortcut["on"] is False and procident.uptime_ticks() is None
        assert procident.spawn_stamp(p.pid, int(real), int(real)) is None  # /proc from now on
    finally:
        p.kill()
        p.wait()


def test_a_jobs_identity_holds_its_exact_start_however_it_was_learnt(tmp_path):
    from sloth_daemon.keeper.joblog import LogWriter
    from sloth_daemon.keeper.runner import JobProcess
    import asyncio

    async def main() -> list[tuple[float | None, float | None]]:
        seen = []
        for i in range(30):
            jp = JobProcess(["sleep", "5"], cwd=None, env=dict(os.environ), log=LogWriter(tmp_path / f"{i}.log", 1024),
                            on_output=lambda d: None, on_exit=lambda jp: None)
            jp.start(asyncio.get_running_loop())
            seen.append((jp.identity()["start"], procident.start_stamp(jp.pid)))
            os.kill(jp.pid, signal.SIGKILL)
            await jp.done.wait()
            jp.log.close()
        return seen
    seen = asyncio.run(main())
    assert all(a == b and a is not None for a, b in seen), seen


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


# ------------------------------------------------------------ one run's tree
def test_an_orphan_is_attributed_only_to_the_one_run_whose_lifetime_covers_its_start():
    lives = {"a": (100.0, 200.0), "b": (150.0, None), "c": (300.0, 400.0)}
    assert procident.attribute_orphan(120, lives, slack=0) == "a"
    assert procident.attribute_orphan(160, lives, slack=0) is None  # a and b both ran then: leave it
    assert procident.attribute_orphan(250, lives, slack=0) == "b"  # b is still running
    assert procident.attribute_orphan(350, lives, slack=0) is None  # b and c
    assert procident.attribute_orphan(50, lives, slack=0) is None  # before any of ours
    assert procident.attribute_orphan(201, {"a": (100.0, 200.0)}, slack=2) == "a"  # a tick's rounding
    assert procident.attribute_orphan(120, {}, slack=0) is None


def test_stamp_now_is_on_the_start_stamp_clock():
    before = procident.stamp_now()
    p = subprocess.Popen(["sleep", "30"])
    try:
        start = procident.start_stamp(p.pid)
        assert start is not None and before - procident.STAMP_SLACK <= start <= procident.stamp_now() + procident.STAMP_SLACK
    finally:
        p.kill()
        p.wait()


def _read_pid(path, timeout_s=10.0) -> int:
    deadline = time.monotonic() + timeout_s
    while not (path.exists() and path.read_text().strip()):
        assert time.monotonic() < deadline, f"no pid in {path}"
        time.sleep(0.01)
    return int(path.read_text())


def test_a_tree_is_found_by_group_snapshot_and_token(tmp_path):
    """The three means that work for any parent: the process group; a
    remembered descendant that left group and tree and carries no token;
    and the token of a double-forked escapee that also left the group."""
    token = f"tok-{os.getpid()}-{time.monotonic_ns()}"
    script = (f"sleep 301 & "  # in the group
              f"sh -c 'setsid env -u SLOTH_JOB_TOKEN sleep 302 & echo $! > {tmp_path}/kid; "
              f"while [ ! -e {tmp_path}/go ]; do sleep 0.01; done' & "
              f"(setsid sleep 303 & echo $! > {tmp_path}/escapee); sleep 300")
    p = subprocess.Popen(["sh", "-c", script], start_new_session=True, env={**os.environ, "SLOTH_JOB_TOKEN": token})
    strays: list[psutil.Process] = []  # psutil refuses to signal a reused pid
    try:
        kid, escapee = _read_pid(tmp_path / "kid"), _read_pid(tmp_path / "escapee")
        strays = [psutil.Process(kid), psutil.Process(escapee)]
        tree = procident.ProcessTree(p.pid, token)
        tree.remember()  # the kid is a descendant now ...
        (tmp_path / "go").touch()  # ... until its parent exits and it is reparented
        deadline = time.monotonic() + 10
        while kid in [c.pid for c in psutil.Process(p.pid).children(recursive=True)]:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        assert kid not in {q.pid for q in procident.ProcessTree(p.pid, token).find()}  # only memory finds it
        found = tree.find()
        pids = {q.pid for q in found}
        assert {p.pid, kid, escapee} <= pids
        assert os.getpid() not in pids
        tree.signal(found, signal.SIGKILL)
        p.wait(5)
        assert psutil.wait_procs([q for q in found if q.pid != p.pid], timeout=5)[1] == []
    finally:
        for q in strays:
            try:
                q.kill()
            except psutil.Error:
                pass
        p.kill()
        p.wait()

"""The keeper as a real process: real jobs, a real Unix socket, real signals.

Waits are bounded polls (``wait_for``, ``Wire.event``), never timed
assertions; trust windows and timeouts are short (0.5-2 s). The ``rig``
fixture reaps the keeper and every job process, also on failure.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from sloth_daemon.daemon.keeper_client import KeeperClient, KeeperError, boot_now, read_journal
from tests.acceptance.test_socket import NOBODY, as_nobody, python_for_nobody
from tests.support import impostor
from tests.support.harness import alive
from tests.support.keeper_rig import KeeperRig, Wire, frozen, remove_rig, wait_for

LINUX = sys.platform.startswith("linux")


def pid_from(path: Path) -> int:
    return int(wait_for(lambda: path.exists() and path.read_text().strip(), what=f"pid file {path}"))


def gone(pids: list[int]) -> bool:
    return not any(alive(p) for p in pids)


# ------------------------------------------------------------ runs and outcomes
def test_a_job_runs_and_its_exit_code_output_and_log_are_kept(rig):
    rig.start()
    w = rig.wire()
    res = w.call("spawn", **rig.job("a", "sh", "-c", "echo out; echo err >&2; exit 7"))
    assert res["pid"] > 0 and res["identity"]["pid"] == res["pid"]
    out = w.event("exited", "a")["outcome"]
    assert out["returncode"] == 7
    assert out["reason"] is None and out["killed_by"] is None and out["log_problem"] is None
    assert out["log_bytes"] == len(b"out\nerr\n")
    assert rig.log_of("a") == b"out\nerr\n"  # stdout and stderr into one pipe, in order
    assert stat.S_IMODE(os.stat(rig.paths.jobs_log_dir / "a.log").st_mode) == 0o600


def test_a_signal_death_is_a_negative_returncode(rig):
    rig.start()
    w = rig.wire()
    w.call("spawn", **rig.job("s", "sh", "-c", "kill -USR1 $$"))
    assert w.event("exited", "s")["outcome"]["returncode"] == -signal.SIGUSR1


def test_a_job_gets_its_env_cwd_token_own_session_and_no_stdin_nor_ignored_signals(rig):
    keeper = rig.start()
    keeper.send_signal(signal.SIGINT)  # detached: a terminal's signals are ignored
    keeper.send_signal(signal.SIGHUP)
    w = rig.wire()
    script = ('echo "$FOO|$SLOTH_JOB_TOKEN|$PWD|$(readlink /proc/self/fd/0)"; '
              'grep -E "^(SigIgn|NSsid|Pid):" /proc/self/status; cat /proc/self/stat')
    job = rig.job("e", "sh", "-c", script, env={"FOO": "bar", "SLOTH_JOB_TOKEN": "forged"})
    pid = w.call("spawn", **job)["pid"]
    assert w.event("exited", "e")["outcome"]["returncode"] == 0
    first, *rest = rig.log_of("e").decode().splitlines()
    assert first == f"bar|{job['token']}|{rig.root}|/dev/null"  # the token is the run's, whatever env says
    fields = dict(line.split(":\t") for line in rest if ":\t" in line)
    # SIGHUP, SIGINT, SIGPIPE: a handler in the keeper, default again in the job
    assert int(fields["SigIgn"], 16) & ((1 << 0) | (1 << 1) | (1 << 12)) == 0
    state, ppid, pgrp, session = rest[-1].rsplit(")", 1)[1].split()[:4]
    assert int(pgrp) == int(session) == pid  # its own session and group, led by the job (setsid)
    assert keeper.poll() is None


def test_spawn_errors_say_whether_a_retry_can_help_and_hold_nothing(rig):
    rig.start()
    w = rig.wire()
    plain = rig.root / "plain.txt"
    plain.write_text("echo hi\n")  # not executable
    cases = [
        (rig.job("m", "no-such-program-xyz"), False, "command not found: no-such-program-xyz"),
        (rig.job("x", str(plain)), False, f"permission denied running {plain}"),
        (rig.job("c", "true", cwd=str(rig.root / "gone")), True, f"working directory {rig.root / 'gone'} does not exist"),
    ]
    for job, retry, message in cases:
        reply = w.request("spawn", **job)
        assert reply["ok"] is False
        # resource: the trouble was a limit (descriptors, processes), not the command
        assert reply["error"] == {"code": "spawn_failed", "message": message, "retry": retry, "resource": False}
    assert w.hello()["runs"] == []
    w.call("spawn", **rig.job("ok", "true"))  # and it keeps serving
    assert w.event("exited", "ok")["outcome"]["returncode"] == 0


def test_a_job_outlives_the_daemon_connection_and_its_outcome_waits_for_an_ack(rig):
    """The daemon hangs up (closed socket), then one is killed -9 (a process):
    the job keeps running and writing; every new hello lists it; after it
    ends with no daemon connected, the next hello has its real exit code;
    the journal holds it until the ack, and is truncated after."""
    rig.start()
    go = rig.root / "go"
    w = rig.wire()
    script = f'i=0; while [ ! -e {go} ]; do i=$((i+1)); echo tick $i; sleep 0.02; done; exit 3'
    pid = w.call("spawn", **rig.job("a", "sh", "-c", script))["pid"]
    wait_for(lambda: b"tick 3\n" in rig.log_of("a"), what="output")
    w.close()
    n = rig.log_of("a").count(b"tick")
    wait_for(lambda: rig.log_of("a").count(b"tick") > n + 3, what="output after the daemon left")

    [run] = rig.wire().hello()["runs"]
    assert (run["key"], run["state"], run["pid"], run["outcome"]) == ("a", "running", pid, None)
    rig.wires[-1].close()

    stand_in = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import json, socket, sys, time
        s = socket.socket(socket.AF_UNIX); s.connect({str(rig.paths.keeper_socket)!r})
        s.sendall(b'{{"v":1,"id":1,"op":"hello","args":{{"role":"daemon"}}}}\\n')
        s.recv(65536); print("attached", flush=True); time.sleep(600)
    """)], stdout=subprocess.PIPE, env=rig.env)
    rig.procs.append(stand_in)
    assert stand_in.stdout.readline() == b"attached\n"
    stand_in.kill()
    stand_in.wait()
    wait_for(lambda: rig.answers() and rig.wire().request("hello", role="daemon")["ok"], what="a new daemon accepted")
    rig.wires[-1].close()

    assert alive(pid)
    go.touch()  # it ends with no daemon connected
    wait_for(lambda: read_journal(rig.paths.keeper_journal), what="the outcome journalled")
    [journalled] = read_journal(rig.paths.keeper_journal)
    assert journalled["key"] == "a" and journalled["outcome"]["returncode"] == 3

    w = rig.wire()
    [run] = w.hello()["runs"]
    assert run["state"] == "exited" and run["outcome"]["returncode"] == 3 and run["pid"] == pid
    assert w.call("ack", keys=["a"]) == {}
    assert w.hello()["runs"] == []
    assert rig.paths.keeper_journal.stat().st_size == 0
    assert w.call("ack", keys=["a", "never-was"]) == {}  # idempotent


# ------------------------------------------------------------------- tree kill
DOUBLE_FORK = """
import os, sys, time
if os.fork(): os._exit(0)
os.setsid()
if os.fork(): os._exit(0)
open(sys.argv[1], "w").write(str(os.getpid())); time.sleep(778)
"""


def test_a_timeout_ends_the_whole_tree_with_no_daemon_connected(rig):
    """Escapees of every kind die: a setsid grandchild (left the group), a
    double-forked one (left group and tree: found by its token) and, on
    Linux, one that cleared its environment too (found only as an orphan
    reparented to the keeper, the one run alive when it started)."""
    keeper = rig.start(check_s=60)  # no periodic snapshot: only the kill-time means find them
    r = rig.root
    script = (f"(setsid sleep 777 & echo $! > {r}/setsid.pid); "
              f"{sys.executable} -c '{DOUBLE_FORK}' {r}/double.pid; "
              f"(setsid env -i /bin/sh -c 'echo $$ > {r}/orphan.pid; exec /bin/sleep 779' &); "
              f"while [ ! -e {r}/go ]; do sleep 0.02; done; echo armed; sleep 100")
    w = rig.wire()
    root = w.call("spawn", **rig.job("t", "sh", "-c", script, timeout_s=4, kill_grace_s=0.5))["pid"]
    w.close()  # no daemon connected from here on
    rig.extra_pids.append(root)
    pids = [pid_from(r / f"{n}.pid") for n in ("setsid", "double", "orphan")]
    rig.extra_pids += pids
    # each has left the root's tree: its parent is the keeper now (subreaper)
    # (or init where there is none)
    wait_for(lambda: all(psutil.Process(p).ppid() != root and psutil.Process(p).ppid() not in
                         [c.pid for c in psutil.Process(root).children(recursive=True)] for p in pids),
             what="the escapees reparented")
    assert "SLOTH_JOB_TOKEN" not in psutil.Process(pids[2]).environ()  # no token to find it by
    (r / "go").touch()
    wait_for(lambda: gone([root, *pids]), what="the whole tree ended by the timeout")
    w = rig.wire()
    out = wait_for(lambda: w.hello()["runs"][0]["outcome"], what="the outcome")
    assert out["killed_by"] == "timeout" and out["reason"] == "timed out after 4s"
    assert out["returncode"] == -signal.SIGTERM
    assert b"[sloth] timed out after 4s: ending the process tree" in rig.log_of("t")
    if LINUX:
        assert f"orphan pid {pids[2]} (sleep) found only as our child" in rig.keeper_log()
    assert keeper.poll() is None


# --------------------------------------------------------- trust and fencing
def uptime() -> float:
    with open("/proc/uptime") as f:
        return float(f.read().split()[0])


@pytest.mark.skipif(not LINUX, reason="reads /proc/uptime: the boot clock, as the job sees it")
def test_without_renewal_the_tree_is_ended_by_its_trust_deadline(rig):
    """SIGTERM comes at trust_until - term_lead_s (never before), SIGKILL for
    what ignores it; the whole tree is gone when `exited` comes."""
    rig.start()
    r = rig.root
    w = rig.wire()
    script = (f"trap 'cat /proc/uptime >> {r}/term.at' TERM; "  # note when TERM came, carry on
              f"sh -c 'trap \"\" TERM; echo $$ > {r}/child.pid; while :; do sleep 0.02; done' & "
              f"while :; do sleep 0.02; done")
    until = boot_now() + 1.5
    root = w.call("spawn", **rig.job("f", "sh", "-c", script, trust_until=until, term_lead_s=0.5))["pid"]
    child = pid_from(r / "child.pid")
    rig.extra_pids += [root, child]
    assert w.hello()["runs"][0]["trust_until"] == until
    out = w.event("exited", "f")["outcome"]
    assert out["killed_by"] == "fence" and out["reason"].startswith("fenced: no lease renewal for ")
    assert out["returncode"] == -signal.SIGKILL  # it ignored TERM: killed at the deadline
    assert gone([root, child])
    term_at = float((r / "term.at").read_text().split()[0])
    assert term_at >= until - 0.5 - 0.02  # /proc/uptime has 10 ms steps
    assert "fenced: no lease renewal" in rig.log_of("f").decode()


def test_renewals_keep_a_run_alive_past_many_deadlines(rig):
    rig.start()
    w = rig.wire()
    pid = w.call("spawn", **rig.job("r", "sleep", "60", trust_until=boot_now() + 1.0, term_lead_s=0.2))["pid"]
    first = boot_now()
    while boot_now() < first + 3.5:  # three and a half windows, renewed ten times a window
        assert w.call("trust", items=[{"key": "r", "until": boot_now() + 1.0}]) == {}
        time.sleep(0.1)
    assert alive(pid) and w.hello()["runs"][0]["state"] == "running"
    assert w.events == []
    out = w.event("exited", "r")["outcome"]  # and once renewals stop, it is fenced
    assert out["killed_by"] == "fence" and out["returncode"] == -signal.SIGTERM


@pytest.mark.skipif(not LINUX, reason="the fake clock is an LD_PRELOAD shim for glibc")
def test_a_lapse_across_a_suspend_freezes_the_tree_until_trust_or_kill(rig, fakeclock):
    """The keeper runs on the fake clock (the jobs do not): a jump of the
    boot clock that the awake clock does not see is a suspend. The lapsed
    runs are stopped, not killed; a renewal continues them, a kill ends them."""
    rig.start(env=fakeclock.env(), check_s=0.1)
    w = rig.wire()
    pids = {}
    for key in ("thaw", "kill"):
        job = rig.job(key, "sh", "-c", "while :; do sleep 0.02; done", trust_until=boot_now() + 3, term_lead_s=0.5)
        pids[key] = w.call("spawn", **job)["pid"]
        rig.extra_pids.append(pids[key])
    fakeclock.jump(3600)  # the laptop slept an hour
    for key, pid in pids.items():
        assert "the machine slept 3600s" in w.event("frozen", key)["why"]
        tree = [pid] + [c.pid for c in psutil.Process(pid).children(recursive=True)]
        wait_for(lambda: all(frozen(p) for p in tree if alive(p)), what=f"{key}'s tree stopped")
    assert {r["key"]: r["state"] for r in w.hello()["runs"]} == {"thaw": "frozen", "kill": "frozen"}

    keeper_boot = boot_now() + fakeclock.offset
    assert w.call("trust", items=[{"key": "thaw", "until": keeper_boot + 30}]) == {}
    wait_for(lambda: not frozen(pids["thaw"]), what="the tree continued")
    assert w.hello()["runs"][0]["state"] == "running"

    assert w.call("kill", key="kill", reason="cancelled", grace_s=5) == {}
    out = w.event("exited", "kill")["outcome"]
    assert out["killed_by"] == "request" and out["reason"] == "cancelled"
    assert out["returncode"] == -signal.SIGTERM  # continued, it acted on SIGTERM within the grace
    assert alive(pids["thaw"]) and not alive(pids["kill"])


def test_a_stalled_keeper_fences_rather_than_freezes(rig):
    """Stopped (not suspended): both clocks ran, the daemon had its window."""
    keeper = rig.start(check_s=0.1)
    w = rig.wire()
    until = boot_now() + 0.8
    pid = w.call("spawn", **rig.job("s", "sleep", "60", trust_until=until, term_lead_s=0.3))["pid"]
    rig.extra_pids.append(pid)
    keeper.send_signal(signal.SIGSTOP)
    try:
        wait_for(lambda: boot_now() > until + 0.5, what="the deadline passed")
    finally:
        keeper.send_signal(signal.SIGCONT)
    out = w.event("exited", "s")["outcome"]
    assert out["killed_by"] == "fence"
    assert [e for e in w.events if e["kind"] == "frozen"] == []


def test_a_renewal_sent_while_the_keeper_was_stopped_is_read_before_it_fences(rig):
    """On SIGCONT the deadline's timer and the renewal waiting in the socket
    are due at once: the renewal is read first, the run goes on."""
    keeper = rig.start(check_s=0.1)
    w = rig.wire()
    until = boot_now() + 0.8
    pid = w.call("spawn", **rig.job("s", "sleep", "60", trust_until=until, term_lead_s=0.3))["pid"]
    rig.extra_pids.append(pid)
    keeper.send_signal(signal.SIGSTOP)
    try:
        w.send(json.dumps({"v": 1, "id": 99, "op": "trust", "args": {"items": [
            {"key": "s", "until": boot_now() + 30}]}}).encode() + b"\n")  # on time: before the deadline
        wait_for(lambda: boot_now() > until + 0.5, what="the deadline passed")
    finally:
        keeper.send_signal(signal.SIGCONT)
    assert w.read_msg(timeout_s=10)["id"] == 99
    time.sleep(0.5)  # what a fence would take: SIGKILL at once (past the deadline)
    assert alive(pid) and w.hello()["runs"][0]["state"] == "running"


def test_a_flood_sent_while_the_keeper_was_stopped_does_not_put_off_its_fence(rig):
    """It waits for what was sent once, then fences: input that keeps coming
    postpones nothing."""
    keeper = rig.start(check_s=0.1)
    w = rig.wire()
    until = boot_now() + 0.8
    pid = w.call("spawn", **rig.job("s", "sleep", "60", trust_until=until, term_lead_s=0.3))["pid"]
    rig.extra_pids.append(pid)
    ping = json.dumps({"v": 1, "id": 7, "op": "ping", "args": {}}).encode() + b"\n"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as flood:
        flood.connect(str(rig.paths.keeper_socket))
        flood.setblocking(False)

        def pour() -> None:
            try:
                while True:
                    flood.send(ping * 200)
            except BlockingIOError:  # its socket is full: it is read from, or the keeper is stopped
                pass

        keeper.send_signal(signal.SIGSTOP)
        try:
            wait_for(lambda: boot_now() > until + 0.5, what="the deadline passed")
            pour()  # waiting when it goes on, with the deadline
        finally:
            keeper.send_signal(signal.SIGCONT)
        pouring_until = time.monotonic() + 5.0
        while alive(pid) and time.monotonic() < pouring_until:
            pour()
    assert not alive(pid)
    assert w.event("exited", "s")["outcome"]["killed_by"] == "fence"


# ------------------------------------------------------------------------ kill
def test_kill_sends_term_then_kill_after_the_grace_and_is_idempotent(rig):
    rig.start()
    w = rig.wire()
    r = rig.root
    script = f"trap '' TERM; sh -c 'echo $$ > {r}/child.pid; sleep 60' & echo ready; sleep 60"
    root = w.call("spawn", **rig.job("k", "sh", "-c", script))["pid"]
    child = pid_from(r / "child.pid")
    rig.extra_pids += [root, child]
    wait_for(lambda: b"ready" in rig.log_of("k"), what="ready")
    assert w.call("kill", key="k", reason="cancelled", grace_s=0.3) == {}
    assert w.call("kill", key="k", reason="again", grace_s=0) == {}  # idempotent: the first reason stays
    out = w.event("exited", "k")["outcome"]
    assert (out["returncode"], out["reason"], out["killed_by"]) == (-signal.SIGKILL, "cancelled", "request")
    assert gone([root, child])  # the whole tree, by the time `exited` comes
    assert b"[sloth] cancelled: ending the process tree" in rig.log_of("k")
    assert w.call("kill", key="k", reason="late", grace_s=0) == {}  # exited: nothing to do
    assert w.request("kill", key="nope", reason="x", grace_s=0)["error"]["code"] == "not_found"


def test_a_job_that_stops_on_term_ends_without_waiting_out_the_grace(rig):
    rig.start()
    w = rig.wire()
    w.call("spawn", **rig.job("g", "sh", "-c", "trap 'echo bye; exit 0' TERM; echo ready; while :; do sleep 0.02; done"))
    wait_for(lambda: b"ready" in rig.log_of("g"), what="ready")
    w.call("kill", key="g", reason="cancelled", grace_s=600)
    out = w.event("exited", "g", timeout_s=30)["outcome"]  # far less than the grace
    assert out["returncode"] == 0 and out["reason"] == "cancelled"
    assert b"bye\n" in rig.log_of("g")


# ----------------------------------------------------- instance, socket, peers
def test_a_second_keeper_exits_6_and_the_first_keeps_serving(rig):
    first = rig.start()
    second = rig.start(wait=False)
    assert second.wait(30) == 6
    assert f"another keeper (pid {first.pid}) holds {rig.paths.keeper_lock}" in rig.keeper_log()
    assert rig.wire().hello()["pid"] == first.pid


def test_a_stale_socket_is_replaced_and_a_foreign_file_is_left_alone(rig):
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.bind(str(rig.paths.keeper_socket))  # a dead keeper's leftover
    rig.start()
    assert rig.wire().hello()["runs"] == []
    assert stat.S_IMODE(os.stat(rig.paths.keeper_socket).st_mode) == 0o600
    os.kill(rig.procs[0].pid, signal.SIGKILL)
    rig.procs[0].wait()
    rig.paths.keeper_socket.unlink()
    rig.paths.keeper_socket.write_text("not ours\n")
    p = rig.start(wait=False)
    assert p.wait(30) == 1
    assert "is not a socket is in the way" in rig.keeper_log() or "not a socket" in rig.keeper_log()
    assert rig.paths.keeper_socket.read_text() == "not ours\n"


@pytest.mark.skipif(shutil.which("setpriv") is None, reason="needs setpriv (util-linux)")
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run a client as another uid")
def test_a_peer_of_another_uid_is_refused_and_the_keeper_keeps_serving(rig):
    from tests.acceptance.test_socket import PEER_PROBE
    rig.start()
    python = python_for_nobody()
    opened = [rig.root, rig.paths.home, rig.paths.runtime_dir, rig.paths.keeper_socket]
    modes = {p: stat.S_IMODE(os.stat(p).st_mode) for p in opened}
    try:  # open the file permissions: the peer check must refuse by itself
        for p in opened:
            os.chmod(p, 0o777)
        probe = PEER_PROBE.replace('b\'{"v": 1, "id": 1, "op": "ping", "args": {}}\\n\'',
                                   'b\'{"v": 1, "id": 1, "op": "hello", "args": {"role": "daemon"}}\\n\'')
        p = subprocess.run(as_nobody(python, "-I", "-c", probe, str(rig.paths.keeper_socket)),
                           capture_output=True, text=True, timeout=30, cwd="/")
    finally:
        for path, mode in modes.items():
            os.chmod(path, mode)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    reply = json.loads(out["reply"])
    assert out["uid"] == NOBODY and reply["ok"] is False
    assert reply["error"]["code"] == "permission_denied" and f"uid {NOBODY}" in reply["error"]["message"]
    assert rig.wire().hello()["runs"] == []  # not attached as the daemon; we can be


def test_one_daemon_at_a_time_but_the_same_daemon_may_reconnect(rig):
    rig.start()
    first = rig.wire()
    first.call("spawn", **rig.job("a", "sleep", "60"))
    [reply] = impostor.run(rig.paths.keeper_socket, "self", env=rig.env)  # another process, saying who it is
    assert reply["error"]["code"] == "already_attached"
    assert f"a daemon (pid {os.getpid()}) is attached" in reply["error"]["message"]
    again = rig.wire()  # the same process: the daemon reconnected before its old connection's end was seen
    assert [r["key"] for r in again.hello()["runs"]] == ["a"]
    with pytest.raises((ConnectionError, OSError)):
        first.read_msg(timeout_s=10)  # the old connection was dropped
    again.call("kill", key="a", reason="done", grace_s=0)
    assert again.event("exited", "a")["outcome"]["reason"] == "done"  # events go to the new one


def test_a_hello_claiming_the_attached_daemons_pid_is_refused_and_the_daemon_keeps_its_connection(rig):
    """Issue 20 item 8: the pid a hello names is a claim; the kernel's
    (SO_PEERCRED) is the proof. A process claiming ours gets neither the
    runs nor the daemon's ops, and we are not dropped."""
    rig.start()
    w = rig.wire()
    w.call("spawn", **rig.job("a", "sleep", "60"))
    hello, spawn, kill, ack = impostor.run(rig.paths.keeper_socket, os.getpid(), "spawn", "kill", "ack", env=rig.env)
    assert hello["ok"] is False and hello["error"]["code"] == "impostor" and "runs" not in json.dumps(hello)
    assert f"not pid {os.getpid()}" in hello["error"]["message"]
    assert all(r["error"]["code"] == "not_attached" for r in (spawn, kill, ack))
    assert [r["key"] for r in w.hello()["runs"]] == ["a"]  # still ours, and still running
    w.call("kill", key="a", reason="done", grace_s=0)
    assert w.event("exited", "a")["outcome"]["reason"] == "done"
    assert "refused a hello from pid" in rig.keeper_log() and "reconnected" not in rig.keeper_log()


def test_bad_frames_get_a_clear_error_change_nothing_and_the_keeper_keeps_serving(rig):
    rig.start()
    w = rig.wire(hello=False)
    frames = {
        b"garbage": "protocol", b"\xff\xfe": "protocol", b"[1, 2]": "protocol",
        b'{"v": 2, "id": 1, "op": "hello", "args": {}}': "protocol",
        b'{"v": 1, "id": 1, "op": "nope", "args": {}}': "protocol",
        b'{"v": 1, "id": 1, "op": "hello", "args": []}': "protocol",
        b'{"v": 1, "id": 1, "op": "hello", "args": {"role": "daemon", "x": 1}}': "bad_request",
        b'{"v": 1, "id": 1, "op": "hello", "args": {"role": "cli"}}': "bad_request",
        b'{"v": 1, "id": 1, "op": "spawn", "args": {}}': "bad_request",
        b'{"v": 1, "id": 1, "op": "ack", "args": {"keys": []}}': "not_attached",
        b"[" * 100000: "protocol",
    }
    for frame, code in frames.items():
        w.send(frame + b"\n")
        msg = w.read_msg()
        assert msg["ok"] is False and msg["error"]["code"] == code, (frame[:60], msg)
        assert msg["id"] == (1 if frame.startswith(b'{"v"') else None), msg  # answered under its id
    w.hello()
    good = rig.job("j", "true")
    bad_spawns = [
        {**good, "argv": []}, {**good, "argv": "true"}, {**good, "argv": ["tr\0ue"]},
        {**good, "env": {"A=B": "x"}}, {**good, "env": {"A": 1}}, {**good, "log_path": "rel.log"},
        {**good, "timeout_s": -1}, {**good, "timeout_s": float("inf")}, {**good, "job_id": "7"},
        {**good, "attempt": True}, {**good, "key": ""}, {**good, "cwd": 3}, {**good, "kill_grace_s": "1"},
    ]
    for args in bad_spawns:
        reply = w.request("spawn", **args)
        assert reply["ok"] is False and reply["error"]["code"] == "bad_request", (args, reply)
    assert w.hello()["runs"] == [] and list(rig.paths.jobs_log_dir.iterdir()) == []
    go = rig.root / "go"
    w.call("spawn", **rig.job("live", "sh", "-c", f"while [ ! -e {go} ]; do sleep 0.02; done"))
    assert w.request("spawn", **rig.job("live", "true"))["error"]["code"] == "exists"
    reply = w.request("ack", keys=["live"])
    assert reply["error"]["code"] == "bad_request" and "have not exited" in reply["error"]["message"]
    assert w.request("trust", items=[{"key": "live", "until": "soon"}])["error"]["code"] == "bad_request"
    assert w.request("trust", items=[{"key": "live"}])["error"]["code"] == "bad_request"
    assert w.call("trust", items=[{"key": "ghost", "until": 1.0}]) == {"unknown": ["ghost"]}
    [run] = w.hello()["runs"]
    assert run["state"] == "running" and run["trust_until"] is None  # nothing changed
    go.touch()
    w.event("exited", "live")

    huge = Wire(rig.paths.keeper_socket)
    rig.wires.append(huge)
    try:
        huge.send(b'{"v": 1, "id": 1, "op": "hello", "args": {"pad": "' + b"x" * (2 << 20))
    except BrokenPipeError:
        pass  # it answered and hung up before we were done
    msg = huge.read_msg()
    assert msg["ok"] is False and "frame over 1048576 bytes" in msg["error"]["message"]
    with pytest.raises((ConnectionError, OSError)):
        huge.read_msg(timeout_s=10)  # closed: the next frame's start cannot be found
    assert w.hello()["runs"][0]["key"] == "live"  # the daemon's connection was never disturbed


# ------------------------------------------------------------------------- tap
def read_tap(s: Wire, timeout_s: float = 30) -> tuple[list[str], dict[str, Any]]:
    events = []
    while True:
        msg = s.read_msg(timeout_s)
        if "event" in msg:
            events.append(msg["event"]["data"])
        else:
            return events, msg


def test_tap_streams_the_log_so_far_then_live_output_then_the_end(rig):
    rig.start()
    w = rig.wire()
    r = rig.root
    script = (f"echo one; while [ ! -e {r}/go ]; do sleep 0.01; done; echo two; "
              f"while [ ! -e {r}/go2 ]; do sleep 0.01; done; printf 'three\\377\\n'; exit 5")
    w.call("spawn", **rig.job("t", "sh", "-c", script))
    wait_for(lambda: rig.log_of("t") == b"one\n", what="the first line")
    t = Wire(rig.paths.keeper_socket)
    rig.wires.append(t)
    t.send(b'{"v": 1, "id": "tap1", "op": "tap", "args": {"key": "t"}}\n')
    assert t.read_msg() == {"v": 1, "id": "tap1", "event": {"kind": "log", "data": "one\n"}}  # the snapshot
    (r / "go").touch()
    assert t.read_msg()["event"]["data"] == "two\n"  # live
    (r / "go2").touch()
    events, end = read_tap(t)
    assert "".join(events).encode("utf-8", "surrogateescape") == b"three\xff\n"  # bytes come back exact
    assert end["id"] == "tap1" and end["ok"] is True
    assert end["result"]["state"] == "exited" and end["result"]["outcome"]["returncode"] == 5

    t.send(b'{"v": 1, "id": 2, "op": "tap", "args": {"key": "t"}}\n')  # exited, not acked: all of it, at once
    events, end = read_tap(t)
    assert "".join(events) == "one\ntwo\nthree\udcff\n" and end["result"]["outcome"]["returncode"] == 5
    t.send(b'{"v": 1, "id": 3, "op": "tap", "args": {"key": "nope"}}\n')
    assert t.read_msg()["error"]["code"] == "not_found"
    assert w.request("tap", key="t")["error"]["code"] == "bad_request"  # never on the daemon's connection


def test_a_follower_that_never_reads_blocks_nothing_and_still_gets_the_end(rig):
    """It stops reading while the job prints 200 MB: the keeper goes on
    serving, past a bounded buffer the follower's bytes are skipped and
    counted, and when it reads again it is told how many, then the end."""
    rig.start()
    w = rig.wire()
    go = rig.root / "go"
    total = 200_000_000
    w.call("spawn", **rig.job("f", "sh", "-c", f"echo ready; while [ ! -e {go} ]; do sleep 0.01; done; "
                                               f"head -c {total} /dev/zero; echo end"))
    wait_for(lambda: rig.log_of("f") == b"ready\n", what="ready")
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.connect(str(rig.paths.keeper_socket))
    follower = Wire.__new__(Wire)
    follower.sock, follower.buf, follower.events, follower.next_id = s, b"", [], 1
    rig.wires.append(follower)
    s.sendall(b'{"v": 1, "id": 1, "op": "tap", "args": {"key": "f"}}\n')
    assert follower.read_msg()["event"]["data"] == "ready\n"
    go.touch()
    # While the follower reads nothing: the daemon's connection is served,
    # another job runs, and the flood ends.
    w.call("spawn", **rig.job("other", "echo", "hi"))
    assert w.event("exited", "other")["outcome"]["returncode"] == 0
    out = w.event("exited", "f", timeout_s=120)["outcome"]
    assert out["returncode"] == 0 and out["log_bytes"] == len(b"ready\n") + total + len(b"end\n")
    events, end = read_tap(follower, timeout_s=60)
    assert end["ok"] is True and end["result"]["state"] == "exited"
    notes = [e for e in events if "bytes of live output skipped here" in e]
    skipped = sum(int(n.split("[sloth] ... ")[1].split()[0]) for n in notes)
    received = sum(len(e.encode("utf-8", "surrogateescape")) for e in events if e not in notes)
    assert notes and skipped > 0
    assert received + skipped == total + len(b"end\n")  # every byte either sent or counted


# ------------------------------------------------------------- hostile log path
def test_a_symlink_planted_at_the_log_path_is_not_followed(rig):
    rig.start()
    w = rig.wire()
    target = rig.root / "precious"
    target.write_bytes(b"keep me\n")
    job = rig.job("h", "echo", "hello")
    Path(job["log_path"]).symlink_to(target)
    w.call("spawn", **job)
    out = w.event("exited", "h")["outcome"]
    assert out["returncode"] == 0
    assert out["log_problem"] == (f"6 bytes of output lost: {job['log_path']} exists; "
                                  "not appending to a file sloth did not create")
    assert target.read_bytes() == b"keep me\n" and Path(job["log_path"]).is_symlink()


# --------------------------------------------------------------- keeper's end
def test_the_keeper_exits_when_idle_but_never_while_a_run_lives(rig):
    keeper = rig.start(idle_exit_s=0.3)
    go = rig.root / "go"
    w = rig.wire()
    w.call("spawn", **rig.job("l", "sh", "-c", f"while [ ! -e {go} ]; do sleep 0.02; done; exit 4"))
    w.close()
    time.sleep(1.0)  # over three idle periods with no daemon: a live run keeps it
    assert keeper.poll() is None
    go.touch()  # the run ends, its outcome is journalled: nothing only the keeper knows
    assert keeper.wait(20) == 0
    assert not rig.paths.keeper_socket.exists()
    # the next keeper offers the unacknowledged outcome again, from the journal
    rig.start(idle_exit_s=60)
    w = rig.wire()
    [run] = w.hello()["runs"]
    assert run["key"] == "l" and run["state"] == "exited" and run["outcome"]["returncode"] == 4
    w.call("ack", keys=["l"])
    assert read_journal(rig.paths.keeper_journal) == []


def test_bye_exits_once_nothing_is_held(rig):
    keeper = rig.start(idle_exit_s=60)
    go = rig.root / "go"
    w = rig.wire()
    w.call("spawn", **rig.job("b", "sh", "-c", f"while [ ! -e {go} ]; do sleep 0.02; done"))
    assert w.call("bye") == {}
    time.sleep(0.3)
    assert keeper.poll() is None  # a run lives
    go.touch()
    assert w.event("exited", "b")["outcome"]["returncode"] == 0
    assert keeper.wait(20) == 0


def test_sigterm_ends_every_run_and_journals_it(rig):
    keeper = rig.start()
    w = rig.wire()
    r = rig.root
    roots = [w.call("spawn", **rig.job("a", "sleep", "60"))["pid"],
             w.call("spawn", **rig.job("b", "sh", "-c", f"trap '' TERM; echo $$ > {r}/b.pid; sleep 60",
                                       kill_grace_s=0.3))["pid"]]
    rig.extra_pids += roots
    pid_from(r / "b.pid")
    keeper.send_signal(signal.SIGTERM)
    assert keeper.wait(30) == 0
    assert gone(roots)
    for key in ("a", "b"):
        out = w.event("exited", key)["outcome"]
        assert out["reason"] == "keeper stopped" and out["killed_by"] == "keeper"
    held = {j["key"]: j for j in read_journal(rig.paths.keeper_journal)}
    assert held["a"]["outcome"]["returncode"] == -signal.SIGTERM
    assert held["b"]["outcome"]["returncode"] == -signal.SIGKILL


# ---------------------------------------------------------------- the client
class Sink:
    """A KeptRunListener that records its calls; ``ended`` is set by exited/spawn_failed."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.ended = asyncio.Event()
        self.frozen_ev = asyncio.Event()

    def started(self, pid: int, identity: dict[str, Any]) -> None:
        self.calls.append(("started", pid, identity))

    def spawn_failed(self, message: str, retry: bool, resource: bool = False) -> None:
        self.calls.append(("spawn_failed", message, retry) + ((resource,) if resource else ()))
        self.ended.set()

    def exited(self, outcome: dict[str, Any]) -> None:
        self.calls.append(("exited", outcome))
        self.ended.set()

    def frozen(self, why: str) -> None:
        self.calls.append(("frozen", why))
        self.frozen_ev.set()

    def progressed(self, progress: dict[str, Any]) -> None:
        self.calls.append(("progressed", progress))


async def until(ev: asyncio.Event, timeout_s: float = 20) -> None:
    await asyncio.wait_for(ev.wait(), timeout_s)


SECOND_DAEMON = """
import asyncio, sys
from pathlib import Path
from sloth_daemon.daemon.keeper_client import KeeperClient, KeeperError
from sloth_daemon.paths import Paths
h = Path(sys.argv[1])
try:
    asyncio.run(KeeperClient.connect(Paths(h, h, h / "logs", h / "run", h), start=False))
except KeeperError as e:
    print(f"KeeperError: {e}")
"""


def test_the_client_starts_a_detached_keeper_and_runs_jobs_through_sinks(rig):
    async def main() -> None:
        c = await KeeperClient.connect(rig.paths, name="test", check_s=0.2)
        keeper = psutil.Process(c.info["pid"])
        assert keeper.ppid() != os.getpid() and os.getsid(keeper.pid) == keeper.pid  # detached
        assert keeper.cwd() == "/" and c.held == []

        ok, bad = Sink(), Sink()
        c.spawn(rig.job("a", "sh", "-c", "echo hi; exit 4"), ok)
        c.spawn(rig.job("b", "no-such-program-xyz"), bad)
        await until(ok.ended)
        await until(bad.ended)
        (s, pid, ident), (e, outcome) = ok.calls
        assert s == "started" and ident["pid"] == pid and e == "exited" and outcome["returncode"] == 4
        assert bad.calls == [("spawn_failed", "command not found: no-such-program-xyz", False)]

        go = rig.root / "go"
        t = Sink()
        c.spawn(rig.job("t", "sh", "-c", f"echo one; while [ ! -e {go} ]; do sleep 0.01; done; echo two"), t)
        chunks: list[bytes] = []
        async for chunk in c.tap("t"):
            chunks.append(chunk)
            if chunk == b"one\n":
                go.touch()
        assert b"".join(chunks) == b"one\ntwo\n"
        await until(t.ended)
        with pytest.raises(KeeperError, match="no run with key 'nope'") as gone:
            async for _ in c.tap("nope"):
                pass
        assert gone.value.gone  # a run the keeper let go: the daemon reads its file instead (streams._stream)

        other = await asyncio.create_subprocess_exec(
            sys.executable, "-c", SECOND_DAEMON, str(rig.paths.home), stdout=asyncio.subprocess.PIPE, env=rig.env)
        said = (await other.communicate())[0].decode()
        assert f"KeeperError: the keeper refused us: a daemon (pid {os.getpid()}) is attached" in said
        c.ack(["a", "t"])
        await c.bye()
        await c.close()
        await asyncio.get_running_loop().run_in_executor(None, keeper.wait, 20)
        assert read_journal(rig.paths.keeper_journal) == []
        with pytest.raises(KeeperError, match="no keeper is listening"):
            await KeeperClient.connect(rig.paths, start=False)
    asyncio.run(main())
    assert "sloth keeper" in rig.paths.keeper_log.read_text()  # its output went to keeper.log


def test_the_client_adopts_held_runs_and_hears_of_a_freeze(rig, fakeclock):
    rig.start(env=fakeclock.env(), check_s=0.1)  # a keeper already runs: connect uses it

    async def main() -> None:
        go = rig.root / "go"
        c = await KeeperClient.connect(rig.paths, start=False)
        first = Sink()
        c.spawn(rig.job("a", "sh", "-c", f"while [ ! -e {go} ]; do sleep 0.01; done; exit 9",
                        trust_until=boot_now() + 3, term_lead_s=0.5), first)
        await asyncio.sleep(0)
        await c.close()  # the daemon restarts: the run goes on
        assert not first.ended.is_set()

        c = await KeeperClient.connect(rig.paths, start=False)
        [held] = c.held
        assert held["key"] == "a" and held["state"] == "running"
        adopted = Sink()
        c.attach("a", adopted)
        fakeclock.jump(600)
        await until(adopted.frozen_ev)
        assert "slept 600s" in adopted.calls[0][1]
        c.trust([("a", boot_now() + fakeclock.offset + 30)])
        go.touch()
        await until(adopted.ended)
        assert adopted.calls[-1][1]["returncode"] == 9
        c.ack(["a"])
        await c.close()
    asyncio.run(main())


def test_on_lost_fires_once_and_fire_and_forget_never_raises(rig):
    keeper = rig.start()

    async def main() -> None:
        c = await KeeperClient.connect(rig.paths, start=False)
        lost = []
        c.on_lost = lambda: lost.append(1)
        s = Sink()
        c.spawn(rig.job("a", "sleep", "60"), s)
        await asyncio.sleep(0.2)
        keeper.kill()  # the keeper dies under us
        await asyncio.get_running_loop().run_in_executor(None, keeper.wait)
        deadline = time.monotonic() + 20
        while not lost:
            assert time.monotonic() < deadline, "on_lost was never called"
            await asyncio.sleep(0.01)
        c.trust([("a", 1.0)])
        c.kill("a", "cancelled", 1.0)
        c.ack(["a"])
        c.spawn(rig.job("b", "true"), Sink())
        c.attach("a", s)
        assert lost == [1] and c.lost
        with pytest.raises(KeeperError):
            await c.bye()
        await c.close()
        assert lost == [1]
    asyncio.run(main())


def test_a_keeper_that_cannot_start_says_why(rig):
    rig.paths.keeper_socket.write_text("in the way\n")  # not a socket: the keeper refuses to remove it

    async def main() -> None:
        with pytest.raises(KeeperError, match="could not start \\(exit 1\\).*not a socket"):
            await KeeperClient.connect(rig.paths)
    asyncio.run(main())


# ------------------------------------------------------------ resource limits
def test_out_of_descriptors_a_spawn_fails_retryably_and_the_keeper_keeps_serving(rig):
    keeper = psutil.Process(rig.start().pid)
    w = rig.wire()
    soft, hard = keeper.rlimit(psutil.RLIMIT_NOFILE)
    keeper.rlimit(psutil.RLIMIT_NOFILE, (keeper.num_fds(), hard))  # not one more descriptor
    try:
        reply = w.request("spawn", **rig.job("a", "true"))
        assert reply["error"]["code"] == "spawn_failed" and reply["error"]["retry"] is True
        assert "Too many open files" in reply["error"]["message"]
        late = Wire(rig.paths.keeper_socket)  # the kernel queues it; the keeper cannot accept it yet
        rig.wires.append(late)
        assert w.hello()["runs"] == []  # the connection it has is served
    finally:
        keeper.rlimit(psutil.RLIMIT_NOFILE, (soft, hard))
    late.send(b'{"v": 1, "id": 1, "op": "hello", "args": {"role": "daemon", "pid": 1}}\n')
    assert late.read_msg()["error"]["code"] == "impostor"  # accepted once it could be (and we are not pid 1)
    w.call("spawn", **rig.job("b", "echo", "fine"))
    assert w.event("exited", "b")["outcome"]["returncode"] == 0


def test_a_daemon_connection_that_stops_reading_is_cut_off_and_the_keeper_serves_on(rig):
    # 50 journalled outcomes with 20 KB each: every hello answer is ~1 MB
    pad = "x" * 20_000
    rig.paths.keeper_journal.write_text("".join(
        json.dumps({"v": 1, "run": {"key": f"k{i}", "identity": {"pad": pad}, "outcome": {"returncode": 0}}}) + "\n"
        for i in range(50)))
    rig.start()
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.connect(str(rig.paths.keeper_socket))
    mute = Wire.__new__(Wire)
    mute.sock, mute.buf, mute.events, mute.next_id = s, b"", [], 1
    rig.wires.append(mute)
    hello = b'{"v": 1, "id": 1, "op": "hello", "args": {"role": "daemon"}}\n'
    try:
        for _ in range(40):  # 40 MB of answers it never reads
            s.sendall(hello)
    except OSError:
        pass  # cut off while we were still asking
    wait_for(lambda: "fell" in rig.keeper_log() and "cutting it off" in rig.keeper_log(), what="the cut")
    answers = 0
    with pytest.raises((ConnectionError, OSError)):
        while True:
            mute.read_msg(timeout_s=10)
            answers += 1
    assert answers < 40
    assert len(rig.wire().hello()["runs"]) == 50  # another daemon is served; nothing was lost


@pytest.mark.skipif(os.geteuid() != 0, reason="mounts a small tmpfs to fill")
def test_with_the_journal_on_a_full_disk_an_outcome_is_held_in_memory_until_there_is_room():
    d = Path(tempfile.mkdtemp(prefix="slkf-"))
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(d)], capture_output=True).returncode:
        os.rmdir(d)
        pytest.skip("cannot mount a tmpfs here")
    rig = KeeperRig(d / "r")
    try:
        keeper = rig.start(idle_exit_s=0.3)
        w = rig.wire()
        go = rig.root / "go"
        w.call("spawn", **rig.job("a", "sh", "-c", f"while [ ! -e {go} ]; do sleep 0.02; done; exit 6"))
        fd = os.open(d / "filler", os.O_WRONLY | os.O_CREAT)
        try:  # the disk is full from here on
            while os.write(fd, b"\0" * 4096):
                pass
        except OSError:
            pass
        finally:
            os.close(fd)
        go.touch()
        assert w.event("exited", "a")["outcome"]["returncode"] == 6
        w.close()
        time.sleep(1.0)  # three idle periods: it holds an outcome only it knows, so it stays
        assert keeper.poll() is None
        assert "cannot write the journal" in rig.keeper_log()
        (d / "filler").unlink()  # room again
        w = rig.wire()
        [run] = w.hello()["runs"]
        assert run["outcome"]["returncode"] == 6
        w.close()
        assert keeper.wait(20) == 0  # journalled at last: it may go
        assert [r["outcome"]["returncode"] for r in read_journal(rig.paths.keeper_journal)] == [6]
    finally:
        remove_rig(rig)
        subprocess.run(["umount", "-l", str(d)], capture_output=True)
        shutil.rmtree(d, ignore_errors=True)


def test_runs_that_share_an_environment_send_it_once_and_a_forgotten_one_whole(rig):
    """The daemon's client names an environment object it sent by a ref;
    later runs that share it send the ref and their own variables only. A
    ref the keeper does not know (it restarted, or forgot it) is refused
    ``unknown_env`` and the client sends the whole environment again: the
    run starts all the same, with the right variables."""
    async def main() -> None:
        c = await KeeperClient.connect(rig.paths, name="test", check_s=0.2)
        assert "env_ref" in c.info["features"]
        shared = rig.job("x", "true")["env"] | {"COLOUR": "blue"}
        sinks = {}
        for n in ("1", "2"):
            req = rig.job(f"r{n}", "sh", "-c", "echo $COLOUR $N") | {"env": shared, "env_extra": {"N": n}}
            sinks[n] = Sink()
            c.spawn(req, sinks[n])
        assert len(c._refs_sent) == 1  # one environment, sent once
        other = dict(shared)
        c._refs_sent.add(c._ref(other))  # as if sent before, but the keeper never saw it
        sinks["3"] = Sink()
        c.spawn(rig.job("r3", "sh", "-c", "echo $COLOUR $N") | {"env": other, "env_extra": {"N": "3"}}, sinks["3"])
        for s in sinks.values():
            await until(s.ended)
            assert s.calls[-1][0] == "exited" and s.calls[-1][1]["returncode"] == 0, s.calls
        c.ack(["r1", "r2", "r3"])
        await c.bye()
        await c.close()
    asyncio.run(main())
    assert [rig.log_of(f"r{n}") for n in "123"] == [b"blue 1\n", b"blue 2\n", b"blue 3\n"]

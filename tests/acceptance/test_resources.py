"""Issue 14, item 3: running short of resources is neither the job's fault
nor "no daemon". Through the real daemon, its socket and the CLI."""

from __future__ import annotations

import errno
import fcntl
import os
import signal
import socket
import time
from pathlib import Path

import pytest

from sloth_daemon.cli.client import Client
from sloth_daemon.paths import resolve

pytestmark = pytest.mark.acceptance
EXIT_UNAVAILABLE = 7


def soft_nofile(pid: int) -> int:
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
        if line.startswith("Max open files"):
            return int(line.split()[3])
    raise AssertionError("no Max open files line")


def idle_connections(sock: Path, n: int, deadline_s: float = 15.0) -> list[socket.socket]:
    """``n`` clients that each send half a frame and then say nothing (each
    waits its turn in a full accept queue, as a blocking client would)."""
    out: list[socket.socket] = []
    deadline = time.monotonic() + deadline_s
    while len(out) < n and time.monotonic() < deadline:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(5)
        try:
            s.connect(str(sock))
            s.send(b'{"v": 1, "id": 1, "op": "add", "args": {"jobs": [{"comm')
        except BlockingIOError:  # the accept queue is full for now
            s.close()
            time.sleep(0.005)
            continue
        except OSError:
            s.close()
            continue
        out.append(s)
    return out


def test_the_daemon_raises_its_soft_descriptor_limit(harness):
    harness.start(nofile=(256, 4096))
    assert harness.daemon is not None
    assert soft_nofile(harness.daemon.pid) == 4096


def test_idle_clients_cannot_starve_jobs_of_descriptors(harness):
    """1,100 half-sent frames once used every descriptor: every job then failed
    at pipe() and spent its attempts, and clients were told no daemon was
    listening. Now connections are capped with a reserve for jobs, and
    clients past the cap are told the daemon is busy."""
    harness.start(nofile=(512, 512))
    jid = harness.add("sh", "-c", "echo ran", max_attempts=1, not_before=time.time() + 3)
    conns = idle_connections(harness.socket, 1100)
    try:
        p = harness.cli("ls")  # while every slot is taken: busy, not "not running" (checked below)
        time.sleep(4)  # the job comes due and runs while the flood holds on
        busy = 0
        for s in conns:  # those past the cap were answered "busy" and closed, not left hanging
            s.settimeout(0.01)  # the held ones have nothing to say
            try:
                busy += b'"busy"' in s.recv(4096)
            except (socket.timeout, OSError):
                continue
    finally:
        for s in conns:
            s.close()
    job = harness.wait_state(jid, "done", "failed", timeout_s=30)
    assert (job["state"], job["attempts"]) == ("done", 1), job
    assert busy > 0
    assert p.returncode == EXIT_UNAVAILABLE, p.stderr
    assert "connections open, its limit" in p.stderr and "Traceback" not in p.stderr, p.stderr
    st = harness.call("status")["server"]
    assert st["refused_busy"] >= busy and st["max_connections"] == (512 - 128) // 2


def test_a_spawn_short_of_descriptors_waits_without_spending_an_attempt(harness):
    """With 64 descriptors, 56 jobs at once cannot all get their pipes (a
    running job holds one descriptor of the keeper's, its output's pipe,
    since it is spawned without Popen's error pipe and pidfd): those that
    cannot start are postponed, attempt refunded, and all finish done."""
    harness.home.joinpath("config.toml").write_text(harness.home.joinpath("config.toml").read_text()
                                                    + "[lanes]\nwide = 56\n")
    harness.start(nofile=(64, 64))
    harness.call("pause")
    ids = harness.add_many([{"command": ["sleep", "3"], "lane": "wide", "max_attempts": 1} for _ in range(56)])
    harness.call("resume")
    jobs = [harness.wait_state(j, "done", "failed", timeout_s=120) for j in ids]
    assert [j["state"] for j in jobs] == ["done"] * 56, [j["message"] for j in jobs if j["state"] != "done"]
    postponed = [e for j in ids for e in harness.events(j) if e["kind"] == "postponed"]
    assert postponed and all("does not count" in e["message"] or "not counted" in e["message"] for e in postponed)
    assert all("Too many open files" in e["message"] for e in postponed)


def fill_backlog(sock: Path) -> list[socket.socket]:
    """Connect without being accepted (the daemon is stopped) until the
    kernel's accept queue is full and connect() says EAGAIN."""
    out = []
    for _ in range(5000):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.setblocking(False)
        try:
            s.connect(str(sock))
        except BlockingIOError:
            s.close()
            return out
        out.append(s)
    raise AssertionError("the accept queue never filled")


def test_a_full_accept_queue_is_busy_not_absent_and_starts_no_second_daemon(harness):
    harness.start()
    assert harness.daemon is not None
    pid = harness.daemon.pid
    os.kill(pid, signal.SIGSTOP)
    conns: list[socket.socket] = []
    try:
        conns = fill_backlog(harness.socket)
        for args in (["ls"], ["add", "--", "true"]):
            p = harness.cli(*args, timeout_s=60)
            assert p.returncode == EXIT_UNAVAILABLE, (args, p.returncode, p.stderr)
            assert "full queue of connections" in p.stderr and f"kill -CONT {pid}" in p.stderr, p.stderr
            assert "Traceback" not in p.stderr and "started the daemon" not in p.stderr
    finally:
        os.kill(pid, signal.SIGCONT)
        for s in conns:
            s.close()
    assert "already running" not in harness.log_text()  # no second daemon was tried
    assert harness.call("ping")["pong"]


def test_a_stopped_daemon_is_not_answering_and_says_how_to_check(harness):
    harness.start()
    assert harness.daemon is not None
    pid = harness.daemon.pid
    os.kill(pid, signal.SIGSTOP)
    try:
        p = resolve({"SLOTH_HOME": str(harness.home)})
        t0 = time.monotonic()
        with pytest.raises(Exception) as ei:
            with Client(p.socket, timeout_s=1, lock_path=p.lock) as c:
                c.call("status")
        assert time.monotonic() - t0 < 10
    finally:
        os.kill(pid, signal.SIGCONT)
    err = ei.value
    assert type(err).__name__ == "DaemonNotAnswering", repr(err)
    assert f"pid {pid}" in err.message and f"kill -CONT {pid}" in err.hint and "ps -o" in err.hint


def test_no_second_daemon_is_started_while_the_lock_is_held(harness, monkeypatch):
    """A daemon that holds the instance lock but does not (yet) listen: `sloth
    add` waits for it and then says so; it never starts another."""
    from sloth_daemon.cli.launcher import start_background

    for k, v in harness.env.items():  # anything started from here runs in the test's folder, nowhere else
        monkeypatch.setenv(k, v)
    p = resolve({"SLOTH_HOME": str(harness.home)})
    p.data_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(p.lock, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.write(fd, f"{os.getpid()}\n".encode())
        with pytest.raises(Exception) as ei:
            start_background(p, timeout_s=1)
    finally:
        os.close(fd)
    assert type(ei.value).__name__ == "DaemonNotAnswering", repr(ei.value)
    assert f"pid {os.getpid()}" in ei.value.message and "not starting a second" in ei.value.message
    assert not p.daemon_log.exists()  # nothing was spawned (it would have written there)
    assert not [q for q in harness.our_processes() if "daemon" in " ".join(q.cmdline())]


def test_connect_errors_are_typed(tmp_path):
    """Nobody listening (no file, refused) is DaemonNotRunning; a timeout in
    connect is not answering. Never a bare OSError."""
    from sloth_daemon.errors import DaemonNotRunning

    with pytest.raises(DaemonNotRunning):
        Client(tmp_path / "none.sock")
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(str(tmp_path / "dead.sock"))
    s.close()  # bound, never listening: ECONNREFUSED
    with pytest.raises(DaemonNotRunning):
        Client(tmp_path / "dead.sock")
    assert errno.ECONNREFUSED  # (documented above)

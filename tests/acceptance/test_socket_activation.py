"""Socket activation (issue 34 item 1): the daemon takes its listening
socket from the service manager (daemon/activation.py) and, with
``idle_exit_s``, leaves it there when it exits, so the next connection
starts it again with nothing lost.

The first test uses systemd's own /usr/bin/systemd-socket-activate: it
listens at the daemon's socket path and, on the first connection, execs the
real daemon with LISTEN_FDS/LISTEN_PID. That tool execs in place, so its
socket goes with the daemon when it exits; systemd (PID 1 or the user
manager) keeps it and starts the service again. The second test holds the
socket the way systemd does (why not a real `systemd --user`: docs/testing.md).
"""

from __future__ import annotations

import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import threading

import pytest

from sloth_daemon.cli.launcher import lock_holder
from tests.acceptance.test_idle_exit import WINDOW, _paths
from tests.support.harness import TEST_CONFIG, Harness

ACTIVATE = shutil.which("systemd-socket-activate") or "/usr/bin/systemd-socket-activate"
needs_activate = pytest.mark.skipif(not os.path.exists(ACTIVATE), reason="no systemd-socket-activate")
DAEMON = [sys.executable, "-m", "sloth_daemon", "daemon", "run"]


def activated(make_harness, name: str = "h") -> Harness:
    h = make_harness(TEST_CONFIG + WINDOW, name)
    (h.home / "run").mkdir(mode=0o700)  # the runtime folder systemd's DirectoryMode=0700 makes
    return h


def added(h: Harness, *cmd: str) -> tuple[int, str]:
    p = h.cli("add", "--", *cmd, check=True)
    return int(p.stdout.split()[-1]), p.stderr


@needs_activate
def test_systemd_socket_activate_starts_the_real_daemon_on_the_first_connection(make_harness):
    h = activated(make_harness)
    with open(h.daemon_log, "ab") as log:
        proc = subprocess.Popen(
            [ACTIVATE, "-l", str(h.socket), "-E", f"SLOTH_HOME={h.home}", "-E", "PYTHONUNBUFFERED=1", *DAEMON],
            env=h.daemon_env, stdout=log, stderr=log, stdin=subprocess.DEVNULL, start_new_session=True)
    h.spawned.append(proc)
    h.wait_for(h.socket.exists, 20, "systemd-socket-activate listening")
    assert lock_holder(_paths(h)) is None  # it only listens: no daemon yet

    jid, said = added(h, "sh", "-c", "echo through the socket")
    assert "started the daemon" not in said  # the connection itself started it
    h.cli("wait", str(jid), check=True)
    assert h.job(jid)["state"] == "done"
    assert "through the socket" in h.cli("logs", str(jid), check=True).stdout
    assert h.call("status")["pid"] == proc.pid  # exec'd in place: the daemon got the socket
    assert "socket activation: listening on the socket systemd made for" in h.log_text()

    busy, _ = added(h, "sleep", "3")  # keeps it from its idle exit while a second daemon tries
    h.wait_state(busy, "running")
    second = h.start(wait=False)  # the single-instance lock still holds
    assert second.wait(30) == 6
    assert "already running" in h.log_text()
    h.wait_state(busy, "done")

    assert proc.wait(30) == 0  # the idle exit
    assert "idle exit: nothing queued" in h.log_text()
    jid, said = added(h, "true")  # the tool's socket went with it: the command starts a daemon itself
    assert "started the daemon" in said
    h.cli("wait", str(jid), check=True)


class SocketHolder:
    """What systemd does with sloth.socket: hold the listening socket, and
    whenever the service is not running and a connection waits, start it
    with the socket at fd 3, LISTEN_FDS=1 and LISTEN_PID its own pid."""

    def __init__(self, h: Harness) -> None:
        self.h = h
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(str(h.socket))
        os.chmod(h.socket, 0o600)
        self.sock.listen(16)
        self.starts: list[subprocess.Popen[bytes]] = []
        self.codes: list[int] = []
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        poll = select.poll()
        poll.register(self.sock, select.POLLIN)
        while not self._stop.is_set():
            if not poll.poll(50):
                continue
            fd = self.sock.fileno()
            with open(self.h.daemon_log, "ab") as log:
                proc = subprocess.Popen(
                    ["sh", "-c", 'LISTEN_PID=$$ exec "$@"', "sh", *DAEMON],
                    env=dict(self.h.daemon_env, LISTEN_FDS="1"), stdout=log, stderr=log,
                    stdin=subprocess.DEVNULL, start_new_session=True, pass_fds=(3,),
                    preexec_fn=lambda: os.dup2(fd, 3))
            self.starts.append(proc)
            self.h.spawned.append(proc)
            self.codes.append(proc.wait())  # the service runs; the socket stays ours meanwhile

    def close(self) -> None:
        self._stop.set()
        for p in self.starts:
            if p.poll() is None:
                p.send_signal(signal.SIGINT)
        self.thread.join(30)
        self.sock.close()


def test_after_an_idle_exit_the_next_connection_starts_it_again_and_its_request_waits_meanwhile(make_harness):
    h = activated(make_harness)
    holder = SocketHolder(h)
    try:
        jid, said = added(h, "sh", "-c", "echo first")
        assert "started the daemon" not in said
        h.cli("wait", str(jid), check=True)
        h.wait_for(lambda: holder.codes == [0], 30, "the first daemon's idle exit")
        assert h.socket.exists()  # the manager's socket: the daemon leaves it in place
        assert "idle exit: nothing queued" in h.log_text()

        again, said = added(h, "sh", "-c", "echo second")  # waits in the held socket until a daemon takes it
        assert "started the daemon" not in said  # never saw a daemon missing
        h.cli("wait", str(again), check=True)
        assert h.job(again)["state"] == "done" and h.job(again)["attempts"] == 1
        assert len(holder.starts) == 2
        assert h.daemon_log.read_text(errors="replace").count("socket activation: listening on the socket systemd") == 2
    finally:
        holder.close()


# ------------------------------------------------- a real systemd --user
SYSTEMD = "/lib/systemd/systemd"
# systemd --user refuses to run unless the machine was booted with systemd
# (/run/systemd/system exists); this container's PID 1 is not systemd. In a
# private mount namespace a tmpfs over /run/systemd with that folder lets a
# real user manager start, its units and cgroups real (docs/testing.md).
START_MANAGER = 'mount -t tmpfs none /run/systemd && mkdir -p /run/systemd/system && exec "$0" --user'


def user_manager(h: Harness, root) -> subprocess.Popen[bytes]:
    """A real `systemd --user` for this test alone (its own runtime and config folders)."""
    if os.geteuid() != 0 or not os.path.exists(SYSTEMD) or not shutil.which("unshare"):
        pytest.skip("a private systemd --user needs root (for unshare -m), unshare and systemd")
    rt, cfg = root / "rt", root / "cfg"
    rt.mkdir(mode=0o700)
    cfg.mkdir()
    h.env.update(XDG_RUNTIME_DIR=str(rt), XDG_CONFIG_HOME=str(cfg), HOME=str(root))
    with open(root / "systemd.log", "ab") as log:
        proc = subprocess.Popen(["unshare", "-m", "sh", "-c", START_MANAGER, SYSTEMD], env=h.env,
                                stdout=log, stderr=log, stdin=subprocess.DEVNULL, start_new_session=True)
    h.spawned.append(proc)
    try:
        h.wait_for(lambda: (rt / "systemd" / "private").is_socket() and systemctl(h, "is-system-running").stdout,
                   20, "systemd --user up")
    except AssertionError:
        proc.kill()
        pytest.skip(f"systemd --user did not start here: {(root / 'systemd.log').read_text()[-500:]}")
    return proc


def systemctl(h: Harness, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["systemctl", "--user", *args], env=h.env, capture_output=True, text=True, timeout=30)


def main_pid(h: Harness) -> int:
    return int(systemctl(h, "show", "-p", "MainPID", "--value", "sloth.service").stdout.strip() or 0)


def test_under_a_real_systemd_user_the_socket_unit_starts_the_daemon_again_after_each_idle_exit(make_harness, tmp_path):
    h = make_harness(TEST_CONFIG + WINDOW)
    manager = user_manager(h, tmp_path)
    try:
        installed = h.cli("service", "install", "--now", check=True).stdout
        assert "ran: systemctl --user enable --now sloth.socket" in installed
        assert systemctl(h, "is-active", "sloth.socket").stdout.strip() == "active"

        jid, said = added(h, "sh", "-c", "echo under systemd")
        assert "started the daemon" not in said
        h.cli("wait", str(jid), check=True)
        first = main_pid(h)
        assert first > 0 and h.call("status")["pid"] == first  # the service's daemon serves it

        busy, _ = added(h, "sleep", "3")  # keeps it from its idle exit while a second daemon tries
        h.wait_state(busy, "running")
        assert subprocess.run(DAEMON, env=h.env, capture_output=True, timeout=30).returncode == 6  # the lock holds
        h.wait_state(busy, "done")

        h.wait_for(lambda: systemctl(h, "is-active", "sloth.service").stdout.strip() == "inactive", 30,
                   "the service's idle exit")
        assert systemctl(h, "is-active", "sloth.socket").stdout.strip() == "active"  # systemd still listens
        assert systemctl(h, "show", "-p", "Result", "--value", "sloth.service").stdout.strip() == "success"
        assert h.socket.exists()

        again, said = added(h, "sh", "-c", "echo again")  # the connection starts the service again
        assert "started the daemon" not in said
        h.cli("wait", str(again), check=True)
        assert h.job(again)["attempts"] == 1
        assert main_pid(h) not in (0, first)

        removed = h.cli("service", "uninstall", check=True).stdout
        assert "ran: systemctl --user disable --now sloth.socket" in removed
        assert not h.socket.exists()  # RemoveOnStop
    finally:
        manager.terminate()
        manager.wait(30)


def test_a_listen_fds_that_counts_more_than_was_passed_closes_none_of_the_daemons_own_descriptors(make_harness):
    """LISTEN_FDS=6 with one socket at fd 3: fds 4-8 were never passed.
    They are read before the daemon opens anything (its lock, its
    database, its event loop), so what it finds there is nothing of its
    own; it serves on fd 3 and its jobs run."""
    h = activated(make_harness)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(h.socket))
    sock.listen(16)
    fd = sock.fileno()
    try:
        with open(h.daemon_log, "ab") as log:
            proc = subprocess.Popen(
                ["sh", "-c", 'LISTEN_PID=$$ exec "$@"', "sh", *DAEMON],
                env=dict(h.daemon_env, LISTEN_FDS="6"), stdout=log, stderr=log,
                stdin=subprocess.DEVNULL, start_new_session=True, pass_fds=(3,),
                preexec_fn=lambda: os.dup2(fd, 3))
        h.spawned.append(proc)
        jid, said = added(h, "sh", "-c", "echo served")
        assert "started the daemon" not in said
        h.cli("wait", str(jid), check=True)
        assert h.job(jid)["state"] == "done"
        assert proc.poll() is None and h.call("status")["pid"] == proc.pid
        assert "socket activation: listening on the socket systemd made for" in h.log_text()
        assert "internal error" not in h.log_text()
    finally:
        sock.close()

"""The renewal at rest (daemon/renewal.py, docs/idle.md) at its worst
moments, through the real daemon: a stop signal while the old process
drains with a thread of its own alive, a config.toml edited and not
reloaded, sloth's code replaced under the daemon (an upgrade). The renewal
is a restart nobody asked for: it must never end the daemon, nor change
what it runs or with which settings, nor swallow a stop."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import sloth_daemon
from sloth_daemon.daemon import renewal
from tests.acceptance.test_renewal import renewed, rest_until, run_until_renewing
from tests.support.harness import TEST_CONFIG

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="renews only where /proc says RSS")
REST = TEST_CONFIG + 'keeper_linger_s = "100ms"\n'


def called_off(h) -> int:
    return h.daemon_log.read_text(errors="replace").count("renewal called off")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_a_signal_while_the_old_process_drains_with_a_thread_alive_is_not_lost(make_harness, sig):
    """A metrics file is written from a thread of the default pool, which
    lives on at rest: with the stop signals blocked in the main thread only,
    the kernel handed that thread the SIGTERM, asyncio ran its handler on a
    daemon already stopping (to renew), and the new process ran on: a
    `systemctl stop` that never stopped. A SIGHUP heard so is the new
    process's reload."""
    h = make_harness(REST)
    (h.home / "config.toml").write_text(REST + f'metrics_file = "{h.home / "sloth.prom"}"\n')
    h.daemon_env["SLOTH_RENEW_GROWTH_KB"] = "0"
    daemon = h.start()
    run_until_renewing(h)
    daemon.send_signal(sig)
    if sig == signal.SIGHUP:
        h.wait_for(lambda: renewed(h) >= 1 and "reloaded" in h.daemon_log.read_text(errors="replace"),
                   timeout_s=20, what="the reload by the renewed daemon")
        h.wait_ready(daemon)
        assert daemon.poll() is None and "Traceback" not in h.log_text()
        return
    assert daemon.wait(20) == 0, h.log_text()
    assert not h.socket.exists(), "its own socket is removed, as at any stop"
    assert "Traceback" not in h.log_text()
    h.cli("add", "--", "true", check=True)  # the lock is free: the next command starts a daemon


def test_a_config_edited_and_not_reloaded_neither_ends_the_daemon_nor_is_applied_by_a_renewal(make_harness):
    """config.toml is the user's to apply (`sloth daemon reload`): a broken
    edit left in it made the renewed process die at start (the daemon gone
    with a traceback, at a moment nobody chose), a valid one was applied
    silently. The renewal is called off instead; a reload applies the file
    as before, and the next rest renews."""
    h = make_harness(REST)
    h.daemon_env["SLOTH_RENEW_GROWTH_KB"] = "0"
    daemon = h.start()
    (h.home / "config.toml").write_text(REST + 'slots = "lots"\n')  # half-way through an edit
    rest_until(h, lambda: called_off(h) >= 1 or daemon.poll() is not None)
    assert daemon.poll() is None, h.log_text()
    assert renewed(h) == 0 and "config.toml" in h.log_text()
    assert h.call("ping")

    (h.home / "config.toml").write_text(REST + "max_attempts = 7\n")  # valid, still not reloaded
    rest_until(h, lambda: called_off(h) >= 2 or renewed(h))
    assert renewed(h) == 0 and "edited and not reloaded (max_attempts: 3 -> 7)" in h.log_text(), h.log_text()
    assert h.call("status")["pid"] == daemon.pid

    h.cli("daemon", "reload", check=True)  # the user applies it: from now on it is the settings in force
    rest_until(h, lambda: renewed(h) >= 1)
    h.wait_ready(daemon)
    assert daemon.poll() is None and h.call("status")["pid"] == daemon.pid


def test_sloth_upgraded_under_the_daemon_is_not_run_by_a_renewal(make_harness, tmp_path):
    """`pip install -U` replaces sloth's files under a running daemon: the
    renewal exec'd the new version in the old one's place (its pid, socket,
    lock and start time), mid-upgrade or not. The daemon goes on with the
    code it started with; `sloth daemon restart` is what runs the new one."""
    site = tmp_path / "site"
    shutil.copytree(Path(sloth_daemon.__file__).parent, site / "sloth_daemon",
                    ignore=shutil.ignore_patterns("__pycache__"))
    h = make_harness(REST)
    h.env["PYTHONPATH"] = h.daemon_env["PYTHONPATH"] = str(site)
    h.daemon_env["SLOTH_RENEW_GROWTH_KB"] = "0"
    daemon = h.start()
    assert h.call("ping")["version"] == sloth_daemon.__version__
    init = site / "sloth_daemon" / "__init__.py"
    new = init.read_text().replace(f'"{sloth_daemon.__version__}"', '"99.0.0"')
    init.unlink()  # as pip does: the old file removed, the new one written
    init.write_text(new)
    rest_until(h, lambda: called_off(h) >= 1 or renewed(h))
    h.wait_ready(daemon)
    assert h.call("ping")["version"] == sloth_daemon.__version__, h.log_text()
    assert renewed(h) == 0
    h.cli("daemon", "stop", check=True)
    assert daemon.wait(20) == 0
    second = h.start()
    assert h.call("ping")["version"] == "99.0.0"  # a restart runs the new one
    os.kill(second.pid, signal.SIGTERM)
    assert second.wait(20) == 0


def test_under_socket_activation_the_renewal_keeps_the_managers_socket_and_a_forged_handover_is_ignored(
        make_harness):
    """Started by its service manager (LISTEN_FDS, fd 3), the daemon renews
    on the manager's socket and never removes it. A $SLOTH_RENEWED it did
    not hand itself (left in a service manager's environment by an
    `import-environment`, or set by another process of the user) was taken
    as a handover: LISTEN_FDS was never read (left to the keeper and every
    job), fd 3 -- the manager's socket -- was closed as 'not the lock', and
    the daemon bound a socket of its own over the manager's path, which it
    then removed at its stop: the next connection found no socket to start
    it. A handover names the process it is for (its pid, as LISTEN_PID
    does); any other is ignored."""
    from tests.acceptance.test_socket_activation import SocketHolder

    h = make_harness(REST)
    (h.home / "run").mkdir(mode=0o700)  # the runtime folder systemd's DirectoryMode=0700 makes
    h.daemon_env["SLOTH_RENEW_GROWTH_KB"] = "0"
    h.daemon_env["SLOTH_RENEWED"] = ('{"listen_fd": 9, "lock_fd": 3, "owned": true, "started_at": 1.0,'
                                     ' "up_row": 1}')  # as a renewed daemon's /proc/PID/environ shows it
    holder = SocketHolder(h)
    made = h.socket.stat().st_ino
    try:
        jid = h.add_many([{"command": ["sh", "-c", "echo ${LISTEN_FDS:-none} ${LISTEN_PID:-none}"]}])[0]
        h.cli("wait", str(jid), check=True)
        assert h.cli("logs", str(jid), check=True).stdout.split() == ["none", "none"]
        assert "socket activation: listening on the socket systemd made for" in h.log_text()
        rest_until(h, lambda: renewed(h) >= 1)
        h.wait_ready(holder.starts[0])
        assert h.call("status")["pid"] == holder.starts[0].pid and h.call("status")["started_at"] > 1.0
        assert h.socket.stat().st_ino == made  # the manager's, never replaced
        h.cli("daemon", "stop", check=True)
        h.wait_for(lambda: holder.codes == [0], 30, "the daemon's stop")
        assert h.socket.exists() and h.socket.stat().st_ino == made  # left where the manager made it
        again = h.add_many([{"command": ["true"]}])[0]  # the next connection starts it again
        h.cli("wait", str(again), check=True)
        assert len(holder.starts) == 2
    finally:
        holder.close()


def held(pid: int, inode: str) -> int:
    """How many of ``pid``'s descriptors are the socket ``inode``."""
    n = 0
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:  # gone
        return 0
    for fd in fds:
        try:
            n += os.readlink(f"/proc/{pid}/fd/{fd}") == f"socket:[{inode}]"
        except OSError:
            pass
    return n


def test_an_idle_exit_due_during_the_renewals_look_waits_for_it(make_harness):
    """With idle_exit_s, an idle exit's look and the renewal's are both
    leavings: stop accepting, settle, look again. Run at once (a daemon
    stopped and continued just after its keeper went makes both due in one
    turn of its loop), the idle exit removed the socket under the renewal's
    pause: the clients waiting in its queue were dropped, the renewal
    stopped the daemon without an exec, and its timeline row was left
    'running' for ever. One leaving at a time: the renewal's look keeps
    the idle exit; the renewed daemon then leaves idle, cleanly."""
    h = make_harness(TEST_CONFIG + 'keeper_linger_s = "600ms"\nidle_exit_s = "1s"\n')  # two looks see the last request
    h.daemon_env["SLOTH_RENEW_GROWTH_KB"] = "0"
    daemon = h.start()
    listener = next(f[6] for f in map(str.split, Path("/proc/net/unix").read_text().splitlines()[1:])
                    if f[-1] == str(h.socket) and f[3] == "00010000")  # listening (__SO_ACCEPTCON), not a connection
    rest_until(h, lambda: held(daemon.pid, listener) == 1, poll_s=0)  # the renewal's pause: asyncio's copy closed
    daemon.send_signal(signal.SIGSTOP)  # within the renewal's look
    time.sleep(1.5)  # past the idle window: both looks are due when it goes on
    daemon.send_signal(signal.SIGCONT)
    assert daemon.wait(30) == 0
    log = h.log_text()
    assert renewed(h) == 1 and "stopped instead of renewing" not in log, log
    assert "idle exit: nothing queued" in log and not h.socket.exists()
    up = h.cli_json("timeline", "--json")["machine"]
    assert up and up[-1]["detail"].startswith("stopped: idle exit"), up


def test_the_renewal_runs_sloths_code_not_a_sloth_daemon_folder_in_its_working_directory(make_harness, tmp_path):
    """`python -m` puts the working directory first on sys.path. A daemon
    started by `sloth daemon run` in a folder holding a `sloth_daemon`
    package (a source checkout, a download, anything another user left in
    /tmp) exec'd that folder's code at its first rest, as the user, on the
    daemon's pid, lock and socket. Every other start sloth makes (the
    daemon by a command, the keeper) runs from /: the renewal too."""
    planted = tmp_path / "cwd"
    for d in ("sloth_daemon", "sloth_daemon/daemon"):
        (planted / d).mkdir(parents=True)
        (planted / d / "__init__.py").write_text("")
    ran = tmp_path / "planted-ran"
    (planted / "sloth_daemon" / "daemon" / "__main__.py").write_text(
        f"open({str(ran)!r}, 'w').write('ran')\n")
    h = make_harness(REST)
    h.daemon_env["SLOTH_RENEW_GROWTH_KB"] = "0"
    with open(h.daemon_log, "ab") as log:
        daemon = subprocess.Popen([str(Path(sys.executable).with_name("sloth")), "daemon", "run"],
                                  env=h.daemon_env, stdout=log, stderr=log, stdin=subprocess.DEVNULL,
                                  start_new_session=True, cwd=planted)
    h.spawned.append(daemon)
    h.wait_ready(daemon)
    rest_until(h, lambda: renewed(h) >= 1 or ran.exists() or daemon.poll() is not None)
    assert not ran.exists(), "the planted folder's code ran in the daemon's place"
    h.wait_ready(daemon)
    assert h.call("status")["pid"] == daemon.pid


def test_a_config_too_long_for_the_environment_is_read_from_its_file_by_the_renewed_daemon(make_harness):
    """config.toml's text in force is handed over in the environment, where
    one variable holds 128 KiB at most (the exec fails with E2BIG past it);
    a config may be 1 MiB. A longer one is read from its file, found
    unchanged just before the exec."""
    h = make_harness(REST + "# a long note\n" * 20_000 + "max_attempts = 4\n")
    h.daemon_env["SLOTH_RENEW_GROWTH_KB"] = "0"
    daemon = h.start()
    rest_until(h, lambda: renewed(h) >= 1 or daemon.poll() is not None)
    h.wait_ready(daemon)
    assert h.call("status")["pid"] == daemon.pid


def test_a_request_family_first_asked_after_an_upgrade_is_refused_with_a_restart_hint(make_harness, tmp_path):
    """The edits, schedules, outbox, timeline and streamed listing are
    imported at their first request (handlers.LAZY). After `pip install -U`
    under a running daemon that first request ran the new version's module
    inside the old daemon, beside the old one's others and on a queue the
    new version's migrations never touched. It is refused instead, saying
    to restart; a restart runs the new version whole."""
    site = tmp_path / "site"
    shutil.copytree(Path(sloth_daemon.__file__).parent, site / "sloth_daemon",
                    ignore=shutil.ignore_patterns("__pycache__"))
    h = make_harness(REST)
    h.env["PYTHONPATH"] = h.daemon_env["PYTHONPATH"] = str(site)
    h.start()
    job = h.add_many([{"command": ["true"], "not_before": time.time() + 3600}])[0]
    loaded = tmp_path / "new-edit-ops-loaded"
    for rel, extra in (("__init__.py", ""), ("daemon/edit_ops.py", f"open({str(loaded)!r}, 'w').close()\n")):
        f = site / "sloth_daemon" / rel
        text = f.read_text()
        f.unlink()  # as pip does: the old file removed, the new one written
        f.write_text(text.replace("from __future__ import annotations\n",
                                  "from __future__ import annotations\n" + extra, 1))
    p = h.cli("hold", str(job))
    assert p.returncode != 0 and "sloth daemon restart" in p.stderr, (p.stdout, p.stderr)
    assert not loaded.exists() and h.job(job)["state"] == "queued"
    assert h.call("ping")
    h.cli("daemon", "restart", check=True)
    h.cli("hold", str(job), check=True)
    assert loaded.exists() and h.job(job)["state"] == "held"


def test_under_a_real_systemd_user_the_renewal_leaves_the_service_running(make_harness, tmp_path):
    """The old process's drain told systemd STOPPING=1 before the exec: the
    service went to 'deactivating (stop-sigterm)', the new process's
    READY=1 did not bring it back, and TimeoutStopSec later systemd killed
    the daemon at rest. A renewal is no stop: nothing is said of it but the
    new process's READY=1."""
    from tests.acceptance.test_socket_activation import main_pid, systemctl, user_manager

    h = make_harness(REST)
    manager = user_manager(h, tmp_path)
    try:
        dropin = tmp_path / "cfg" / "systemd" / "user" / "sloth.service.d"  # read by the install's daemon-reload
        dropin.mkdir(parents=True)
        (dropin / "renew.conf").write_text("[Service]\nEnvironment=SLOTH_RENEW_GROWTH_KB=0\n")
        h.cli("service", "install", "--now", check=True)
        assert h.call("ping")  # the socket starts the service
        pid = main_pid(h)
        renewed_env = f"{renewal.ENV}=".encode()  # the exec'd process's first environment says it was renewed
        rest_until(h, lambda: renewed_env in Path(f"/proc/{pid}/environ").read_bytes())
        h.wait_for(lambda: h.call("ping"), 20, "the renewed daemon")
        state = systemctl(h, "show", "-p", "ActiveState", "-p", "SubState", "--value", "sloth.service").stdout.split()
        assert state == ["active", "running"] and main_pid(h) == pid, state
    finally:
        manager.terminate()
        manager.wait(30)


def test_no_notify_tool_is_said_once_not_at_every_renewal(make_harness, tmp_path):
    """notify = ["failed"] on a machine without notify-send: the first
    daemon says so in its log; a renewal is the same daemon with the same
    settings and PATH, and says nothing new."""
    bare = tmp_path / "bin"  # a PATH with sh and true, and no notify-send
    bare.mkdir()
    for tool in ("sh", "true"):
        (bare / tool).symlink_to(shutil.which(tool))  # type: ignore[arg-type]
    h = make_harness(REST + 'notify = ["failed"]\n')
    h.daemon_env.update({"SLOTH_RENEW_GROWTH_KB": "0", "PATH": str(bare)})
    h.start()
    rest_until(h, lambda: renewed(h) >= 1)
    rest_until(h, lambda: renewed(h) >= 2)
    said = h.daemon_log.read_text(errors="replace").count("neither notify-send nor osascript")
    assert said == 1, h.log_text()

"""A daemon at rest renews itself (daemon/renewal.py, docs/idle.md): having
run jobs and let its keeper go, it execs a fresh process that takes over its
pid, socket and lock, and loads only what the idle loop needs: no CLI, no
schedules' parser (cronsim, zoneinfo) while there is no schedule, no shutil
(bz2, lzma), no request family the idle loop never runs (edits, schedules,
outbox, timeline, the streamed listing). Every request family still works
the first time it is asked after the rest, through the real daemon; a
second daemon is still refused. On main the daemon keeps every module it
ever loaded (the CLI's among them), so the module check fails there."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.harness import TEST_CONFIG, alive

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="renews only where /proc says RSS")

PROBE = Path(__file__).resolve().parents[1] / "support" / "modules_probe"
NOT_AT_REST = ("sloth_daemon.cli", "sloth_daemon.cli.commands", "sloth_daemon.cli.fast", "cronsim", "zoneinfo",
               "calendar", "shutil", "bz2", "lzma",  # and the request families loaded at their first request:
               "sloth_daemon.daemon.edit_ops", "sloth_daemon.daemon.schedules.ops", "sloth_daemon.daemon.telling.ops",
               "sloth_daemon.backends.timeline", "sloth_daemon.daemon.listing_stream",
               # the keeper's client: no keeper at rest, the next job connects one
               "sloth_daemon.daemon.keeper_client", "sloth_daemon.daemon.keeper_hello", "sloth_daemon.keeper.wire")


def probed(h, pid: int) -> dict:
    """What the daemon says of itself through the probe: its modules, its -O level."""
    out = h.home / "modules.txt"
    out.unlink(missing_ok=True)
    os.kill(pid, signal.SIGUSR2)
    h.wait_for(out.exists, timeout_s=10, what="the daemon's module list")
    return json.loads(out.read_text())


def modules(h, pid: int) -> set[str]:
    return set(probed(h, pid)["modules"])


def renewed(h) -> int:
    return h.daemon_log.read_text(errors="replace").count("renewed at rest")


def rest_until(h, decided, *, poll_s: float = 0.05) -> None:
    """Run a job and let the daemon come to rest until ``decided()``: a rest
    met with a client still connected (a `wait` slow to exit, the machine
    loaded) is no moment to renew, and nothing is logged then."""
    for _ in range(5):
        ids = h.add_many([{"command": ["true"]}])
        h.cli("wait", *map(str, ids), check=True)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            if decided():
                return
            time.sleep(poll_s)
    raise AssertionError(f"not decided:\n{h.log_text()}")


def run_until_renewing(h) -> None:
    """Run jobs until the daemon has decided to renew itself (its log says so); return at once."""
    rest_until(h, lambda: "renewing the process" in h.daemon_log.read_text(errors="replace"), poll_s=0.002)


def test_at_rest_the_daemon_renews_itself_lean_and_every_family_works_the_first_time(make_harness):
    h = make_harness(TEST_CONFIG + 'keeper_linger_s = "200ms"\n')
    h.daemon_env.update({"PYTHONPATH": str(PROBE), "SLOTH_TEST_MODULES_OUT": str(h.home / "modules.txt"),
                         "SLOTH_RENEW_GROWTH_KB": "0"})  # renew at every rest: the growth is the benchmark's
    daemon = h.start()
    started_at = h.call("status")["started_at"]
    assert "sloth_daemon.cli.commands" in modules(h, daemon.pid)  # `sloth daemon run` came through the CLI
    ids = h.add_many([{"command": ["true"]} for _ in range(20)])
    h.cli("wait", *map(str, ids), check=True)
    h.wait_for(lambda: renewed(h) >= 1, timeout_s=20, what="the daemon renewed at rest")
    h.wait_ready(daemon)

    st = h.call("status")
    assert alive(daemon.pid) and daemon.poll() is None and st["pid"] == daemon.pid  # the same process
    assert st["started_at"] == started_at and st["keeper"]["pid"] is None
    loaded = modules(h, daemon.pid)
    assert "sloth_daemon.daemon.main" in loaded and not loaded & set(NOT_AT_REST), sorted(loaded & set(NOT_AT_REST))

    # a second daemon is refused: the lock was handed over, not dropped
    second = subprocess.run([sys.executable, "-m", "sloth_daemon", "daemon", "run"], env=h.env, capture_output=True,
                            text=True, timeout=30)
    assert second.returncode == 6 and "already running" in second.stderr, second.stderr

    # every family, first time after the rest
    assert h.call("ping")
    h.cli("schedule", "add", "nightly", "--cron", "0 3 * * *", "--tz", "Europe/Berlin", "--", "true", check=True)
    assert [s["name"] for s in h.call("schedule_ls")["schedules"]] == ["nightly"]
    assert len(h.call("list", limit=100)["jobs"]) == 20
    job = h.add_many([{"command": ["true"], "not_before": time.time() + 3600}])[0]
    h.cli("hold", str(job), check=True)
    h.cli("edit", str(job), "--priority", "5", check=True)
    h.cli("release", str(job), check=True)
    h.cli("cancel", str(job), check=True)
    assert "messages" in h.call("outbox")
    h.cli("metrics", check=True)
    h.cli("timeline", check=True)
    assert isinstance(h.call("lanes"), dict)
    after = h.add_many([{"command": ["sh", "-c", "echo after-rest"]}])[0]  # the next job starts a keeper
    h.cli("wait", str(after), check=True)
    assert h.job(after)["state"] == "done"
    assert "after-rest" in h.cli("logs", str(after), check=True).stdout

    # renewed again with a schedule: it is armed from its stored next slot (the parser loads when it fires)
    h.wait_for(lambda: renewed(h) >= 2, timeout_s=20, what="the second renewal")
    h.wait_ready(daemon)
    assert h.call("status")["pid"] == daemon.pid
    assert h.call("schedule_show", name="nightly")["schedule"]["next_slot"] is not None
    h.cli("daemon", "stop", check=True)
    assert daemon.wait(20) == 0
    assert not (h.home / "run" / "sloth.sock").exists()  # its own socket: removed at the stop, as before


def test_where_its_compiled_files_can_be_kept_the_renewed_daemon_runs_without_docstrings(make_harness):
    """-OO (renewal.optimized): the docstrings of every module left out, ~1 MB
    at rest (docs/idle.md). Its .opt-2.pyc files are written where the first
    renewal finds them missing (here a PYTHONPYCACHEPREFIX of the test's own);
    the flag is carried to every later renewal, never doubled, and the
    renewed daemon starts a keeper and runs jobs as before. On main the
    renewed daemon runs at -O level 0, so this fails there."""
    h = make_harness(TEST_CONFIG + 'keeper_linger_s = "200ms"\n')
    h.daemon_env.pop("PYTHONDONTWRITEBYTECODE", None)
    h.daemon_env.update({"PYTHONPATH": str(PROBE), "SLOTH_TEST_MODULES_OUT": str(h.home / "modules.txt"),
                         "SLOTH_RENEW_GROWTH_KB": "0", "PYTHONPYCACHEPREFIX": str(h.home / "pyc")})
    daemon = h.start()
    assert probed(h, daemon.pid)["optimize"] == 0  # `sloth daemon run` as the user typed it
    for renewals in (1, 2):
        ids = h.add_many([{"command": ["sh", "-c", f"echo run-{renewals}"]}])
        h.cli("wait", *map(str, ids), check=True)
        assert f"run-{renewals}" in h.cli("logs", str(ids[0]), check=True).stdout
        h.wait_for(lambda: renewed(h) >= renewals, timeout_s=20, what=f"renewal {renewals}")
        h.wait_ready(daemon)
        assert h.call("status")["pid"] == daemon.pid
        seen = probed(h, daemon.pid)
        assert seen["optimize"] == 2 and not set(seen["modules"]) & set(NOT_AT_REST), seen["optimize"]
        argv = Path(f"/proc/{daemon.pid}/cmdline").read_bytes().split(b"\0")
        assert argv.count(b"-OO") == 1 and b"-O" not in argv, argv
    assert list((h.home / "pyc").rglob("main.cpython-*.opt-2.pyc"))  # kept for the next renewal


def test_requests_at_random_moments_around_the_renewal_are_all_answered_and_every_job_runs_once(make_harness):
    """The renewal's window (accepting stopped, the queue closed, the exec,
    the new process starting) is hit by clients on purpose: each is answered
    by one process or the other, each job runs once, first try."""
    h = make_harness(TEST_CONFIG + 'keeper_linger_s = "100ms"\n')
    h.daemon_env["SLOTH_RENEW_GROWTH_KB"] = "0"
    daemon = h.start()
    rng = random.Random(3434)
    ids: list[int] = []
    for _ in range(8):
        ids += h.add_many([{"command": ["true"]}])
        h.cli("wait", str(ids[-1]), check=True)
        time.sleep(rng.uniform(0.05, 0.6))  # the keeper goes ~0.1 s after the end; then the renewal
        assert h.call("ping") and h.call("status")["pid"] == daemon.pid
    h.cli("wait", *map(str, ids), check=True)
    assert renewed(h) >= 2, h.log_text()  # the window was really crossed
    for jid in ids:
        job = h.job(jid)
        assert job["state"] == "done" and job["attempts"] == 1, job
    assert daemon.poll() is None


def test_kill_9_at_a_random_moment_of_the_renewal_loses_nothing(make_harness):
    """The renewal is a restart: a kill -9 anywhere in it (accepting
    stopped, the queue closing, the exec, the new start) leaves the lock
    free and the queue whole: the next command starts a daemon, every job
    queued is run once."""
    rng = random.Random(3435)
    for round_ in range(3):
        h = make_harness(TEST_CONFIG + 'keeper_linger_s = "100ms"\n', name=f"h{round_}")
        h.daemon_env["SLOTH_RENEW_GROWTH_KB"] = "0"
        daemon = h.start()
        done = h.add_many([{"command": ["true"]}])
        h.cli("wait", *map(str, done), check=True)
        later = h.add_many([{"command": ["true"], "not_before": time.time() + 4}])  # queued through the kill
        time.sleep(rng.uniform(0.1, 0.9))  # around the keeper's let-go and the renewal
        daemon.kill()
        daemon.wait(10)
        h.cli("add", "--", "true", check=True)  # starts the next daemon: the lock is free
        h.cli("wait", *map(str, later), check=True, timeout_s=60)
        for jid in [*done, *later]:
            job = h.job(jid)
            assert job["state"] == "done" and job["attempts"] == 1, job



@pytest.mark.parametrize("sig", [signal.SIGHUP, signal.SIGTERM])
def test_a_signal_sent_during_the_renewal_is_handled_by_the_new_process(make_harness, sig):
    """From the moment the renewal is decided the stop and reload signals
    are blocked, across the exec, until the new daemon's handlers are in
    place: a SIGHUP is a reload of the new daemon (not a failed reload on
    the old one's closed queue, nor SIGHUP's default end of the process), a
    SIGTERM stops it (not lost on the old one's drain). A SIGTERM the old
    one hears (through a thread of its own: renewal.HeldSignals) ends it
    instead of the exec: stopped either way."""
    h = make_harness(TEST_CONFIG + 'keeper_linger_s = "100ms"\n')
    h.daemon_env["SLOTH_RENEW_GROWTH_KB"] = "0"
    daemon = h.start()
    run_until_renewing(h)
    daemon.send_signal(sig)  # the old one draining, the exec, or the new one starting
    if sig == signal.SIGTERM:
        assert daemon.wait(30) == 0
        log = h.log_text()
        assert ((renewed(h) == 1 and "stopping (keeping running jobs): signal SIGTERM" in log)
                or (renewed(h) == 0 and "stopped instead of renewing: SIGTERM" in log)), log
        assert not h.socket.exists()
        return
    h.wait_for(lambda: renewed(h) >= 1, timeout_s=20, what="the renewed daemon")
    h.wait_for(lambda: "reloaded" in h.daemon_log.read_text(errors="replace"), timeout_s=20, what="the reload")
    assert daemon.poll() is None and h.call("ping") and "Traceback" not in h.log_text()

"""The keeper as the user sees it (issue 20 items 16 and 17): `sloth daemon
status` shows it (pid, version, runs held) or why there is none; a keeper
of another protocol version is named, with both versions and what to do,
never a raw, cut-off frame."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from sloth_daemon import __version__
from sloth_daemon.keeper.wire import VERSION
from tests.support.fake_keeper import PROTOCOL
from tests.support.harness import alive

assert PROTOCOL != VERSION


@pytest.fixture
def fake_keeper(harness):
    """Start a v2 keeper on the harness's folder: fake_keeper(wait=...)."""
    started: list[subprocess.Popen[str]] = []

    def start(*, wait: bool = False) -> subprocess.Popen[str]:
        p = subprocess.Popen([sys.executable, "-m", "tests.support.fake_keeper", str(harness.home),
                              str(harness.home / "run"), *(["--wait"] if wait else [])],
                             stdout=subprocess.PIPE, text=True, env=harness.env,
                             cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
        started.append(p)
        return p

    yield start
    for p in started:
        p.kill()
        p.wait(10)


def ready(p: subprocess.Popen[str]) -> None:
    assert p.stdout is not None and p.stdout.readline().strip() == "ready"


def test_status_shows_the_keeper_its_version_and_the_runs_it_holds(harness):
    harness.start()
    jid = harness.add("sleep", "30")
    harness.wait_state(jid, "running")
    out = harness.cli("daemon", "status", check=True).stdout
    keeper = harness.keeper_pid()
    assert f"keeper: pid {keeper}, version {__version__} (protocol v{VERSION}), 1 run(s) held" in " ".join(out.split()), out
    assert f"jobs_log_dir: {harness.home}" in out, out  # a space after every name, the longest too


def test_daemon_start_names_a_keeper_of_another_version_and_what_to_do(harness, fake_keeper):
    fake = fake_keeper()
    ready(fake)
    p = harness.cli("daemon", "start")
    assert p.returncode != 0
    err = p.stderr
    assert f"the keeper (pid {fake.pid}) speaks keeper protocol v{PROTOCOL}, this sloth speaks v{VERSION}" in err, err
    assert "still running the 2 job(s) it holds" in err, err
    assert "Wait for its jobs to end" in err and f"`kill {fake.pid}`" in err, err
    assert "ValueError" not in err and "b'" not in err, err
    assert alive(fake.pid)  # left alone: it holds another sloth's jobs
    add = harness.cli("add", "--", "true")
    assert add.returncode != 0 and "nothing was queued" in add.stderr, add.stderr


def test_a_keeper_of_another_version_met_on_reconnect_shows_in_status(harness, fake_keeper):
    harness.start()
    ours = harness.keeper_pid()
    # The daemon is held still while its keeper dies and the other one takes
    # the lock, so that it cannot start a keeper of its own in between.
    assert harness.daemon is not None
    os.kill(harness.daemon.pid, signal.SIGSTOP)
    try:
        fake = fake_keeper(wait=True)  # takes the lock the moment our keeper lets go of it
        os.kill(ours, signal.SIGKILL)
        ready(fake)
    finally:
        os.kill(harness.daemon.pid, signal.SIGCONT)
    harness.wait_for(lambda: harness.call("status")["keeper"]["problem"] is not None, timeout_s=10,
                     what="the daemon to meet the other keeper")
    out = harness.cli("daemon", "status", check=True).stdout
    assert (f"keeper: NONE CONNECTED: the keeper (pid {fake.pid}) speaks keeper protocol v{PROTOCOL}, "
            f"this sloth speaks v{VERSION}") in " ".join(out.split()), out

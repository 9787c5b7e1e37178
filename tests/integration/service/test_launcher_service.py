"""`sloth add` with no daemon running starts it through the installed login
service (so it lives in its unit), with a recording systemctl on PATH that
really starts the daemon, as systemd would."""

import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import psutil
import pytest

from tests.support.harness import processes_with_env

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="systemd flavour")

FAKE_SYSTEMCTL = """#!/bin/sh
echo "$@" >> "{calls}"
if [ "$*" = "--user start sloth.service" ]; then
    setsid "{python}" -m sloth_daemon daemon run >> "{log}" 2>&1 < /dev/null &
    echo $! > "{pidfile}"
fi
exit 0
"""


@pytest.fixture
def world():
    root = Path(tempfile.mkdtemp(prefix="sls-"))
    bin_dir = root / "bin"
    bin_dir.mkdir()
    (root / "run").mkdir(mode=0o700)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLOTH_", "XDG_"))}
    env.update(HOME=str(root), XDG_CONFIG_HOME=str(root / "config"), XDG_DATA_HOME=str(root / "data"),
               XDG_STATE_HOME=str(root / "state"), XDG_RUNTIME_DIR=str(root / "run"),
               PATH=f"{bin_dir}:{env.get('PATH', '/usr/bin:/bin')}", NO_COLOR="1")
    fake = bin_dir / "systemctl"
    fake.write_text(FAKE_SYSTEMCTL.format(calls=root / "calls", python=sys.executable,
                                          log=root / "daemon.log", pidfile=root / "daemon.pid"))
    fake.chmod(0o755)
    yield root, env
    pidfile = root / "daemon.pid"
    if pidfile.exists():
        try:
            p = psutil.Process(int(pidfile.read_text()))
            p.send_signal(signal.SIGTERM)
            p.wait(20)
        except (psutil.Error, ValueError):
            pass
    for p in processes_with_env("HOME", str(root)):
        try:
            p.kill()
        except psutil.Error:
            pass


def install_unit(root: Path, text: str) -> None:
    unit = root / "config" / "systemd" / "user" / "sloth.service"
    unit.parent.mkdir(parents=True)
    unit.write_text(text)


def sloth(env, *args):
    return subprocess.run([sys.executable, "-m", "sloth_daemon", *args], env=env,
                          capture_output=True, text=True, timeout=60)


def test_add_starts_the_daemon_through_the_installed_unit(world):
    root, env = world
    install_unit(root, "[Service]\nExecStart=/x/sloth daemon run\n")
    p = sloth(env, "add", "--json", "--", "true")
    assert p.returncode == 0, p.stderr + (root / "daemon.log").read_text(errors="replace")
    assert "started the daemon" in p.stderr
    assert (root / "calls").read_text().splitlines() == ["--user start sloth.service"]
    st = json.loads(sloth(env, "daemon", "status", "--json").stdout)
    assert st["pid"] == int((root / "daemon.pid").read_text())  # the unit's daemon serves us
    assert st["paths"]["db"] == str(root / "data" / "sloth" / "queue.db")


def test_a_unit_for_another_queue_is_not_used(world):
    root, env = world
    install_unit(root, "[Service]\nEnvironment=SLOTH_HOME=/elsewhere\nExecStart=/x/sloth daemon run\n")
    p = sloth(env, "add", "--json", "--", "true")
    assert p.returncode == 0, p.stderr
    assert not (root / "calls").exists()  # spawned directly instead
    st = json.loads(sloth(env, "daemon", "status", "--json").stdout)
    (root / "daemon.pid").write_text(str(st["pid"]))  # for the fixture's teardown

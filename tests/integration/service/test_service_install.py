"""`sloth service install|uninstall|status` through the real CLI (subprocesses),
with systemctl, loginctl and launchctl replaced by recording fakes on PATH."""

from __future__ import annotations

import json
import os
import plistlib
import pwd
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.harness import sandbox_env

SLOTH = Path(sys.executable).with_name("sloth")
USER = pwd.getpwuid(os.getuid()).pw_name
UID = os.getuid()
pytestmark = pytest.mark.skipif(not SLOTH.is_file(), reason="no sloth console script beside python")

FAKE_SYSTEMCTL = r"""#!/bin/sh
echo "systemctl $*" >> "$FAKE_LOG"
if [ -n "$FAKE_FAIL" ] && [ "$*" = "$FAKE_FAIL" ]; then
  echo "Failed to connect to bus: No medium found" >&2; exit 1
fi
case "$*" in
  "--user daemon-reload") exit 0 ;;
  "--user enable --now sloth.socket") touch "$FAKE_STATE/socket"; exit 0 ;;
  "--user enable sloth.socket") exit 0 ;;
  "--user disable --now sloth.socket") rm -f "$FAKE_STATE/socket"; exit 0 ;;
  "--user enable --now sloth.service") touch "$FAKE_STATE/enabled" "$FAKE_STATE/active"; exit 0 ;;
  "--user enable sloth.service") touch "$FAKE_STATE/enabled"; exit 0 ;;
  "--user disable --now sloth.service") rm -f "$FAKE_STATE/enabled" "$FAKE_STATE/active"; exit 0 ;;
  "--user is-enabled sloth.service")
    if [ -e "$FAKE_STATE/enabled" ]; then echo enabled; exit 0; fi; echo disabled; exit 1 ;;
  "--user is-active sloth.service")
    if [ -e "$FAKE_STATE/active" ]; then echo active; exit 0; fi; echo inactive; exit 3 ;;
esac
echo "fake systemctl: unexpected: $*" >&2; exit 64
"""

FAKE_LOGINCTL = r"""#!/bin/sh
echo "loginctl $*" >> "$FAKE_LOG"
echo "Linger=${FAKE_LINGER:-no}"
"""

FAKE_LAUNCHCTL = r"""#!/bin/sh
echo "launchctl $*" >> "$FAKE_LOG"
case "$1" in
  print)
    if [ -e "$FAKE_STATE/loaded" ]; then printf '%s = {\n\tstate = running\n\tpid = 4242\n}\n' "$2"; exit 0; fi
    echo "Could not find service \"$2\" in domain" >&2; exit 113 ;;
  bootstrap)
    if [ -e "$FAKE_STATE/loaded" ]; then echo "Bootstrap failed: 5: Input/output error" >&2; exit 5; fi
    [ -f "$3" ] || { echo "no such file $3" >&2; exit 2; }
    touch "$FAKE_STATE/loaded"; exit 0 ;;
  bootout)
    if [ -e "$FAKE_STATE/loaded" ]; then rm -f "$FAKE_STATE/loaded"; exit 0; fi
    echo "Boot-out failed: 3: No such process" >&2; exit 3 ;;
  enable|kickstart) exit 0 ;;
esac
echo "fake launchctl: unexpected: $*" >&2; exit 64
"""


@dataclass
class Sandbox:
    root: Path
    env: dict[str, str]

    @property
    def log(self) -> Path:
        return Path(self.env["FAKE_LOG"])

    def calls(self) -> list[str]:
        """The fake commands run since the last call (then forgets them)."""
        if not self.log.exists():
            return []
        lines = self.log.read_text().splitlines()
        self.log.unlink()
        return lines

    def sloth(self, *args: str, ok: bool = True, **env: str) -> subprocess.CompletedProcess[str]:
        cp = subprocess.run([str(SLOTH), *args], capture_output=True, text=True, timeout=30,
                            env={**self.env, **env}, cwd=self.root)
        if ok:
            assert cp.returncode == 0, cp.stdout + cp.stderr
        return cp

    def sloth_json(self, *args: str, **env: str) -> dict:
        return json.loads(self.sloth(*args, "--json", **env).stdout)


@pytest.fixture
def box(tmp_path: Path) -> Sandbox:
    state = tmp_path / "state"
    state.mkdir()
    env = sandbox_env(tmp_path, {"systemctl": FAKE_SYSTEMCTL, "loginctl": FAKE_LOGINCTL,
                                 "launchctl": FAKE_LAUNCHCTL})
    env.update(FAKE_LOG=str(tmp_path / "calls.log"), FAKE_STATE=str(state))
    return Sandbox(tmp_path, env)


def unit_file(box: Sandbox) -> Path:
    return box.root / "cfg" / "systemd" / "user" / "sloth.service"


def plist_file(box: Sandbox) -> Path:
    return box.root / "home" / "Library" / "LaunchAgents" / "io.slothqueue.sloth.plist"


LINGER = f"loginctl show-user {USER} --property=Linger"


# ------------------------------------------------------------------ systemd
def test_print_shows_the_unit_and_writes_nothing(box):
    cp = box.sloth("service", "install", "--print")
    assert f"ExecStart={SLOTH} daemon run" in cp.stdout
    assert f"Environment=SLOTH_HOME={box.root / 'sl'}" in cp.stdout
    assert not unit_file(box).exists()
    assert not (box.root / "cfg").exists()
    assert box.calls() == []
    d = box.sloth_json("service", "install", "--print")
    assert d["path"] == str(unit_file(box)) and d["content"] == cp.stdout
    assert box.calls() == []


def test_install_now_then_again_then_changed_then_uninstall(box):
    cp = box.sloth("service", "install", "--now")
    unit = unit_file(box)
    assert unit.read_text() == box.sloth("service", "install", "--print").stdout
    socket = unit.with_name("sloth.socket")
    assert f"ListenStream={box.root / 'sl' / 'run' / 'sloth.sock'}" in socket.read_text()
    assert box.calls() == [
        "systemctl --user daemon-reload",
        "systemctl --user enable --now sloth.socket",
        "systemctl --user enable --now sloth.service",
        LINGER,
    ]
    assert cp.stdout.splitlines()[:6] == [
        f"wrote {unit}",
        f"wrote {socket}",
        "ran: systemctl --user daemon-reload",
        "ran: systemctl --user enable --now sloth.socket",
        "ran: systemctl --user enable --now sloth.service",
        f"sloth service installed: systemd --user, {unit}",
    ]
    assert f"note: SLOTH_HOME={box.root / 'sl'} is baked into the unit" in cp.stdout
    assert f"loginctl enable-linger {USER}" in cp.stderr  # the fake says Linger=no

    # Same content: nothing rewritten, no daemon-reload, but still enabled.
    mtime = unit.stat().st_mtime_ns
    cp = box.sloth("service", "install", "--now", FAKE_LINGER="yes")
    assert "already installed, unchanged" in cp.stdout
    assert "wrote" not in cp.stdout
    assert unit.stat().st_mtime_ns == mtime
    assert box.calls() == ["systemctl --user enable --now sloth.socket", "systemctl --user enable --now sloth.service",
                           LINGER]
    assert "linger" not in cp.stderr

    # Changed content (another SLOTH_HOME): rewritten and daemon-reloaded.
    other = box.root / "other"
    d = box.sloth_json("service", "install", SLOTH_HOME=str(other), FAKE_LINGER="yes")
    assert d["state"] == "updated"
    assert d["written"] == [str(unit), str(socket)]
    assert d["commands"] == [["systemctl", "--user", "daemon-reload"], ["systemctl", "--user", "enable", "sloth.socket"],
                             ["systemctl", "--user", "enable", "sloth.service"]]
    assert d["warnings"] == []
    assert f"Environment=SLOTH_HOME={other}" in unit.read_text()
    assert f"ListenStream={other / 'run' / 'sloth.sock'}" in socket.read_text()
    assert box.calls() == ["systemctl --user daemon-reload", "systemctl --user enable sloth.socket",
                           "systemctl --user enable sloth.service", LINGER]

    cp = box.sloth("service", "uninstall")
    assert not unit.exists() and not socket.exists()
    assert box.calls() == ["systemctl --user disable --now sloth.socket", "systemctl --user disable --now sloth.service",
                           "systemctl --user daemon-reload"]
    assert cp.stdout.splitlines() == [
        f"removed {unit}",
        f"removed {socket}",
        "ran: systemctl --user disable --now sloth.socket",
        "ran: systemctl --user disable --now sloth.service",
        "ran: systemctl --user daemon-reload",
        "sloth service removed: systemd --user",
    ]
    cp = box.sloth("service", "uninstall")
    assert "not installed" in cp.stdout
    assert box.calls() == []
    assert box.sloth_json("service", "uninstall")["state"] == "not installed"


def test_uninstall_of_an_install_without_the_socket_unit_removes_the_service(box):
    """An install from before sloth.socket: uninstall does not ask systemd about a socket it never had."""
    box.sloth("service", "install")
    unit_file(box).with_name("sloth.socket").unlink()
    box.calls()
    d = box.sloth_json("service", "uninstall")
    assert d["state"] == "removed" and d["removed"] == [str(unit_file(box))]
    assert box.calls() == ["systemctl --user disable --now sloth.service", "systemctl --user daemon-reload"]


def test_install_without_now_only_enables(box):
    d = box.sloth_json("service", "install", FAKE_LINGER="yes")
    assert d["state"] == "installed"
    assert d["commands"] == [["systemctl", "--user", "daemon-reload"], ["systemctl", "--user", "enable", "sloth.socket"],
                             ["systemctl", "--user", "enable", "sloth.service"]]
    assert any("systemctl --user start sloth.service" in n for n in d["notes"])
    assert d["warnings"] == []


def test_linger_warning_only_when_linger_is_off(box):
    off = box.sloth("service", "install", FAKE_LINGER="no")
    assert f"warning: linger is off for {USER}" in off.stderr
    assert f"loginctl enable-linger {USER}" in off.stderr
    on = box.sloth("service", "install", FAKE_LINGER="yes")
    assert on.stderr == ""


def test_status_reports_file_enabled_active_binary_and_linger(box):
    d = box.sloth_json("service", "status")
    assert d["installed"] is False and d["enabled"] is None
    assert box.calls() == [LINGER]
    box.sloth("service", "install", "--now")
    box.calls()
    d = box.sloth_json("service", "status", FAKE_LINGER="yes")
    assert d == {
        "platform": "linux", "manager": "systemd --user", "path": str(unit_file(box)), "installed": True,
        "enabled": "enabled", "active": "active", "binary": str(SLOTH), "binary_exists": True,
        "current": True, "linger": "yes",
    }
    assert box.calls() == ["systemctl --user is-enabled sloth.service", "systemctl --user is-active sloth.service",
                           LINGER]
    text = box.sloth("service", "status").stdout
    assert "enabled:   enabled" in text and "active:    active" in text
    assert f"binary:    {SLOTH} (exists)" in text


def test_status_notices_a_binary_that_is_gone(box):
    box.sloth("service", "install")
    unit = unit_file(box)
    unit.write_text(unit.read_text().replace(str(SLOTH), "/nonexistent/venv/bin/sloth"))
    d = box.sloth_json("service", "status")
    assert d["binary"] == "/nonexistent/venv/bin/sloth"
    assert d["binary_exists"] is False and d["current"] is False
    assert "(MISSING)" in box.sloth("service", "status").stdout


def test_missing_systemctl_is_a_clear_error_and_writes_nothing(box, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    cp = box.sloth("service", "install", ok=False, PATH=str(empty))
    assert cp.returncode == 1
    assert "sloth: error: systemctl not found on PATH" in cp.stderr
    assert "hint: " in cp.stderr and "sloth daemon start" in cp.stderr
    assert not unit_file(box).exists()


def test_failing_systemctl_names_the_command_and_hints(box):
    cp = box.sloth("service", "install", "--now", ok=False, FAKE_FAIL="--user enable --now sloth.service")
    assert cp.returncode == 1
    assert ("sloth: error: `systemctl --user enable --now sloth.service` failed (exit 1): "
            "Failed to connect to bus: No medium found") in cp.stderr
    assert "hint: No user session bus" in cp.stderr


NO_BUS_SYSTEMCTL = r"""#!/bin/sh
echo "systemctl $*" >> "$FAKE_LOG"
echo "Failed to connect to bus: No medium found" >&2; exit 1
"""


def test_a_failed_install_now_leaves_nothing_behind_and_doctor_tells_the_truth(tmp_path):
    """Issue 22, item 7: no user bus (su, a container): `service install --now`
    fails, and the unit file it wrote goes again; `doctor` then advises what
    works here (`sloth daemon start`), not the command that just failed."""
    env = sandbox_env(tmp_path, {"systemctl": NO_BUS_SYSTEMCTL, "loginctl": FAKE_LOGINCTL})
    env.update(FAKE_LOG=str(tmp_path / "calls.log"))
    run = lambda *a: subprocess.run([str(SLOTH), *a], capture_output=True, text=True, timeout=60,  # noqa: E731
                                    env=env, cwd=tmp_path)
    cp = run("service", "install", "--now")
    assert cp.returncode == 1 and "Failed to connect to bus" in cp.stderr
    unit = tmp_path / "cfg" / "systemd" / "user" / "sloth.service"
    assert not unit.exists() and "nothing was left behind" in cp.stderr, cp.stderr
    assert not list((tmp_path / "cfg").rglob("*.service")) and not list((tmp_path / "cfg").rglob("*.socket"))
    doc = json.loads(run("doctor", "--json").stdout)
    fixes = {c["name"]: c["hint"] for c in doc["checks"]}
    assert "sloth daemon start" in fixes["service"] and "no systemd user manager" in \
        next(c["detail"] for c in doc["checks"] if c["name"] == "service")
    assert not any("sloth service install --now" in h and not h.startswith("sloth daemon start")
                   for h in fixes.values()), fixes
    assert "sloth daemon start" in fixes["daemon"] and "service install" not in fixes["daemon"]


def test_an_install_that_fails_puts_a_changed_unit_back(box):
    box.sloth("service", "install")
    unit = unit_file(box)
    before = unit.read_text()
    unit.write_text(before + "# edited by hand\n")
    cp = box.sloth("service", "install", "--now", ok=False, FAKE_FAIL="--user daemon-reload")
    assert cp.returncode == 1 and "was put back as it was" in cp.stderr
    assert unit.read_text() == before + "# edited by hand\n"


# ------------------------------------------------------------------ launchd
def test_launchd_install_idempotent_update_and_uninstall(box):
    mac = {"SLOTH_SERVICE_PLATFORM": "macos"}
    svc, dom = f"gui/{UID}/io.slothqueue.sloth", f"gui/{UID}"
    plist = plist_file(box)

    printed = box.sloth("service", "install", "--print", **mac).stdout
    assert not plist.exists() and box.calls() == []
    assert plistlib.loads(printed.encode())["ProgramArguments"] == [str(SLOTH), "daemon", "run"]

    cp = box.sloth("service", "install", "--now", **mac)
    assert plist.read_text() == printed
    assert box.calls() == [
        f"launchctl print {svc}",
        f"launchctl enable {svc}",
        f"launchctl bootstrap {dom} {plist}",
        f"launchctl kickstart {svc}",
    ]
    assert cp.stdout.splitlines()[:5] == [
        f"wrote {plist}",
        f"ran: launchctl enable {svc}",
        f"ran: launchctl bootstrap {dom} {plist}",
        f"ran: launchctl kickstart {svc}",
        f"sloth service installed: launchd, {plist}",
    ]
    assert "linger" not in cp.stdout + cp.stderr
    assert (box.root / "sl" / "logs").is_dir()  # launchd will not create the log folder

    cp = box.sloth("service", "install", **mac)
    assert "already installed, unchanged" in cp.stdout
    assert box.calls() == [f"launchctl print {svc}", f"launchctl enable {svc}"]

    # Changed: boot out, wait until gone, boot in again.
    d = box.sloth_json("service", "install", "--platform", "macos", SLOTH_HOME=str(box.root / "other"))
    assert d["state"] == "updated"
    assert d["commands"] == [["launchctl", "bootout", svc], ["launchctl", "enable", svc],
                             ["launchctl", "bootstrap", dom, str(plist)]]
    assert box.calls() == [f"launchctl print {svc}", f"launchctl bootout {svc}", f"launchctl print {svc}",
                           f"launchctl enable {svc}", f"launchctl bootstrap {dom} {plist}"]
    assert plistlib.loads(plist.read_bytes())["EnvironmentVariables"]["SLOTH_HOME"] == str(box.root / "other")

    st = box.sloth_json("service", "status", **mac)
    assert st["installed"] and st["enabled"] == "loaded" and st["active"] == "active" and st["pid"] == "4242"
    assert st["binary"] == str(SLOTH) and st["binary_exists"] is True
    box.calls()

    cp = box.sloth("service", "uninstall", **mac)
    assert not plist.exists()
    assert box.calls() == [f"launchctl print {svc}", f"launchctl bootout {svc}", f"launchctl print {svc}"]
    assert f"ran: launchctl bootout {svc}" in cp.stdout
    assert "not installed" in box.sloth("service", "uninstall", **mac).stdout
    assert box.calls() == [f"launchctl print {svc}"]


def test_launchd_reloads_a_file_that_is_present_but_not_loaded(box):
    mac = {"SLOTH_SERVICE_PLATFORM": "macos"}
    svc = f"gui/{UID}/io.slothqueue.sloth"
    box.sloth("service", "install", **mac)
    (box.root / "state" / "loaded").unlink()  # e.g. booted out by hand
    box.calls()
    d = box.sloth_json("service", "install", **mac)
    assert d["state"] == "unchanged"
    assert d["commands"] == [["launchctl", "enable", svc], ["launchctl", "bootstrap", f"gui/{UID}", str(plist_file(box))]]

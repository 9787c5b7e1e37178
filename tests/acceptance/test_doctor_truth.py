"""What sloth says it holds, and doctor's advice, true for the state seen
(issue 28 "also seen", issue 30 sections 1 and 2), on the real daemon.

A notifier that fails is said once per cause, and by `sloth doctor`: on
main every failed job logged `notification exited 1: Cannot autolaunch
D-Bus ...` (407 lines in a 300 s soak) and `doctor` said `notify ok via
notify-send` all the while. A fake notify-send first on the daemon's PATH
fails as the real one does without a session bus (and records each call),
then is made to work.
"""

from __future__ import annotations

import json
import sys

import pytest

from tests.support.harness import TEST_CONFIG

pytestmark = pytest.mark.acceptance

CAUSE = "Cannot autolaunch D-Bus without X11 $DISPLAY"


def daemon_log(h) -> str:
    """All the daemon said (its stderr: daemon.log when the launcher starts it)."""
    return h.daemon_log.read_text(errors="replace")


def test_a_failing_notifier_is_said_once_per_cause_and_by_doctor(make_harness):
    h = make_harness(TEST_CONFIG + 'notify = ["failed"]\n')
    bin_dir, calls, mode = h.home / "bin", h.home / "notified.log", h.home / "notify-mode"
    bin_dir.mkdir()
    mode.write_text("fail")
    tool = bin_dir / "notify-send"
    tool.write_text(f"#!{sys.executable}\nimport sys\nopen({str(calls)!r}, 'a').write('x\\n')\n"
                    f"if open({str(mode)!r}).read() == 'fail':\n"
                    f"    print('Error spawning command line \\u201cdbus-launch\\u201d: {CAUSE}', file=sys.stderr)\n"
                    "    sys.exit(1)\n")
    tool.chmod(0o755)
    h.env["PATH"] = h.daemon_env["PATH"] = f"{bin_dir}:/usr/bin:/bin"
    h.start()
    ids = [h.add("false", max_attempts=1) for _ in range(4)]
    for job in ids:
        h.wait_state(job, "failed")
    h.wait_for(lambda: calls.exists() and len(calls.read_text().splitlines()) >= 4, what="four notices tried")
    h.wait_for(lambda: CAUSE in daemon_log(h), what="the cause in the daemon's log")
    said = [line for line in daemon_log(h).splitlines() if CAUSE in line]
    assert len(said) == 1, said

    doctor = h.cli("doctor", "--json")
    checks = {c["name"]: c for c in json.loads(doctor.stdout)["checks"]}
    notify = checks["notify"]
    assert notify["status"] == "warn" and CAUSE in notify["detail"] and "4" in notify["detail"], notify
    assert "notify = []" in notify["hint"], notify

    mode.write_text("ok")  # the session bus is there now: the next notice works, and doctor says so
    job = h.add("false", max_attempts=1)
    h.wait_state(job, "failed")
    h.wait_for(lambda: len(calls.read_text().splitlines()) >= 5, what="the fifth notice")
    h.wait_for(lambda: json.loads(h.cli("doctor", "--json").stdout)["checks"] and
               {c["name"]: c for c in json.loads(h.cli("doctor", "--json").stdout)["checks"]}["notify"]["status"]
               == "ok", what="doctor's notify ok again")


def files_check(h) -> dict[str, str]:
    doctor = h.cli("doctor", "--json")
    return {c["name"]: c for c in json.loads(doctor.stdout)["checks"]}["files"]


def test_doctors_advice_on_loose_folders_is_true_for_the_state_it_sees(harness):
    """Issue 30: a 0755 config folder while the daemon ran was met with "or
    just start the daemon" (it runs; it tightens its folders when it
    starts). Each piece of advice, followed, fixes what it was given for."""
    from sloth_daemon.paths import resolve

    h = harness
    folder = resolve({"SLOTH_HOME": str(h.home)}).config_dir
    folder.mkdir(parents=True, exist_ok=True)
    h.start()
    folder.chmod(0o755)
    c = files_check(h)
    assert c["status"] == "warn" and "0755" in c["detail"], c
    assert "just start" not in c["hint"] and "sloth daemon restart" in c["hint"], c
    h.stop()  # the advice followed: a restart (stop, start) tightens them
    c = files_check(h)
    assert "sloth daemon start" in c["hint"] and "restart" not in c["hint"], c  # not running now: start it
    h.start()
    assert files_check(h)["status"] == "ok"

"""A notifier that fails is said once per cause, and by `sloth doctor`
(issue 28, "also seen"; issue 30, section 2): on main every failed job
logged `notification exited 1: Cannot autolaunch D-Bus ...` (407 lines in
a 300 s soak) and `doctor` said `notify ok via notify-send` all the while.

The real daemon runs failing jobs with `notify = ["failed"]`; a fake
notify-send first on its PATH fails as the real one does without a session
bus (and records each call), then is made to work."""

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

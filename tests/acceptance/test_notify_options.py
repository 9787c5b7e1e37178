"""A job's command reaches notify-send as text, never as options (issue 20
item 10). The real daemon runs jobs named ``-u`` and ``--help`` (real
programs on PATH, so they succeed) and notifies through a recording
notify-send first on PATH. On 1d80a5b the command followed the options
with no ``--``: notify-send would have read ``-u critical ...`` as its
own urgency and ``--help`` as a request for its help, not the notice.
"""

from __future__ import annotations

import json
import sys

import pytest

from tests.support.harness import TEST_CONFIG

pytestmark = pytest.mark.acceptance


def test_a_command_that_looks_like_options_is_passed_after_the_end_of_options(make_harness):
    h = make_harness(TEST_CONFIG + 'notify = ["done", "failed"]\n')
    bin_dir, calls = h.home / "bin", h.home / "notified.jsonl"
    bin_dir.mkdir()
    (bin_dir / "notify-send").write_text(
        f"#!{sys.executable}\nimport json, sys\nopen({str(calls)!r}, 'a').write(json.dumps(sys.argv[1:]) + '\\n')\n")
    (bin_dir / "-u").write_text("#!/bin/sh\nexit 0\n")
    (bin_dir / "--help").write_text("#!/bin/sh\nexit 4\n")
    for f in bin_dir.iterdir():
        f.chmod(0o755)
    h.env["PATH"] = h.daemon_env["PATH"] = f"{bin_dir}:/usr/bin:/bin"
    h.start()
    done, failed = h.add("-u", "critical", "--icon=x"), h.add("--help", max_attempts=1)
    h.wait_state(done, "done")
    h.wait_state(failed, "failed")
    h.wait_for(lambda: calls.exists() and len(calls.read_text().splitlines()) >= 2, what="two notices")
    argvs = [json.loads(line) for line in calls.read_text().splitlines()]
    assert ["-a", "sloth", "-u", "normal", "--", f"sloth: job {done} done", "-u critical --icon=x"] in argvs
    [told] = [a for a in argvs if f"sloth: job {failed} failed" in a]
    assert told[:6] == ["-a", "sloth", "-u", "critical", "--", f"sloth: job {failed} failed"]
    assert told[6].endswith("\n--help"), told
    for argv in argvs:
        end = argv.index("--")  # every one has it, and only ours is before it
        assert argv[:end] in (["-a", "sloth", "-u", "normal"], ["-a", "sloth", "-u", "critical"]), argv
        assert len(argv) == end + 3 and argv[end + 1].startswith("sloth: "), argv

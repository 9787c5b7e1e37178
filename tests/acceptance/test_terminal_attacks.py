"""A hostile reviewer's attacks on the terminal rule (issue 28 item 13;
round 4, X1): the ways text reaches a terminal besides a command's own
lines -- a --debug traceback, the live line of `wait` while a hostile job
runs. On a real pseudo-terminal, through the real CLI and daemon."""

from __future__ import annotations

import pytest

from tests.acceptance.test_terminal_escapes import EVIL, OWN, RAW, on_terminal

pytestmark = pytest.mark.acceptance


def test_a_debug_traceback_shows_a_hostile_path_escaped(harness, home):
    """`--debug` prints the traceback of an error: the exception's words
    (a --cwd that is not a folder, named as given) were written raw."""
    code, out = on_terminal(harness, "--debug", "add", "--cwd", str(home / EVIL), "--", "true")
    assert code != 0 and "Traceback" in out and "not a folder" in out, out
    assert RAW.search(OWN.sub("", out)) is None, out


def test_the_live_line_of_wait_shows_a_hostile_running_job_escaped(harness):
    harness.start()
    jid = int(harness.cli("add", "--lane", EVIL, "--label", EVIL, "--", "sh", "-c", f"printf '{EVIL}'; sleep 2",
                          check=True).stdout)
    harness.wait_state(jid, "running")
    code, out = on_terminal(harness, "wait", str(jid))
    assert code == 0, out
    assert RAW.search(OWN.sub("", out)) is None, out

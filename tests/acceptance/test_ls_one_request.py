"""`sloth ls` asks the daemon once: the listing says what is paused
(Control.paused: ``paused`` in ``list``'s result and in ``scan``'s head), so
the lines under the table no longer cost a second connection and request
(``lanes``), a tenth of an `ls` (docs/benchmarks.md, "one add"). What
they say is unchanged, with a daemon or without; `ls --json` keeps its shape."""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.acceptance

LINES = (["ls"], ["ls", "--since", "12h"], ["ls", "--all"], ["ls", "-l", "video"])


def requests(h) -> int:
    return h.call("status")["server"]["requests"]


def test_each_listing_is_one_request_and_says_what_is_paused(harness):
    harness.start()
    harness.call("lane_set", lane="video", concurrency=1, create=True)
    harness.call("pause", lane="video")
    harness.cli("add", "-l", "video", "--", "true", check=True)
    for argv in LINES:
        before = requests(harness)
        out = harness.cli(*argv, check=True).stdout
        asked = 1 + ("-l" in argv)  # the listing (and for -l, first whether the lane exists: ls.check_lane)
        assert requests(harness) - before == asked + 1, argv  # ... and this status
        assert "paused lane: video; `sloth resume LANE` starts its jobs again" in out, (argv, out)
    harness.call("pause")
    for argv in LINES:
        out = harness.cli(*argv, check=True).stdout
        assert out.rstrip().endswith("paused: everything; nothing new starts until `sloth resume`"), (argv, out)
    for argv in (["ls", "--json", "-n", "5"], ["ls", "--json", "--since", "12h"], ["ls", "--json"]):
        assert "paused" not in json.loads(harness.cli(*argv, check=True).stdout), argv


def test_without_a_daemon_the_lines_are_the_same(harness):
    harness.start()
    harness.call("lane_set", lane="video", concurrency=1, create=True)
    harness.call("pause", lane="video")
    harness.cli("add", "-l", "video", "--", "true", check=True)
    online = {tuple(a): harness.cli(*a, check=True).stdout.splitlines()[-1] for a in LINES}
    harness.stop()
    for argv in LINES:
        assert harness.cli(*argv, check=True).stdout.splitlines()[-1] == online[tuple(argv)], argv

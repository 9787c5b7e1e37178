"""Issue 20, items 11 and 12: config.toml's numbers are bounded as the CLI's
are (one declaration, checks.BOUNDS), at start and at reload, and a bad
reload leaves the daemon's settings as they were; `sloth config` shows the
settings even when the queue_url's server is down, unreachable or not
migrated yet, and says so, within a couple of seconds.

The real CLI and daemon; for item 12 a real PostgreSQL server
(tests/support/pg.py) stopped, a loopback port nothing listens on, and a
database never migrated.
"""

from __future__ import annotations

import pytest

from tests.support.harness import TEST_CONFIG

pytestmark = pytest.mark.acceptance
HUGE = "99999999999999999999999"


# ---------------------------------------------------------------- item 11
@pytest.mark.parametrize("line, says", [
    (f"[lanes]\nbig = {HUGE}", f"lanes.big must be a whole number from 1 to 10000, got {HUGE}"),
    (f"max_attempts = {HUGE}", f"max_attempts must be a whole number from 1 to 9223372036854775807, got {HUGE}"),
    (f"log_cap_bytes = {HUGE}", "log_cap_bytes must be a whole number from 1024 to 9223372036854775807"),
    (f"default_concurrency = {HUGE}", "default_concurrency must be a whole number from 1 to 10000"),
])
def test_a_huge_number_in_config_is_refused_at_start_with_its_bounds(make_harness, line, says):
    h = make_harness(TEST_CONFIG + line + "\n")
    for args in (("config",), ("daemon", "start")):
        p = h.cli(*args, timeout_s=30)
        assert p.returncode != 0 and says in p.stderr, (args, p.stderr)
        assert "internal error" not in p.stderr and "Traceback" not in p.stderr, p.stderr
    assert not h.our_processes()


def test_a_reload_with_a_huge_number_is_refused_and_the_old_settings_stay(make_harness):
    h = make_harness(TEST_CONFIG + "[lanes]\nbig = 2\n")
    h.start()
    (h.home / "config.toml").write_text(TEST_CONFIG + f"max_attempts = 9\n[lanes]\nbig = {HUGE}\n")
    p = h.cli("daemon", "reload", timeout_s=30)
    assert p.returncode == 2 and f"lanes.big must be a whole number from 1 to 10000, got {HUGE}" in p.stderr, p.stderr
    lanes = h.cli_json("lane", "ls")["lanes"]
    assert lanes["big"]["concurrency"] == 2 and lanes["big"]["source"] == "config"
    assert h.call("config")["settings"]["max_attempts"]["value"] == 3  # none of the file's changes applied
    p = h.cli("lane", "set", "big", "-c", "5", check=True)  # was: internal error, Python int too large
    assert p.stdout.strip() == "lane big: concurrency 5 (was 2)"
    jid = h.add("true", lane="big")
    h.wait_state(jid, "done", timeout_s=20)


def test_a_lane_of_zero_in_config_is_refused_and_points_at_the_pause_that_lane_set_0_is(make_harness):
    h = make_harness(TEST_CONFIG + "[lanes]\ndefault = 0\n")
    p = h.cli("config")
    assert p.returncode == 2 and "lanes.default must be a whole number from 1 to 10000, got 0" in p.stderr
    assert "sloth pause default" in p.stderr and "lane set default -c 0" in p.stderr, p.stderr
    (h.home / "config.toml").write_text(TEST_CONFIG)
    h.start()
    assert h.cli("lane", "set", "default", "-c", "0", check=True).stdout.strip() == "lane default: concurrency 1, paused"
    lanes = h.cli_json("lane", "ls")
    assert lanes["lanes"]["default"]["concurrency"] == 1 and lanes["lanes"]["default"]["paused"]

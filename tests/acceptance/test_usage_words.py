"""What a person typing a command is told and what it does: `lane set
--create` starts a daemon like every command that needs one (issue 28,
item 17), and a mistyped option is offered only close matches (issue 30)."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.acceptance


def test_lane_set_create_starts_the_daemon_like_lane_set(harness):
    p = harness.cli("lane", "set", "build", "-c", "3", "--create")
    assert p.returncode == 0, p.stderr
    assert "started the daemon" in p.stderr, p.stderr
    assert p.stdout.strip() == "lane build: created; concurrency 3", p.stdout
    assert harness.call("lanes")["lanes"]["build"]["concurrency"] == 3
    again = harness.cli("lane", "set", "build", "-c", "2", "--create", check=True)
    assert again.stdout.strip() == "lane build: concurrency 2 (was 3)", again.stdout

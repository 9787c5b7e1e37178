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


@pytest.mark.parametrize("line, offered", [
    (["edit", "1", "--shell"], None),                               # was: (Possible options: --help)
    (["schedule", "add", "b", "--at", "9pm", "--", "true"], None),  # was: (Possible options: --lane, --tz)
    (["--verbos"], None),                                           # was: (Possible options: --version)
    (["stauts"], "status"),                                         # was: 'status', 'restart'
    (["add", "--prority", "3", "--", "true"], "--priority"),
    (["add", "--lable", "x", "--", "true"], "--label"),
    (["ls", "--stat", "queued"], "--state"),
    (["lnae", "ls"], "lane"),
    (["schedule", "ad"], "add"),
])
def test_a_mistyped_word_is_offered_only_a_close_match(harness, line, offered):
    p = harness.cli(*line)
    assert p.returncode == 2, p.stderr
    said = p.stderr.strip().splitlines()[-1]
    assert "Possible options" not in said, said
    if offered is None:
        assert "Did you mean" not in said, said
    else:
        assert said.endswith(f"Did you mean {offered}?"), said

"""A hint that shows a command with text a user chose in it (a lane name)
shows it quoted for the shell: pasted, it is that one word and runs
nothing else (issue 20, seen once: `sloth lane set x'); DROP TABLE jobs; -- -c N`)."""

from __future__ import annotations

import re
import shlex

LANE = "x'); DROP TABLE jobs; -- $(touch pwned) `id`"


def commands(text: str) -> list[list[str] | str]:
    """Every `...` command in ``text``, split as sh would split it (as
    found when sh could not: an unclosed quote)."""
    out: list[list[str] | str] = []
    for c in re.findall(r"`(sloth [^`]*(?:`[^`]*)*?)`(?: to change|\.)", text):
        try:
            out.append(shlex.split(c))
        except ValueError:
            out.append(c)
    return out


def test_the_new_lane_hint_of_add_quotes_the_lane(harness):
    harness.start()
    p = harness.cli("add", "--lane", LANE, "--", "true", check=True)
    assert ["sloth", "lane", "set", LANE, "-c", "N"] in commands(p.stderr), p.stderr


def test_the_hints_of_lane_set_and_lane_rm_quote_the_lane(harness):
    harness.start()
    p = harness.cli("lane", "set", LANE, "-c", "2")
    assert p.returncode != 0
    assert ["sloth", "lane", "set", LANE, "--concurrency", "N", "--create"] in commands(p.stderr), p.stderr
    harness.cli("add", "--lane", LANE, "--", "sleep", "30", check=True)
    p = harness.cli("lane", "rm", LANE)
    assert p.returncode != 0
    assert ["sloth", "cancel", "--lane", LANE] in commands(p.stderr), p.stderr

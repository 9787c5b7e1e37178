"""The plainest add (cli/fast_add.py) takes exactly the lines it may: its
reading of a line agrees with the fast path's reading from the declaration
(fast.read), and what it finds evident the queue's checks accept. The
acceptance tests (tests/acceptance/test_fast_cli.py) run plain lines
through it and through Typer against real daemons and compare."""

from __future__ import annotations

import os

from hypothesis import given, settings, strategies as st

from sloth_daemon.cli import fast, fast_add
from sloth_daemon.cli.commands import COMMANDS
from sloth_daemon.cli.submit import check

ADD = next(c for c in COMMANDS if c.path == ("add",))
DEFAULTS = {o.dest: o.default for o in ADD.options}
WORDS = ["--", "-w", "--wait", "--wait=1", "-", "-l", "video", "true", "echo", "--lane", "-ww", "-wl", "--json",
         "hi there", "", "-s", "--no-start", "x=1"]


def plain_reading(args: list[str]) -> tuple[list[str], bool] | None:
    """The line as fast.read reads it, if every option but --wait is left at its default."""
    values = fast.read(ADD, args)
    if values is None or not values["command"]:
        return None
    if any(v != DEFAULTS[k] for k, v in values.items() if k not in ("command", "wait")):
        return None
    return values["command"], values["wait"]


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(WORDS), max_size=6))
def test_the_plain_reading_is_the_declarations(args):
    assert fast_add.read(args) == plain_reading(args)


def test_plain_lines_and_others():
    assert fast_add.read(["--", "true"]) == (["true"], False)
    assert fast_add.read(["-w", "--", "sh", "-c", "x"]) == (["sh", "-c", "x"], True)
    assert fast_add.read(["echo", "--wait"]) == (["echo", "--wait"], False)  # add reads no option after its command
    for other in (["--lane", "x", "--", "true"], ["--json", "true"], ["-w"], ["--"], [], ["--wait=1", "true"]):
        assert fast_add.read(other) is None, other


TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=8) | st.sampled_from(
    ["a\x00b", "\udcff", "\ud800", "caf\u00e9", "", "A=B", "=x"])


@settings(max_examples=400, deadline=None)
@given(st.lists(TEXT, min_size=1, max_size=4), st.dictionaries(TEXT, TEXT, max_size=4))
def test_what_is_evident_the_checks_accept(words, env):
    if fast_add.evident(words, env):
        check([{"command": words, "shell": False}], {"cwd": "/tmp", "env": env}, where=lambda i: "")


def test_the_callers_own_line_and_environment_are_evident():
    assert fast_add.evident(["echo", "caf\u00e9", "\udcff"], dict(os.environ))
    assert not fast_add.evident(["a\x00b"], {})
    assert not fast_add.evident(["true"], {"": "x"})
    assert not fast_add.evident(["x" * (fast_add.PLAIN_BYTES // 6 + 1)], {})  # the full add splits or refuses


def test_shell_text_and_scripts_are_left_to_the_full_add(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for words in (["ls | wc -l"], ["FOO=1", "env"], ["~/bin/x"], ["sh", "-c", "echo 'x"], ["bash", "-lc", "true"]):
        assert fast_add.plain(["--", *words]) is None, words
    assert fast_add.plain(["--", "echo", "a | b"]) is not None  # an argument may hold anything


def test_a_folder_that_is_gone_is_left_to_the_full_add(tmp_path, monkeypatch):
    gone = tmp_path / "gone"
    gone.mkdir()
    monkeypatch.chdir(gone)
    gone.rmdir()
    assert fast_add.plain(["--", "true"]) is None  # add.caller_cwd says what is wrong

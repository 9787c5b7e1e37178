"""`sloth CMD --help` on the fast path (cli/fast_help.py) against Typer's
own page for the same command, in process: the same option names, the
same arguments in the usage line, and -- since both are laid out by the
same rules -- the same page, at a wide and a narrow terminal; and words
are never lost when the terminal is narrow.

That the real `sloth add --help` imports no Typer is checked with the
other command lines in tests/acceptance/test_fast_cli.py.
"""

from __future__ import annotations

import re

import pytest

from sloth_daemon.cli import commands, fast
from sloth_daemon.cli.fast_help import page


@pytest.fixture(scope="module")
def app():
    import typer.main

    from sloth_daemon.cli.typer_app import build

    return typer.main.get_command(build([]))


def typer_page(app, cmd: commands.Command, columns: int, monkeypatch) -> str:
    """Typer's page for ``cmd`` as `sloth CMD --help` prints it (click's
    get_help; its CliRunner would force a width of 80)."""
    from typer import _click

    monkeypatch.setenv("COLUMNS", str(columns))
    ctx = _click.Context(app, info_name="sloth", help_option_names=["-h", "--help"])  # as typer_app.py
    for word in cmd.path:
        ctx = _click.Context(ctx.command.get_command(ctx, word), info_name=word, parent=ctx)
    return ctx.command.get_help(ctx) + "\n"


def fast_page(cmd: commands.Command, columns: int, monkeypatch, capsys) -> str:
    """What `sloth CMD --help` prints through fast.handle (the real entry)."""
    monkeypatch.setenv("COLUMNS", str(columns))
    capsys.readouterr()
    assert fast.handle([*cmd.path, "--help"]) == 0
    return capsys.readouterr().out


def option_words(text: str) -> set[str]:
    """The names in the first column of the Options list ("  -l, --lane <str>  Lane ...")."""
    options = text.split("\nOptions:\n", 1)[1]
    return {w for m in re.finditer(r"^  (-\S.*?)(?:  |$)", options, re.M) for w in re.findall(r"--?[\w-]+", m[1])}


def usage_arguments(text: str) -> str:
    usage = text.split("\n\n", 1)[0]
    return " ".join(usage.split()).split("[OPTIONS]", 1)[1].strip()


@pytest.mark.parametrize("cmd", commands.COMMANDS, ids=lambda c: " ".join(c.path))
def test_each_commands_page_lists_what_typers_lists(cmd, app, monkeypatch, capsys):
    theirs = typer_page(app, cmd, 100, monkeypatch)
    ours = fast_page(cmd, 100, monkeypatch, capsys)
    assert option_words(ours) == option_words(theirs)
    assert "--help" in option_words(ours)
    assert usage_arguments(ours) == usage_arguments(theirs)
    assert not any(o.hidden and o.names[0] in option_words(ours) for o in cmd.options)  # hidden stays hidden
    assert ours == theirs  # and the same page, word for word


@pytest.mark.parametrize("cmd", [c for c in commands.COMMANDS if c.path in {("add",), ("edit",), ("ls",),
                                                                           ("lane", "set"), ("service", "uninstall")}],
                         ids=lambda c: " ".join(c.path))
def test_a_narrow_terminal_wraps_without_losing_a_word(cmd, app, monkeypatch, capsys):
    ours = fast_page(cmd, 60, monkeypatch, capsys)
    kept = {f"    {ln.strip()}" for ln in cmd.help.split("\b", 1)[-1].splitlines()} if "\b" in cmd.help else set()
    assert max(len(ln) for ln in ours.splitlines() if ln not in kept) <= 58  # click's width: min(columns, 80) - 2
    wide = fast_page(cmd, 200, monkeypatch, capsys)
    assert len(ours.splitlines()) > len(wide.splitlines())
    assert "".join(ours.split()) == "".join(wide.split())  # every word, in order (one cut at a hyphen joins again)
    assert ours == typer_page(app, cmd, 60, monkeypatch)


def test_the_help_page_of_a_group_and_of_sloth_stay_typers(monkeypatch, capsys):
    for argv in (["lane", "--help"], ["--help"], ["schedule", "-h"], ["add", "--lane", "x", "--help"]):
        assert fast.handle(argv) is None, argv  # each a line the fast path does not run: nothing done
    assert capsys.readouterr().out == ""


def test_the_page_is_written_through_the_one_writer(monkeypatch, capsys):
    monkeypatch.setattr(commands.COMMANDS[0], "help", "Queue \x1b]0;owned\x07 it.")
    page_text = fast_page(commands.COMMANDS[0], 80, monkeypatch, capsys)
    assert "\x1b" not in page_text and "\x07" not in page_text
    assert page(commands.COMMANDS[0], 78).count("\x1b") == 1  # the declaration's, escaped only on the way out

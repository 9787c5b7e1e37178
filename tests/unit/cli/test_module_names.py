"""Issue 29, item 6: the CLI's modules are named for what they hold. A
module that holds commands is named for its family: a group's commands live
in the group's module (`lane set` in lane.py), a top-level command in the
module of its own name or of the family it belongs to (`kill` in
cancel.py, beside `cancel`). Every other module is shared machinery, named
for what it is and listed here with it, or a part of one family or helper
(``add_options``: add's; ``fast_help``: the fast path's)."""

from __future__ import annotations

from pathlib import Path

from sloth_daemon.cli.commands import COMMANDS, GROUPS

CLI = Path(__file__).resolve().parents[3] / "sloth_daemon" / "cli"
GROUP_NAMES = {g.name for g in GROUPS}
HELPERS = {
    "__init__": "the entry point: the fast path first, else the Typer app",
    "client": "the socket client",
    "commands": "every command declared once",
    "completers": "shell completion's answers (job ids, lanes, states)",
    "connection": "the daemon the commands talk to: connect (start it), call, read the queue without it",
    "fast": "the fast path: the daily commands read without Typer",
    "latest": "the latest job, what a command with no id means",
    "launcher": "starting the daemon in the background",
    "locate": "finding the running daemon's socket",
    "many_jobs": "a command on many jobs: the selection and the report",
    "offline": "the daemon's reading answers, computed from the queue file",
    "output": "the one writer to the terminal, and the error edge",
    "progress_view": "how far jobs are and what runs cost, as ls, show, status and wait say it; a batch's line",
    "render": "tables, colours, a job's lines",
    "shell_check": "whether shell lines parse (sh -n)",
    "shell_lines": "one line of --stdin/--file as a job",
    "submit": "handing add's jobs to the daemon, all or none",
    "suggestions": "what a mistyped word is offered",
    "typer_app": "the Typer app built from the declarations",
    "values": "ids, durations and lists as typed",
}


def _module(cmd) -> str:
    return cmd.run.partition(":")[0].rpartition(".")[2]


def test_each_command_lives_in_the_module_of_its_family():
    top = {cmd.path[0]: _module(cmd) for cmd in COMMANDS if len(cmd.path) == 1}
    for cmd in COMMANDS:
        mod = _module(cmd)
        if cmd.path[0] in GROUP_NAMES:
            assert mod == cmd.path[0], (cmd.path, mod)
        else:  # its own module, or the module of the command its family is named for
            assert mod in top and top[mod] == mod, (cmd.path, mod)


def test_every_other_module_is_a_listed_helper_or_a_part_of_a_family():
    families = {_module(cmd) for cmd in COMMANDS}
    for f in sorted(CLI.glob("*.py")):
        name = f.stem
        if name in families or name in HELPERS:
            continue
        head = name.partition("_")[0]
        assert head in families or head in HELPERS, f"{f.name}: name it for its command family, or list what it is"
    assert all((CLI / f"{h}.py").exists() for h in HELPERS)
    assert not families & set(HELPERS)

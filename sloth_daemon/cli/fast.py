"""The fast path: the commands declared ``fast`` in commands.py (the
common forms of every command a person types daily -- add, ls, show, logs,
status, cancel, retry, kill, pause, resume, lane ls -- and `sloth daemon
run`), and a TAB of shell completion (fast_complete.py), without importing
Typer (whose import is most of a command's time: 70-100 ms of ~100-120).

It reads the command line the way click does, with the options each
command declares, and answers None -- "not mine" -- for anything it does
not fully understand: another command, an option before the command,
-h/--help anywhere but alone after a command (`sloth add --help`, any
command's page, is printed from its declaration: fast_help.py), an
unknown or misspelled option, an option missing its value, a number that
is not one, a combined short flag (-sw), an attached short
value (-ldefault), an option declared ``fast=False`` (`ls --watch`), a
required option or argument missing, words a command does not take. The
Typer app then reads the whole line itself, with its own help, usage
errors and exit code 2. The function that runs a command is the one the
Typer app calls, with the same values (an option not given: its declared
default, as Typer passes it), so the jobs queued, the output, the errors
and the exit code are the same either way; tests/unit/cli/test_fast_cli.py
and tests/acceptance/test_fast_cli.py run command lines through both.
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable, Optional

    from sloth_daemon.cli.commands import Command


def handle(argv: list[str]) -> Optional[int]:
    """Run ``sloth ARGV`` if it is a form this path knows: the exit code.
    None if it is not (nothing has been done; let Typer run it)."""
    if os.environ.get("_SLOTH_COMPLETE"):  # set but empty: Typer runs the command line
        from sloth_daemon.cli.fast_complete import complete

        return complete()
    if not argv and streams_ok():  # plain `sloth`: the day at a glance (typer_app.main does the same)
        from sloth_daemon.cli.status import glance

        return at_edge(glance)
    if argv[:1] == ["add"] and streams_ok():  # the plainest add, without the declarations (fast_add.py)
        from sloth_daemon.cli.fast_add import plain

        run_plain = plain(argv[1:])
        if run_plain is not None:
            return at_edge(run_plain)
    from sloth_daemon.cli.commands import find  # every command's declaration: ~1 ms to import

    cmd = find(argv)
    if cmd is not None and argv[len(cmd.path):] in (["-h"], ["--help"]) and streams_ok():
        from sloth_daemon.cli.output import echo  # `sloth CMD --help` of any command: its page (fast_help.py)
        from sloth_daemon.cli.fast_help import page

        echo(page(cmd))
        return 0
    if cmd is None or not cmd.fast or not streams_ok():
        return None
    values = read(cmd, argv[len(cmd.path):])
    if values is None:
        return None
    run = cmd.function()
    return at_edge(lambda: run(**values))


def read(cmd: Command, args: list[str]) -> Optional[dict[str, Any]]:
    """Every parameter of ``cmd`` as the Typer app would pass it for
    ``args``; None if the line is not one the fast path takes."""
    from sloth_daemon.cli.commands import REQUIRED
    from sloth_daemon.cli.fast_args import options, parse

    parsed = parse(args, options(cmd.options), interspersed=cmd.interspersed)
    if parsed is None:
        return None
    given, words = parsed
    values = {o.dest: given.get(o.dest, o.default) for o in cmd.options}
    if any(v is REQUIRED for v in values.values()):
        return None  # Typer's "missing option"
    a = cmd.arg
    if a is None:
        return None if words else values  # Typer's "unexpected extra argument"
    if (a.required and not words) or (len(words) > 1 and not a.many):
        return None  # "missing argument", "unexpected extra argument"
    values[a.dest] = (words if a.many else words[0]) if words else None
    return values


def streams_ok() -> bool:
    """stdout and stderr are there and not ASCII: click.echo would write to
    them as they are (it re-wraps a stream misconfigured as ASCII)."""
    import codecs

    for s in (sys.stdout, sys.stderr):
        try:
            if codecs.lookup(getattr(s, "encoding", None) or "ascii").name == "ascii":
                return False
        except LookupError:  # an encoding Python does not know: Typer says what it makes of it
            return False
    return True


def at_edge(fn: Callable[[], Optional[int]]) -> int:
    """Run ``fn`` at the CLI's error edge (as typer_app.handles_errors does)."""
    from sloth_daemon.cli.output import caught

    try:
        return fn() or 0
    except BaseException as e:
        code = caught(e)
        if code is None:
            raise
        return code

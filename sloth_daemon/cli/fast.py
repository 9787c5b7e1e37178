"""The fast path: the common forms of `sloth add`, `sloth ls` and `sloth
show`, `sloth daemon run`, and a TAB of shell completion (fast_complete.py),
without importing Typer (whose import is most of a command's time: 70-100 ms of ~170).

It reads the command line the way click does, for the options of these
three commands only, and answers None -- "not mine" -- for anything it
does not fully understand: another command, an option before the command,
-h/--help, an unknown or misspelled option, an option missing its value, a
number that is not one, a combined short flag (-sw), an attached short
value (-ldefault), `ls --watch`. The Typer app then reads the whole line
itself, with its own help, usage errors and exit code 2. What a command
does once its options are read is shared with the Typer commands
(add_run.py, look_run.py), so the jobs queued, the output, the errors and
the exit code are the same either way; tests/unit/test_fast_cli.py runs a
table of command lines through both and compares.
"""

from __future__ import annotations

import os
import sys

from sloth_daemon.cli.fast_args import FLAG, INT, LIST, VALUE, options, parse

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Callable, Optional

# The options of `sloth add` (jobs.py), `ls` and `show` (look.py): the same
# names and kinds as the Typer commands (test_fast_cli checks them against
# the Typer app). `ls --watch` and `--interval` are left to Typer.
ADD = options(
    ("lane", VALUE, "--lane -l"), ("priority", INT, "--priority -p"), ("max_attempts", INT, "--max-attempts"),
    ("lease", VALUE, "--lease"), ("timeout", VALUE, "--timeout -t"), ("delay", VALUE, "--delay"),
    ("at", VALUE, "--at"), ("key", VALUE, "--key -k"), ("label", VALUE, "--label"), ("cwd", VALUE, "--cwd"),
    ("shell", FLAG, "--shell -s"), ("stdin", FLAG, "--stdin"), ("from_file", VALUE, "--file -f"),
    ("after", LIST, "--after"), ("after_any", LIST, "--after-any"), ("chain", FLAG, "--chain"),
    ("chain_any", FLAG, "--chain-any"), ("retry_exit", VALUE, "--retry-exit"),
    ("no_retry_exit", VALUE, "--no-retry-exit"), ("anywhere", FLAG, "--anywhere"), ("on", VALUE, "--on"),
    ("wait", FLAG, "--wait -w"), ("no_start", FLAG, "--no-start"), ("as_json", FLAG, "--json"))
LS = options(
    ("state", LIST, "--state -s"), ("lane", VALUE, "--lane -l"), ("all_", FLAG, "--all -a"),
    ("limit", INT, "--limit -n"), ("offset", INT, "--offset"), ("as_json", FLAG, "--json"), ("host", VALUE, "--host"))
SHOW = options(("as_json", FLAG, "--json"))


def handle(argv: list[str]) -> Optional[int]:
    """Run ``sloth ARGV`` if it is a form this path knows: the exit code.
    None if it is not (nothing has been done; let Typer run it)."""
    if os.environ.get("_SLOTH_COMPLETE"):  # set but empty: Typer runs the command line
        from sloth_daemon.cli.fast_complete import complete

        return complete()
    run = _COMMANDS.get(argv[0]) if argv else None
    if run is None or not streams_ok():
        return None
    return run(argv[1:])


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


def _edge(fn: Callable[[], Optional[int]]) -> int:
    """Run ``fn`` at the CLI's error edge (as app.handles_errors does)."""
    from sloth_daemon.cli.edge import caught

    try:
        return fn() or 0
    except BaseException as e:
        code = caught(e)
        if code is None:
            raise
        return code


def _add(args: list[str]) -> Optional[int]:
    parsed = parse(args, ADD, interspersed=False)
    if parsed is None:
        return None
    given, command = parsed
    for opt in ("cwd", "from_file"):  # Typer hands these over as Path: the same text in messages
        if opt in given:
            from pathlib import Path

            given[opt] = Path(given[opt])
    from sloth_daemon.cli.add_run import add

    return _edge(lambda: add(command or None, **given))


def _ls(args: list[str]) -> Optional[int]:
    parsed = parse(args, LS)
    if parsed is None or parsed[1]:
        return None  # ls takes no words: Typer's "unexpected extra argument"
    from sloth_daemon.cli.look_run import ls

    g = parsed[0]
    return _edge(lambda: ls(g.get("state"), g.get("lane"), g.get("all_", False), g.get("limit"),
                            g.get("offset", 0), g.get("as_json", False), host=g.get("host")))


def _show(args: list[str]) -> Optional[int]:
    parsed = parse(args, SHOW)
    if parsed is None or not parsed[1]:
        return None  # no id: Typer's "missing argument"
    from sloth_daemon.cli.look_run import show

    given, ids = parsed
    return _edge(lambda: show(ids, given.get("as_json", False)))


def _daemon(args: list[str]) -> Optional[int]:
    """`sloth daemon run` (what the login service runs): the daemon, without
    Typer's ~5 MiB resident for as long as it runs."""
    if args != ["run"]:
        return None
    from sloth_daemon.daemon.main import main as daemon_main

    return _edge(daemon_main)


_COMMANDS: dict[str, Callable[[list[str]], Optional[int]]] = {"add": _add, "ls": _ls, "show": _show,
                                                               "daemon": _daemon}

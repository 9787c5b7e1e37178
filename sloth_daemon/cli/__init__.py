"""The ``sloth`` command line, a client of the daemon's socket.

Every command is declared once (commands.py): its help, argument and
options, and the function that runs it. ``main`` first offers the command
line to the fast path (fast.py): the commands declared fast (the common
forms of the daily commands and `daemon run`) and a TAB of shell
completion, read without Typer; it answers None for anything it does not
fully recognise, and the Typer app built from the same declarations
(typer_app.py) runs it instead. Both call the same function with the same
values, so the output, errors and exit codes are the same whichever ran.

This module imports nothing: `sloth add` pays for every import.
"""

from __future__ import annotations


def main() -> None:
    import sys

    from sloth_daemon.cli.fast import handle

    code = handle(sys.argv[1:])
    if code is not None:
        sys.exit(code)
    from sloth_daemon.cli.typer_app import main as typer_main

    typer_main()

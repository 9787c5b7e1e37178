"""The ``sloth`` command line, a client of the daemon's socket.

``main`` first offers the command line to the fast path (fast.py): the
common forms of `sloth add`, `ls`, `show` and a TAB of shell completion,
read without Typer; it answers None for anything it does not fully
recognise, and the whole Typer app (full.py) runs it instead. Both end in
the same code (add_run.py, look_run.py, base.py, edge.py), so the output,
errors and exit codes are the same whichever ran.

This module imports nothing: `sloth add` pays for every import.
"""

from __future__ import annotations


def main() -> None:
    import sys

    from sloth_daemon.cli.fast import handle

    code = handle(sys.argv[1:])
    if code is not None:
        sys.exit(code)
    from sloth_daemon.cli.full import main as typer_main

    typer_main()

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


def run() -> None:
    """The `sloth` script's entry (scripts/sloth, ``python -m sloth_daemon``):
    ``main``, then out at once. Once a command has ended and flushed its
    output, the interpreter's teardown (freeing every module and object the
    exit frees anyway: a tenth of what a `sloth add` costs) serves nobody:
    the commands register no atexit, their one thread (wait's live line) is
    a daemon thread, their files are closed by ``with``. It is kept where it
    may matter: `sloth daemon ...` (the daemon's logging, its queue's
    close), an atexit someone registered, an exit with a message, and a
    flush that fails (a closed pipe: Python's own exit says so, as before).
    ``main`` itself still raises SystemExit, for callers in a process of
    their own (tests)."""
    import sys

    try:
        main()
        code: str | int | None = 0
    except SystemExit as e:
        code = 0 if e.code is None else e.code  # what sys.exit was given
    import atexit

    if not isinstance(code, int) or sys.argv[1:2] == ["daemon"] or atexit._ncallbacks():
        sys.exit(code)
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except BaseException:
        sys.exit(code)
    import os

    os._exit(code)

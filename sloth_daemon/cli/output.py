"""The CLI's one writer to the terminal and its one error edge, without
Typer: every line a command prints goes through ``echo`` (which escapes
whatever would drive a terminal), JSON answers through ``emit_json``; an
error is printed as one line and a hint (a traceback only with --debug or
SLOTH_DEBUG) with its exit code. The Typer commands
(typer_app.handles_errors) and the fast path (fast.py) both end here, so a
command reads and fails the same whichever ran.

Imported by every `sloth add`: the standard library only, lazily.
"""

from __future__ import annotations

import os
import sys

from sloth_daemon.errors import SlothError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Callable

DEBUG = bool(os.environ.get("SLOTH_DEBUG"))  # --debug sets it too (typer_app._root)


def _write(text: str, err: bool = False, nl: bool = True) -> None:
    stream = sys.stderr if err else sys.stdout
    stream.write(text + "\n" if nl else text)
    stream.flush()


# The Typer app prints through click.echo (typer_app.py sets it: it mends a stream
# misconfigured as ASCII); the fast path runs only where the streams need no
# mending (fast.streams_ok), and there the two write the same bytes.
_echo: Callable[..., None] = _write


def use_echo(fn: Callable[..., None]) -> None:
    global _echo
    _echo = fn


def echo(text: str, *, err: bool = False, nl: bool = True) -> None:
    """A line on stdout or stderr, flushed at once: the one way the CLI's
    words reach a terminal (tests/unit/cli/test_one_writer.py keeps it so).
    Every control character or escape sequence in it is shown escaped
    (text.for_terminal), whoever wrote it: a lane, a label, a schedule's
    command, another machine's host name; only line breaks and sloth's own
    colours pass. What goes to stderr is sloth's own word (errors, hints,
    notes), which may quote a driver's error: masked too (text.py)."""
    from sloth_daemon.text import for_terminal, mask

    if err:
        text = mask(text)
    _echo(for_terminal(text, colours="\x1b[" in text and _colours(err)), err=err, nl=nl)


def _colours(err: bool) -> bool:
    from sloth_daemon.cli.render import use_colour

    return use_colour(sys.stderr if err else sys.stdout)


def fail(e: SlothError) -> int:
    """Print ``e`` as `sloth: error: ...` and its hint; return its exit code."""
    from sloth_daemon.text import showable

    if DEBUG:
        import traceback

        from sloth_daemon.text import for_terminal, mask

        sys.stderr.write(for_terminal(mask(traceback.format_exc())))  # its messages quote what the user gave
    echo(f"sloth: error: {showable(e.message)}", err=True)
    if e.hint:
        echo(f"hint: {showable(e.hint)}", err=True)
    return e.exit_code


def caught(e: BaseException) -> int | None:
    """The exit code for an exception that reached the edge, after saying
    what it needs to; None for one that is not ours to handle (re-raise it)."""
    if isinstance(e, SlothError):
        return fail(e)
    if isinstance(e, KeyboardInterrupt):
        return 130
    if isinstance(e, BrokenPipeError):  # `sloth logs ID | head`: the reader had enough
        quiet_stdout()
        return 0
    if isinstance(e, Exception):  # the edge: never a bare traceback
        return fail(SlothError(f"internal error: {type(e).__name__}: {e}",
                               hint="This is a bug; run with --debug for the traceback and report it."))
    return None


def quiet_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush of a closed
    pipe does not print "Exception ignored ... BrokenPipeError"."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


def emit_json(data: object) -> None:
    from sloth_daemon.protocol import dumps_pretty

    echo(dumps_pretty(data))  # json.dumps(data, indent=2, sort_keys=True), without importing json

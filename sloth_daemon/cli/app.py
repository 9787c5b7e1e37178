"""The Typer app every ``sloth`` command registers on, and what they share:
one error edge (handles_errors), the daemon connection, JSON output, ids and
durations as typed.

Start-up cost matters (``sloth add`` is run from scripts in loops), so this
imports only typer and the errors at top level; everything else is imported
inside the command that needs it.
"""

from __future__ import annotations

import functools
import json
import os
from typing import Any, Callable, Optional

import typer

from .. import errors
from ..errors import SlothError

app = typer.Typer(
    help="sloth: hand it shell commands and walk away. Jobs survive sleep, crashes and reboots.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
    rich_markup_mode=None,
)
daemon_app = typer.Typer(help="Run, start, stop or inspect the background daemon.", no_args_is_help=True)
app.add_typer(daemon_app, name="daemon")

_DEBUG = False
_TOLD_OFFLINE = False  # "no daemon is running" said once per command


def _version(value: bool) -> None:
    if value:
        from .. import __version__

        typer.echo(f"sloth {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    debug: bool = typer.Option(False, "--debug", help="Show tracebacks on errors."),
    version: bool = typer.Option(False, "--version", "-V", callback=_version, is_eager=True,
                                 help="Print the version and exit."),
) -> None:
    global _DEBUG
    _DEBUG = debug or bool(os.environ.get("SLOTH_DEBUG"))


def handles_errors(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Print a SlothError as one line plus a hint and exit with its named
    code. Anything else is a bug: one line too, the traceback only with --debug."""

    @functools.wraps(fn)
    def wrapper(*a: Any, **kw: Any) -> Any:
        try:
            return fn(*a, **kw)
        except SlothError as e:
            _fail(e)
        except KeyboardInterrupt:
            raise typer.Exit(130) from None
        except BrokenPipeError:  # `sloth logs ID | head`: the reader had enough
            _quiet_stdout()
            raise typer.Exit(0) from None
        except (typer.Exit, typer.Abort, typer.TyperException):
            raise
        except Exception as e:  # noqa: BLE001 - the edge: never a bare traceback
            _fail(SlothError(f"internal error: {type(e).__name__}: {e}",
                             hint="This is a bug; run with --debug for the traceback and report it."))

    return wrapper


def _fail(e: SlothError) -> None:
    from ..text import showable

    if _DEBUG:
        import traceback

        traceback.print_exc()
    typer.echo(f"sloth: error: {showable(e.message)}", err=True)
    if e.hint:
        typer.echo(f"hint: {showable(e.hint)}", err=True)
    raise typer.Exit(e.exit_code) from None


def _quiet_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush of a closed
    pipe does not print "Exception ignored ... BrokenPipeError"."""
    import sys

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


def paths():  # noqa: ANN201 - lazy import keeps start-up lean
    from .. import paths as p

    return p.resolve()


def connect(*, timeout_s: float | None = 30.0):  # noqa: ANN201
    from ..client import Client
    from ..locate import daemon_socket

    p = paths()
    return Client(daemon_socket(p), timeout_s=timeout_s, lock_path=p.lock)


def log_paths():  # noqa: ANN201 - Paths
    """The paths with this folder's queue's own log folder (identity.py)."""
    from ..identity import queue_paths

    return queue_paths(paths())


def call(op: str, **args: Any) -> Any:
    with connect() as c:
        return c.call(op, **args)


def call_or_read(op: str, **args: Any) -> Any:
    """``call``, or, when no daemon answers, the same answer read from the
    queue file read-only (for ls, show, logs, lanes, status, config), with
    a note on stderr."""
    try:
        return call(op, **args)
    except errors.DaemonNotRunning:
        from .offline import answer, where

        global _TOLD_OFFLINE
        if not _TOLD_OFFLINE:
            typer.echo(f"sloth: no daemon is running; reading {where(paths())} (read-only)", err=True)
            _TOLD_OFFLINE = True
        return answer(paths(), op, **args)


def emit_json(data: Any) -> None:
    typer.echo(json.dumps(data, indent=2, sort_keys=True))


def parse_id(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise errors.BadRequest(f"bad job id {text!r}: ids are whole numbers (see `sloth ls`)") from None
    if v < 1:
        raise errors.BadRequest(f"bad job id {text!r}: ids start at 1")
    return v


def duration(text: Optional[str], what: str) -> Optional[float]:
    if text is None:
        return None
    from ..durations import parse_duration

    return parse_duration(text, what=what)



"""The Typer app every ``sloth`` command is registered on (full.py builds
them from commands.py), its root options, and its error edge
(handles_errors). What the commands share -- the daemon connection, JSON
output, ids and durations as typed -- is base.py's, re-exported here; the
error edge itself is edge.py's: the fast path (fast.py) uses both without
Typer, so a command reads and fails the same whichever path ran it.

Start-up cost matters (``sloth add`` is run from scripts in loops), so this
imports only typer and base.py at top level; everything else is imported
inside the command that needs it.
"""

from __future__ import annotations

import functools
from typing import Any, Callable

import typer

from sloth_daemon.cli import edge, usage
from sloth_daemon.cli.base import call, call_or_read, connect, duration, emit_json, parse_id, paths

__all__ = ["app", "handles_errors", "call", "call_or_read", "connect", "duration", "emit_json",
           "parse_id", "paths"]

app = typer.Typer(
    cls=usage.Group,  # suggestions: close matches only
    help="sloth: hand it shell commands and walk away. Jobs survive sleep, crashes and reboots.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
    rich_markup_mode=None,
)
edge.use_echo(typer.echo)  # click.echo mends a stream misconfigured as ASCII


def _version(value: bool) -> None:
    if value:
        from sloth_daemon import __version__

        edge.echo(f"sloth {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    debug: bool = typer.Option(False, "--debug", help="Show tracebacks on errors."),
    version: bool = typer.Option(False, "--version", "-V", callback=_version, is_eager=True,
                                 help="Print the version and exit."),
) -> None:
    edge.DEBUG = edge.DEBUG or debug


def handles_errors(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Print a SlothError as one line plus a hint and exit with its named
    code. Anything else is a bug: one line too, the traceback only with --debug
    (edge.caught says which)."""

    @functools.wraps(fn)
    def wrapper(*a: Any, **kw: Any) -> Any:
        try:
            return fn(*a, **kw)
        except (typer.Exit, typer.Abort, typer.TyperException):
            raise
        except BaseException as e:
            code = edge.caught(e)
            if code is None:
                raise
            raise typer.Exit(code) from None

    return wrapper

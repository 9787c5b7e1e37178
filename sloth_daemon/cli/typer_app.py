"""The whole ``sloth`` command line: the Typer app, with every command
built from its declaration (commands.py).

Each command becomes a Typer command whose callback has the signature
Typer reads (inspect.signature and the type hints): one parameter per
declared option and argument, its default a typer.Option or
typer.Argument, its annotation the type the option's kind makes. The
callback imports the command's function only when it runs, and turns the
exit code it returns into typer.Exit. Here too: the app itself, its root
options (--debug, --version), and its error edge (handles_errors), which
ends in output.py's as the fast path's does, so a command reads and fails
the same whichever path ran it. The commands the fast path takes do not
come here at all (fast.py).

Start-up cost matters (``sloth add`` is run from scripts in loops), so this
imports only typer and the declarations at top level; a command's function
is imported only when it runs.
"""

from __future__ import annotations

import functools
import inspect
import os
import sys
from pathlib import Path
from typing import Any, Callable, List, Optional

import typer

from sloth_daemon.cli import commands as decl, completers, output, suggestions
from sloth_daemon.cli.commands import FLAG, INT, LIST, PATH, REQUIRED, Argument, Command, Option

_TYPES: dict[str, Any] = {FLAG: bool, INT: int, PATH: Path, LIST: List[str]}

app = typer.Typer(
    cls=suggestions.SuggestingGroup,  # suggestions: close matches only
    help="sloth: hand it shell commands and walk away. Jobs survive sleep, crashes and reboots.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
    rich_markup_mode=None,
)
output.use_echo(typer.echo)  # click.echo mends a stream misconfigured as ASCII


def _version(value: bool) -> None:
    if value:
        from sloth_daemon import __version__

        output.echo(f"sloth {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    debug: bool = typer.Option(False, "--debug", help="Show tracebacks on errors."),
    version: bool = typer.Option(False, "--version", "-V", callback=_version, is_eager=True,
                                 help="Print the version and exit."),
) -> None:
    output.DEBUG = output.DEBUG or debug


def handles_errors(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Print a SlothError as one line plus a hint and exit with its named
    code. Anything else is a bug: one line too, the traceback only with --debug
    (output.caught says which)."""

    @functools.wraps(fn)
    def wrapper(*a: Any, **kw: Any) -> Any:
        try:
            return fn(*a, **kw)
        except (typer.Exit, typer.Abort, typer.TyperException):
            raise
        except BaseException as e:
            code = output.caught(e)
            if code is None:
                raise
            raise typer.Exit(code) from None

    return wrapper


def main() -> None:
    if not sys.argv[1:] and "_SLOTH_COMPLETE" not in os.environ:  # plain `sloth`: the day at a glance (as fast.py)
        from sloth_daemon.cli.fast import at_edge
        from sloth_daemon.cli.status import glance

        sys.exit(at_edge(glance))
    build(sys.argv[1:2])
    app(prog_name="sloth")


def build(first: list[str]) -> typer.Typer:
    """The app with the declared commands registered on it (afresh). Typer
    turns every registered command into a click command on each run (~5 ms
    of signature inspection, 6% of a `sloth add`); a run needs one. So only
    the command or group named ``first`` is registered when there is one;
    anything else (an option first, a typo, shell completion) gets them
    all, for help and suggestions."""
    only = first[0] if first and "_SLOTH_COMPLETE" not in os.environ else None
    if only not in {c.path[0] for c in decl.COMMANDS}:
        only = None
    groups = {g.name: typer.Typer(help=g.help, no_args_is_help=True, cls=suggestions.SuggestingGroup)
              for g in decl.GROUPS}
    app.registered_commands, app.registered_groups = [], []
    for cmd in decl.COMMANDS:
        if only in (None, cmd.path[0]):
            on = app if len(cmd.path) == 1 else groups[cmd.path[0]]
            settings = None if cmd.interspersed else {"allow_interspersed_args": False}
            on.command(cmd.path[-1], cls=suggestions.SuggestingCommand, context_settings=settings,
                       short_help=short_help(cmd.help))(callback(cmd))
    for g in decl.GROUPS:
        if only in (None, g.name):
            app.add_typer(groups[g.name], name=g.name, short_help=short_help(g.help))
    return app


def short_help(text: str) -> str:
    """A command's line in its group's help: its help's first sentence,
    whole. Click's own cuts at the first period and space, or at the
    column's width ("Restart the daemon (e.g."): never mid-sentence here;
    the listing wraps it instead."""
    import re

    first = text.split("\n\n", 1)[0].replace("\n", " ")
    m = re.search(r"(?<!\be\.g)(?<!\bi\.e)\.(\s|$)", first)
    return (first[:m.start() + 1] if m else first).strip()


def callback(cmd: Command) -> Callable[..., None]:
    """A function Typer reads as ``cmd``'s declaration says, that runs it."""

    def run(**values: Any) -> None:
        code = cmd.function()(**values)
        if code:
            raise typer.Exit(code)

    params = [parameter(o) for o in cmd.options]
    if cmd.arg is not None:
        params.insert(0, parameter(cmd.arg))
    fn = handles_errors(run)
    fn.__name__ = fn.__qualname__ = "_".join(cmd.path)
    fn.__doc__ = cmd.help
    fn.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    fn.__annotations__ = {p.name: p.annotation for p in params}
    return fn


def parameter(p: Option | Argument) -> inspect.Parameter:
    """One parameter of a command's callback, as Typer reads it."""
    done = getattr(completers, p.complete) if p.complete else None
    if isinstance(p, Argument):
        default = REQUIRED if p.required else None
        kind = LIST if p.many else None
        info = typer.Argument(default, metavar=p.metavar, help=p.help, autocompletion=done)
    else:
        default, kind = p.default, p.kind
        info = typer.Option(default, *p.names, help=p.help, autocompletion=done, hidden=p.hidden)
    annotation = _TYPES.get(kind or "", str)
    if default is None:
        annotation = Optional[annotation]
    return inspect.Parameter(p.dest, inspect.Parameter.KEYWORD_ONLY, default=info, annotation=annotation)

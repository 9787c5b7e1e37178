"""The whole ``sloth`` command line: the Typer app with every command.

app.py holds the app and its error edge; jobs.py (add), look.py (ls,
show, logs, status), watch.py (wait), act.py (cancel, retry, restart, kill,
pause, resume, prune), lanes.py, admin.py, db.py and service.py register the
commands. Each imports only typer at top level; the daemon is imported
only by ``sloth daemon run``. The common forms of add, ls, show and shell
completion do not come here at all (fast.py).
"""

from __future__ import annotations

import os
import sys

import typer

# Registering their commands is the import; `sloth --help` lists them in this order.
from sloth_daemon.cli import jobs, look, watch, act, lanes, admin, db, service  # noqa: F401
from sloth_daemon.cli.app import app


def main() -> None:
    _only_the_command_named(sys.argv[1:2])
    app(prog_name="sloth")


def _only_the_command_named(first: list[str]) -> None:
    """Typer turns every registered command into a click command on each run
    (~5 ms of signature inspection, 6% of a `sloth add`); a run needs one.
    Keep only the command named first on the line. Anything else (an option
    first, a typo, shell completion) keeps them all, for help and suggestions."""
    if not first or "_SLOTH_COMPLETE" in os.environ:
        return
    cmds = [c for c in app.registered_commands if _name(c) == first[0]]
    groups = [g for g in app.registered_groups if g.name == first[0]]
    if cmds or groups:
        app.registered_commands, app.registered_groups = cmds, groups


def _name(cmd: typer.models.CommandInfo) -> str:
    return cmd.name or getattr(cmd.callback, "__name__", "").replace("_", "-")

"""`sloth prune`: finished jobs deleted (and their logs), by age,
state and lane. --dry-run only counts, so it reads the queue file when no
daemon runs; a prune itself needs the daemon (connection.call starts one).
Its options are declared in commands.py. No Typer (the fast path runs
it): it prints with output.echo and returns its exit code.
"""

from __future__ import annotations

from sloth_daemon.cli.connection import call, call_or_read
from sloth_daemon.cli.output import echo, emit_json
from sloth_daemon.cli.values import comma_list, duration

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Optional, Sequence


def prune(*, older_than: str, state: Optional[Sequence[str]], lane: Optional[str], dry_run: bool,
          as_json: bool) -> int:
    """`sloth prune` (its help and options: commands.py). --dry-run only
    counts, so it reads the queue file when no daemon runs."""
    older_s = duration(older_than, "--older-than")
    state = comma_list(state)
    args: dict[str, Any] = {"older_than_s": older_s, "dry_run": dry_run}
    args.update({"states": list(state)} if state else {}, **({"lane": lane} if lane is not None else {}))
    res = call_or_read("prune", **args) if dry_run else call("prune", **args)
    if as_json:
        emit_json(res)
    else:
        kind = "/".join(state) if state else "finished"
        which = (f"every {kind} job" if not args["older_than_s"] else
                 f"{kind} jobs that ended more than {older_than} ago") + (f" in lane {lane}" if lane else "")
        if dry_run:
            echo(f"would prune {res['would_prune']} job(s): {which}")
        else:
            echo(f"pruned {res['pruned']} job(s): {which}")
    return 0

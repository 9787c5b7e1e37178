"""`sloth cancel` and `sloth kill`: jobs ended, cancelled (kill: its
process tree ended first, or at once with --now). Each is one request
and one transaction, however many jobs it names; jobs named by id that it
leaves alone are listed on stderr with why (exit 6, many_jobs.py). A
selection (--lane, --state) names only the jobs the command applies to.
Their options are declared in commands.py.

No Typer (the fast path runs both): each prints with output.echo, returns
its exit code and raises SlothError. Both need the daemon, and
connection.call starts one if none runs (saying so on stderr).
"""

from __future__ import annotations

from sloth_daemon import errors
from sloth_daemon.cli.connection import call
from sloth_daemon.cli.many_jobs import report, selection
from sloth_daemon.cli.values import parse_id

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Optional, Sequence


# The states a cancel by --lane applies to (the queue's ACTIVE_STATES).
ACTIVE = ["blocked", "queued", "running"]


def cancel(*, ids: Optional[Sequence[str]], lane: Optional[str], state: Optional[Sequence[str]],
           as_json: bool, batch: Optional[str] = None) -> int:
    """`sloth cancel` (its help and options: commands.py). --lane alone
    selects the lane's active jobs: its finished ones are not "left alone",
    they were never asked for; --batch likewise its batch's (held too)."""
    if batch is not None:
        if ids or lane is not None or state:
            raise errors.BadRequest("give --batch alone, or ids or --lane/--state, to cancel")
        from sloth_daemon.cli.many_jobs import find_batch, on_batch

        return report(on_batch("cancel", find_batch(batch, [*ACTIVE, "held"])["ids"]), "cancelled", "cancelled",
                      as_json)
    sel = selection(ids, lane, state, "cancel")
    if "lane" in sel and "states" not in sel:
        sel["states"] = ACTIVE
    return report(call("cancel", **sel), "cancelled", "cancelled", as_json)


def kill(*, ids: Sequence[str], now: bool, as_json: bool) -> int:
    """`sloth kill` (its help and options: commands.py)."""
    return report(call("kill", ids=[parse_id(i) for i in ids], now=now), "killed", "cancelled", as_json)

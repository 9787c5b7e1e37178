"""`sloth retry` and `sloth restart`: jobs run again. retry puts failed
or cancelled jobs back in the queue with a fresh attempt budget; restart
queues finished jobs again as new jobs. One request each, however
many jobs; jobs left alone are listed on stderr with why (exit 6,
many_jobs.py). Their options are declared in commands.py.

No Typer (the fast path runs both): each prints with output.echo, returns
its exit code and raises SlothError.
"""

from __future__ import annotations

from sloth_daemon import errors
from sloth_daemon.cli.connection import call
from sloth_daemon.cli.many_jobs import report, selection
from sloth_daemon.cli.output import echo, emit_json
from sloth_daemon.cli.values import parse_id

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Optional, Sequence


def retry(*, ids: Optional[Sequence[str]], failed: bool, lane: Optional[str], as_json: bool,
          batch: Optional[str] = None) -> int:
    """`sloth retry` (its help and options: commands.py)."""
    if batch is not None:
        if ids or lane is not None:
            raise errors.BadRequest("give --batch alone, or ids or --failed [--lane], to retry")
        from sloth_daemon.cli.many_jobs import find_batch, on_batch

        return report(on_batch("retry", find_batch(batch, ["failed"])["ids"]), "queued again", "queued", as_json)
    if ids and failed:
        raise errors.BadRequest("give job ids or --failed, not both")
    if lane is not None and not failed:
        raise errors.BadRequest("--lane picks among --failed jobs", hint="`sloth retry --failed --lane L`.")
    sel = selection(ids, lane, ["failed"] if failed else None, "retry")
    return report(call("retry", **sel), "queued again", "queued", as_json)


def restart(*, ids: Sequence[str], as_json: bool) -> int:
    """`sloth restart` (its help and options: commands.py)."""
    res = call("restart", ids=[parse_id(i) for i in ids])
    if as_json:
        emit_json(res)
    else:
        for old, new in res["restarted"]:
            echo(f"job {old} restarted as job {new}")
    return report(res, "restarted", "queued", as_json, printed=True)

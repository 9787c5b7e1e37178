"""A command on many jobs in one request: which jobs (ids, or a selection
by --lane/--state), and what it did to them ("job 5 cancelled" on stdout,
each job left alone on stderr with why: exit 6). Shared by cancel, kill,
retry and restart (cancel.py, retry.py). No Typer; light imports.
"""

from __future__ import annotations

from sloth_daemon import errors
from sloth_daemon.cli.output import echo, emit_json
from sloth_daemon.cli.values import comma_list, parse_id

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Optional, Sequence


def report(res: dict[str, Any], verb: str, state: str, as_json: bool, *, printed: bool = False) -> int:
    """Print what a request on many jobs did ("job 5 cancelled"; the state
    only when it is not the one ``verb`` leads to, ``state``). Exit 6 if it
    left some alone (an error, as for one job, if it did nothing at all)."""
    if res["skipped"] and not res["jobs"] and not as_json:
        raise errors.IllegalTransition("; ".join(s["why"] for s in res["skipped"][:5])
                                       + (f" (and {len(res['skipped']) - 5} more)" if len(res["skipped"]) > 5 else ""),
                                       hint="See their states with `sloth show ID...`.")
    if printed:
        pass
    elif as_json:
        emit_json(res)
    else:
        for j in res["jobs"]:
            echo(f"job {j['id']} {verb}" + ("" if j["state"] == state else f" ({j['state']})"))
        if not res["jobs"] and not res["skipped"]:
            echo(f"no job matched: nothing {verb}")
    for s in res["skipped"]:
        echo(f"sloth: job {s['id']} left alone: {s['why']}", err=True)
    return errors.EXIT_CONFLICT if res["skipped"] else 0


def find_batch(ref: str, states: Optional[Sequence[str]] = None, *, read: bool = False) -> dict[str, Any]:
    """The batch `--batch REF` names (an id, or the newest batch of a name:
    the daemon's batch_show) and its jobs' ids (those in ``states``);
    ``read``: for a reading command (ls, show), which reads the queue when
    no daemon runs rather than start one."""
    from sloth_daemon.cli.connection import call, call_or_read

    ask = call_or_read if read else call
    return dict(ask("batch_show", batch=ref, **({"states": list(states)} if states is not None else {})))


def on_batch(op: str, ids: list[int]) -> dict[str, Any]:
    """``op`` (cancel, retry) on a batch's jobs: one request and one
    transaction, given time by their number (10,000 cancels on a loaded
    PostgreSQL take longer than a request's usual 30 s)."""
    if not ids:
        return {"jobs": [], "skipped": []}
    from sloth_daemon.cli.connection import connect

    with connect() as c:
        c.set_timeout(30.0 + len(ids) / 200)
        return dict(c.call(op, ids=ids))


def batch_line(batch: dict[str, Any]) -> str:
    """A batch in one line: ``batch 7 'sweep': 40 jobs: 38 done, 1 failed, 1 running``
    (counts by state, the finished first; issue 31's time left can join it)."""
    from sloth_daemon.text import showable

    name = f" {showable(batch['name'])!r}" if batch.get("name") else ""
    n = batch["counts"]
    order = ["done", "failed", "cancelled", "running", "queued", "blocked", "held"]
    parts = [f"{n[s]} {s}" for s in order + sorted(set(n) - set(order)) if n.get(s)]
    total = batch["total"]
    return f"batch {batch['id']}{name}: {total} job{'s' if total != 1 else ''}" + (": " + ", ".join(parts)
                                                                                 if parts else "")


def selection(ids: Optional[Sequence[str]], lane: Optional[str], state: Optional[Sequence[str]],
               what: str) -> dict[str, Any]:
    state = comma_list(state)
    if ids and (lane is not None or state):
        raise errors.BadRequest(f"give job ids or --lane/--state to {what}, not both")
    if ids:
        return {"ids": [parse_id(i) for i in ids]}
    if lane is None and not state:
        raise errors.BadRequest(f"which jobs? Give ids, or --lane/--state, to {what}",
                                hint=f"e.g. `sloth {what} 12 13` or `sloth {what} --lane video`.")
    return {**({"lane": lane} if lane is not None else {}), **({"states": list(state)} if state else {})}

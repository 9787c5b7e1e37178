"""Commands that change jobs: cancel, retry, restart, kill, pause, resume,
prune. Each is one request and one transaction, however many jobs it
names; jobs named by id that it leaves alone are listed on stderr with why
(exit 6). A selection (--lane, --state, --failed) names only the jobs the
command applies to. Their options are declared in commands.py.

No Typer (the fast path runs cancel, retry, kill, pause and resume): each
prints with edge.echo, returns its exit code and raises SlothError. A
command that changes jobs needs the daemon, and base.call starts one if
none runs (saying so on stderr); `prune --dry-run` only reads, and reads
the queue file when no daemon runs.
"""

from __future__ import annotations

from sloth_daemon import errors
from sloth_daemon.cli.base import call, call_or_read, comma_list, duration, emit_json, parse_id
from sloth_daemon.cli.edge import echo

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Optional, Sequence

# The states a cancel by --lane applies to (the queue's ACTIVE_STATES).
ACTIVE = ["blocked", "queued", "running"]


def _report(res: dict[str, Any], verb: str, state: str, as_json: bool, *, printed: bool = False) -> int:
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


def _selection(ids: Optional[Sequence[str]], lane: Optional[str], state: Optional[Sequence[str]],
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


def cancel(*, ids: Optional[Sequence[str]], lane: Optional[str], state: Optional[Sequence[str]],
           as_json: bool) -> int:
    """`sloth cancel` (its help and options: commands.py). --lane alone
    selects the lane's active jobs: its finished ones are not "left alone",
    they were never asked for."""
    sel = _selection(ids, lane, state, "cancel")
    if "lane" in sel and "states" not in sel:
        sel["states"] = ACTIVE
    return _report(call("cancel", **sel), "cancelled", "cancelled", as_json)


def retry(*, ids: Optional[Sequence[str]], failed: bool, lane: Optional[str], as_json: bool) -> int:
    """`sloth retry` (its help and options: commands.py)."""
    if ids and failed:
        raise errors.BadRequest("give job ids or --failed, not both")
    if lane is not None and not failed:
        raise errors.BadRequest("--lane picks among --failed jobs", hint="`sloth retry --failed --lane L`.")
    sel = _selection(ids, lane, ["failed"] if failed else None, "retry")
    return _report(call("retry", **sel), "queued again", "queued", as_json)


def restart(*, ids: Sequence[str], as_json: bool) -> int:
    """`sloth restart` (its help and options: commands.py)."""
    res = call("restart", ids=[parse_id(i) for i in ids])
    if as_json:
        emit_json(res)
    else:
        for old, new in res["restarted"]:
            echo(f"job {old} restarted as job {new}")
    return _report(res, "restarted", "queued", as_json, printed=True)


def kill(*, ids: Sequence[str], now: bool, as_json: bool) -> int:
    """`sloth kill` (its help and options: commands.py)."""
    return _report(call("kill", ids=[parse_id(i) for i in ids], now=now), "killed", "cancelled", as_json)


def pause(*, lane: Optional[str], as_json: bool) -> int:
    """`sloth pause` (its help and options: commands.py)."""
    res = call("pause", **({"lane": lane} if lane else {}))
    emit_json(res) if as_json else echo(f"paused {lane or 'all lanes'}")
    return 0


def resume(*, lane: Optional[str], as_json: bool) -> int:
    """`sloth resume` (its help and options: commands.py)."""
    res = call("resume", **({"lane": lane} if lane else {}))
    emit_json(res) if as_json else echo(f"resumed {lane or 'all lanes'}")
    return 0


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

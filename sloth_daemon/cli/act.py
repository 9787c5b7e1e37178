"""Commands that change jobs: cancel, retry, restart, kill, pause, resume,
prune. Each is one request and one transaction, however many jobs it
names; jobs it leaves alone are listed on stderr with why (exit 6).
Their options are declared in commands.py."""

from __future__ import annotations

from typing import Any, List, Optional

import typer

from sloth_daemon import errors
from sloth_daemon.cli.app import call, duration, emit_json, parse_id


def _report(res: dict[str, Any], verb: str, as_json: bool, *, printed: bool = False) -> None:
    """Print what a request on many jobs did; exit 6 if it left some alone
    (an error, as for one job, if it did nothing at all)."""
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
            typer.echo(f"job {j['id']} {verb} ({j['state']})")
        if not res["jobs"] and not res["skipped"]:
            typer.echo(f"no job matched: nothing {verb}")
    for s in res["skipped"]:
        typer.echo(f"sloth: job {s['id']} left alone: {s['why']}", err=True)
    if res["skipped"]:
        raise typer.Exit(errors.EXIT_CONFLICT)


def _selection(ids: Optional[List[str]], lane: Optional[str], state: Optional[List[str]],
               what: str) -> dict[str, Any]:
    if ids and (lane is not None or state):
        raise errors.BadRequest(f"give job ids or --lane/--state to {what}, not both")
    if ids:
        return {"ids": [parse_id(i) for i in ids]}
    if lane is None and not state:
        raise errors.BadRequest(f"which jobs? Give ids, or --lane/--state, to {what}",
                                hint=f"e.g. `sloth {what} 12 13` or `sloth {what} --lane video`.")
    return {**({"lane": lane} if lane is not None else {}), **({"states": list(state)} if state else {})}


def cancel(*, ids: Optional[List[str]], lane: Optional[str], state: Optional[List[str]],
           as_json: bool) -> None:
    """`sloth cancel` (its help and options: commands.py)."""
    _report(call("cancel", **_selection(ids, lane, state, "cancel")), "cancelled", as_json)


def retry(*, ids: Optional[List[str]], failed: bool, lane: Optional[str], as_json: bool) -> None:
    """`sloth retry` (its help and options: commands.py)."""
    if ids and failed:
        raise errors.BadRequest("give job ids or --failed, not both")
    if lane is not None and not failed:
        raise errors.BadRequest("--lane picks among --failed jobs", hint="`sloth retry --failed --lane L`.")
    sel = _selection(ids, lane, ["failed"] if failed else None, "retry")
    _report(call("retry", **sel), "queued again", as_json)


def restart(*, ids: List[str], as_json: bool) -> None:
    """`sloth restart` (its help and options: commands.py)."""
    res = call("restart", ids=[parse_id(i) for i in ids])
    if as_json:
        emit_json(res)
    else:
        for old, new in res["restarted"]:
            typer.echo(f"job {old} restarted as job {new}")
    _report(res, "restarted", as_json, printed=True)


def kill(*, ids: List[str], now: bool, as_json: bool) -> None:
    """`sloth kill` (its help and options: commands.py)."""
    _report(call("kill", ids=[parse_id(i) for i in ids], now=now), "killed", as_json)


def pause(*, lane: Optional[str], as_json: bool) -> None:
    """`sloth pause` (its help and options: commands.py)."""
    res = call("pause", **({"lane": lane} if lane else {}))
    emit_json(res) if as_json else typer.echo(f"paused {lane or 'all lanes'}")


def resume(*, lane: Optional[str], as_json: bool) -> None:
    """`sloth resume` (its help and options: commands.py)."""
    res = call("resume", **({"lane": lane} if lane else {}))
    emit_json(res) if as_json else typer.echo(f"resumed {lane or 'all lanes'}")


def prune(*, older_than: str, state: Optional[List[str]], lane: Optional[str], dry_run: bool,
          as_json: bool) -> None:
    """`sloth prune` (its help and options: commands.py)."""
    args: dict[str, Any] = {"older_than_s": duration(older_than, "--older-than"), "dry_run": dry_run}
    args.update({"states": list(state)} if state else {}, **({"lane": lane} if lane is not None else {}))
    res = call("prune", **args)
    if as_json:
        emit_json(res)
    else:
        kind = "/".join(state) if state else "finished"
        which = (f"every {kind} job" if not args["older_than_s"] else
                 f"{kind} jobs that ended more than {older_than} ago") + (f" in lane {lane}" if lane else "")
        if dry_run:
            typer.echo(f"would prune {res['would_prune']} job(s): {which}")
        else:
            typer.echo(f"pruned {res['pruned']} job(s): {which}")

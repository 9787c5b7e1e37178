"""Commands that change jobs: cancel, retry, restart, kill, pause, resume,
prune. Each is one request and one transaction, however many jobs it
names; jobs it leaves alone are listed on stderr with why (exit 6)."""

from __future__ import annotations

from typing import Any, List, Optional

import typer

from sloth_daemon import errors
from sloth_daemon.cli.app import app, call, duration, emit_json, handles_errors, parse_id
from sloth_daemon.cli.complete import job_ids, lanes, states

_IDS = typer.Argument(None, metavar="[ID]...", autocompletion=job_ids)


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


@app.command()
@handles_errors
def cancel(
    ids: Optional[List[str]] = _IDS,
    lane: Optional[str] = typer.Option(None, "--lane", "-l", help="Every active job of this lane.",
                                       autocompletion=lanes),
    state: Optional[List[str]] = typer.Option(None, "--state", "-s", help="Only jobs in this state "
                                              "(blocked, queued, running; repeatable).", autocompletion=states),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Cancel jobs: running ones have their process tree ended; jobs that
    waited for them to be done are cancelled too."""
    _report(call("cancel", **_selection(ids, lane, state, "cancel")), "cancelled", as_json)


@app.command()
@handles_errors
def retry(
    ids: Optional[List[str]] = _IDS,
    failed: bool = typer.Option(False, "--failed", help="Every failed job (of --lane, if given)."),
    lane: Optional[str] = typer.Option(None, "--lane", "-l", help="Only this lane.", autocompletion=lanes),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Put failed or cancelled jobs back in the queue with a fresh attempt budget."""
    if ids and failed:
        raise errors.BadRequest("give job ids or --failed, not both")
    if lane is not None and not failed:
        raise errors.BadRequest("--lane picks among --failed jobs", hint="`sloth retry --failed --lane L`.")
    sel = _selection(ids, lane, ["failed"] if failed else None, "retry")
    _report(call("retry", **sel), "queued again", as_json)


@app.command()
@handles_errors
def restart(
    ids: List[str] = typer.Argument(..., metavar="ID...", autocompletion=job_ids),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Queue finished jobs again as new jobs with the same command, lane,
    folder, environment and limits (prints the new ids)."""
    res = call("restart", ids=[parse_id(i) for i in ids])
    if as_json:
        emit_json(res)
    else:
        for old, new in res["restarted"]:
            typer.echo(f"job {old} restarted as job {new}")
    _report(res, "restarted", as_json, printed=True)


@app.command()
@handles_errors
def kill(
    ids: List[str] = typer.Argument(..., metavar="ID...", autocompletion=job_ids),
    now: bool = typer.Option(False, "--now", help="SIGKILL at once, no grace period."),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Stop running jobs now: end their process trees (SIGTERM, then SIGKILL
    after the grace) and mark them cancelled, not retried."""
    _report(call("kill", ids=[parse_id(i) for i in ids], now=now), "killed", as_json)


@app.command()
@handles_errors
def pause(
    lane: Optional[str] = typer.Argument(None, help="Lane to pause (default: everything).", autocompletion=lanes),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Stop starting new jobs (in one lane, or all). Running jobs carry on."""
    res = call("pause", **({"lane": lane} if lane else {}))
    emit_json(res) if as_json else typer.echo(f"paused {lane or 'all lanes'}")


@app.command()
@handles_errors
def resume(
    lane: Optional[str] = typer.Argument(None, help="Lane to resume (default: everything).", autocompletion=lanes),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Start jobs again after `sloth pause`."""
    res = call("resume", **({"lane": lane} if lane else {}))
    emit_json(res) if as_json else typer.echo(f"resumed {lane or 'all lanes'}")


@app.command()
@handles_errors
def prune(
    older_than: str = typer.Option("7d", "--older-than", help="Only jobs that ended longer ago than this."),
    state: Optional[List[str]] = typer.Option(None, "--state", "-s", help="Only done, failed or cancelled ones "
                                              "(repeatable).", autocompletion=states),
    lane: Optional[str] = typer.Option(None, "--lane", "-l", help="Only this lane.", autocompletion=lanes),
    dry_run: bool = typer.Option(False, "--dry-run", help="Say how many, delete nothing."),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Delete finished jobs (and their logs); `--older-than 0` for all of them."""
    args: dict[str, Any] = {"older_than_s": duration(older_than, "--older-than"), "dry_run": dry_run}
    args.update({"states": list(state)} if state else {}, **({"lane": lane} if lane is not None else {}))
    res = call("prune", **args)
    if as_json:
        emit_json(res)
    elif dry_run:
        typer.echo(f"would prune {res['would_prune']} job(s) (finished more than {older_than} ago)")
    else:
        typer.echo(f"pruned {res['pruned']} job(s)")

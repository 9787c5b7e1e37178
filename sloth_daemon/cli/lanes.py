"""`sloth lane ls | set | rm`: lanes and their concurrency, live.

`lane set` takes effect at once (running jobs are never touched) and
survives restarts; `lane ls` reads the queue file when no daemon answers."""

from __future__ import annotations

from typing import Any

import typer

from sloth_daemon.cli.app import app, call, call_or_read, emit_json, handles_errors
from sloth_daemon.cli.complete import lanes

lane_app = typer.Typer(help="List lanes and change how many jobs each runs at once.", no_args_is_help=True)
app.add_typer(lane_app, name="lane")


@lane_app.command("ls")
@handles_errors
def lane_ls(as_json: bool = typer.Option(False, "--json")) -> None:
    """Every lane: concurrency (and where it comes from), running, queued, blocked, paused."""
    res = call_or_read("lanes")
    if as_json:
        emit_json(res)
        return
    typer.echo(_table(res["lanes"]))
    if res.get("paused_all"):
        typer.echo("every lane is paused (`sloth resume`)")


def _table(rows: dict[str, Any]) -> str:
    from sloth_daemon.cli import render

    body = [[name, str(r["concurrency"]), r["source"], str(r["running"]), str(r["queued"]), str(r["blocked"]),
             "paused" if r["paused"] else ""] for name, r in rows.items()]
    return render.table(["LANE", "SLOTS", "FROM", "RUNNING", "QUEUED", "BLOCKED", ""], body)


@lane_app.command("set")
@handles_errors
def lane_set(
    name: str = typer.Argument(..., metavar="LANE", autocompletion=lanes),
    concurrency: int = typer.Option(..., "--concurrency", "-c", help="Jobs at once; 0 pauses the lane."),
    create: bool = typer.Option(False, "--create", help="Make the lane if it does not exist yet."),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Set a lane's concurrency now: no restart, running jobs untouched; kept across restarts."""
    res = call("lane_set", lane=name, concurrency=concurrency, create=create)
    if as_json:
        emit_json(res)
        return
    was = res["was"]
    text = f"lane {name}: concurrency {res['concurrency']}"
    if was["concurrency"] != res["concurrency"]:
        text += f" (was {was['concurrency']})"
    if res["paused"] != was["paused"]:
        text += ", paused" if res["paused"] else ", resumed"
    elif res["paused"]:
        text += ", paused"
    typer.echo(text)


@lane_app.command("rm")
@handles_errors
def lane_rm(name: str = typer.Argument(..., metavar="LANE", autocompletion=lanes)) -> None:
    """Forget a lane that has no blocked, queued or running jobs (say, a typo)."""
    call("lane_rm", lane=name)
    typer.echo(f"lane {name} removed")

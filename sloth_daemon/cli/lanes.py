"""`sloth lane ls | set | rm`: lanes and their concurrency, live.

`lane set` takes effect at once (running jobs are never touched) and
survives restarts; `lane ls` reads the queue file when no daemon answers."""

from __future__ import annotations

from typing import Any

import typer

from sloth_daemon.cli.app import call, call_or_read, emit_json


def lane_ls(*, as_json: bool) -> None:
    """`sloth lane ls` (its help and options: commands.py)."""
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


def lane_set(*, name: str, concurrency: int, create: bool, as_json: bool) -> None:
    """`sloth lane set` (its help and options: commands.py). ``-c 0`` pauses
    the lane, new (with --create) or not: it keeps its concurrency (a new
    lane the default) for `sloth resume`, as a lane of 0 slots could never
    be resumed; the line says so."""
    new = create and name not in call("lanes")["lanes"]
    res = call("lane_set", lane=name, concurrency=concurrency, create=create)
    if as_json:
        emit_json({**res, "created": new})
        return
    was = res["was"]
    text = f"lane {name}: {'created; ' if new else ''}concurrency {res['concurrency']}"
    if was["concurrency"] != res["concurrency"] and not new:
        text += f" (was {was['concurrency']})"
    if res["paused"] != was["paused"] and not new:
        text += ", paused" if res["paused"] else ", resumed"
    elif res["paused"]:
        text += ", paused"
    if concurrency == 0:
        text += f" (-c 0 pauses a lane; `sloth resume {shell_word(name)}` runs its jobs again)"
    typer.echo(text)


def shell_word(s: str) -> str:
    import shlex

    return shlex.quote(s)


def lane_rm(*, name: str) -> None:
    """`sloth lane rm` (its help and options: commands.py)."""
    call("lane_rm", lane=name)
    typer.echo(f"lane {name} removed")

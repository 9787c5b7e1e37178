"""`sloth lane ls | set | rm`: lanes and their concurrency, live.

`lane set` takes effect at once (running jobs are never touched) and
survives restarts; `lane ls` reads the queue file when no daemon answers.
No Typer (the fast path runs `lane ls`): each prints with output.echo and
returns its exit code."""

from __future__ import annotations

from sloth_daemon.cli.connection import call, call_or_read, connect

from sloth_daemon.cli.output import echo, emit_json

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


def lane_ls(*, as_json: bool) -> int:
    """`sloth lane ls` (its help and options: commands.py)."""
    res = call_or_read("lanes")
    if as_json:
        emit_json(res)
        return 0
    echo(_table(res["lanes"]))
    if res.get("paused_all"):
        echo("every lane is paused (`sloth resume`)")
    return 0


def _table(rows: dict[str, Any]) -> str:
    from sloth_daemon.cli import render

    body = [[name, str(r["concurrency"]), r["source"], str(r["running"]), str(r["queued"]), str(r["blocked"]),
             "paused" if r["paused"] else ""] for name, r in rows.items()]
    return render.table(["LANE", "SLOTS", "FROM", "RUNNING", "QUEUED", "BLOCKED", ""], body)


def lane_set(*, name: str, concurrency: int, create: bool, as_json: bool) -> int:
    """`sloth lane set` (its help and options: commands.py). ``-c 0`` pauses
    the lane, new (with --create) or not: it keeps its concurrency (a new
    lane the default) for `sloth resume`, as a lane of 0 slots could never
    be resumed; the line says so."""
    with connect() as c:  # started if none runs, for both calls ("lanes" alone never starts one)
        new = create and name not in c.call("lanes")["lanes"]
        res = c.call("lane_set", lane=name, concurrency=concurrency, create=create)
    if as_json:
        emit_json({**res, "created": new})
        return 0
    was = res["was"]
    text = f"lane {name}: {'created; ' if new else ''}concurrency {res['concurrency']}"
    if was["concurrency"] != res["concurrency"] and not new:
        text += f" (was {was['concurrency']})"
    if res["paused"] != was["paused"] and not new:
        text += ", paused" if res["paused"] else ", resumed"
    elif res["paused"]:
        text += ", paused"
    if concurrency == 0:
        from sloth_daemon.text import shell_command

        text += f" (-c 0 pauses a lane; `{shell_command('sloth', 'resume', name)}` runs its jobs again)"
    echo(text)
    for line in res.get("held", ()):  # jobs that need more slots than the lane now has
        echo(line)
    return 0


def lane_rm(*, name: str) -> int:
    """`sloth lane rm` (its help and options: commands.py)."""
    call("lane_rm", lane=name)
    echo(f"lane {name} removed")
    return 0

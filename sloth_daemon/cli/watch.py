"""Waiting and watching: `sloth wait` and `ls --watch` (how a wait shows
what it waits for is waiting.py's, shared with `add --wait`)."""

from __future__ import annotations

import sys
import time
from typing import Callable, List, Optional

import typer

from sloth_daemon.cli.app import app, handles_errors, parse_id
from sloth_daemon.cli.complete import job_ids


@app.command("wait")
@handles_errors
def wait_cmd(
    job_ids_: List[str] = typer.Argument(..., metavar="ID...", autocompletion=job_ids),
    as_json: bool = typer.Option(False, "--json", help='{"jobs": [...]} as they ended.'),
) -> None:
    """Block until the jobs end, telling each outcome; exit 0 if all are done,
    5 if any failed or was cancelled."""
    from sloth_daemon.cli.waiting import wait_for

    raise typer.Exit(wait_for([parse_id(j) for j in job_ids_], stream=sys.stdout, as_json=as_json))


def watch_ls(text_for: Callable[[Optional[int]], str], interval: str) -> None:
    """Redraw ``text_for(rows)`` in place every ``interval`` until Ctrl-C
    (plain snapshots, one after another, when stdout is not a terminal)."""
    import shutil

    from sloth_daemon.durations import local_time, parse_duration

    every = max(0.2, parse_duration(interval, what="--interval"))
    tty = sys.stdout.isatty()
    try:
        while True:
            rows = max(5, shutil.get_terminal_size().lines - 6) if tty else None
            text = f"sloth ls, every {interval} ({local_time(time.time())}; Ctrl-C to stop)\n\n{text_for(rows)}\n"
            sys.stdout.write(("\x1b[H\x1b[2J" if tty else "") + text + ("" if tty else "\n"))
            sys.stdout.flush()
            time.sleep(every)
    except KeyboardInterrupt:
        return

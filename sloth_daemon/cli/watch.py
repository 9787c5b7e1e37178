"""Waiting and watching: `sloth wait` and `ls --watch` (how a wait shows
what it waits for is waiting.py's, shared with `add --wait`). No Typer:
`wait` runs on the fast path."""

from __future__ import annotations

import sys
import time
from sloth_daemon.cli.base import parse_id

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Callable, Optional


def wait(job_ids: Optional[list[str]], as_json: bool) -> int:
    """`sloth wait [ID...]`: the exit code is the outcome (0 all done, 5 not,
    130 on Ctrl-C). No id: the latest job (as `tsp -w`), said on stderr.
    Runs on the fast path (no Typer)."""
    from sloth_daemon.cli.waiting import wait_for

    if job_ids:
        ids = [parse_id(j) for j in job_ids]
    else:
        from sloth_daemon.cli.edge import echo
        from sloth_daemon.cli.latest import latest_job_id

        ids = [latest_job_id()]
        echo(f"waiting for job {ids[0]} (the latest)", err=True)
    return wait_for(ids, stream=sys.stdout, as_json=as_json)


def watch_ls(text_for: Callable[[Optional[int]], str], interval: str) -> None:
    """Redraw ``text_for(rows)`` in place every ``interval`` until Ctrl-C
    (plain snapshots, one after another, when stdout is not a terminal)."""
    import shutil

    from sloth_daemon.cli.render import use_colour
    from sloth_daemon.durations import local_time, parse_duration
    from sloth_daemon.text import for_terminal

    every = max(0.2, parse_duration(interval, what="--interval"))
    tty = sys.stdout.isatty()
    try:
        while True:
            rows = max(5, shutil.get_terminal_size().lines - 6) if tty else None
            text = f"sloth ls, every {interval} ({local_time(time.time())}; Ctrl-C to stop)\n\n{text_for(rows)}\n"
            shown = for_terminal(text, colours=use_colour())  # the listing's text, as edge.echo writes it
            sys.stdout.write(("\x1b[H\x1b[2J" if tty else "") + shown + ("" if tty else "\n"))
            sys.stdout.flush()
            time.sleep(every)
    except KeyboardInterrupt:
        return

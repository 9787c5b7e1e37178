"""`sloth timeline` (issue 31; docs/timeline.md): the last day (``--since``)
on one time axis, one row per lane (or per job with ``--jobs``): runs as
bars, failures marked, waiting shaded, the machine's sleeps and the
daemon's downtime as labelled gaps; in the terminal (text.py) or as one
self-contained page (``--html FILE``: page.py).

The data is the daemon's ``timeline`` op, or, with no daemon, the same read
from the queue read-only (cli/offline.py; both backends/timeline.py).
Imported only by this command: the daily commands never load it. The
fast path runs it (no Typer: echo, an exit code, SlothError), so it
starts in ~0.1 s instead of the Typer app's ~0.3 s.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Optional

from sloth_daemon.cli.connection import call_or_read, log_paths
from sloth_daemon.cli.output import echo, emit_json
from sloth_daemon.durations import parse_duration
from sloth_daemon.errors import BadRequest

LOG_LINES = 40  # of each job's latest attempt, embedded in the page
LOG_BYTES = 8192  # ... at most, per job
PAGE_LOG_BYTES = 2 << 20  # all the page's logs together: past it, a job's detail says so


def timeline(*, since: str, lane: Optional[str], jobs: bool, html: Optional[Path], as_json: bool) -> int:
    """`sloth timeline`: draw it here, or write the page (and say where)."""
    from sloth_daemon.backends.timeline import MAX_SINCE_S

    since_s = parse_duration(since, what="--since")
    if not 0 < since_s <= MAX_SINCE_S:
        raise BadRequest(f"bad --since: {since!r} (more than nothing, at most 90 days)",
                         hint="E.g. --since 24h, 90m, 7d.")
    if html is not None and not html.parent.is_dir():
        raise BadRequest(f"--html: no folder {html.parent}", hint="Name a file in a folder that exists.")
    data = call_or_read("timeline", since_s=since_s, **({"lane": lane} if lane is not None else {}))
    if lane is not None and not data["jobs"]:  # nothing in it: a typo, or a lane that is not (said as ls says it)
        from sloth_daemon.cli.ls import check_lane

        check_lane(lane)
    if as_json:
        emit_json(data)
        return 0
    if html is not None:
        from sloth_daemon.cli.timeline.page import write

        _attach_logs(data)
        write(data, html, by_job=jobs)
        echo(f"wrote {html} ({_size(html)}): open it in a browser")
        return 0
    from sloth_daemon.cli import render
    from sloth_daemon.cli.timeline.text import MIN_WIDTH, draw

    width = max(MIN_WIDTH, render.terminal_width() or _columns())
    echo(draw(data, by_job=jobs, width=width, colour=render.use_colour(), unicode=_unicode()))
    return 0


def _attach_logs(data: dict[str, Any]) -> None:
    """Each job's latest log lines, capped (LOG_LINES, LOG_BYTES, and
    PAGE_LOG_BYTES for the page); ``log_note`` says why there are none."""
    from sloth_daemon.cli.render import tail_lines

    where, left = log_paths(), PAGE_LOG_BYTES
    for job in reversed(data["jobs"]):  # the newest first: they matter most
        if not job.get("attempts"):
            job["log"], job["log_note"] = [], "never ran"
            continue
        if left <= 0:
            job["log"], job["log_note"] = [], f"not embedded: the page holds {PAGE_LOG_BYTES >> 20} MB of logs at most"
            continue
        lines = tail_lines(str(where.job_log(job["id"], job["attempts"])), LOG_LINES, LOG_BYTES)
        left -= sum(len(ln) + 1 for ln in lines)
        job["log"] = lines
        job["log_note"] = "" if lines else "no log here (empty, pruned, or kept by the machine that ran it)"


def _size(path: Path) -> str:
    n = path.stat().st_size
    return f"{n} bytes" if n < 10_000 else f"{n / 1024:.0f} KB" if n < 10 << 20 else f"{n / (1 << 20):.0f} MB"


def _columns() -> int:
    """Not a terminal: $COLUMNS if it is a number, else 100."""
    value = os.environ.get("COLUMNS", "")
    return int(value) if value.isdigit() else 100


def _unicode() -> bool:
    import sys

    return "utf" in (getattr(sys.stdout, "encoding", None) or "").lower()

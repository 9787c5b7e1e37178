"""What `sloth ls` does once its options are read (`ls --watch` too; a
listing of any size streamed: ls_stream.py). Both readers of the command
line end here, with the options commands.py declares: the Typer app
(typer_app.py) and the fast path (fast.py). No Typer, and nothing heavy
unless an option needs it (the state names, --watch).
"""

from __future__ import annotations

from sloth_daemon import errors
from sloth_daemon.cli.connection import call_or_read
from sloth_daemon.cli.output import echo, emit_json
from sloth_daemon.cli.commands import DEFAULT_ROWS, RECENT_FINISHED
from sloth_daemon.cli.values import comma_list

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable, Optional, Sequence

PAGE = 100_000  # jobs per request when a listing is fetched whole
RECENT = RECENT_FINISHED  # finished jobs in the default view
SMALL = 1_000  # `ls --json --limit N` up to this: one `list` answer; past it (or without), streamed


def ls(state: Optional[Sequence[str]], lane: Optional[str], all_: bool, limit: Optional[int], offset: int,
       as_json: bool, *, watch: bool = False, interval: str = "2s", host: Optional[str] = None,
       since: Optional[str] = None, columns: Optional[Sequence[str]] = None, batch: Optional[str] = None) -> None:
    """`sloth ls` with these options (commands.py says what each means)."""
    if watch and as_json:
        raise errors.BadRequest("--watch redraws a table; --json prints once", hint="Use one or the other.")
    args = {**ls_args(state, lane, all_, limit, offset, as_json), "host": host}
    if columns:
        from sloth_daemon.cli.progress_view import check_columns
        try:
            picked = check_columns(comma_list(columns) or [])
        except ValueError as e:
            raise errors.BadRequest(str(e), hint="e.g. `sloth ls --columns cpu,mem,wall`.") from None
    else:
        picked = []
    if batch is not None:
        from sloth_daemon.cli.many_jobs import find_batch

        args["batch"] = find_batch(batch, read=True)["batch"]["id"]
    after = None
    if since is not None:
        from sloth_daemon.durations import parse_since

        after = parse_since(since)
    if watch:
        # -n N: N rows; without it, as many as the terminal has room for
        watch_ls(lambda rows: ls_text(dict(args, limit=rows if limit is None else limit), after, picked), interval)
        return
    if after is not None:
        res = since_listing(args, after)
        emit_json(as_printed(res)) if as_json else echo(_text(res, args, picked))
        return
    if as_json:
        if args["limit"] is None or args["limit"] > SMALL:
            from sloth_daemon.cli.ls_stream import print_json

            print_json(args)  # as it arrives, whatever the number of jobs
        else:
            emit_json(timed(fetch(args)))
        return
    if args["limit"] is None:  # --all: however many, a block of rows at a time
        from sloth_daemon.cli.ls_stream import print_table

        print_table(args, picked)
        return
    echo(ls_text(args, None, picked))


def timed(res: dict[str, Any]) -> dict[str, Any]:
    """A listing's jobs with waited_s and ran_s (render.timing)."""
    import time

    from sloth_daemon.cli.render import with_timing

    now = time.time()
    return as_printed({**res, "jobs": [with_timing(j, now) for j in res["jobs"]]})


def as_printed(res: dict[str, Any]) -> dict[str, Any]:
    """A listing as `ls --json` prints it: without ``paused`` (what the lines under the table say,
    from a daemon's listing), so its shape is the same with a daemon or without."""
    return {k: v for k, v in res.items() if k != "paused"}


def ls_args(state: Optional[Sequence[str]], lane: Optional[str], all_: bool, limit: Optional[int], offset: int,
            as_json: bool) -> dict[str, Any]:
    """The list op's arguments. The table shows DEFAULT_ROWS rows and the
    RECENT latest finished jobs; --json (for scripts, which must not miss
    a job nobody sees was left out) every job unless --limit says fewer."""
    states = _states(comma_list(state) or []) if state else None
    if limit is not None and limit < 1 or offset < 0:
        raise errors.BadRequest("--limit must be at least 1 and --offset at least 0")
    if lane is not None:
        check_lane(lane)
    rows = limit if limit is not None else (None if all_ or as_json else DEFAULT_ROWS)
    return {"states": states, "lane": lane, "limit": rows,
            "offset": offset, "finished_limit": None if all_ or state or as_json else RECENT}


def since_listing(args: dict[str, Any], after: float) -> dict[str, Any]:
    """The jobs of ``args``'s selection that were added, started or ended
    at ``after`` or later (every one read, filtered here: one pass, a chunk
    in memory at a time), then the page ``args`` asks for. ``counts`` and
    ``total`` are of those jobs."""
    import time

    from sloth_daemon.cli.ls_stream import _source
    from sloth_daemon.cli.render import with_timing

    a = {k: v for k, v in dict(args, limit=None, offset=0, finished_limit=None).items() if v is not None}
    head, jobs, rest = _source(a)
    now, picked = time.time(), []
    for j in jobs:
        started = (j.get("runner") or {}).get("started_at") if j["attempts"] else None
        if any(t is not None and t >= after for t in (j["created_at"], started, j.get("finished_at"))):
            picked.append(j)
    rest()
    counts = {s: 0 for s in head["counts"]}
    for j in picked:
        counts[j["state"]] = counts.get(j["state"], 0) + 1
    off, lim = args["offset"], args["limit"]
    page = picked[off:] if lim is None else picked[off:off + lim]
    return {"jobs": [with_timing(j, now) for j in page], "total": len(picked), "counts": counts,
            "offset": off, "left_out": len(picked) - off - len(page), "lanes": head.get("lanes", {}),
            "since": after, **({"paused": head["paused"]} if "paused" in head else {})}


def _states(given: Sequence[str]) -> list[str]:
    from sloth_daemon.checks import STATE_NAMES, state_name  # not models: `ls --state` stays light

    for s in given:  # bad usage is exit 2 whether or not the daemon runs
        if s not in STATE_NAMES and s != "claimed":
            raise errors.BadRequest(f"unknown state {s!r}", hint=f"States: {', '.join(STATE_NAMES)}.")
    return [state_name(s) for s in given]


def check_lane(lane: str) -> None:
    """LaneNotFound (with the lanes there are) for a lane that does not exist
    (``known``: listed or not: a lane a job's --lane made is listed only
    while it has active jobs; a daemon from before says only ``lanes``)."""
    res = call_or_read("lanes")
    if lane not in res.get("known", res["lanes"]):
        raise errors.LaneNotFound(lane, sorted(res["lanes"]))


def fetch(args: dict[str, Any]) -> dict[str, Any]:
    """A listing; with no limit, every page of it, so nothing is cut."""
    a = {k: v for k, v in args.items() if v is not None}
    if args.get("limit") is not None:
        return call_or_read("list", **a)
    res = call_or_read("list", **a, limit=PAGE)
    while res["left_out"] > 0:
        more = call_or_read("list", **dict(a, offset=res["offset"] + len(res["jobs"])), limit=PAGE)
        if not more["jobs"]:
            break
        res["jobs"] += more["jobs"]
        res["left_out"] = more["left_out"]
    return res


def ls_text(args: dict[str, Any], since: Optional[float] = None, picked: Sequence[str] = ()) -> str:
    res = fetch(args) if since is None else since_listing(args, since)
    return _text(res, args, picked)


def _text(res: dict[str, Any], args: dict[str, Any], picked: Sequence[str] = ()) -> str:
    from sloth_daemon.cli import render
    from sloth_daemon.cli.ls_stream import extra_columns, paused_lines, summary

    out = []
    if res["jobs"]:
        extra = extra_columns(res["jobs"], picked)
        rows, sts = render.job_rows(res["jobs"], extra)
        out.append(render.table(render.job_headers(extra), rows, sts, fit=render.terminal_width()))
    if "since" in res:
        from sloth_daemon.durations import local_time

        out.append(f"since {local_time(res['since'])}: jobs added, started or ended since then")
    paused = sum(render.shown_state(j) == "paused" for j in res["jobs"])
    return "\n".join(out + summary(res, len(res["jobs"]), paused) + paused_lines(args.get("lane"), res.get("paused")))


def watch_ls(text_for: Callable[[Optional[int]], str], interval: str) -> None:
    """Redraw ``text_for(rows)`` in place every ``interval`` until Ctrl-C
    (plain snapshots, one after another, when stdout is not a terminal)."""
    import shutil
    import sys
    import time

    from sloth_daemon.cli.render import use_colour
    from sloth_daemon.durations import local_time, parse_duration
    from sloth_daemon.text import for_terminal

    every = max(0.2, parse_duration(interval, what="--interval"))
    tty = sys.stdout.isatty()
    try:
        while True:
            rows = max(5, shutil.get_terminal_size().lines - 6) if tty else None
            text = f"sloth ls, every {interval} ({local_time(time.time())}; Ctrl-C to stop)\n\n{text_for(rows)}\n"
            shown = for_terminal(text, colours=use_colour())  # the listing's text, as output.echo writes it
            sys.stdout.write(("\x1b[H\x1b[2J" if tty else "") + shown + ("" if tty else "\n"))
            sys.stdout.flush()
            time.sleep(every)
    except KeyboardInterrupt:
        return

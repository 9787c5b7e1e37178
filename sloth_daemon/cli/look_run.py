"""What `sloth ls` and `sloth show` do once their options are read. Both
readers of the command line end here, with the options commands.py
declares: the Typer app (full.py) and the fast path (fast.py). No Typer, and nothing heavy unless an option
needs it (the state names, --watch).
"""

from __future__ import annotations

from sloth_daemon import errors
from sloth_daemon.cli.base import call_or_read, emit_json, log_paths, parse_id
from sloth_daemon.cli.commands import DEFAULT_ROWS
from sloth_daemon.cli.edge import echo

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Optional, Sequence

PAGE = 100_000  # jobs per request when a listing is fetched whole
RECENT = 10  # finished jobs in the default view
SMALL = 1_000  # `ls --json --limit N` up to this: one `list` answer; past it (or without), streamed


# ------------------------------------------------------------------- ls
def ls(state: Optional[Sequence[str]], lane: Optional[str], all_: bool, limit: Optional[int], offset: int,
       as_json: bool, *, watch: bool = False, interval: str = "2s", host: Optional[str] = None) -> None:
    """`sloth ls` with these options (see look.ls for what each means)."""
    if watch and as_json:
        raise errors.BadRequest("--watch redraws a table; --json prints once", hint="Use one or the other.")
    args = {**ls_args(state, lane, all_, limit, offset, as_json), "host": host}
    if watch:
        from sloth_daemon.cli.watch import watch_ls

        watch_ls(lambda rows: ls_text(dict(args, limit=rows)), interval)
        return
    if as_json:
        if args["limit"] is None or args["limit"] > SMALL:
            from sloth_daemon.cli.look_stream import print_json

            print_json(args)  # as it arrives, whatever the number of jobs
        else:
            emit_json(fetch(args))
        return
    if args["limit"] is None:  # --all: however many, a block of rows at a time
        from sloth_daemon.cli.look_stream import print_table

        print_table(args)
        return
    echo(ls_text(args))


def ls_args(state: Optional[Sequence[str]], lane: Optional[str], all_: bool, limit: Optional[int], offset: int,
            as_json: bool) -> dict[str, Any]:
    states = _states(state) if state else None
    if limit is not None and limit < 1 or offset < 0:
        raise errors.BadRequest("--limit must be at least 1 and --offset at least 0")
    if lane is not None:
        check_lane(lane)
    rows = limit if limit is not None else (None if all_ or as_json else DEFAULT_ROWS)
    return {"states": states, "lane": lane, "limit": rows,
            "offset": offset, "finished_limit": None if all_ or state else RECENT}


def _states(given: Sequence[str]) -> list[str]:
    from sloth_daemon.models import STATE_NAMES, state_name

    for s in given:  # bad usage is exit 2 whether or not the daemon runs
        if s not in STATE_NAMES and s != "claimed":
            raise errors.BadRequest(f"unknown state {s!r}", hint=f"States: {', '.join(STATE_NAMES)}.")
    return [state_name(s) for s in given]


def check_lane(lane: str) -> None:
    """LaneNotFound (with the lanes there are) for a lane that does not exist."""
    known = call_or_read("lanes")["lanes"]
    if lane not in known:
        raise errors.LaneNotFound(lane, sorted(known))


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


def ls_text(args: dict[str, Any]) -> str:
    from sloth_daemon.cli import render

    res = fetch(args)
    out = []
    if res["jobs"]:
        rows, sts = render.job_rows(res["jobs"])
        out.append(render.table(render.JOB_HEADERS, rows, sts))
    from sloth_daemon.cli.look_stream import summary

    return "\n".join(out + summary(res, len(res["jobs"])))


# ----------------------------------------------------------------- show
def show(job_ids: Sequence[str], as_json: bool) -> None:
    """`sloth show ID...`: each job with its history; a failed one's last log lines."""
    from sloth_daemon.cli import render

    ids = [parse_id(j) for j in job_ids]
    res = call_or_read("show", ids=ids)
    if as_json:
        emit_json(res)
        return
    blocks = []
    for j in res["jobs"]:
        tail = render.tail_lines(str(log_paths().job_log(j["id"], j["attempts"]))) \
            if j["state"] == "failed" and j["attempts"] else []
        blocks.append(render.show_job(j, j["events"], prereqs=j["prereqs"], dependents=j["dependents"],
                                      log_tail=tail))
    echo("\n\n".join(blocks))

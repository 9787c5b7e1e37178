"""`sloth ls --json` (and `ls --all`) of any size: the listing written to
stdout as it arrives, with the memory of one chunk whatever the number of jobs.

The text is dumps_pretty's of the whole listing, byte for byte (one JSON
document, `{"counts", "jobs", "lanes", "left_out", "offset", "total"}`),
written a job at a time (protocol.pretty_stream): the counts come first,
the jobs as the daemon reads them (the ``scan`` op, protocol v3), what is
known only at the end last. When no daemon answers, the queue is read the
same way in this process (offline.scan); a daemon older than the scan op
is asked a page of ``list`` at a time (each page written, then dropped).

If the stream breaks (the daemon dies or stops), the error is raised
after what was written: the document on stdout is cut short, so it does
not parse, and the exit code is not 0 -- never a listing that looks whole.
"""

from __future__ import annotations

import sys

from sloth_daemon import errors
from sloth_daemon.cli.connection import call_or_read, connect, tell_offline

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable, Iterator, Optional, Sequence

    Source = tuple[dict[str, Any], Iterator[dict[str, Any]], Callable[[], dict[str, Any]]]

PAGE = 10_000  # jobs per `list` request to a daemon older than `scan` (each answer quick and small)
BLOCK = 1_000  # rows of `ls --all` laid out at a time


def print_json(args: dict[str, Any]) -> None:
    """Write the listing of ``args`` (list's arguments) to stdout as JSON."""
    from sloth_daemon.protocol import pretty_stream

    import time

    from sloth_daemon.cli.render import with_timing

    a = {k: v for k, v in args.items() if v is not None}
    head, jobs, rest = _source(a)
    write, now = sys.stdout.write, time.time()
    timed = (with_timing(j, now) for j in jobs)
    for piece in pretty_stream({"counts": head["counts"]}, "jobs", timed,
                               lambda: {"lanes": head["lanes"], "offset": head["offset"], "total": head["total"],
                                        **rest()}):
        write(piece)
    write("\n")
    sys.stdout.flush()


def print_table(args: dict[str, Any], picked: Sequence[str] = ()) -> None:
    """`sloth ls --all`: the table a block of BLOCK rows at a time (each
    block's columns at least as wide as the blocks before), then the lines
    of ls_text under it (what is paused: paused_lines, from the head;
    ``picked``: ls --columns; PROGRESS shows if the first block, which holds
    the running jobs, has any)."""
    from sloth_daemon.cli import render
    from sloth_daemon.cli.output import echo

    head, jobs, rest = _source({k: v for k, v in args.items() if v is not None})
    shown, block, paused_jobs = 0, [], 0
    extra: Any = None
    widths: list[int] = []
    fit = render.terminal_width()

    def put(block: list[dict[str, Any]]) -> None:
        nonlocal extra, widths
        if extra is None:
            extra = extra_columns(block, picked)
            widths = [len(h) for h in render.job_headers(extra)]
        echo(render.table(render.job_headers(extra), *render.job_rows(block, extra), widths=widths,
                          header=not shown, fit=fit))

    for job in jobs:
        block.append(job)
        paused_jobs += render.shown_state(job) == "paused"
        if len(block) == BLOCK:
            put(block)
            shown, block = shown + len(block), []
    if block:
        put(block)
        shown += len(block)
    under = summary({**head, **rest()}, shown, paused_jobs) + paused_lines(args.get("lane"), head.get("paused"))
    echo("\n".join(under))


def _source(a: dict[str, Any]) -> Source:
    """(head, jobs, rest): the daemon's stream, or the queue read here when
    no daemon runs, or pages of a daemon that has no ``scan``."""
    try:
        client = connect(start=False)
    except errors.DaemonNotRunning:
        return _offline(a)
    try:
        return _streamed(client, a)
    except errors.ProtocolError:  # an older daemon: "version 3 is not supported"
        client.close()
        return _paged(a)
    except BaseException:
        client.close()
        raise


def _streamed(client: Any, a: dict[str, Any]) -> Source:
    events = client.stream("scan", **a)
    head = next(events)  # the request's error, if any, is raised here, before anything is written
    end: dict[str, Any] = {}

    def jobs() -> Iterator[dict[str, Any]]:
        with client:
            for ev in events:
                if ev.get("kind") == "jobs":
                    yield from ev["jobs"]
                elif ev.get("kind") == "end":
                    end.update(ev["result"])

    return head, jobs(), lambda: {"left_out": end["left_out"]}


def _offline(a: dict[str, Any]) -> Source:
    from sloth_daemon.cli.connection import paths
    from sloth_daemon.cli.offline import scan as open_scan

    tell_offline()
    scan, explain = open_scan(paths(), a)

    def jobs() -> Iterator[dict[str, Any]]:
        try:
            while chunk := scan.next():
                explain(part := [j.to_dict() for j in chunk])
                yield from part
        finally:
            scan.close()

    return scan.head, jobs(), scan.tail


def _paged(a: dict[str, Any]) -> Source:
    from sloth_daemon.cli.connection import call

    limit = a.pop("limit", None)
    first = call("list", **a, limit=min(PAGE, limit or PAGE))
    last = first

    def jobs() -> Iterator[dict[str, Any]]:
        nonlocal last
        page, sent = first, 0
        while True:
            yield from page["jobs"]
            sent += len(page["jobs"])
            room = PAGE if limit is None else min(PAGE, limit - sent)
            if page["left_out"] <= 0 or not page["jobs"] or room <= 0:
                return
            page = last = call("list", **dict(a, offset=a.get("offset", 0) + sent), limit=room)

    return first, jobs(), lambda: {"left_out": last["left_out"], "total": last["total"]}


def extra_columns(jobs: Sequence[dict[str, Any]], picked: Sequence[str]) -> list[Any]:
    """progress_view.columns, which has none to add unless a column was picked or a job shows
    progress: then alone is progress_view imported (~0.3 ms of every `sloth ls`)."""
    if not picked and not any(j.get("progress") for j in jobs):
        return []
    from sloth_daemon.cli.progress_view import columns

    return columns(jobs, picked)


def paused_lines(lane: Optional[str], told: Optional[dict[str, Any]] = None) -> list[str]:
    """``paused: everything (`sloth resume`)`` / ``paused lanes: video``:
    what holds jobs back, which the table cannot show. ``told``: what the
    daemon's listing said is paused (Control.paused); without it (a daemon
    from before, or the queue read with none) ``lanes`` is asked."""
    if told is None:
        res = call_or_read("lanes")
        told = {"all": res.get("paused_all", False), "lanes": [k for k, v in res["lanes"].items() if v.get("paused")]}
    names = sorted(k for k in told["lanes"] if lane in (None, k))
    out = []
    if told["all"]:
        return ["paused: everything; nothing new starts until `sloth resume`"]
    if names:
        shown = ", ".join(names[:10]) + (f" (and {len(names) - 10} more)" if len(names) > 10 else "")
        out.append(f"paused lane{'s' if len(names) > 1 else ''}: {shown}; `sloth resume LANE` starts "
                   "its jobs again")
    return out


def summary(res: dict[str, Any], shown: int, paused: int = 0) -> list[str]:
    """The lines under the table: no jobs, counts (``paused``: the running
    jobs listed that are paused on request), busy lanes, how many were left out."""
    from sloth_daemon.cli import render

    out = [] if shown else ["no jobs" if not res["total"] else "no jobs on this page"]
    out.append(render.counts_line(res["counts"], paused))
    busy = {k: v for k, v in res.get("lanes", {}).items() if any(v.values())}
    if len(busy) > 1:
        out.append("lanes: " + render.lanes_line(busy))
    if res["left_out"] > 0 or res["offset"]:
        out.append(f"{res['left_out']} more not shown (rows {res['offset'] + 1}-{res['offset'] + shown}"
                   f" of {res['total']}): `sloth ls --all`, --state S, --lane L or --limit N")
    return out

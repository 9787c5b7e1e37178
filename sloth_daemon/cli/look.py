"""Commands that read: logs and status (ls and show are look_run.py's).
Each asks the daemon, or, when none answers, reads the queue file
read-only and says so on stderr (base.call_or_read); only `logs -f` needs
a daemon, and starts one if none runs (base.connect). Their options are
declared in commands.py.

No Typer: the fast path runs both (commands.py), so each prints with
edge.echo, returns its exit code and raises SlothError.
"""

from __future__ import annotations

import sys

from sloth_daemon import errors
from sloth_daemon.cli.edge import echo
from sloth_daemon.cli.base import call_or_read, connect, emit_json, parse_id

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Optional


# ----------------------------------------------------------------- logs
def logs(*, job_id: Optional[str], attempt: Optional[int], follow: bool, tail: Optional[int],
         path_only: bool) -> int:
    """`sloth logs [ID]`: the log of an attempt, its tail, its path, or
    followed live; no ID: the latest job of yours that ran (said on stderr). What the job
    printed goes to stdout; every note about it (nothing printed, no such
    file, never started) to stderr."""
    if job_id is None:
        from sloth_daemon.cli.latest import latest_job_id

        jid = latest_job_id(ran=True)
        echo(f"sloth: logs of the latest job that ran, {jid}", err=True)
    else:
        jid = parse_id(job_id)
    if tail is not None and tail < 0:
        raise errors.BadRequest(f"--tail must be at least 0, got {tail}", hint="e.g. `sloth logs 12 -n 20`.")
    args: dict[str, Any] = {"id": jid, **({"attempt": attempt} if attempt is not None else {})}
    if follow and not path_only:
        return _follow(args, through=attempt is None)
    res = call_or_read("logs", **args)
    if path_only:
        echo(res["path"])
        _say_missing(res, jid)
        return 0
    if res.get("stored") or "data" in res:  # a shared queue: it ran on another machine
        _stored(res, tail)
        return 0
    if tail is not None:
        data = _tail(res["path"], tail)
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()
        if not data and tail > 0:
            _say_missing(res, jid, empty=True)
        return 0
    _cat(res["path"], jid, res["attempt"])
    return 0


def _say_missing(res: dict[str, Any], jid: int, *, empty: bool = False) -> None:
    """On stderr: the attempt's log file does not exist (it printed
    nothing, or is still to start), or it is empty."""
    import os

    try:
        size: Optional[int] = os.stat(res["path"]).st_size
    except OSError:
        size = None
    if size is None:
        echo(f"sloth: {res['path']} does not exist: job {jid} attempt {res['attempt']} has printed "
                   "nothing (a log file is made at its first output)", err=True)
    elif empty and size == 0:
        echo(f"sloth: job {jid} attempt {res['attempt']} has printed nothing", err=True)


def _tail(path: str, n: int) -> bytes:
    """The last ``n`` lines of a log file as the job wrote them (as tail -n:
    long lines whole, escapes untouched); b"" if it is missing."""
    import os

    from sloth_daemon.safefile import open_file

    if n <= 0:
        return b""
    try:
        with os.fdopen(open_file(path), "rb") as f:  # never through a link, only a regular file
            pos = f.seek(0, os.SEEK_END)
            data = b""
            while pos > 0 and data.count(b"\n") <= n:  # n + 1 newlines: the last n lines are whole
                step = min(pos, 1 << 16)
                pos -= step
                f.seek(pos)
                data = f.read(step) + data
    except FileNotFoundError:
        return b""
    except OSError as e:
        raise errors.LogUnreadable(path, e) from None
    cut = len(data) - 1 if data.endswith(b"\n") else len(data)
    for _ in range(n):
        cut = data.rfind(b"\n", 0, cut)
        if cut < 0:
            return data
    return data[cut + 1:]


def _stored(res: dict[str, Any], tail: Optional[int]) -> None:
    """The copy of the log that the machine that ran it stored in the shared
    queue (from the daemon, or read directly when none runs here)."""
    data = res.get("data")
    if data is None:
        with connect(timeout_s=None) as c:
            data = "".join(ev["data"] for ev in c.stream("follow", id=res["id"], attempt=res["attempt"], live=False)
                           if ev.get("kind") == "log")
    raw = data.encode("utf-8", "surrogateescape")
    if tail is not None:
        raw = b"".join(raw.splitlines(keepends=True)[-tail:] if tail > 0 else [])
    sys.stdout.buffer.write(raw)
    sys.stdout.buffer.flush()


def _cat(path: str, jid: int, attempt: int) -> None:
    import os

    from sloth_daemon.safefile import open_file  # paths.open_log without pathlib: `sloth logs` is fast

    try:
        wrote = 0
        with os.fdopen(open_file(path), "rb") as f:  # never through a link, only a regular file
            while chunk := f.read(1 << 16):
                sys.stdout.buffer.write(chunk)
                wrote += len(chunk)
        sys.stdout.buffer.flush()
    except FileNotFoundError:  # the attempt has printed nothing (no output, no file)
        echo(f"sloth: job {jid} attempt {attempt} has printed nothing", err=True)
        return
    except BrokenPipeError:
        raise
    except OSError as e:
        raise errors.LogUnreadable(path, e) from None
    if not wrote:
        echo(f"sloth: job {jid} attempt {attempt} has printed nothing", err=True)


def _follow(args: dict[str, Any], *, through: bool) -> int:
    """Stream the log; attempt marks go to stderr. The exit code is the
    job's outcome once it is final (0 done, 5 otherwise)."""
    out = sys.stdout.buffer
    final, wrote = None, False
    with connect(timeout_s=None) as c:
        for ev in c.stream("follow", **args, all_attempts=through):
            kind = ev.get("kind")
            if kind == "log":
                out.write(ev["data"].encode("utf-8", "surrogateescape"))
                out.flush()
                wrote = wrote or bool(ev["data"])
            elif kind == "attempt":
                prev = f" (the last one {ev['previous']})" if ev.get("previous") else ""
                echo(f"sloth: --- attempt {ev['attempt']}{prev} ---", err=True)
            elif kind == "end":
                final = ev["result"]["job"]
    if final is not None and not wrote:  # as `sloth logs` says it: silence would look like a hang that ended
        echo(f"sloth: job {args['id']} has printed nothing" + (f" in attempt {args['attempt']}" if "attempt" in args
                                                               else ""), err=True)
    if final is None or final["state"] not in ("done", "failed", "cancelled"):
        return 0
    return 0 if final["state"] == "done" else errors.EXIT_JOB_FAILED


# --------------------------------------------------------------- status
def status(*, as_json: bool) -> int:
    """`sloth status`: the daemon, counts, lanes, hosts, running and failed
    jobs (each with its command, or label, shortened)."""
    from sloth_daemon.cli import render
    from sloth_daemon.durations import format_duration, relative
    from sloth_daemon.text import showable

    st = _status()
    if as_json:
        emit_json(st)
        return 0
    d = st["daemon"]
    up = f"running, pid {d['pid']}, up {format_duration(d['uptime_s'])}, version {d['version']}" if d else None
    paused = sum(render.shown_state(j) == "paused" for j in st["running"])
    lines = [f"daemon   {up or 'not running (`sloth daemon start`)'}",
             f"jobs     {render.counts_line(st['counts'], paused)}",
             "lanes    " + "  ".join(f"{k} {v['running']}/{v['concurrency']}{' paused' if v['paused'] else ''}"
                                     for k, v in st["lanes"].items())]
    if st.get("hosts"):
        lines.append("hosts    " + "  ".join(_host_text(h, st.get("host")) for h in st["hosts"]))
    cond = st.get("conditions") or {}
    for why in sorted(set((cond.get("waiting") or {}).values())):
        lines.append(f"waiting  {_who(st['waiting'].get(why, []))}{_for(why)}")
    for lane, why in sorted((cond.get("lanes") or {}).items()):
        lines.append(f"waiting  lane {showable(lane)}{_for(why)}")
    if cond.get("resources"):
        lines.append("tokens   " + "  ".join(f"{showable(k)} {len(v['free'])}/{len(v['tokens'])} free"
                                           for k, v in cond["resources"].items()))
    for j in st["running"]:
        lines.append(f"{render.shown_state(j):<8} {j['id']:<6} {render.when(j)}  {render.command_text(j, 50)}")
    for j in st["failed"]:
        why = showable(j.get("message") or "")
        lines.append(_cut(f"failed   {j['id']:<6} {relative(j.get('finished_at')):>9}  {render.command_text(j, 40)}"
                          + (f": {why}" if why else ""), FAILED_WIDTH))
    echo("\n".join(lines))
    return 0


def glance() -> int:
    """Plain `sloth` (plain tsp lists the jobs): the day at a glance, as
    `sloth status` shows it, and where the rest is."""
    status(as_json=False)
    echo("every command: `sloth --help`; every job: `sloth ls`")
    return 0


FAILED_WIDTH = 110  # a failure's line, its command and why, at most
WAITING_LISTED = 200  # queued jobs read to name the ones a reason holds back


def _who(ids: list[int]) -> str:
    """``job 4``, ``jobs 4, 5``, ``jobs 4, 5, 6 and 9 more``; ``jobs`` when none were read."""
    if not ids:
        return "jobs"
    return ("job " if len(ids) == 1 else "jobs ") + ", ".join(map(str, ids[:3])) \
        + (f" and {len(ids) - 3} more" if len(ids) > 3 else "")


def _for(why: str) -> str:
    """A reason after whom it holds back: `` for mains power`` (its own ``waiting`` said once)."""
    from sloth_daemon.text import showable

    return f" {showable(why[len('waiting '):])}" if why.startswith("waiting ") else f": {showable(why)}"


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[:width - 1] + "…"


def _host_text(h: dict[str, Any], me: Optional[str]) -> str:
    from sloth_daemon.durations import format_duration

    notes = (["this"] if h["name"] == me else []) + list(h.get("tags") or [])
    seen = f"seen {format_duration(max(h['ago'], 0))} ago" if h.get("alive") else f"gone {format_duration(h['ago'])}"
    return f"{h['name']}{' (' + ', '.join(notes) + ')' if notes else ''} {seen}"


def _status() -> dict[str, Any]:
    """What status shows, asked over one connection (no daemon is started
    for it: the queue file is read instead)."""
    try:
        with connect(start=False) as c:
            d = c.call("status")
            running = c.call("list", states=["running"], limit=10)["jobs"]
            failed = c.call("list", states=["failed"], limit=3)["jobs"]
            queued = c.call("list", states=["queued"], limit=WAITING_LISTED)["jobs"] \
                if (d.get("conditions") or {}).get("waiting") else []
        daemon: Optional[dict[str, Any]] = {k: d[k] for k in ("pid", "uptime_s", "version")}
    except errors.DaemonNotRunning:
        daemon, queued = None, []  # no daemon: nobody judges conditions, nothing is said to wait on them
        d = call_or_read("status")
        running = call_or_read("list", states=["running"], limit=10)["jobs"]
        failed = call_or_read("list", states=["failed"], limit=3)["jobs"]
    waiting: dict[str, list[int]] = {}
    for j in queued:
        if j.get("wait_reason"):
            waiting.setdefault(j["wait_reason"], []).append(j["id"])
    return {"daemon": daemon, "counts": d["counts"], "lanes": d["lanes"], "running": running,
            "failed": failed, "host": d.get("host"), "hosts": d.get("hosts"), "conditions": d.get("conditions"),
            "waiting": waiting}

"""Commands that read: logs and status (ls and show are look_run.py's,
run by the fast path too). Each asks the daemon, or, when none answers,
reads the queue file read-only and says so on stderr (app.call_or_read);
only `logs -f` needs a daemon. Their options are declared in commands.py."""

from __future__ import annotations

import sys
from typing import Any, Optional

import typer

from sloth_daemon import errors
from sloth_daemon.cli.app import call_or_read, connect, emit_json, parse_id


# ----------------------------------------------------------------- logs
def logs(*, job_id: str, attempt: Optional[int], follow: bool, tail: Optional[int], path_only: bool) -> int:
    """`sloth logs ID`: the log of an attempt, its tail, its path, or followed live."""
    jid = parse_id(job_id)
    args: dict[str, Any] = {"id": jid, **({"attempt": attempt} if attempt is not None else {})}
    if follow and not path_only:
        return _follow(args, through=attempt is None)
    res = call_or_read("logs", **args)
    if path_only:
        typer.echo(res["path"])
        return 0
    if res.get("stored") or "data" in res:  # a shared queue: it ran on another machine
        _stored(res, tail)
        return 0
    if tail is not None:
        from sloth_daemon.cli.render import tail_lines

        for line in tail_lines(res["path"], max(tail, 0), max_bytes=max(16384, tail * 400)):
            typer.echo(line)
        return 0
    _cat(res["path"], jid, res["attempt"])
    return 0


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
    from pathlib import Path

    from sloth_daemon.paths import open_log

    try:
        with open_log(Path(path)) as f:  # never through a link, only a regular file
            while chunk := f.read(1 << 16):
                sys.stdout.buffer.write(chunk)
        sys.stdout.buffer.flush()
    except FileNotFoundError:  # the attempt has printed nothing (no output, no file)
        if sys.stderr.isatty():
            typer.echo(f"(job {jid} attempt {attempt} has printed nothing)", err=True)
    except BrokenPipeError:
        raise
    except OSError as e:
        raise errors.LogUnreadable(path, e) from None


def _follow(args: dict[str, Any], *, through: bool) -> int:
    """Stream the log; attempt marks go to stderr. The exit code is the
    job's outcome once it is final (0 done, 5 otherwise)."""
    out = sys.stdout.buffer
    final = None
    with connect(timeout_s=None) as c:
        for ev in c.stream("follow", **args, all_attempts=through):
            kind = ev.get("kind")
            if kind == "log":
                out.write(ev["data"].encode("utf-8", "surrogateescape"))
                out.flush()
            elif kind == "attempt":
                prev = f" (the last one {ev['previous']})" if ev.get("previous") else ""
                typer.echo(f"sloth: --- attempt {ev['attempt']}{prev} ---", err=True)
            elif kind == "end":
                final = ev["result"]["job"]
    if final is None or final["state"] not in ("done", "failed", "cancelled"):
        return 0
    return 0 if final["state"] == "done" else errors.EXIT_JOB_FAILED


# --------------------------------------------------------------- status
def status(*, as_json: bool) -> None:
    """`sloth status`: the daemon, counts, lanes, hosts, running and failed jobs."""
    from sloth_daemon.cli import render
    from sloth_daemon.durations import format_duration, relative
    from sloth_daemon.text import showable

    st = _status()
    if as_json:
        emit_json(st)
        return
    d = st["daemon"]
    up = f"running, pid {d['pid']}, up {format_duration(d['uptime_s'])}, version {d['version']}" if d else None
    typer.echo(f"daemon   {up or 'not running (`sloth daemon start`)'}")
    typer.echo(f"jobs     {render.counts_line(st['counts'])}")
    typer.echo("lanes    " + "  ".join(
        f"{k} {v['running']}/{v['concurrency']}{' paused' if v['paused'] else ''}" for k, v in st["lanes"].items()))
    if st.get("hosts"):
        typer.echo("hosts    " + "  ".join(_host_text(h, st.get("host")) for h in st["hosts"]))
    cond = st.get("conditions") or {}
    for why in sorted(set((cond.get("waiting") or {}).values())):
        typer.echo(f"waiting  {showable(why)}")
    for lane, why in sorted((cond.get("lanes") or {}).items()):
        typer.echo(f"waiting  lane {showable(lane)}: {showable(why)}")
    if cond.get("resources"):
        typer.echo("tokens   " + "  ".join(f"{showable(k)} {len(v['free'])}/{len(v['tokens'])} free"
                                           for k, v in cond["resources"].items()))
    for j in st["running"]:
        typer.echo(f"running  {j['id']:<6} {render.when(j)}  {render.command_text(j, 50)}")
    for j in st["failed"]:
        typer.echo(f"failed   {j['id']:<6} {relative(j.get('finished_at')):>9}  {showable(j.get('message', ''))}"[:100])


def _host_text(h: dict[str, Any], me: Optional[str]) -> str:
    from sloth_daemon.durations import format_duration

    notes = (["this"] if h["name"] == me else []) + list(h.get("tags") or [])
    seen = f"seen {format_duration(max(h['ago'], 0))} ago" if h.get("alive") else f"gone {format_duration(h['ago'])}"
    return f"{h['name']}{' (' + ', '.join(notes) + ')' if notes else ''} {seen}"


def _status() -> dict[str, Any]:
    try:
        from sloth_daemon.cli.app import call

        d = call("status")
        daemon = {k: d[k] for k in ("pid", "uptime_s", "version")}
    except errors.DaemonNotRunning:
        daemon = None
    base = call_or_read("status") if daemon is None else d
    running = call_or_read("list", states=["running"], limit=10)["jobs"]
    failed = call_or_read("list", states=["failed"], limit=3)["jobs"]
    return {"daemon": daemon, "counts": base["counts"], "lanes": base["lanes"], "running": running,
            "failed": failed, "host": base.get("host"), "hosts": base.get("hosts"),
            "conditions": base.get("conditions")}

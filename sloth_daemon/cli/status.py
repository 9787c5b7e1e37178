"""`sloth status` (and plain `sloth`, the day at a glance): the daemon,
counts, lanes, hosts, what waits and why, running and failed jobs. It asks
the daemon, or, when none answers, reads the queue file read-only and says
so on stderr (connection.call_or_read); it never starts a daemon. Its
options are declared in commands.py.

No Typer: the fast path runs it (commands.py), so it prints with
output.echo, returns its exit code and raises SlothError.
"""

from __future__ import annotations

from sloth_daemon import errors
from sloth_daemon.cli.connection import call_or_read, connect
from sloth_daemon.cli.output import echo, emit_json

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Optional


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
                                           + (f" ({sum(v['free_milli'].values()) / 1000:g} counting shares)"
                                              if v.get("free_milli") else "")
                                           for k, v in cond["resources"].items()))
    if (cond.get("gpus") or {}).get("error"):
        lines.append(f"gpus     nvidia-smi failed: {showable(cond['gpus']['error'])}")
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

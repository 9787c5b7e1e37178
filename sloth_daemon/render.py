"""Human output: tables, colours (off with NO_COLOR or when not a tty), job lines."""

from __future__ import annotations

import os
import shlex
import sys
import time
from typing import Any, Sequence

from .durations import format_duration, local_time, relative
from .text import showable

_COLOURS = {"queued": "33", "claimed": "36", "done": "32", "failed": "31", "cancelled": "90"}


def use_colour(stream: Any = None) -> bool:
    stream = stream or sys.stdout
    if "NO_COLOR" in os.environ or os.environ.get("TERM") == "dumb":
        return False
    return hasattr(stream, "isatty") and stream.isatty()


def paint(text: str, state: str) -> str:
    code = _COLOURS.get(state)
    return f"\x1b[{code}m{text}\x1b[0m" if code and use_colour() else text


def table(headers: Sequence[str], rows: Sequence[Sequence[str]], states: Sequence[str] | None = None) -> str:
    widths = [len(h) for h in headers]
    for r in rows:
        for i, cell in enumerate(r[:-1]):
            widths[i] = max(widths[i], len(cell))
    def fmt(r: Sequence[str]) -> str:
        cells = [c.ljust(widths[i]) for i, c in enumerate(r[:-1])] + [r[-1]]
        return "  ".join(cells).rstrip()
    out = [fmt(headers)]
    for i, r in enumerate(rows):
        line = fmt(r)
        if states is not None:
            st = states[i]
            line = line.replace(st, paint(st, st), 1)
        out.append(line)
    return "\n".join(out)


def command_text(job: dict[str, Any], width: int | None = 60) -> str:
    cmd = job["command"]
    if job.get("shell") and len(cmd) == 3 and cmd[1] == "-c":
        text = cmd[2]
    else:
        text = shlex.join(cmd)
    if job.get("label"):
        text = f"[{job['label']}] {text}"
    text = showable(text)  # a newline or an escape sequence must not break the table
    if width and len(text) > width:
        text = text[: width - 1] + "…"
    return text


def when(job: dict[str, Any], now: float | None = None) -> str:
    now = time.time() if now is None else now
    st = job["state"]
    if st == "queued":
        return "due" if job["not_before"] <= now else relative(job["not_before"], now)
    if st == "claimed":
        started = (job.get("runner") or {}).get("started_at") or job["updated_at"]
        return f"running {format_duration(now - started)}"
    return relative(job.get("finished_at") or job["updated_at"], now)


def job_rows(jobs: Sequence[dict[str, Any]]) -> tuple[list[list[str]], list[str]]:
    now = time.time()
    rows, states = [], []
    for j in jobs:
        rows.append([
            str(j["id"]), j["state"], showable(j["lane"]), str(j["priority"]),
            f"{j['attempts']}/{j['max_attempts']}", when(j, now), command_text(j),
        ])
        states.append(j["state"])
    return rows, states


JOB_HEADERS = ["ID", "STATE", "LANE", "PRI", "TRY", "WHEN", "COMMAND"]


def show_job(job: dict[str, Any], events: Sequence[dict[str, Any]]) -> str:
    now = time.time()
    lines = [
        f"job {job['id']}  {paint(job['state'], job['state'])}",
        f"  command   {command_text(job, None)}",
        f"  lane      {showable(job['lane'])}  priority {job['priority']}",
        f"  attempts  {job['attempts']}/{job['max_attempts']}",
        f"  created   {local_time(job['created_at'])} ({relative(job['created_at'], now)})",
    ]
    if job["state"] == "queued":
        lines.append(f"  due       {local_time(job['not_before'])} ({relative(job['not_before'], now)})")
    if job.get("lease_until"):
        lines.append(f"  lease     until {local_time(job['lease_until'])} ({relative(job['lease_until'], now)})")
    if job.get("timeout_s"):
        lines.append(f"  timeout   {format_duration(job['timeout_s'])}")
    if job.get("cwd"):
        lines.append(f"  cwd       {showable(job['cwd'])}")
    if job.get("key"):
        lines.append(f"  key       {showable(job['key'])}")
    if job.get("runner"):
        lines.append(f"  pid       {job['runner'].get('pid')}")
    if job.get("message"):
        lines.append(f"  message   {showable(job['message'])}")
    lines.append("  history")
    lines.append(f"    {local_time(job['created_at']):>16}  enqueued")
    for e in events:
        msg = f"  {showable(e['message'])}" if e["message"] else ""
        lines.append(f"    {local_time(e['at']):>16}  {e['kind']} (attempt {e['attempt']}){msg}")
    return "\n".join(lines)

"""The timeline drawn as text (`sloth timeline`): a header, a time ruler
in local time, the machine's row (its sleeps and the daemon's downtime,
labelled where they fit), one row per lane (or per job), a legend and the
gaps listed with their times. Plain characters, ASCII when the terminal
is not UTF-8; colour only when asked (render.use_colour: a terminal, no
NO_COLOR). Each column is an equal slice of the window; a cell shows the
most telling thing in it (a failure over a run over a gap over a wait).
"""

from __future__ import annotations

import time
from typing import Any, Sequence

from sloth_daemon.cli.render import command_text, cut
from sloth_daemon.durations import format_duration
from sloth_daemon.text import showable

MIN_WIDTH = 80
LABEL_MAX = 16  # a lane's name in its row's label
JOB_LABEL_MAX = 26  # "#id command" with --jobs
MAX_ROWS = 300  # rows drawn; the rest is counted
# Ruler steps: the smallest that leaves room for a label at each tick.
STEPS = (60, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400, 172800, 604800)
GLYPHS = {True: {"empty": " ", "wait": "░", "run": "█", "failed": "✗", "cut": "⊘", "sleep": "z", "down": "╌"},
          False: {"empty": " ", "wait": ".", "run": "#", "failed": "X", "cut": "/", "sleep": "z", "down": "-"}}
# Only colours text.for_terminal lets through (bold or dim would be shown escaped).
COLOURS = {"wait": "90", "run": "32", "failed": "31", "cut": "33", "sleep": "34", "down": "35"}
RANK = {"empty": 0, "wait": 1, "sleep": 2, "down": 2, "run": 3, "cut": 4, "failed": 5}
OUTCOME_MARK = {"failed": "failed", "cancelled": "cut", "interrupted": "cut"}


class Axis:
    """``cols`` equal slices of [since, until]."""

    def __init__(self, since: float, until: float, cols: int) -> None:
        self.since, self.cols = since, cols
        self.dt = max(until - since, 1e-9) / cols

    def cell(self, t: float) -> int:
        return min(self.cols - 1, max(0, int((t - self.since) // self.dt)))

    def cells(self, start: float, end: float) -> range:
        """The cells [start, end] covers; one at least, however short (or None if all of it is outside)."""
        if end < self.since or start > self.since + self.dt * self.cols:
            return range(0)
        return range(self.cell(start), max(self.cell(start), self.cell(end - 1e-9)) + 1)


def draw(data: dict[str, Any], *, by_job: bool, width: int, colour: bool, unicode: bool) -> str:
    """The whole picture, ``width`` columns wide (at least MIN_WIDTH)."""
    width = max(MIN_WIDTH, width)
    rows = _rows(data, by_job)
    label_w = min(JOB_LABEL_MAX if by_job else LABEL_MAX, max([7] + [len(label) for label, _ in rows])) + 1
    axis = Axis(data["since"], data["until"], width - label_w)
    glyph = GLYPHS[unicode]
    gaps = _gaps(data)

    def paint(cells: Sequence[str], overlay: dict[int, str] | None = None) -> str:
        out = []
        for i, kind in enumerate(cells):
            ch = (overlay or {}).get(i, glyph[kind])
            out.append(f"\x1b[{COLOURS[kind]}m{ch}\x1b[0m" if colour and kind in COLOURS else ch)
        return "".join(out)

    lines = [*_header(data, gaps, width), " " * label_w + _ruler(axis, data["until"])]
    machine = ["empty"] * axis.cols
    labels: dict[int, str] = {}
    for kind, start, end, short, _ in gaps:
        span = axis.cells(start, end)
        for i in span:
            machine[i] = kind
        if len(span) >= len(short) + 1 and all(i not in labels for i in span):
            labels.update({span.start + k: ch for k, ch in enumerate(short)})
    lines.append("machine".ljust(label_w) + paint(machine, labels))
    for label, jobs in rows[:MAX_ROWS]:
        cells = ["empty"] * axis.cols
        for kind, start, end, _, _ in gaps:
            _put(cells, axis.cells(start, end), kind)
        for job in jobs:
            for w in job.get("waits", ()):
                _put(cells, axis.cells(w["start"], w["end"]), "wait")
            for run in job.get("runs", ()):
                span = axis.cells(run["start"], run["end"])
                _put(cells, span, "run")
                mark = OUTCOME_MARK.get(run["outcome"])
                if mark and span:
                    _put(cells, range(span.stop - 1, span.stop), mark)
        lines.append(label.ljust(label_w) + paint(cells))
    if len(rows) > MAX_ROWS:
        lines.append(f"… {len(rows) - MAX_ROWS} more rows (narrow it with --lane or --since)")
    if not rows:
        lines.append("(no jobs in this window)")
    legend = [f"{glyph[k]} {name}" for k, name in (("run", "ran"), ("failed", "failed"), ("cut", "cut short"),
                                                   ("wait", "waiting"), ("sleep", "asleep"), ("down", "daemon down"))]
    lines.append(cut(" " * label_w + "  ".join(legend), width))
    span_s = data["until"] - data["since"]
    for kind, start, end, _, long in gaps:
        lines.append(cut(f"  {glyph[kind]} {_clock(start, span_s)}–{_clock(end, span_s)}  "
                         f"{format_duration(end - start):>6}  {long}", width))
    if data.get("capped"):
        lines.append("(only the newest jobs were read: narrow it with --lane or --since)")
    return "\n".join(lines)


def _put(cells: list[str], span: range, kind: str) -> None:
    for i in span:
        if RANK[kind] >= RANK[cells[i]]:
            cells[i] = kind


def _rows(data: dict[str, Any], by_job: bool) -> list[tuple[str, list[dict[str, Any]]]]:
    """(label, its jobs): each lane by name, or each job by id."""
    if by_job:
        return [(cut(f"#{j['id']} {command_text(j, None)}", JOB_LABEL_MAX), [j]) for j in data["jobs"]]
    lanes: dict[str, list[dict[str, Any]]] = {}
    for j in data["jobs"]:
        lanes.setdefault(j["lane"], []).append(j)
    return [(cut(showable(lane), LABEL_MAX), lanes[lane]) for lane in sorted(lanes)]


def _gaps(data: dict[str, Any]) -> list[tuple[str, float, float, str, str]]:
    """(kind, start, end, short label, long label) of each sleep and downtime, by start."""
    since, until = data["since"], data["until"]
    out = []
    for m in data.get("machine", ()):
        if m["kind"] == "sleep" and m["end_at"] >= since:
            d = format_duration(m["end_at"] - m["start_at"])
            out.append(("sleep", max(m["start_at"], since), min(m["end_at"], until), f"slept {d}",
                        f"the machine slept ({showable(m['host'])})"))
    for g in data.get("downtime", ()):
        d = format_duration(g["end"] - g["start"])
        why = showable(g["why"])
        out.append(("down", g["start"], min(g["end"], until), f"down {d}",
                    f"the daemon was down: {why} ({showable(g['host'])})" + (", still" if g.get("open") else "")))
    return sorted(out, key=lambda g: g[1])


def _header(data: dict[str, Any], gaps: list[tuple[str, float, float, str, str]], width: int) -> list[str]:
    """The window and what happened in it, on as many lines of ``width`` as it takes."""
    span_s = data["until"] - data["since"]
    runs = [r for j in data["jobs"] for r in j.get("runs", ())]
    failed = sum(r["outcome"] == "failed" for r in runs)
    slept = sum(e - s for k, s, e, _, _ in gaps if k == "sleep")
    down = sum(e - s for k, s, e, _, _ in gaps if k == "down")
    where = f"lane {showable(data['lane'])}" if data.get("lane") else "every lane"
    parts = [f"{_clock(data['since'], span_s)} → {_clock(data['until'], span_s)} ({format_duration(span_s)}), {where}",
             f"{len(runs)} runs, {failed} failed"]
    if slept:
        parts.append(f"slept {format_duration(slept)}")
    if down:
        parts.append(f"daemon down {format_duration(down)}")
    lines = ["timeline  " + parts[0]]
    for part in parts[1:]:
        if len(lines[-1]) + 3 + len(part) <= width:
            lines[-1] += " · " + part
        else:
            lines.append("          " + part)
    return [cut(ln, width) for ln in lines]


def _clock(t: float, span_s: float) -> str:
    """Local time: HH:MM, with the day when the window is longer than a day."""
    return time.strftime("%a %H:%M" if span_s > 86400 else "%H:%M", time.localtime(t))


def _ruler(axis: Axis, until: float) -> str:
    """Ticks at local round times, each labelled where there is room."""
    span_s = axis.dt * axis.cols
    step = next((s for s in STEPS if axis.cols * s / span_s >= 8), STEPS[-1])
    offset = time.localtime(axis.since).tm_gmtoff  # round times are local ones
    t = ((axis.since + offset) // step + 1) * step - offset
    row = [" "] * axis.cols
    fmt = "%a %d" if step >= 86400 else "%H:%M"
    while t < until:
        i = axis.cell(t)
        text = "|" + time.strftime(fmt, time.localtime(t))
        if i + len(text) <= axis.cols and all(c == " " for c in row[max(0, i - 1):i + len(text)]):
            row[i:i + len(text)] = list(text)
        elif row[i] == " ":
            row[i] = "|"
        t += step
    return "".join(row)

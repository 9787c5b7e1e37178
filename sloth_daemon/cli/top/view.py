"""What `sloth top` shows, as plain text and rows: the header, lanes,
running jobs, next up (each with why it waits), the day's failures by
signature, schedules due and blocked, the filter. Pure functions of what
the daemon (or the queue file) said and of ``now``: the app (app.py) puts
them on the screen, the unit tests read them without a terminal.

Fields other branches add are shown when present and skipped when absent:
a job's ``progress`` ({fraction, source, eta_s, at}), ``batch`` ({id,
name}), an attempt's ``cost`` ({cpu_s, peak_rss_bytes, wall_s, ended,
covers}).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

from sloth_daemon.cli.render import command_text, cut, shown_state
from sloth_daemon.cli.top.signatures import FailureGroup
from sloth_daemon.durations import format_duration, local_time
from sloth_daemon.text import showable

DAY_S = 86400.0
BAR = 10  # cells of a progress bar
Row = tuple[str, ...]  # a pane's cells
SIGNATURE_WIDTH = 52  # a failure's signature as a row shows it (the detail shows the job's own line)


# ------------------------------------------------------------------ header
def header_lines(status: dict[str, Any] | None, source: str, power: tuple[bool, float | None] | None,
                 now: float) -> list[str]:
    """Two lines: who answers (the daemon, up, version; or the file read
    read-only) and the machine (power, the last sleep/resume, paused)."""
    if status is None:
        first = source or "connecting to the daemon…"
    elif status.get("pid"):
        since = status.get("started_at")  # its uptime moves each second without a read
        up = now - since if isinstance(since, (int, float)) else status.get("uptime_s") or 0
        first = (f"daemon up {format_duration(up)}, pid {status['pid']}, "
                 f"version {status.get('version', '?')}")
    else:
        first = source
    bits = []
    if power is not None:
        mains, pct = power
        bits.append(("on mains" if mains else "on battery") + (f" {pct:.0f}%" if pct is not None else ""))
    jump = (status or {}).get("last_jump")
    if jump:
        bits.append(f"last {jump.get('kind', 'jump')} {local_time(jump.get('at'))}: {jump.get('describe', '')}")
    else:
        bits.append("no sleep seen")
    if (status or {}).get("paused_all"):
        bits.append("PAUSED: nothing new starts (`sloth resume`)")
    counts = (status or {}).get("counts") or {}
    if counts:
        bits.append(" ".join(f"{counts[s]} {s}" for s in ("running", "queued", "held", "blocked", "failed")
                             if counts.get(s)) or "no jobs")
    return [first, "  ·  ".join(bits)]


# ------------------------------------------------------------------- lanes
def lane_rows(lanes: dict[str, dict[str, Any]]) -> list[Row]:
    """(lane, slots used/total, queued, blocked, paused)."""
    rows: list[Row] = []
    for name, v in sorted(lanes.items()):
        conc = v.get("concurrency")
        rows.append((showable(name), f"{v.get('running', 0)}/{conc if conc is not None else '∞'}",
                     str(v.get("queued", 0)), str(v.get("blocked", 0)), "paused" if v.get("paused") else ""))
    return rows


# ----------------------------------------------------------------- running
def elapsed(job: dict[str, Any], now: float) -> float:
    started = (job.get("runner") or {}).get("started_at") or job.get("updated_at") or now
    return max(0.0, now - float(started))


def progress_text(job: dict[str, Any], now: float) -> tuple[str, str]:
    """(a bar and its percent, the time left), or ("", "") when unknown; an
    estimate is said to be one (``~``)."""
    p = job.get("progress")
    if not isinstance(p, dict) or not isinstance(p.get("fraction"), (int, float)):
        return "", ""
    frac = min(1.0, max(0.0, float(p["fraction"])))
    full = round(frac * BAR)
    bar = "█" * full + "░" * (BAR - full) + f" {frac * 100:3.0f}%"
    eta = p.get("eta_s")
    est = p.get("source") == "estimate"
    if isinstance(eta, (int, float)):
        at = p["at"] if isinstance(p.get("at"), (int, float)) else now
        left = max(0.0, eta - (now - at))
        return bar, ("~" if est else "") + format_duration(left) + " left"
    return bar, ""


def conditions_text(job: dict[str, Any]) -> str:
    """What it runs under: its ``--when`` conditions, resource tokens, limits."""
    bits = []
    gate = job.get("gate") or {}
    if gate.get("when"):
        bits.append("when " + ",".join(map(showable, map(str, gate["when"]))))
    if gate.get("needs"):
        needs = gate["needs"]
        bits.append("needs " + ",".join(f"{showable(str(k))}:{v}" for k, v in needs.items()) if isinstance(needs, dict)
                    else "needs " + showable(str(needs)))
    if gate.get("on_lost"):
        bits.append(f"on lost: {showable(str(gate['on_lost']))}")
    tokens = job.get("tokens") or {}
    bits += [f"{showable(k)}={','.join(map(showable, v))}" for k, v in tokens.items()]
    lim = job.get("limits")
    if isinstance(lim, dict):
        bits += [f"{k} {v}" for k, v in lim.items() if v is not None]
    if job.get("keep_awake"):
        bits.append("awake")
    return " ".join(bits)


def human_bytes(n: float | None) -> str:
    if n is None:
        return ""
    for unit in ("B", "K", "M", "G"):
        if n < 1024:
            return f"{n:.0f}{unit}"
        n /= 1024
    return f"{n:.1f}T"


def running_rows(jobs: Iterable[dict[str, Any]], usage: dict[int, tuple[float, int]],
                 now: float) -> list[tuple[int, Row]]:
    """(job id, (id, elapsed, progress, left, cpu, mem, state, runs under, command))."""
    rows: list[tuple[int, Row]] = []
    for j in jobs:
        bar, left = progress_text(j, now)
        cpu, rss = usage.get(j["id"], (None, None))
        rows.append((j["id"], (str(j["id"]), format_duration(elapsed(j, now)), bar, left,
                               "" if cpu is None else f"{cpu:.0f}%", human_bytes(rss),
                               "paused" if shown_state(j) == "paused" else "", conditions_text(j),
                               command_text(j, 60))))
    return rows


# ----------------------------------------------------------------- next up
def why_waits(job: dict[str, Any], lanes: dict[str, dict[str, Any]], paused_all: bool, now: float) -> str:
    """Why this job does not run now: held, its --after, a delay or a
    retry's backoff, a condition, a resource or a reservation (the daemon's
    ``wait_reason``), a paused lane, a lane with no free slot."""
    st = job["state"]
    if st == "held":
        return f"held: {showable(job['wait_reason'])}" if job.get("wait_reason") else \
            f"held (`sloth release {job['id']}`)"
    if st == "blocked":
        after, any_ = job.get("after") or [], job.get("after_any") or []
        bits = []
        if after:
            bits.append("after job" + ("s " if len(after) > 1 else " ") + ", ".join(map(str, after[:4]))
                        + ("…" if len(after) > 4 else ""))
        if any_:
            bits.append("after any of " + ", ".join(map(str, any_[:4])) + ("…" if len(any_) > 4 else ""))
        return "; ".join(bits) or "blocked"
    if job["not_before"] > now:
        what = "retry" if job.get("attempts") else "delayed"
        return f"{what}: starts in {format_duration(job['not_before'] - now)}"
    if job.get("wait_reason"):
        return showable(job["wait_reason"])
    if paused_all:
        return "paused (everything)"
    lane = lanes.get(job["lane"]) or {}
    if lane.get("paused"):
        return f"paused (lane {showable(job['lane'])})"
    conc = lane.get("concurrency")
    if conc is not None and lane.get("running", 0) >= conc:
        return f"lane {showable(job['lane'])} full ({lane.get('running', 0)}/{conc})"
    return "due: next to start"


def next_rows(jobs: Iterable[dict[str, Any]], lanes: dict[str, dict[str, Any]], paused_all: bool,
              now: float) -> list[tuple[int, Row]]:
    """(job id, (id, lane, priority, why it waits, command)), in run order."""
    return [(j["id"], (str(j["id"]), showable(j["lane"]), str(j["priority"]),
                       why_waits(j, lanes, paused_all, now), command_text(j, 50))) for j in jobs]


# ---------------------------------------------------------------- failures
def failure_rows(groups: Sequence[FailureGroup], now: float) -> list[tuple[int, Row]]:
    """(newest job id, (count, signature, ids, when))."""
    rows: list[tuple[int, Row]] = []
    for g in groups:
        ids = ", ".join(map(str, g.ids[:5])) + (f" +{len(g.ids) - 5}" if len(g.ids) > 5 else "")
        when = format_duration(now - g.last_at) + " ago"
        rows.append((g.ids[0], (f"{g.count}×", cut(g.text(), SIGNATURE_WIDTH), ids, when)))
    return rows


def start_of_day(now: float) -> float:
    t = time.localtime(now)
    return time.mktime((t.tm_year, t.tm_mon, t.tm_mday, 0, 0, 0, 0, 0, -1))


# --------------------------------------------------------------- schedules
def schedule_rows(schedules: Iterable[dict[str, Any]], jobs: dict[int, dict[str, Any]],
                  now: float) -> list[tuple[str, Row]]:
    """(name, (name, countdown, when in words, note)): the schedules due in
    the next 24 h, soonest first, then the blocked ones (its last job still
    waits: "no run since 03:30: waiting for mains power") and the paused."""
    due: list[tuple[float, str, Row]] = []
    blocked: list[tuple[str, Row]] = []
    for s in schedules:
        name = showable(s["name"])
        last = jobs.get(s["last_job"]) if s.get("last_job") is not None else None
        if last is not None and last["state"] in ("queued", "held", "blocked") and last["not_before"] <= now:
            since = local_time(s.get("last_slot") or last["created_at"])
            why = last.get("wait_reason") or why_waits(last, {}, False, now)
            blocked.append((s["name"], (name, "blocked", showable(s.get("spec", "")),
                                        f"no run since {since}: {showable(why)}")))
        elif s.get("paused"):
            blocked.append((s["name"], (name, "paused", showable(s.get("spec", "")),
                                        f"`sloth schedule resume {name}`")))
        elif s.get("next_run") is not None and s["next_run"] - now <= DAY_S:
            left = s["next_run"] - now
            note = f"last: {s['last_state']}" if s.get("last_state") else "never ran"
            due.append((s["next_run"], s["name"], (name, "due now" if left <= 0 else "in " + clock(left),
                                                  showable(s.get("spec", "")), note)))
    due.sort(key=lambda d: d[0])
    return [(n, row) for _, n, row in due] + blocked


def clock(seconds: float) -> str:
    """A countdown: ``2:05:09``, ``4:07``."""
    s = int(max(0, seconds))
    h, r = divmod(s, 3600)
    m, s = divmod(r, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


# ------------------------------------------------------------------ filter
@dataclass
class Filter:
    """``lane:video state:failed label:nightly some words``: every part must
    hold (the words anywhere in the command, label or message)."""

    lane: str | None = None
    states: set[str] = field(default_factory=set)
    label: str | None = None
    words: list[str] = field(default_factory=list)

    @classmethod
    def parse(cls, text: str) -> Filter:
        f = cls()
        for part in text.split():
            key, sep, val = part.partition(":")
            if sep and key == "lane" and val:
                f.lane = val
            elif sep and key == "state" and val:
                f.states |= set(val.split(","))
            elif sep and key == "label" and val:
                f.label = val
            else:
                f.words.append(part.lower())
        return f

    def __bool__(self) -> bool:
        return bool(self.lane or self.states or self.label or self.words)

    def matches(self, job: dict[str, Any]) -> bool:
        if self.lane is not None and job.get("lane") != self.lane:
            return False
        if self.states and shown_state(job) not in self.states and job["state"] not in self.states:
            return False
        if self.label is not None and job.get("label") != self.label:
            return False
        hay = " ".join([*job.get("command", []), job.get("label") or "", job.get("message") or ""]).lower()
        return all(w in hay for w in self.words)

    def text(self) -> str:
        bits = ([f"lane:{self.lane}"] if self.lane else []) + [f"state:{s}" for s in sorted(self.states)] \
            + ([f"label:{self.label}"] if self.label else []) + self.words
        return " ".join(bits)


# ------------------------------------------------------------------ detail
def cost_lines(detail: dict[str, Any]) -> list[str]:
    """Each attempt's cost, where the daemon says it (the ``cost`` of an
    attempt in ``attempts`` or ``tries``)."""
    out = []
    for key in ("attempts", "tries"):
        items = detail.get(key)
        if not isinstance(items, list):
            continue
        for n, a in enumerate(items, 1):
            c = a.get("cost") if isinstance(a, dict) else None
            if isinstance(c, dict):
                out.append(f"  attempt {a.get('attempt', n)}: cpu {c.get('cpu_s', 0):.1f}s, peak "
                           f"{human_bytes(c.get('peak_rss_bytes'))}, wall {format_duration(c.get('wall_s') or 0)}"
                           f", {showable(str(c.get('ended', '')))} ({c.get('covers', '?')})")
    return (["  cost"] + out) if out else []

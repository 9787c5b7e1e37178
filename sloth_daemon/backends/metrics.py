"""The queue's metrics (docs/metrics.md) and their text: OpenMetrics, what
`sloth metrics` prints, or Prometheus's text format 0.0.4, what
node_exporter's textfile collector reads (it takes no OpenMetrics).

What the queue says (both engines, daemon or not): runs by lane and outcome
and their durations (backends/run_tally.py), jobs per lane and state, since
when each lane's oldest queued job is due, the schedules' missed slots,
lateness and next slot. The daemon adds what only a running process knows
(its clock jumps and sleeps, its keeper's starts and losses:
daemon/metrics_file.py) as more families.

A counter never goes back while what it counts lives: ``_created`` names
when that began -- the queue's creation for runs, the schedule's for its
missed slots, the daemon's start for what the daemon counts -- so a
scraper that sees a counter lower than before also sees a new ``_created``
(a queue made anew, a schedule removed and added again, a daemon
restarted) and knows it was a reset.

Times that grow by themselves are given as timestamps (``*_timestamp_seconds``),
never as ages: a file written once and read an hour later must still be
true (``time() - sloth_queue_oldest_due_timestamp_seconds`` is the wait).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

from sloth_daemon.backends import run_tally

OPENMETRICS = "openmetrics"
PROMETHEUS = "prometheus"
FORMATS = (OPENMETRICS, PROMETHEUS)
STATES = ("blocked", "queued", "held", "running")

Labels = tuple[tuple[str, str], ...]


@dataclass
class Series:
    """One labelled series of a family: its value, and for a histogram its
    cumulative bucket counts and sum (``value`` is then the count)."""

    labels: Labels
    value: float
    created: float | None = None
    buckets: Sequence[tuple[float, int]] = ()
    sum: float = 0.0


@dataclass
class Family:
    """``name``: without ``_total`` for a counter (OpenMetrics' family name)."""

    name: str
    kind: str  # counter, gauge, histogram
    help: str
    unit: str = ""
    series: list[Series] = field(default_factory=list)


def queue_families(q: Any, *, now: float) -> list[Family]:
    """The families a queue's reads give (``q``: a Queue or a ReadOnlyQueue)."""
    born = _number(q.get_meta("queue_created_at"))
    tally = q.run_tally()
    runs = Family("sloth_runs", "counter", "Runs that ended, by lane and outcome (pruned history included).")
    durations = Family("sloth_run_duration_seconds", "histogram",
                       "How long the runs that ended took, started to ended, by lane.", "seconds")
    by_lane: dict[str, run_tally.RunCount] = {}
    for (lane, outcome), c in sorted(tally.items()):
        runs.series.append(Series((("lane", lane), ("outcome", outcome)), c.n, born))
        if c.timed:
            by_lane.setdefault(lane, run_tally.RunCount()).add(
                run_tally.RunCount(c.timed, c.timed, c.sum_s, c.le))
    for lane, c in sorted(by_lane.items()):
        durations.series.append(Series((("lane", lane),), c.n, born, tuple(zip(run_tally.BUCKETS, c.le, strict=True)),
                                          c.sum_s))
    jobs = Family("sloth_queue_jobs", "gauge", "Jobs not ended, by lane and state.")
    for lane, counts in sorted(q.lane_counts().items()):
        for state in STATES:
            jobs.series.append(Series((("lane", lane), ("state", state)), counts.get(state, 0)))
    oldest = Family("sloth_queue_oldest_due_timestamp_seconds", "gauge",
                    "Since when the oldest queued job of a lane is due (in the future: none is due yet).", "seconds")
    for lane, at in sorted(q.oldest_queued().items()):
        oldest.series.append(Series((("lane", lane),), at))
    return [runs, durations, jobs, oldest, *schedule_families(q.schedules), *outbox_families(q)]


def outbox_families(q: Any) -> list[Family]:
    """The outbox's messages by state (docs/telling.md): pending and failed
    are what an alert watches; sent grows until pruned, so it is a gauge too."""
    box = Family("sloth_outbox_messages", "gauge", "Pings, webhooks and mail in the outbox, by state.")
    for state, n in sorted(q.outbox_counts().items()):
        box.series.append(Series((("state", state),), n))
    return [box]


def schedule_families(schedules: Any) -> list[Family]:
    missed = Family("sloth_schedule_missed_slots", "counter",
                    "Slots of a schedule not run on time: coalesced into a catch-up, skipped or dropped.")
    late = Family("sloth_schedule_lateness_seconds", "gauge",
                  "How long after its slot the last occurrence of a schedule was queued.", "seconds")
    nxt = Family("sloth_schedule_next_slot_timestamp_seconds", "gauge",
                 "The next slot of a schedule (in the past: it is overdue).", "seconds")
    paused = Family("sloth_schedule_paused", "gauge", "1 while a schedule is paused.")
    for s in schedules.all():
        name = (("schedule", str(s["name"])),)
        missed.series.append(Series(name, int(s["missed"]) + int(s["dropped"]), float(s["created_at"])))
        nxt.series.append(Series(name, float(s["next_slot"])))
        paused.series.append(Series(name, int(bool(s["paused"]))))
        last = next((r for r in schedules.runs(s["name"], 8) if not r["manual"] and r["job_id"] is not None), None)
        if last is not None:
            late.series.append(Series(name, max(0.0, float(last["at"]) - float(last["slot"]))))
    return [missed, late, nxt, paused]


# --------------------------------------------------------------- the text
def expose(families: Iterable[Family], fmt: str = OPENMETRICS) -> str:
    """The families as text in ``fmt`` (OPENMETRICS ends with ``# EOF``)."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown metrics format {fmt!r}: one of {', '.join(FORMATS)}")
    om = fmt == OPENMETRICS
    out: list[str] = []
    for f in families:
        out += _openmetrics(f) if om else _prometheus(f)
    if om:
        out.append("# EOF")
    return "\n".join(out) + "\n"


def _openmetrics(f: Family) -> list[str]:
    lines = [f"# TYPE {f.name} {f.kind}"] + ([f"# UNIT {f.name} {f.unit}"] if f.unit else [])
    lines.append(f"# HELP {f.name} {_help(f.help)}")
    for s in f.series:
        lines += _samples(f, s)
        if s.created is not None and f.kind != "gauge":
            lines.append(_line(f"{f.name}_created", s.labels, s.created))
    return lines


def _prometheus(f: Family) -> list[str]:
    """Text format 0.0.4: a counter's family is named with ``_total``;
    ``_created`` is a gauge family of its own (as prometheus_client writes it)."""
    name = f.name + ("_total" if f.kind == "counter" else "")
    lines = [f"# HELP {name} {_help(f.help)}", f"# TYPE {name} {f.kind}"]
    for s in f.series:
        lines += _samples(f, s)
    created = [s for s in f.series if s.created is not None and f.kind != "gauge"]
    if created:
        lines += [f"# HELP {f.name}_created When the series of {name} began counting (a new value: a reset).",
                  f"# TYPE {f.name}_created gauge"]
        lines += [_line(f"{f.name}_created", s.labels, s.created) for s in created if s.created is not None]
    return lines


def _samples(f: Family, s: Series) -> list[str]:
    """A series' samples, alike in both formats (``_created`` aside)."""
    if f.kind != "histogram":
        return [_line(f.name + ("_total" if f.kind == "counter" else ""), s.labels, s.value)]
    return [*_buckets(f.name, s), _line(f"{f.name}_count", s.labels, s.value),
            _line(f"{f.name}_sum", s.labels, s.sum)]


def _buckets(name: str, s: Series) -> list[str]:
    return ([_line(f"{name}_bucket", (*s.labels, ("le", repr(float(b)))), n) for b, n in s.buckets]
            + [_line(f"{name}_bucket", (*s.labels, ("le", "+Inf")), s.value)])


def _line(name: str, labels: Labels, value: float) -> str:
    inner = ",".join(f'{k}="{_escape(v)}"' for k, v in labels)
    return f"{name}{{{inner}}} {_value(value)}" if inner else f"{name} {_value(value)}"


def _value(v: float) -> str:
    if isinstance(v, bool) or isinstance(v, int):
        return str(int(v))
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    return repr(float(v))


def _escape(v: str) -> str:
    return v.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _number(v: Any) -> float | None:
    try:
        return float(v) if v is not None else None
    except (TypeError, ValueError):
        return None

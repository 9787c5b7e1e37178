"""How far jobs are and what their runs cost, as the commands show them
(docs/progress.md): a job's progress and time left, an attempt's cost,
the extra columns of `sloth ls`, and a batch's summary ("12/40 done, 2
failed, 1 running, about 3m left"). Text only: no Typer, nothing heavy
(the fast path imports it for `ls`, `show`, `status` and `wait`).
"""

from __future__ import annotations

from sloth_daemon.durations import format_duration

TYPE_CHECKING = False
if TYPE_CHECKING:  # not at run time: the daily commands pay for every import
    from typing import Any, Callable, Iterable, Sequence

    Cell = Callable[[dict[str, Any]], str]

# `sloth ls --columns`: the extra columns a user may pick, each of a job's latest attempt
COLUMNS: dict[str, str] = {"progress": "PROGRESS", "cpu": "CPU", "mem": "PEAK", "wall": "WALL", "ended": "ENDED"}


def size_text(n: int) -> str:
    """Bytes as a person reads a peak: "211M", "1.5G", "900K"."""
    if n >= 1 << 30:
        return f"{n / (1 << 30):.1f}G"
    if n >= 1 << 20:
        return f"{n / (1 << 20):.0f}M"
    return f"{n / 1024:.0f}K" if n >= 1024 else f"{n}B"


def progress_text(progress: dict[str, Any] | None) -> str:
    """"42%, 1m left"; an estimate says so: "~40%, about 1m left (estimate)"; "" for none."""
    if not progress:
        return ""
    pct = f"{progress['fraction'] * 100:.0f}%"
    eta = progress.get("eta_s")
    if progress.get("source") == "estimate":
        left = "longer than usual" if eta is not None and eta <= 0 else (
            f"about {format_duration(eta)} left" if eta is not None else "")
        return f"~{pct}" + (f", {left}" if left else "") + " (estimate)"
    return pct + (f", {format_duration(eta)} left" if eta is not None else "")


def cost_text(cost: dict[str, Any] | None) -> str:
    """"cpu 1.0s, peak 210M, wall 1.3s: exit 0 (cgroup)"; "" for none."""
    if not cost:
        return ""
    return (f"cpu {format_duration(cost['cpu_s'])}, peak {size_text(int(cost['peak_rss_bytes']))}, "
            f"wall {format_duration(cost['wall_s'])}: {cost.get('ended') or '?'} ({cost.get('covers')})")


def _cell(name: str) -> Callable[[dict[str, Any]], str]:
    def cost_of(job: dict[str, Any]) -> dict[str, Any]:
        return job.get("cost") or {}

    if name == "progress":
        return lambda j: progress_text(j.get("progress")) or "-"
    if name == "cpu":
        return lambda j: format_duration(c["cpu_s"]) if (c := cost_of(j)) else "-"
    if name == "mem":
        return lambda j: size_text(int(c["peak_rss_bytes"])) if (c := cost_of(j)) else "-"
    if name == "wall":
        return lambda j: format_duration(c["wall_s"]) if (c := cost_of(j)) else "-"
    return lambda j: str(c.get("ended") or "-") if (c := cost_of(j)) else "-"


def columns(jobs: Sequence[dict[str, Any]], picked: Sequence[str] = ()) -> list[tuple[str, Cell]]:
    """The extra columns of a listing: PROGRESS when any job shows progress
    (or when picked), then those picked (``ls --columns``), in COLUMNS' order."""
    names = [n for n in COLUMNS if n in picked or (n == "progress" and any(j.get("progress") for j in jobs))]
    return [(COLUMNS[n], _cell(n)) for n in names]


def check_columns(picked: Iterable[str]) -> list[str]:
    """The names of ``ls --columns``; ValueError naming those that are not columns."""
    names = [p.strip().lower() for p in picked if p.strip()]
    if bad := [n for n in names if n not in COLUMNS]:
        raise ValueError(f"unknown column(s) {', '.join(bad)}; columns: {', '.join(COLUMNS)}")
    return names


def batch_summary(jobs: Sequence[dict[str, Any]], slots: int | None = None) -> str:
    """One line for a set of jobs (a label's, a batch's): "12/40 done, 2
    failed, 1 running, 25 queued, about 3m left". Time left: what the
    running ones say or are estimated to have left, plus, for those still
    waiting, the median time of the ones that ran (their progress' or
    their cost's wall time), spread over ``slots`` (default: as many as run
    now, at least one); said only when known. The jobs as `ls --json` gives them."""
    counts: dict[str, int] = {}
    for j in jobs:
        counts[j["state"]] = counts.get(j["state"], 0) + 1
    parts = [f"{counts.get('done', 0)}/{len(jobs)} done"]
    for state in ("failed", "cancelled", "running", "queued", "blocked", "held"):
        if counts.get(state):
            parts.append(f"{counts[state]} {state}")
    left = _time_left(jobs, counts, slots)
    if left is not None:
        parts.append(f"about {format_duration(left)} left")
    return ", ".join(parts)


def time_left(jobs: Sequence[dict[str, Any]], slots: int | None = None) -> float | None:
    """The seconds a set of jobs (a batch's) has left, as batch_summary says it; None when unknown."""
    counts: dict[str, int] = {}
    for j in jobs:
        counts[j["state"]] = counts.get(j["state"], 0) + 1
    return _time_left(jobs, counts, slots)


def _time_left(jobs: Sequence[dict[str, Any]], counts: dict[str, int], slots: int | None) -> float | None:
    running = [j for j in jobs if j["state"] == "running"]
    waiting = sum(counts.get(s, 0) for s in ("queued", "blocked"))
    etas = [p["eta_s"] for j in running if (p := j.get("progress")) and p.get("eta_s") is not None]
    if not running and not waiting:
        return None
    if len(etas) < len(running):
        return None  # a running job that says nothing and has no past to go by: unknown
    walls = sorted(c["wall_s"] for j in jobs if j["state"] == "done" and (c := j.get("cost")))
    typical = walls[len(walls) // 2] if walls else None
    if waiting and typical is None:
        return None
    width = max(1, slots if slots is not None else len(running))
    return (max(etas, default=0.0) if running else 0.0) + (waiting * (typical or 0.0)) / width


def label_summaries(jobs: Sequence[dict[str, Any]]) -> list[str]:
    """`status`: one line per label that two or more jobs share, "nightly: 12/40 done, ..."."""
    by_label: dict[str, list[dict[str, Any]]] = {}
    for j in jobs:
        if j.get("label"):
            by_label.setdefault(j["label"], []).append(j)
    return [f"{label}: {batch_summary(group)}" for label, group in sorted(by_label.items()) if len(group) > 1]

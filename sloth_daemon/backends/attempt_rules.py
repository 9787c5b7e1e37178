"""What both engines decide alike about a run's progress and cost (no SQL):
the values checked before they are stored, and told as the views read
them (docs/progress.md).

A running job's ``progress`` is one JSON value on its row, the latest only,
with the attempt it belongs to: a new attempt never shows the last one's.
An attempt's ``cost`` is a row of its own (``attempts``: job, attempt),
written with its outcome.
"""

from __future__ import annotations

import json
import math
from typing import Any, Callable, Iterable, Mapping

from sloth_daemon.errors import BadRequest

SOURCES = ("line", "file", "tqdm", "estimate")
COVERS = ("cgroup", "rusage")
ENDED_MAX = 200  # characters of how a run ended kept with its cost
COST_FIELDS = ("cpu_s", "peak_rss_bytes", "wall_s", "ended", "covers")
ESTIMATE_RUNS = 20  # the done runs (the latest) an estimate is the median of
ESTIMATE_SCAN = 2000  # finished jobs looked at, newest first, for runs like a job


def _seconds(v: Any, name: str, *, none_ok: bool = False) -> float | None:
    if v is None and none_ok:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or not 0 <= v < 1e12:
        raise BadRequest(f"{name} must be a number from 0 to 1e12")
    return float(v)


def progress_json(progress: Mapping[str, Any], attempt: int) -> str:
    """The stored form of a run's progress; BadRequest for a value no keeper sends."""
    if not isinstance(progress, Mapping):
        raise BadRequest("progress must be an object")
    f = progress.get("fraction")
    if isinstance(f, bool) or not isinstance(f, (int, float)) or not math.isfinite(f) or not 0 <= f <= 1:
        raise BadRequest("progress fraction must be a number from 0 to 1")
    source = progress.get("source")
    if source not in SOURCES:
        raise BadRequest(f"progress source must be one of {', '.join(SOURCES)}")
    return json.dumps({"fraction": float(f), "source": source,
                       "eta_s": _seconds(progress.get("eta_s"), "eta_s", none_ok=True),
                       "at": _seconds(progress.get("at"), "at", none_ok=True), "attempt": attempt})


def cost_values(cost: Mapping[str, Any]) -> tuple[float, int, float, str, str]:
    """(cpu_s, peak_rss_bytes, wall_s, ended, covers) to store; BadRequest if not a cost."""
    if not isinstance(cost, Mapping):
        raise BadRequest("cost must be an object")
    peak = cost.get("peak_rss_bytes")
    if isinstance(peak, bool) or not isinstance(peak, int) or not 0 <= peak < 2**62:
        raise BadRequest("peak_rss_bytes must be a whole number of bytes")
    if cost.get("covers") not in COVERS:
        raise BadRequest(f"covers must be one of {', '.join(COVERS)}")
    return (_seconds(cost.get("cpu_s"), "cpu_s"), peak, _seconds(cost.get("wall_s"), "wall_s"),  # type: ignore[return-value]
            str(cost.get("ended") or "")[:ENDED_MAX], str(cost["covers"]))


def cost_dict(row: Any) -> dict[str, Any]:
    """An ``attempts`` row as the views read it: {"attempt", "cost": {...}}."""
    return {"attempt": int(row["attempt"]), "cost": {k: row[k] for k in COST_FIELDS}}


def costs_by_job(rows: Iterable[Any]) -> dict[int, list[dict[str, Any]]]:
    out: dict[int, list[dict[str, Any]]] = {}
    for r in rows:
        out.setdefault(int(r["job_id"]), []).append(cost_dict(r))
    return out


LIKE_COLUMNS = ("key", "label", "command")  # what a job's past runs are found by (with a schedule's key prefix)


def run_times_sql(column: str, prefix: bool, table: str, mark: str) -> str:
    """The wall times of the latest done runs whose ``column`` equals (with
    ``prefix``: begins with) a value, among the newest finished jobs: one
    statement both engines run (``table``: their jobs table; ``mark``: their
    placeholder). Parameters: [len(value) if prefix], value, ESTIMATE_SCAN, ESTIMATE_RUNS."""
    if column not in LIKE_COLUMNS:
        raise BadRequest(f"runs are found by one of {', '.join(LIKE_COLUMNS)}")
    attempts = table.replace("jobs", "attempts")
    match = f"substr(j.{column}, 1, {mark}) = {mark}" if prefix else f"j.{column} = {mark}"
    return (f"SELECT a.wall_s FROM (SELECT id, attempts, state, finished_at, key, label, command FROM {table}"
            f" WHERE finished_at IS NOT NULL ORDER BY finished_at DESC LIMIT {mark}) j"
            f" JOIN {attempts} a ON a.job_id = j.id AND a.attempt = j.attempts"
            f" WHERE j.state = 'done' AND {match} ORDER BY j.finished_at DESC LIMIT {mark}")


def run_times_args(value: str, prefix: bool) -> tuple[Any, ...]:
    return ((ESTIMATE_SCAN, len(value), value) if prefix else (ESTIMATE_SCAN, value)) + (ESTIMATE_RUNS,)


def like(job: Mapping[str, Any]) -> list[tuple[str, str, bool]]:
    """What a job's past runs are found by, the closest first: its
    schedule's slot keys, its key, its label, its command (as stored)."""
    out: list[tuple[str, str, bool]] = []
    key = job.get("key")
    if isinstance(key, str) and key.startswith("schedule:") and key.count(":") >= 2:
        out.append(("key", key[:key.rindex(":") + 1], True))
    elif key:
        out.append(("key", key, False))
    if job.get("label"):
        out.append(("label", job["label"], False))
    out.append(("command", json.dumps(job["command"]), False))
    return out


RunTimes = Callable[..., "list[float]"]


def with_run_facts(jobs: list[dict[str, Any]], costs: Callable[[list[int]], dict[int, list[dict[str, Any]]]],
                   run_times: RunTimes, now: float) -> None:
    """Each job (a dict as listed) gets ``cost``: its latest attempt's, or
    None; a running one that says nothing of its progress gets an estimate
    from the median of its like's done runs (``source`` "estimate"); one
    that says a fraction but no time left gets one from its rate so far.
    One read of costs for all, one of past runs per distinct like."""
    ran = [j["id"] for j in jobs if j.get("attempts")]
    found = costs(ran) if ran else {}
    medians: dict[tuple[str, str, bool], float | None] = {}
    for j in jobs:
        runs = found.get(j["id"], [])
        j["cost"] = runs[-1]["cost"] if runs and runs[-1]["attempt"] == j.get("attempts") else None
        if j.get("state") != "running":
            continue
        started = (j.get("runner") or {}).get("started_at") or j.get("updated_at") or now
        elapsed = max(0.0, now - float(started))
        p = j.get("progress")
        if p:
            if p.get("eta_s") is None and p["fraction"] >= 0.01:
                j["progress"] = {**p, "eta_s": round(elapsed * (1 - p["fraction"]) / p["fraction"], 1)}
            continue
        for how in like(j):
            if how not in medians:
                medians[how] = median(run_times(how[0], how[1], prefix=how[2]))
            typical = medians[how]
            if typical:
                j["progress"] = {"fraction": round(min(elapsed / typical, 0.99), 3), "source": "estimate",
                                 "eta_s": round(max(typical - elapsed, 0.0), 1), "at": now}
                break


def median(values: list[float]) -> float | None:
    if not values:
        return None
    s = sorted(values)
    mid = len(s) // 2
    return s[mid] if len(s) % 2 else (s[mid - 1] + s[mid]) / 2

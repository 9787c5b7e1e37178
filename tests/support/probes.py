"""Reading what probe jobs (probe_job.py) recorded: who started when, who
ended, who ticked last, and whether two runs of one job ever overlapped."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path


@dataclass
class ProbeRun:
    job: int
    attempt: int
    token: str
    pid: int
    start: float
    end: float | None = None  # it wrote its end line (it succeeded)
    last_tick: float | None = None

    @property
    def last_seen(self) -> float:
        """The last moment it is known to have run."""
        return max(t for t in (self.start, self.end, self.last_tick) if t is not None)


def _lines(path: Path) -> list[list[str]]:
    try:
        return [ln.split() for ln in path.read_text().splitlines() if ln.strip()]
    except FileNotFoundError:
        return []


def runs(rec: Path) -> dict[int, list[ProbeRun]]:
    """job id -> its runs in the order they started."""
    by_token: dict[str, ProbeRun] = {}
    for job, attempt, token, pid, ts in _lines(rec / "starts"):
        by_token[token] = ProbeRun(int(job), int(attempt), token, int(pid), float(ts))
    for job, attempt, token, pid, ts in _lines(rec / "ends"):
        if token in by_token:
            by_token[token].end = float(ts)
    for job, attempt, token, pid, ts in _lines(rec / "ticks"):
        if token in by_token:
            r = by_token[token]
            r.last_tick = max(r.last_tick or 0.0, float(ts))
    out: dict[int, list[ProbeRun]] = defaultdict(list)
    for r in sorted(by_token.values(), key=lambda r: r.start):
        out[r.job].append(r)
    return dict(out)


def collisions(rec: Path) -> list[list[str]]:
    """Runs that found another run of their job holding its flock."""
    return _lines(rec / "collisions")


def overlaps(rec: Path) -> list[str]:
    """Every run that started before an earlier run of its job was last seen."""
    out = []
    for job, rs in runs(rec).items():
        for a, b in zip(rs, rs[1:]):
            if b.start <= a.last_seen:
                out.append(f"job {job}: attempt {b.attempt} started at {b.start:.3f}, but attempt {a.attempt}"
                           f" was seen running until {a.last_seen:.3f}")
    return out


def ticks_of(rec: Path, token: str) -> list[float]:
    return [float(t[4]) for t in _lines(rec / "ticks") if t[2] == token]

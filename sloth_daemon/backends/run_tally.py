"""How many runs ended, how, and how long they took: counted alike by both
engines from the queue's history (docs/metrics.md).

A run is a ``started`` event; its outcome the kind of the first event of
the same job and attempt after it that ends a run (OUTCOMES), its duration
from the one to the other. A run whose job moved past its attempt (or
ended) with no such event was ``lost`` (its lease expired for good: the
daemon and the keeper died with it); it has no duration. A run still
running is not counted yet.

History is pruned (`sloth prune`), so the counts would go backwards: the
prune folds what it deletes into ``PRUNED_KEY`` in meta, in the same
transaction, and a tally is the history's plus that. So a counter never
goes back while the queue lives, whichever process reads it, daemon or
not, on any machine of a shared queue.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

# The kinds that end a run (backends/*/leases.py, batch.py, ends.py):
# done and failed are the job's doing (a failed run with tries left is
# retried, same event); the others end it from outside.
OUTCOMES = ("done", "failed", "interrupted", "fenced", "condition_lost", "cancelled", "abandoned")
LOST = "lost"
# Upper bounds of the duration histogram, seconds: from a `true` to a night's backup.
BUCKETS = (0.01, 0.1, 1.0, 10.0, 60.0, 300.0, 1800.0, 3600.0, 14400.0, 86400.0)
PRUNED_KEY = "runs_pruned"


@dataclass
class RunCount:
    """Runs of one lane with one outcome: ``n`` all of them; ``timed``
    those with a duration (a lost run has none), ``sum_s`` their total,
    ``le[i]`` how many took at most BUCKETS[i] (cumulative)."""

    n: int = 0
    timed: int = 0
    sum_s: float = 0.0
    le: list[int] = field(default_factory=lambda: [0] * len(BUCKETS))

    def add(self, other: "RunCount") -> None:
        self.n += other.n
        self.timed += other.timed
        self.sum_s += other.sum_s
        self.le = [a + b for a, b in zip(self.le, other.le, strict=True)]


Tally = dict[tuple[str, str], RunCount]  # (lane, outcome) -> RunCount


def statement(prefix: str = "", jobs_where: str = "") -> str:
    """The one query, for either engine: ``prefix`` the schema (``sloth.``
    on PostgreSQL); ``jobs_where`` a condition on the jobs ``j`` (a prune's
    selection). Columns: lane, outcome, n, timed, sum_s, then one per bucket."""
    kinds = ", ".join(f"'{k}'" for k in OUTCOMES)
    buckets = ", ".join(f"sum(CASE WHEN e.at - r.began <= {b!r} THEN 1 ELSE 0 END) AS le{i}"
                        for i, b in enumerate(BUCKETS))
    return (
        f"WITH r AS (SELECT s.job_id, s.attempt, s.at AS began,"
        f" (SELECT e.id FROM {prefix}events e WHERE e.job_id = s.job_id AND e.id > s.id"
        f" AND e.attempt = s.attempt AND e.kind IN ({kinds}) ORDER BY e.id LIMIT 1) AS end_id"
        f" FROM {prefix}events s WHERE s.kind = 'started')"
        f" SELECT j.lane, coalesce(e.kind, '{LOST}') AS outcome, count(*) AS n, count(e.id) AS timed,"
        f" coalesce(sum(e.at - r.began), 0) AS sum_s, {buckets}"
        f" FROM r JOIN {prefix}jobs j ON j.id = r.job_id LEFT JOIN {prefix}events e ON e.id = r.end_id"
        f" WHERE (e.id IS NOT NULL OR j.attempts > r.attempt OR j.state <> 'running')"
        + (f" AND {jobs_where}" if jobs_where else "")
        + " GROUP BY j.lane, coalesce(e.kind, 'lost')"
    )


def from_rows(rows: Iterable[Iterable[Any]]) -> Tally:
    """The statement's rows (tuples, or dicts in column order) as a Tally."""
    out: Tally = {}
    for row in rows:
        lane, outcome, n, timed, sum_s, *le = list(row.values()) if isinstance(row, Mapping) else list(row)
        out[(str(lane), str(outcome))] = RunCount(int(n), int(timed), float(sum_s or 0), [int(x or 0) for x in le])
    return out


def merged(*tallies: Tally) -> Tally:
    out: Tally = {}
    for t in tallies:
        for k, v in t.items():
            out.setdefault(k, RunCount()).add(v)
    return out


def to_json(t: Tally) -> str:
    """The form kept in meta: [[lane, outcome, n, timed, sum_s, [le...]], ...]."""
    return json.dumps([[lane, outcome, c.n, c.timed, c.sum_s, c.le] for (lane, outcome), c in sorted(t.items())])


def from_meta(value: Any) -> Tally:
    """What ``PRUNED_KEY`` holds (None: nothing pruned yet). A record of
    another shape (another bucket list) is read as far as it fits."""
    out: Tally = {}
    for item in value or ():
        lane, outcome, n, timed, sum_s, le = item
        le = (list(le) + [timed] * len(BUCKETS))[:len(BUCKETS)]
        out[(str(lane), str(outcome))] = RunCount(int(n), int(timed), float(sum_s), [int(x) for x in le])
    return out

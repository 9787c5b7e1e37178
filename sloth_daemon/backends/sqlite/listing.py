"""What ``sloth ls`` shows, read from the SQLite queue: the jobs of a
selection in the order a user reads them, a page at a time, with how many
there are in all (a listing never stops short without saying so).

Sections, in order: running (oldest first), queued (the ones due now in the
order a claim takes them, then the delayed ones by when they come due),
blocked (oldest first), finished (most recent first): the sections and the
paging are backends/rules.py's, shared with PostgreSQL. Composed into the
queue and the read-only view beside their reads (backends/sqlite/reads.py).
"""

from __future__ import annotations

import sqlite3
from typing import Callable, Sequence

from sloth_daemon.backends import contract, rules
from sloth_daemon.models import Job, Listing

ORDER = {
    "running": "id",
    "queued": "not_before > :now, CASE WHEN not_before <= :now THEN -priority ELSE 0 END,"
              " not_before, -priority, id",
    "held": "priority DESC, not_before, id",  # the order they would run in once released
    "blocked": "id",
    "finished": "finished_at DESC, id DESC",
}


class SqliteListings(contract.Listings):
    """Listings on one connection; ``job`` tells a row as a Job, and
    ``lane_counts`` reads the active jobs per lane (SqliteReads's)."""

    def __init__(self, conn: sqlite3.Connection, job: Callable[[sqlite3.Row], Job],
                 lane_counts: Callable[[], dict[str, dict[str, int]]]) -> None:
        self.conn, self.job, self.lane_counts = conn, job, lane_counts

    def listing(self, *, states: Sequence[str] | None = None, lane: str | None = None,
                limit: int | None = None, offset: int = 0, finished_limit: int | None = None,
                now: float, host: str | None = None, batch: int | None = None) -> Listing:
        wanted = rules.listed_states(states)
        where, args = _where(lane, host, batch)
        counts = self.state_counts(where, args)
        jobs: list[Job] = []
        for name, members, take, skip in rules.pages(rules.sections(wanted, counts, finished_limit), offset, limit):
            jobs += self._section(name, members, where, args, take, skip, now)
        return rules.listing(jobs, counts, wanted, offset, self.lane_counts(), lane)

    def state_counts(self, where: str, args: dict[str, object]) -> dict[str, int]:
        """Jobs per state (every state named) that match a filter of _where."""
        sql = f"SELECT state, count(*) FROM jobs WHERE {where} GROUP BY state"
        return rules.state_counts(self.conn.execute(sql, args))

    def _section(self, name: str, members: list[str], where: str, wargs: dict[str, object], take: int, skip: int,
                 now: float) -> list[Job]:
        marks = ", ".join(f":s{i}" for i in range(len(members)))
        sql = (f"SELECT * FROM jobs WHERE state IN ({marks}) AND {where}"
               f" ORDER BY {ORDER[name]} LIMIT :take OFFSET :skip")
        args = {**{f"s{i}": m for i, m in enumerate(members)}, **wargs, "now": now, "take": take, "skip": skip}
        return [self.job(r) for r in self.conn.execute(sql, args)]


def _where(lane: str | None, host: str | None, batch: int | None = None) -> tuple[str, dict[str, object]]:
    """The listing's filter (fixed text, named parameters): a lane, a host
    (the job runs or ran there, or is placed there), both, or neither."""
    parts: list[str] = ["1"]
    args: dict[str, object] = {}
    if lane is not None:
        parts.append("lane = :lane")
        args["lane"] = lane
    if host is not None:
        prefix = rules.host_prefix(host)
        parts.append("(place = :host OR substr(worker, 1, :plen) = :prefix)")
        args.update(host=host, plen=len(prefix), prefix=prefix)
    if batch is not None:  # a batch with a handle (issue 33)
        parts.append("batch_id = :batch")
        args["batch"] = batch
    return " AND ".join(parts), args

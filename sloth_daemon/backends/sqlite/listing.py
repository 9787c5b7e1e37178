"""What ``sloth ls`` shows, read from the SQLite queue: the jobs of a
selection in the order a user reads them, a page at a time, with how many
there are in all (a listing never stops short without saying so).

Sections, in order: running (oldest first), queued (the ones due now in the
order a claim takes them, then the delayed ones by when they come due),
blocked (oldest first), finished (most recent first). A base class of the
read side (backends/sqlite/reads.py).
"""

from __future__ import annotations

import sqlite3
from typing import TYPE_CHECKING, Sequence

from sloth_daemon.models import FINISHED_STATES, STATE_NAMES, Job, Listing, state_name

ORDER = {
    "running": "id",
    "queued": "not_before > :now, CASE WHEN not_before <= :now THEN -priority ELSE 0 END,"
              " not_before, -priority, id",
    "blocked": "id",
    "finished": "finished_at DESC, id DESC",
}


class SqliteListing:
    _conn: sqlite3.Connection

    if TYPE_CHECKING:
        def _job(self, row: sqlite3.Row) -> Job: ...
        def lane_counts(self) -> dict[str, dict[str, int]]: ...

    def listing(self, *, states: Sequence[str] | None = None, lane: str | None = None,
                limit: int | None = None, offset: int = 0, finished_limit: int | None = None,
                now: float, host: str | None = None) -> Listing:
        """Up to ``limit`` jobs of the selection from ``offset`` on (see the
        module docstring for the order). ``states``: which (``claimed`` reads
        as ``running``; default all); ``finished_limit``: at most this many
        finished jobs, the most recent (the default view's "last 10").
        ``lanes``: active jobs per lane (the selection's lane, or all).
        ``host``: only jobs that run (or ran) on that host, or are placed
        there. Raises ValueError for an unknown state."""
        wanted = set(STATE_NAMES) if not states else {state_name(s) for s in states}
        where, args = _where(lane, host)
        counts = self._state_counts(where, args)
        total = sum(counts[s] for s in wanted)
        jobs: list[Job] = []
        for name, members, take, skip in _pages(_sections(wanted, counts, finished_limit), offset, limit):
            jobs += self._section(name, members, where, args, take, skip, now)
        lanes = self.lane_counts()
        return Listing(jobs, total, counts, offset, lanes if lane is None else {lane: lanes.get(lane, {})})

    def _state_counts(self, where: str, args: dict[str, object]) -> dict[str, int]:
        out = dict.fromkeys(STATE_NAMES, 0)
        for st, n in self._conn.execute(f"SELECT state, count(*) FROM jobs WHERE {where} GROUP BY state", args):
            out[st] = n
        return out

    def _section(self, name: str, members: list[str], where: str, wargs: dict[str, object], take: int, skip: int,
                 now: float) -> list[Job]:
        marks = ", ".join(f":s{i}" for i in range(len(members)))
        sql = (f"SELECT * FROM jobs WHERE state IN ({marks}) AND {where}"
               f" ORDER BY {ORDER[name]} LIMIT :take OFFSET :skip")
        args = {**{f"s{i}": m for i, m in enumerate(members)}, **wargs, "now": now, "take": take, "skip": skip}
        return [self._job(r) for r in self._conn.execute(sql, args)]


WORKER_PREFIX = "sloth-daemon:"  # runs.worker_name: sloth-daemon:HOST:PID:INSTANCE


def _where(lane: str | None, host: str | None) -> tuple[str, dict[str, object]]:
    """The listing's filter (fixed text, named parameters): a lane, a host
    (the job runs or ran there, or is placed there), both, or neither."""
    parts: list[str] = ["1"]
    args: dict[str, object] = {}
    if lane is not None:
        parts.append("lane = :lane")
        args["lane"] = lane
    if host is not None:
        prefix = f"{WORKER_PREFIX}{host}:"
        parts.append("(place = :host OR substr(worker, 1, :plen) = :prefix)")
        args.update(host=host, plen=len(prefix), prefix=prefix)
    return " AND ".join(parts), args


def _pages(sections: list[tuple[str, int, list[str]]], offset: int,
           limit: int | None) -> list[tuple[str, list[str], int, int]]:
    """(section, states, rows to take, rows to skip) for a page from
    ``offset`` of at most ``limit`` rows across the sections in order."""
    out = []
    skip, room = offset, (limit if limit is not None else -1)
    for name, size, members in sections:
        if room == 0:
            break
        if skip >= size:
            skip -= size
            continue
        take = size - skip if room < 0 else min(room, size - skip)
        out.append((name, members, take, skip))
        room, skip = (room - take if room > 0 else room), 0
    return out


def _sections(wanted: set[str], counts: dict[str, int],
              finished_limit: int | None) -> list[tuple[str, int, list[str]]]:
    """(section, rows in it, states) for the non-empty sections wanted, in order."""
    out: list[tuple[str, int, list[str]]] = [
        (s, counts[s], [s]) for s in ("running", "queued", "blocked") if s in wanted and counts[s]]
    done = [s for s in FINISHED_STATES if s in wanted]
    n = sum(counts[s] for s in done)
    if finished_limit is not None:
        n = min(n, finished_limit)
    if n:
        out.append(("finished", n, done))
    return out

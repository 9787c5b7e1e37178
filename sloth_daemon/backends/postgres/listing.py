"""What ``sloth ls`` shows, read from the PostgreSQL queue: the jobs of a
selection in the order a user reads them, a page at a time, with how many
there are in all (the counterpart of backends/sqlite/listing.py: the same sections,
order and paging, backends/rules.py's).

All of one listing is read in one read-only snapshot, so its total, its
counts and its rows agree even while other daemons write.
"""

from __future__ import annotations

from typing import Any, Sequence

from sloth_daemon.backends import contract, rules
from sloth_daemon.models import Job, Listing
from sloth_daemon.backends.postgres.db import Connection, Cursor
from sloth_daemon.backends.postgres.reads import SQL_LANE_COUNTS, JobRows

ORDER = {
    "running": "id",
    "queued": "not_before > %(now)s, CASE WHEN not_before <= %(now)s THEN -priority ELSE 0 END,"
              " not_before, -priority, id",
    "held": "priority DESC, not_before, id",  # the order they would run in once released
    "blocked": "id",
    "finished": "finished_at DESC, id DESC",
}
SQL_STATE_COUNTS = "SELECT state, count(*) AS n FROM sloth.jobs WHERE {where} GROUP BY state"
# ls --host H: jobs that run or ran on H (by their worker's name), or are placed there
HOST = "(place = %(host)s OR left(worker, %(plen)s) = %(prefix)s)"


class PgListings(contract.Listings):
    """listing() of the PostgreSQL queue and of its read-only view, over ``db``; ``rows``
    makes its Jobs. No state of its own."""

    def __init__(self, db: Connection, rows: JobRows) -> None:
        self._db = db
        self.rows = rows

    def listing(self, *, states: Sequence[str] | None = None, lane: str | None = None,
                limit: int | None = None, offset: int = 0, finished_limit: int | None = None,
                now: float, host: str | None = None, batch: int | None = None) -> Listing:
        wanted = rules.listed_states(states)
        where, args = _where(lane, host, batch)
        return self._db.read(lambda c: self._listing(c, wanted, (where, args), lane, limit, offset,
                                                     finished_limit, now),
                             "listing jobs", snapshot=True)

    def _listing(self, c: Cursor, wanted: set[str], filt: tuple[str, dict[str, Any]], lane: str | None,
                 limit: int | None, offset: int, finished_limit: int | None, now: float) -> Listing:
        counts = rules.state_counts((r["state"], r["n"]) for r in c.execute(
            SQL_STATE_COUNTS.format(where=filt[0]), filt[1]).fetchall())
        jobs: list[Job] = []
        for name, members, take, skip in rules.pages(rules.sections(wanted, counts, finished_limit), offset, limit):
            jobs += self._section(c, name, members, filt, take, skip, now)
        lanes = rules.lane_counts((r["lane"], r["state"], r["n"]) for r in c.execute(SQL_LANE_COUNTS).fetchall())
        return rules.listing(jobs, counts, wanted, offset, lanes, lane)

    def _section(self, c: Cursor, name: str, members: list[str], filt: tuple[str, dict[str, Any]], take: int,
                 skip: int, now: float) -> list[Job]:
        sql = (f"SELECT * FROM sloth.jobs WHERE state = ANY(%(members)s) AND {filt[0]}"
               f" ORDER BY {ORDER[name]} LIMIT %(take)s OFFSET %(skip)s")
        args = {"members": members, **filt[1], "now": now, "take": take, "skip": skip}
        return [self.rows.job(r, c) for r in c.execute(sql, args).fetchall()]


def _where(lane: str | None, host: str | None, batch: int | None = None) -> tuple[str, dict[str, Any]]:
    """The listing's filter (fixed text, named parameters), as sqlite_listing's."""
    parts: list[str] = ["true"]
    args: dict[str, Any] = {}
    if lane is not None:
        parts.append("lane = %(lane)s")
        args["lane"] = lane
    if host is not None:
        prefix = rules.host_prefix(host)
        parts.append(HOST)
        args.update(host=host, plen=len(prefix), prefix=prefix)
    if batch is not None:  # a batch with a handle (issue 33)
        parts.append("batch_id = %(batch)s")
        args["batch"] = batch
    return " AND ".join(parts), args

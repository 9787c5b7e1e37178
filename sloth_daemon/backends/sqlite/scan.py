"""A listing read a chunk at a time, for one too large to hold (`sloth ls
--json` of a million jobs): the daemon sends each chunk as it is read and
reads the next only once its reader has taken it (the counterpart of
backends/postgres/scan.py; the sections and paging are backends/rules.py's,
the order in each backends/sqlite/listing.py's).

At the start, in one short read transaction: the counts, the lanes, and
the ids of the page in listing order, written to a temporary table of this
scan's own connection (on disk, never held in memory). Then the rows, a
chunk at a time by position in that table (a keyset, never OFFSET), each
chunk its own short read: a reader that pauses for an hour holds no read
transaction open, so the WAL is checkpointed as usual meanwhile.

What a scan promises: every job of the selection as it stood at the start
is listed once, in the order of the start, whatever changes meanwhile (a
job never appears twice, nor vanishes because another moved); each row is
the job as it is when its chunk is read (one listed among the running may
say it is done by then); a job queued after the start is not listed (nor
counted); a job pruned meanwhile is not listed and is counted in
``left_out``, so ``offset + len(jobs) + left_out == total`` always holds
and nothing is left out without saying so.
"""

from __future__ import annotations

import sqlite3
from typing import TYPE_CHECKING, Any, Callable, Sequence

from sloth_daemon.models import Job
from sloth_daemon.backends import contract, rules
from sloth_daemon.backends.sqlite.listing import ORDER, _where
from sloth_daemon.backends.sqlite.reads import reads

if TYPE_CHECKING:
    from sloth_daemon.backends.sqlite.listing import SqliteListings

TABLE = "temp.sloth_listing"


class SqliteScan(contract.Scan):
    """One listing being read (see the module docstring). ``listings``: the
    listing side of the read-only view whose connection holds the scan's
    table; ``close_reader``: what closing the scan closes besides (the view,
    when the daemon opened one for this scan), or None."""

    def __init__(self, listings: SqliteListings, *, close_reader: Callable[[], None] | None, now: float,
                 states: Sequence[str] | None = None, lane: str | None = None, limit: int | None = None,
                 offset: int = 0, finished_limit: int | None = None, host: str | None = None,
                 batch: int | None = None) -> None:
        self._listings, self._close_reader = listings, close_reader
        self.conn = listings.conn
        self._pos, self.sent = 0, 0
        wanted = rules.listed_states(states)
        self.head = self._start(wanted, _where(lane, host, batch), lane, limit, offset, finished_limit, now)

    @reads
    def _start(self, wanted: set[str], filt: tuple[str, dict[str, object]], lane: str | None,
               limit: int | None, offset: int, finished_limit: int | None, now: float) -> dict[str, Any]:
        c = self.conn
        c.execute("PRAGMA temp_store = FILE")
        c.execute(f"DROP TABLE IF EXISTS {TABLE}")
        c.execute(f"CREATE TABLE {TABLE} (pos INTEGER PRIMARY KEY, id INTEGER NOT NULL)")
        c.execute("BEGIN")
        try:
            counts = self._listings.state_counts(*filt)
            base = 0
            for name, members, take, skip in rules.pages(rules.sections(wanted, counts, finished_limit), offset, limit):
                c.execute(_insert(name, members, filt[0]), {**_members(members), **filt[1], "now": now,
                                                            "take": take, "skip": skip, "base": base - skip})
                base += take
            lanes = self._listings.lane_counts()
            c.execute("COMMIT")
        except BaseException:
            c.execute("ROLLBACK")
            raise
        return rules.scan_head(counts, wanted, offset, lanes, lane)

    @reads
    def next(self, n: int = rules.CHUNK) -> list[Job]:
        while True:
            ids = [(p, i) for p, i in self.conn.execute(
                f"SELECT pos, id FROM {TABLE} WHERE pos > ? ORDER BY pos LIMIT ?", (self._pos, n))]
            if not ids:
                return []
            self._pos = ids[-1][0]
            jobs = self._jobs([i for _, i in ids])
            if jobs:  # else every one of them was pruned meanwhile: read on
                self.sent += len(jobs)
                return jobs

    def _jobs(self, ids: list[int]) -> list[Job]:
        marks = ",".join("?" * len(ids))
        rows = {r["id"]: r for r in self.conn.execute(f"SELECT * FROM jobs WHERE id IN ({marks})", ids)}
        return [self._listings.job(rows[i]) for i in ids if i in rows]

    def tail(self) -> dict[str, Any]:
        return {"left_out": self.head["total"] - self.head["offset"] - self.sent}

    def close(self) -> None:
        try:
            self.conn.execute(f"DROP TABLE IF EXISTS {TABLE}")
        except sqlite3.Error:
            pass  # closing the connection drops it too
        if self._close_reader is not None:
            self._close_reader()


def _insert(name: str, members: list[str], where: str) -> str:
    """The statement that appends a section's ids in its order; ``pos``
    counts on from the rows before it (row_number, not insertion order)."""
    marks = ", ".join(f":s{i}" for i in range(len(members)))
    return (f"INSERT INTO {TABLE} (pos, id) SELECT :base + row_number() OVER (ORDER BY {ORDER[name]}), id"
            f" FROM jobs WHERE state IN ({marks}) AND {where} ORDER BY {ORDER[name]} LIMIT :take OFFSET :skip")


def _members(members: list[str]) -> dict[str, str]:
    return {f"s{i}": m for i, m in enumerate(members)}

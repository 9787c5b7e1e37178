"""A listing of the PostgreSQL queue read a chunk at a time (the
counterpart of backends/sqlite/scan.py, with the same promise; the sections and
paging are backends/rules.py's, their order backends/postgres/listing.py's).

At the start, in one read-only REPEATABLE READ transaction: the counts,
the lanes, and one cursor per section of the page over its ids in order,
declared WITH HOLD, so the server keeps the ids (its own temporary storage,
not ours) once the transaction has committed, and no snapshot stays open
while a slow reader takes its time (nothing holds back VACUUM). Then the
rows, a chunk at a time: the next ids from the cursor, and those jobs as
they are now, each chunk its own short read. The cursors belong to the
scan's own connection; if it is lost, the scan fails (StorageError)
rather than start over and list jobs twice.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

from sloth_daemon.backends import contract, rules
from sloth_daemon.errors import StorageError
from sloth_daemon.models import Job
from sloth_daemon.backends.postgres.listing import ORDER, SQL_STATE_COUNTS, _where
from sloth_daemon.backends.postgres.db import Connection, Cursor
from sloth_daemon.backends.postgres.reads import SQL_LANE_COUNTS, JobRows

CURSOR = "sloth_listing_{}"


class PgScan(contract.Scan):
    """One listing being read on ``db`` (see the module docstring), its Jobs
    made by ``rows``; ``on_close``: called once the scan is closed (the
    read-only view that owns it closes itself: the daemon opens one per scan)."""

    def __init__(self, db: Connection, rows: JobRows, *, on_close: Callable[[], None] | None = None,
                 now: float, states: Sequence[str] | None = None, lane: str | None = None,
                 limit: int | None = None, offset: int = 0, finished_limit: int | None = None,
                 host: str | None = None, batch: int | None = None) -> None:
        self._db, self.rows, self._on_close = db, rows, on_close
        self.sent = 0
        wanted = rules.listed_states(states)
        filt = _where(lane, host, batch)
        self.head, self._cursors = self._db.read(
            lambda c: self._start(c, wanted, filt, lane, limit, offset, finished_limit, now),
            "listing jobs", snapshot=True)

    def _start(self, c: Cursor, wanted: set[str], filt: tuple[str, dict[str, Any]], lane: str | None,
               limit: int | None, offset: int, finished_limit: int | None,
               now: float) -> tuple[dict[str, Any], list[str]]:
        counts = rules.state_counts((r["state"], r["n"]) for r in c.execute(
            SQL_STATE_COUNTS.format(where=filt[0]), filt[1]).fetchall())
        cursors: list[str] = []
        for name, members, take, skip in rules.pages(rules.sections(wanted, counts, finished_limit), offset, limit):
            cursors.append(CURSOR.format(len(cursors)))
            c.execute(f"DECLARE {cursors[-1]} NO SCROLL CURSOR WITH HOLD FOR SELECT id FROM sloth.jobs"
                      f" WHERE state = ANY(%(members)s) AND {filt[0]} ORDER BY {ORDER[name]}"
                      " LIMIT %(take)s OFFSET %(skip)s",
                      {"members": members, **filt[1], "now": now, "take": take, "skip": skip})
        lanes = rules.lane_counts((r["lane"], r["state"], r["n"]) for r in c.execute(SQL_LANE_COUNTS).fetchall())
        return rules.scan_head(counts, wanted, offset, lanes, lane), cursors

    def next(self, n: int = rules.CHUNK) -> list[Job]:
        while self._cursors:
            ids = self._db.read(lambda c: [r["id"] for r in c.execute(
                f"FETCH FORWARD {int(n)} FROM {self._cursors[0]}").fetchall()], "listing jobs")
            if len(ids) < n:
                self._close_cursor()
            jobs = self._jobs(ids) if ids else []
            if jobs:  # else the section ended, or all of these were pruned meanwhile: read on
                self.sent += len(jobs)
                return jobs
        return []

    def _jobs(self, ids: list[int]) -> list[Job]:
        def read(c: Cursor) -> list[Job]:
            rows = {r["id"]: r for r in c.execute("SELECT * FROM sloth.jobs WHERE id = ANY(%s)", (ids,)).fetchall()}
            return [self.rows.job(rows[i], c) for i in ids if i in rows]

        return self._db.read(read, "listing jobs")

    def _close_cursor(self) -> None:
        name = self._cursors.pop(0)
        self._db.read(lambda c: c.execute(f"CLOSE {name}"), "listing jobs")

    def tail(self) -> dict[str, Any]:
        return {"left_out": self.head["total"] - self.head["offset"] - self.sent}

    def close(self) -> None:
        try:
            while self._cursors:
                self._close_cursor()
        except StorageError:
            pass  # a lost connection took its cursors with it
        if self._on_close is not None:
            self._on_close()

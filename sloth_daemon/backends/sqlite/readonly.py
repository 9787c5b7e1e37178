"""The SQLite queue opened to read only, for the CLI when no daemon answers:
``ls``, ``show``, ``logs`` and ``config`` still work (and say so). Never
creates, migrates or writes the file, so it is safe beside a daemon that is
starting, and on a file the user may not write.

It composes the queue's own readers (reads.py, listing.py) over a read-only
connection; each read says what it returns there.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from typing import Any, Collection, Sequence

from sloth_daemon.backends.sqlite import db
from sloth_daemon.backends.sqlite.listing import SqliteListing
from sloth_daemon.backends.sqlite.reads import JobRows, SqliteReads
from sloth_daemon.backends.sqlite.scan import SqliteScan
from sloth_daemon.backends.sqlite.schedules import ScheduleReads
from sloth_daemon.models import Event, Job, JobState, Listing


class SqliteReadOnly:
    """A read-only view of the queue at ``path``: ``reads`` and ``listings``
    over its own read-only connection."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        """Raises FileNotFoundError (no queue yet) or StorageError."""
        self.path = Path(path)
        self._conn = db.connect_readonly(self.path)
        self._conn.row_factory = sqlite3.Row
        rows = JobRows(self._conn)
        self.reads = SqliteReads(self._conn, rows)
        self.listings = SqliteListing(self._conn, rows.job, self.reads.lane_counts)
        self.schedules = ScheduleReads(self._conn)

    def scan(self, *, owns_reader: bool = False, **kw: Any) -> SqliteScan:
        """The listing ``listing(**kw)`` would give, read a chunk at a time
        on this connection (backends/sqlite/scan.py); ``owns_reader``: closing the
        scan closes this view."""
        return SqliteScan(self.listings, close_reader=self.close if owns_reader else None, **kw)

    # The reads (reads.py, listing.py): SqliteQueue's methods of the same names say what each returns.
    def get(self, job_id: int) -> Job:
        return self.reads.get(job_id)

    def jobs(self, state: str | JobState | None = None, lane: str | None = None, limit: int = 1000,
             *, states: Sequence[str] | None = None) -> list[Job]:
        return self.reads.jobs(state, lane, limit, states=states)

    def events(self, job_id: int) -> list[Event]:
        return self.reads.events(job_id)

    def counts(self) -> dict[str, int]:
        return self.reads.counts()

    def latest(self, *, origin: str | None = None, ran: bool = False) -> int | None:
        return self.reads.latest(origin=origin, ran=ran)

    def running(self) -> list[Job]:
        return self.reads.running()

    claimed = running  # the name of schema v1-v3 days

    def prereqs(self, job_id: int) -> list[dict[str, Any]]:
        return self.reads.prereqs(job_id)

    def dependents(self, job_id: int) -> list[int]:
        return self.reads.dependents(job_id)

    def next_due_at(self, lanes: Sequence[str] | None = None, *, exclude_lanes: Collection[str] = (),
                    exclude_ids: Collection[int] = (), places: Collection[str] | None = None) -> float | None:
        return self.reads.next_due_at(lanes, exclude_lanes=exclude_lanes, exclude_ids=exclude_ids, places=places)

    def lanes(self) -> list[str]:
        return self.reads.lanes()

    def lane_counts(self) -> dict[str, dict[str, int]]:
        return self.reads.lane_counts()

    def lane_busy(self, lane: str) -> bool:
        return self.reads.lane_busy(lane)

    def lane_rows(self) -> dict[str, dict[str, Any]]:
        return self.reads.lane_rows()

    def get_meta(self, key: str, default: Any = None) -> Any:
        return self.reads.get_meta(key, default)

    def listing(self, *, states: Sequence[str] | None = None, lane: str | None = None,
                limit: int | None = None, offset: int = 0, finished_limit: int | None = None,
                now: float, host: str | None = None) -> Listing:
        return self.listings.listing(states=states, lane=lane, limit=limit, offset=offset,
                                     finished_limit=finished_limit, now=now, host=host)

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> "SqliteReadOnly":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

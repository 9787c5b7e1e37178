"""The SQLite engine: the parts that keep the queue's contract
(backends/contract.py) over one file, built on one connection; db.py
connects and migrates.

Knows nothing of sockets, processes or the CLI. Every write is one short
``BEGIN IMMEDIATE`` transaction (db.transaction, through the store), every
time is a bound parameter read from the injected clock: SQL never reads
the clock. What ``claim`` picks, and in which order, is pick.py's; what a
job's end does to the jobs waiting for it, deps.py's.

The parts: ``store`` (unit.py: the connection, the one transaction helper,
the unit of a worker's turn, the broken-file guard), ``reads`` and
``listings`` (reads.py, listing.py, rows told as Jobs by reads.JobRows),
``adds`` (enqueue.py), ``claims`` (claim.py), ``leases`` (leases.py: what
a lease's holder does with it), ``requests`` (batch.py: the user's cancel,
retry, restart, prune), ``edits`` (edits.py), ``meta`` (meta.py: meta
and lanes), ``schedules`` (schedules.py). A job's end, shared by the
writers, is ends.py's.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from typing import Any

from sloth_daemon.backends.contract import Engine, QueueDefaults, ReadEngine
from sloth_daemon.backends.sqlite import db
from sloth_daemon.backends.sqlite.batch import SqliteRequests
from sloth_daemon.backends.sqlite.claim import SqliteClaims
from sloth_daemon.backends.sqlite.edits import SqliteEdits
from sloth_daemon.backends.sqlite.ends import SqliteEnds
from sloth_daemon.backends.sqlite.enqueue import SqliteAdds
from sloth_daemon.backends.sqlite.leases import SqliteLeases
from sloth_daemon.backends.sqlite.listing import SqliteListings
from sloth_daemon.backends.sqlite.meta import SqliteMeta
from sloth_daemon.backends.sqlite.outbox import SqliteOutbox
from sloth_daemon.backends.sqlite.reads import JobRows, SqliteReads
from sloth_daemon.backends.sqlite.scan import SqliteScan
from sloth_daemon.backends.sqlite.schedules import SqliteScheduleReads, SqliteSchedules
from sloth_daemon.backends.sqlite.unit import SqliteStore
from sloth_daemon.clock import Clock, SystemClock


def open_engine(path: str | os.PathLike[str], clock: Clock | None, defaults: QueueDefaults, *,
                lock_wait_s: float = 30.0) -> Engine:
    """The queue in the file at ``path`` (created with its folder if
    missing, migrated). ``lock_wait_s``: how long a write waits for another
    process's lock before raising StorageBusy (the daemon uses a short wait
    and tries again later, so its event loop never freezes behind a foreign
    writer)."""
    path, clock = Path(path), clock or SystemClock()
    patience_s = float(lock_wait_s)
    conn = db.connect(path, busy_timeout_s=min(patience_s, db.BUSY_TIMEOUT_MS / 1000))
    conn.row_factory = sqlite3.Row
    rows = JobRows(conn)
    store = SqliteStore(conn, path, patience_s, rows.job)
    reads = SqliteReads(conn, rows, clock)
    ends = SqliteEnds(store, rows)
    adds = SqliteAdds(store, clock, defaults, ends)
    meta = SqliteMeta(store, clock)
    return Engine(
        target=path, clock=clock, identity=meta.identity(), defaults=defaults, store=store, adds=adds,
        claims=SqliteClaims(store, rows, ends, clock), leases=SqliteLeases(store, rows, ends, clock, defaults),
        requests=SqliteRequests(store, rows, ends, adds, clock), edits=SqliteEdits(store, rows, clock),
        meta=meta, reads=reads,
        listings=SqliteListings(conn, rows.job, reads.lane_counts),
        schedules=SqliteSchedules(store, clock, adds.insert), outbox=SqliteOutbox(store, clock))


def open_read_engine(path: str | os.PathLike[str]) -> ReadEngine:
    """The queue at ``path`` on a read-only connection: never creates,
    migrates or writes the file, so it is safe beside a daemon that is
    starting, and on a file the user may not write. Raises
    FileNotFoundError (no queue yet) or StorageError."""
    path = Path(path)
    conn = db.connect_readonly(path)
    conn.row_factory = sqlite3.Row
    rows = JobRows(conn)
    reads = SqliteReads(conn, rows, SystemClock())
    listings = SqliteListings(conn, rows.job, reads.lane_counts)

    def scan(*, owns_reader: bool = False, **kw: Any) -> SqliteScan:
        return SqliteScan(listings, close_reader=conn.close if owns_reader else None, **kw)

    return ReadEngine(target=path, identity=None, reads=reads, listings=listings,
                      schedules=SqliteScheduleReads(conn), scan=scan, close=conn.close)

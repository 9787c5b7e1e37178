"""The PostgreSQL queue opened to read only: what the CLI reads when no
daemon answers (``ls``, ``show``, ``logs``; the counterpart of
backends/sqlite/readonly.py). Never migrates or writes: every transaction on its
connection is read only, so the server itself refuses a write, and a
schema that is not exactly this sloth's is refused, never touched.

PgReadOnly composes the read side of PgQueue (reads.Reads, listing.Listings,
hosts.Machines, logs.Logs, over one reads.JobRows) on a connection of its own,
and reads a listing of any size a chunk at a time (scan.PgScan).
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from sloth_daemon.backends.postgres import identity as pg_identity, migrate as pg_migrate, db as pgdb
from sloth_daemon.backends.postgres.hosts import Machines
from sloth_daemon.backends.postgres.listing import Listings
from sloth_daemon.backends.postgres.logs import Logs
from sloth_daemon.backends.postgres.reads import JobRows, Reads
from sloth_daemon.backends.postgres.scan import PgScan
from sloth_daemon.backends.postgres.schedules import PgScheduleReads

# One look, for a command that must answer whatever the server does (`sloth
# config`): libpq's shortest connect timeout (it reads less than 2 s as 2),
# no reconnecting, statements bounded as tightly.
QUICK = pgdb.PgOptions(connect_timeout_s=2, tcp_user_timeout_s=2.0, statement_timeout_s=2.0, reconnect_s=0.0)


class PgReadOnly:
    def __init__(self, url: str, options: pgdb.PgOptions | None = None) -> None:
        """Raises StorageError (unreachable, or no queue of this sloth's schema there)."""
        self.url = url
        options = dataclasses.replace(options or pgdb.PgOptions(), read_only=True)
        self._db = db = pgdb.Connection(url, options, lambda: None)
        self.rows = JobRows(db)
        self._name_readers(db, self.rows)
        try:
            pg_migrate.check_schema(db)
            row = db.read(lambda c: c.execute(pg_identity.SQL_ID).fetchone(), "reading the queue's identity")
            self.identity: str | None = None if row is None else str(json.loads(row["value"]))
        except BaseException:
            db.close()
            raise

    def _name_readers(self, db: pgdb.Connection, rows: JobRows) -> None:
        """The readers (as PgQueue's), and which of their methods answers."""
        self.reads = reads = Reads(db, rows)
        self.get = reads.get
        self.get_many = reads.get_many
        self.jobs = reads.jobs
        self.events = reads.events
        self.counts = reads.counts
        self.latest = reads.latest
        self.running = self.claimed = reads.running  # claimed: the name of schema v1-v2 days
        self.prereqs = reads.prereqs
        self.dependents = reads.dependents
        self.next_due_at = reads.next_due_at
        self.lanes = reads.lanes
        self.lane_counts = reads.lane_counts
        self.lane_busy = reads.lane_busy
        self.lane_rows = reads.lane_rows
        self.get_meta = reads.get_meta
        self.schema_status = reads.schema_status
        self.listings = Listings(db, rows)
        self.listing = self.listings.listing
        self.machines = machines = Machines(db)
        self.hosts = machines.hosts
        # writes the server refuses on this view's connection, kept as they were
        self.register_host = machines.register_host
        self.host_seen = machines.host_seen
        self.forget_host = machines.forget_host
        self.logs = Logs(db)
        self.schedules = PgScheduleReads(db)
        self.stored_log = self.logs.stored_log

    def scan(self, *, owns_reader: bool = False, **kw: Any) -> PgScan:
        """The listing ``listing(**kw)`` would give, read a chunk at a time
        on this connection (backends/postgres/scan.py); ``owns_reader``: closing the scan
        closes this view."""
        return PgScan(self._db, self.rows, on_close=self.close if owns_reader else None, **kw)

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> "PgReadOnly":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

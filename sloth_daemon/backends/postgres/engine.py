"""The PostgreSQL engine: the parts that keep the queue's contract
(backends/contract.py) on one connection (db.Connection: connecting,
reconnecting, the one transaction helper), a queue shared by any number of
daemons:

* ``store`` (store.PgStore): the unit of a worker's turn, flush, the
  queue's identity checked on every new connection; ``meta``
  (meta.PgMeta): meta and lanes;
* ``claims`` (claim.PgClaims, its statements in pick.py): claim;
* ``leases`` (leases.PgLeases): heartbeats, adoption, and the outcomes that
  end a lease (complete, fail, release);
* ``requests`` (batch.PgRequests), ``edits`` (edits.PgEdits), ``adds``
  (enqueue.PgAdds), ``schedules`` (schedules.PgSchedules);
* ``reads`` (reads.PgReads) and ``listings`` (listing.PgListings), rows
  made into Jobs by reads.JobRows;
* ``machines`` (hosts.PgMachines) and ``logs`` (logs.PgLogs): the hosts
  that serve the queue and the attempt logs they store.

Writers go through one writer.PgWriter (transactions that report changed
dependents to ``on_side_change``, and a job's end). deps.py holds the SQL
of dependencies, identity.py which queue a database holds, migrate.py the
schema.

The contract is the same as SQLite's (same methods, values, errors and
event history); what differs is who keeps time and who may race:

* **One clock, the server's.** Every lease comparison and every time written
  is ``sloth.now()`` in SQL: the server's clock at the start of the
  transaction, one instant for all it writes (see the migration); clients
  send durations (a lease, a backoff), never timestamps. A test passes a
  ManualClock and each transaction pins sloth.now() to its reading instead.
  (``not_before`` given to enqueue is the one absolute time a caller may
  send: it is the user's own "not before this moment"; ``ended_at`` and a
  runner's ``started_at`` are reports, never later than now.)
* **Hot writes are one statement**: a claim, a renewal or the completion of
  a job nobody waits for is one UPDATE that also inserts its event,
  committed alone: one round trip. An end that settles dependents
  (backends/postgres/deps.py) is a transaction.
* **Several daemons claim at once.** A claim is one UPDATE whose candidates
  come from ``FOR UPDATE SKIP LOCKED`` selects, so two claimers never wait
  for or take the same row; the UPDATE re-checks due-ness itself, so a row
  that changed after it was picked (completed, renewed) is left alone
  (River #1302). Lease holders are matched on id AND token in the UPDATE.
* **Fencing tokens** are ``<sequence value>-<16 random hex digits>``: the
  number grows with every claim in the whole queue, so a resource that
  remembers the highest token it saw can refuse an older holder
  (Kleppmann); the random part makes a token unguessable, and keeps a stale
  holder from matching a reissued number if the sequence is ever reset (a
  restore from backup, a recreated schema).
* **Identity.** A queue has a random id, made with it and kept in its meta
  table, as on SQLite. Where SQLite watches its file, this queue checks
  every new connection: a URL that now reaches another queue, or a
  database that was dropped, breaks the queue (``broken``, QueueBroken),
  and it takes no more requests.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from sloth_daemon.backends.contract import Engine, QueueDefaults, ReadEngine
from sloth_daemon.backends.postgres import db as pgdb, identity as pg_identity, migrate as pg_migrate
from sloth_daemon.backends.postgres.batch import PgRequests
from sloth_daemon.backends.postgres.claim import PgClaims
from sloth_daemon.backends.postgres.db import one
from sloth_daemon.backends.postgres.edits import PgEdits
from sloth_daemon.backends.postgres.enqueue import PgAdds, insert_all
from sloth_daemon.backends.postgres.hosts import PgMachines
from sloth_daemon.backends.postgres.leases import PgLeases
from sloth_daemon.backends.postgres.listing import PgListings
from sloth_daemon.backends.postgres.logs import PgLogs
from sloth_daemon.backends.postgres.reads import JobRows, PgReads
from sloth_daemon.backends.postgres.scan import PgScan
from sloth_daemon.backends.postgres.schedules import PgScheduleReads, PgSchedules
from sloth_daemon.backends.postgres.outbox import PgOutbox
from sloth_daemon.backends.postgres.meta import PgMeta
from sloth_daemon.backends.postgres.store import PgStore
from sloth_daemon.backends.postgres.writer import PgWriter
from sloth_daemon.clock import Clock, SystemClock, SystemClocks

# One look, for a command that must answer whatever the server does (`sloth
# config`): libpq's shortest connect timeout (it reads less than 2 s as 2),
# no reconnecting, statements bounded as tightly.
QUICK = pgdb.PgOptions(connect_timeout_s=2, tcp_user_timeout_s=2.0, statement_timeout_s=2.0, reconnect_s=0.0)


class ServerClock:
    """``now()`` of the database server (``sloth.now()``): what a caller that
    needs "now" (a due time to sleep until) must compare with."""

    def __init__(self, db: pgdb.Connection) -> None:
        self._db = db

    def now(self) -> float:
        return self._db.read(lambda c: one(c.execute("SELECT sloth.now() AS now"))["now"], "reading the clock")


def open_engine(url: str, clock: Clock | None, defaults: QueueDefaults, *, lock_wait_s: float | None = None,
                migrate: bool = True, options: pgdb.PgOptions | None = None) -> Engine:
    """The queue on the database at ``url``.

    ``clock``: None (production) uses the server's clock. A test clock
    (ManualClock) pins every transaction's now to its reading. A SystemClock
    is this machine's wall clock, which a shared queue must not trust: it is
    taken to mean "the real clock", i.e. the server's.
    ``lock_wait_s``: how long a write waits for a row another session holds
    before StorageBusy (None: up to the statement timeout).
    ``migrate``: apply pending schema migrations on open (under an advisory
    lock); False refuses a schema that is not exactly this code's.
    ``options``: connection settings (pgdb.PgOptions).
    """
    pinned = None if isinstance(clock, (SystemClock, SystemClocks)) else clock
    options = options or pgdb.PgOptions()
    if lock_wait_s is not None:
        options = dataclasses.replace(options, lock_wait_s=lock_wait_s)
    db = pgdb.Connection(url, options, lambda: None if pinned is None else pinned.now())
    identity = _open(db, migrate)
    rows = JobRows(db)
    writer = PgWriter(db, rows)
    reads = PgReads(db, rows)
    adds = PgAdds(db, writer, defaults)
    return Engine(
        target=url, clock=pinned if pinned is not None else ServerClock(db), identity=identity,
        defaults=defaults, store=PgStore(db, writer, identity), adds=adds, claims=PgClaims(db, rows, writer),
        leases=PgLeases(db, rows, writer, defaults), requests=PgRequests(db, rows, writer),
        edits=PgEdits(rows, writer), meta=PgMeta(db), reads=reads, listings=PgListings(db, rows),
        schedules=PgSchedules(db, writer, insert_all), outbox=PgOutbox(db), machines=PgMachines(db),
        logs=PgLogs(db))


def _open(db: pgdb.Connection, migrate: bool) -> str:
    """Migrate the schema (or refuse one that is not this code's), then
    read or make the queue's identity; the connection is closed if that
    fails. From then on every new connection is checked against it."""
    try:
        if migrate:
            pg_migrate.migrate(db)
        else:
            pg_migrate.check_schema(db)
        identity = db.write(pg_identity.make, "reading the queue's identity")
    except BaseException:
        db.close()
        raise
    db.verify = lambda conn: pg_identity.other_queue(conn, identity)
    return identity


def open_read_engine(url: str, options: pgdb.PgOptions | None = None) -> ReadEngine:
    """The queue at ``url`` read only (what the CLI reads when no daemon
    answers): every transaction on its connection is read only, so the
    server itself refuses a write, and a schema that is not exactly this
    sloth's is refused, never touched. Raises StorageError (unreachable, or
    no queue of this sloth's schema there)."""
    options = dataclasses.replace(options or pgdb.PgOptions(), read_only=True)
    db = pgdb.Connection(url, options, lambda: None)
    try:
        pg_migrate.check_schema(db)
        row = db.read(lambda c: c.execute(pg_identity.SQL_ID).fetchone(), "reading the queue's identity")
    except BaseException:
        db.close()
        raise
    rows = JobRows(db)

    def scan(*, owns_reader: bool = False, **kw: Any) -> PgScan:
        return PgScan(db, rows, on_close=db.close if owns_reader else None, **kw)

    return ReadEngine(target=url, identity=None if row is None else str(json.loads(row["value"])),
                      reads=PgReads(db, rows), listings=PgListings(db, rows), schedules=PgScheduleReads(db),
                      scan=scan, close=db.close, machines=PgMachines(db), logs=PgLogs(db))

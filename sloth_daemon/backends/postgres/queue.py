"""The lease queue on PostgreSQL, composed: PgQueue opens one connection
(db.Connection: connecting, reconnecting, the one transaction helper) and
names the readers and writers over it, each the owner of its SQL, and
answers each method of the contract with one of theirs:

* ``rows`` (reads.JobRows): rows made into Jobs, its cache of environments;
* ``writer`` (writer.Writer): transactions that report changed dependents
  to ``on_side_change``, and a job's end;
* ``claims`` (claim.Claims, its statements in pick.py): claim;
* ``leases`` (leases.Leases): heartbeats, adoption, and the outcomes that
  end a lease (complete, fail, release);
* ``requests`` (batch.Requests): a user's cancel, retry, restart, prune;
* ``edits`` (edits.Edits): edit, bump, hold, unhold (`sloth release`);
* ``adding`` (enqueue.Enqueuer): enqueue, enqueue_many, batch_ids;
* ``reads`` (reads.Reads) and ``listings`` (listing.Listings): the read side;
* ``machines`` (hosts.Machines) and ``logs`` (logs.Logs): the hosts that
  serve the queue and the attempt logs they store.

deps.py holds the SQL of dependencies, identity.py which queue a database
holds, migrate.py the schema. PgQueue itself keeps the queue's identity,
its clock and the settings writes (meta, lanes).

The contract is SqliteQueue's (same methods, values, errors and event
history); what differs is who keeps time and who may race:

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

States: blocked -> queued -> running -> done | failed | cancelled (and
running -> queued for a retry or an interruption). A transition that ends a
job may queue or cancel jobs that wait for it; those are passed, after the
commit, to ``on_side_change``.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from typing import Any, Callable

from sloth_daemon.clock import Clock, SystemClock, SystemClocks
from sloth_daemon.models import Job
from sloth_daemon.backends import rules
from sloth_daemon.backends.postgres import identity as pg_identity, migrate as pg_migrate, db as pgdb
from sloth_daemon.backends.postgres.batch import Requests
from sloth_daemon.backends.postgres.claim import Claims
from sloth_daemon.backends.postgres.edits import Edits
from sloth_daemon.backends.postgres.enqueue import Enqueuer, insert_all
from sloth_daemon.backends.postgres.schedules import PgSchedules
from sloth_daemon.backends.postgres.hosts import Machines
from sloth_daemon.backends.postgres.leases import Leases
from sloth_daemon.backends.postgres.listing import Listings
from sloth_daemon.backends.postgres.logs import Logs
from sloth_daemon.backends.postgres.reads import JobRows, Reads
from sloth_daemon.backends.postgres.writer import Writer
from sloth_daemon.backends.postgres.db import one

__all__ = ["PgQueue", "ServerClock"]

SQL_SET_META = ("INSERT INTO sloth.meta (key, value) VALUES (%s, %s)"
                " ON CONFLICT (key) DO UPDATE SET value = excluded.value")
SQL_SET_LANE = ("INSERT INTO sloth.lanes (name, concurrency, config_was, created_at) VALUES (%s, %s, %s, sloth.now())"
                " ON CONFLICT (name) DO UPDATE SET concurrency = excluded.concurrency,"
                " config_was = excluded.config_was")


class ServerClock:
    """``now()`` of the database server (``sloth.now()``): what a caller that
    needs "now" (a due time to sleep until) must compare with."""

    def __init__(self, db: pgdb.Connection) -> None:
        self._db = db

    def now(self) -> float:
        return self._db.read(lambda c: one(c.execute("SELECT sloth.now() AS now"))["now"], "reading the clock")


class PgQueue:
    """A durable lease queue on PostgreSQL, shared by any number of daemons
    (see the module docstring). Same contract as SqliteQueue; each method
    is its collaborator's (its docstring is there).

    ``clock``: None (production) uses the server's clock. A test clock
    (ManualClock) pins every transaction's now to its reading. A SystemClock
    is this machine's wall clock, which a shared queue must not trust: it is
    taken to mean "the real clock", i.e. the server's.
    ``lock_wait_s``: how long a write waits for a row another session holds
    before StorageBusy (SqliteQueue's; None: up to the statement timeout).
    ``migrate``: apply pending schema migrations on open (under an advisory
    lock); False refuses a schema that is not exactly this code's.
    ``options``: connection settings (pgdb.PgOptions).
    """

    units_durable = True  # unit() commits synchronously: what it wrote is durable once it ends

    def __init__(
        self,
        url: str,
        clock: Clock | None = None,
        *,
        lease_s: float = rules.DEFAULT_LEASE_S,
        max_attempts: int = rules.DEFAULT_MAX_ATTEMPTS,
        backoff_cap_s: float = rules.DEFAULT_BACKOFF_CAP_S,
        lock_wait_s: float | None = None,
        migrate: bool = True,
        options: pgdb.PgOptions | None = None,
    ) -> None:
        self.url = url
        if isinstance(clock, (SystemClock, SystemClocks)):
            clock = None
        self._pinned = clock
        self.lease_s = float(lease_s)
        self.max_attempts = int(max_attempts)
        self.backoff_cap_s = float(backoff_cap_s)
        options = options or pgdb.PgOptions()
        if lock_wait_s is not None:
            options = dataclasses.replace(options, lock_wait_s=lock_wait_s)
        self._db = db = pgdb.Connection(url, options, self._pin)
        self.clock: Clock = clock if clock is not None else ServerClock(db)
        self.rows = rows = JobRows(db)
        self.writer = writer = Writer(db, rows)
        self._name_writers(db, rows, writer)
        self._name_readers(db, rows)
        self.identity: str = self._open(migrate)

    def _name_writers(self, db: pgdb.Connection, rows: JobRows, writer: Writer) -> None:
        """The writers, and which of their methods answers for the queue."""
        self.claims = claims = Claims(db, rows, writer)
        self.claim = claims.claim

        self.leases = leases = Leases(db, rows, writer, backoff_cap_s=self.backoff_cap_s)
        self.heartbeat = leases.heartbeat
        self.renew_after_resume = leases.renew_after_resume
        self.set_runner = leases.set_runner
        self.set_paused = leases.set_paused
        self.note_run = leases.note_run
        self.adopt = leases.adopt
        self.abandon = leases.abandon
        self.unclaim = leases.unclaim
        self.complete = leases.complete
        self.fail = leases.fail
        self.release = leases.release
        self.note_ended = leases.note_ended
        self.set_waiting = leases.set_waiting
        self.flush = leases.flush
        # unit(): the writes inside as one transaction and one synchronous
        # commit (a worker's turn), as SqliteQueue.unit: a write that raises
        # for its own reason (its lease lost) undoes itself alone; a database
        # error or a lost connection rolls the whole unit back, then every
        # later write of it and its end raise StorageError. Reads inside, once
        # it has written, see its writes; dependents it settled are told once
        # it commits. Nested: part of the outer one (postgres/db.py).
        self.unit = db.unit

        self.requests = requests = Requests(db, rows, writer)
        self.cancel = requests.cancel
        self.retry = requests.retry
        self.cancel_many = requests.cancel_many
        self.retry_many = requests.retry_many
        self.restart = requests.restart
        self.prune = requests.prune

        self.edits = edits = Edits(rows, writer)  # issue 22: `sloth edit`, `bump`, `hold`, `release`
        self.edit = edits.edit
        self.bump = edits.bump
        self.hold = edits.hold
        self.unhold = edits.unhold
        self.hold_never = edits.hold_never

        self.adding = adding = Enqueuer(db, writer, lease_s=self.lease_s, max_attempts=self.max_attempts)
        self.enqueue = functools.partial(rules.enqueue_one, adding.enqueue_many)
        self.enqueue_many = adding.enqueue_many
        self.batch_ids = adding.batch_ids
        # schedules: their rows and firings (postgres/schedules.py; the same methods as SQLite's)
        self.schedules = PgSchedules(db, writer, insert_all)

    def _name_readers(self, db: pgdb.Connection, rows: JobRows) -> None:
        """The readers (as the read-only view's), and which of their methods answers."""
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
        self.gates = reads.gates
        self.held_gates = reads.held_gates
        self.gated_heads = reads.gated_heads
        self.lanes = reads.lanes
        self.lane_counts = reads.lane_counts
        self.lane_busy = reads.lane_busy
        self.lane_rows = reads.lane_rows
        self.get_meta = reads.get_meta
        self.schema_status = reads.schema_status
        self.listings = Listings(db, rows)
        self.listing = self.listings.listing

        self.machines = machines = Machines(db)
        self.register_host = machines.register_host
        self.host_seen = machines.host_seen
        self.forget_host = machines.forget_host
        self.hosts = machines.hosts
        self.logs = Logs(db)
        self.stored_log = self.logs.stored_log

    def _pin(self) -> float | None:
        return None if self._pinned is None else self._pinned.now()

    def _open(self, migrate: bool) -> str:
        """Migrate the schema (or refuse one that is not this code's), then
        read or make the queue's identity; the connection is closed if that
        fails. From then on every new connection is checked against it."""
        try:
            if migrate:
                pg_migrate.migrate(self._db)
            else:
                pg_migrate.check_schema(self._db)
            identity = self._db.write(pg_identity.make, "reading the queue's identity")
        except BaseException:
            self._db.close()
            raise
        self._db.verify = lambda conn: pg_identity.other_queue(conn, identity)
        return identity

    @property
    def on_side_change(self) -> Callable[[Job], None] | None:
        """Told, after the commit, of each dependent a transition queued or
        cancelled (see the module docstring of backends/postgres/writer.py)."""
        return self.writer.on_side_change

    @on_side_change.setter
    def on_side_change(self, fn: Callable[[Job], None] | None) -> None:
        self.writer.on_side_change = fn

    def check(self) -> None:
        """Raise QueueBroken if this queue's database was dropped, lost its
        schema, or the URL now reaches another queue (then it takes no more
        requests)."""
        why = self._db.read(lambda c: pg_identity.other_queue(c.connection, self.identity), "checking the queue")
        if why is not None:
            raise self._db.mark_broken(why)

    def rest(self) -> None:
        """Idle for a while: nothing to give back (the server holds the cache)."""

    def revalidate(self) -> None:
        """After a suspend or a network change: connect afresh on the next call."""
        self._db.revalidate()

    @property
    def broken(self) -> str | None:
        """Why this queue takes no more requests, or None."""
        return self._db.broken

    def set_meta(self, key: str, value: Any) -> None:
        text = json.dumps(value)
        self._db.write(lambda c: c.execute(SQL_SET_META, (key, text)), "saving a setting")

    def set_lane(self, name: str, concurrency: int | None, config_was: int | None = None) -> None:
        """Record a lane (and, unless None, the concurrency `sloth lane set`
        gave it, with the config's value at that moment)."""
        self._db.write(lambda c: c.execute(SQL_SET_LANE, (name, concurrency, config_was)), "saving a lane")

    def forget_lane(self, name: str) -> None:
        """Remove a lane from the lanes table (its jobs, if any, keep their lane)."""
        self._db.write(lambda c: c.execute("DELETE FROM sloth.lanes WHERE name = %s", (name,)),
                       "forgetting a lane")

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> "PgQueue":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

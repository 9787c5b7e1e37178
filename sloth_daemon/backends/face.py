"""The queue's public face, written once over an engine (backends/contract.py):
``Queue`` (sloth_daemon.queue.Queue, what docs/library.md shows) and the
read-only view ``ReadOnlyQueue`` (backends.open_read_only).

Each method of the contract is the engine part's own, bound here as an
attribute: a call reaches the object that does the work, and its
docstring is the contract's (help(Queue(...).claim)). What the face adds is
only what no part owns: the settings the parts share (``lease_s``,
``max_attempts``, ``backoff_cap_s``), ``on_side_change`` and
``enqueue`` (one job: a batch of one).
"""

from __future__ import annotations

import functools
import os
from typing import Any, Callable, Generic, TypeVar

from sloth_daemon.backends import is_url, rules
from sloth_daemon.backends.contract import Engine, QueueDefaults, ReadEngine, SideChange
from sloth_daemon.clock import Clock

T = TypeVar("T")


def open_engine(target: str | os.PathLike[str], clock: Clock | None, **options: Any) -> Engine:
    """The engine for a path (SQLite) or a URL (PostgreSQL: psycopg
    imported only here). ``options``: lease_s, max_attempts, backoff_cap_s,
    lock_wait_s; on PostgreSQL also migrate and options."""
    defaults = QueueDefaults(float(options.pop("lease_s", rules.DEFAULT_LEASE_S)),
                        int(options.pop("max_attempts", rules.DEFAULT_MAX_ATTEMPTS)),
                        float(options.pop("backoff_cap_s", rules.DEFAULT_BACKOFF_CAP_S)))
    if is_url(target):
        from sloth_daemon.backends.postgres import engine as pg

        return pg.open_engine(str(target), clock, defaults, **options)
    from sloth_daemon.backends.sqlite import engine as sqlite

    return sqlite.open_engine(target, clock, defaults, **options)


class Setting(Generic[T]):
    """A field of the face's ``defaults`` (contract.QueueDefaults), read and set
    as an attribute of the face; a value set is made a ``kind``."""

    def __init__(self, kind: Callable[[Any], T]) -> None:
        self.kind = kind

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, face: Queue, owner: type | None = None) -> T:
        return getattr(face.defaults, self.name)

    def __set__(self, face: Queue, value: Any) -> None:
        setattr(face.defaults, self.name, self.kind(value))


class QueueReads:
    """The reads of a queue, the same on a Queue and on its read-only view,
    each the engine's reads part's own; ``machines`` and ``logs``: a shared
    queue's hosts and stored logs (None on SQLite)."""

    def __init__(self, e: Engine | ReadEngine) -> None:
        self.target, self.machines, self.logs = e.target, e.machines, e.logs
        reads = e.reads
        self.get = reads.get
        self.get_many = reads.get_many
        self.jobs = reads.jobs
        self.events = reads.events
        self.results = reads.results
        self.counts = reads.counts
        self.outbox_counts = reads.outbox_counts
        self.batch_find = reads.batch_find
        self.batch_members = reads.batch_members
        self.active_batches = reads.active_batches
        self.costs = reads.costs
        self.run_times = reads.run_times
        self.latest = reads.latest
        self.running = self.claimed = reads.running  # claimed: the name of schema v1-v3 days
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
        self.run_tally = reads.run_tally
        self.oldest_queued = reads.oldest_queued
        self.machine_events = reads.machine_events
        self.window_jobs = reads.window_jobs
        self.listing = e.listings.listing


class Queue(QueueReads):
    """A durable lease queue: a SQLite file (a path) or a PostgreSQL
    database shared by several daemons (a URL); see docs/library.md.

    ``Queue(target, clock=None, **options)``: ``clock`` is for tests (on
    PostgreSQL every time comes from the server's clock unless a test clock
    is given); ``options`` are lease_s, max_attempts and backoff_cap_s for
    jobs that set none, ``lock_wait_s`` (how long a write waits for another
    writer before StorageBusy), and on PostgreSQL ``migrate`` and
    ``options`` (backends/postgres/engine.py).

    ``engine``: the parts (contract.Engine), each method below is one of
    theirs; ``machines`` and ``logs`` are there on a shared queue only
    (None on SQLite).
    """

    def __init__(self, target: str | os.PathLike[str], clock: Clock | None = None, **options: Any) -> None:
        self.engine = e = open_engine(target, clock, **options)
        super().__init__(e)
        self.clock, self.identity, self.defaults, self.schedules = e.clock, e.identity, e.defaults, e.schedules
        self.outbox = e.outbox  # the messages transitions caused (contract.Outbox), a part of its own
        store = e.store
        self.units_durable = store.units_durable
        self.unit = store.unit
        self.flush = store.flush
        self.sync = store.sync
        self.check = store.check
        self.rest = store.rest
        self.revalidate = store.revalidate
        self.checkpoint = store.checkpoint
        self.close = store.close
        self.enqueue_many = e.adds.enqueue_many
        self.enqueue = functools.partial(rules.enqueue_one, e.adds.enqueue_many)  # one job (rules.enqueue_one)
        self.batch_ids = e.adds.batch_ids
        self.claim = e.claims.claim
        self.claim_many = e.claims.claim_many
        leases = e.leases
        self.set_waiting = leases.set_waiting
        self.heartbeat = leases.heartbeat
        self.renew_after_resume = leases.renew_after_resume
        self.set_runner = leases.set_runner
        self.note_run = leases.note_run
        self.set_paused = leases.set_paused
        self.complete = leases.complete
        self.complete_many = leases.complete_many
        self.fail = leases.fail
        self.release = leases.release
        self.note_ended = leases.note_ended
        self.set_progress = leases.set_progress
        self.record_cost = leases.record_cost
        self.keep_result = leases.keep_result
        self.unclaim = leases.unclaim
        self.adopt = leases.adopt
        self.abandon = leases.abandon
        requests = e.requests
        self.cancel = requests.cancel
        self.retry = requests.retry
        self.cancel_many = requests.cancel_many
        self.retry_many = requests.retry_many
        self.restart = requests.restart
        self.prune = requests.prune
        edits = e.edits
        self.edit = edits.edit
        self.bump = edits.bump
        self.hold = edits.hold
        self.hold_never = edits.hold_never
        self.unhold = edits.unhold
        self.set_meta = e.meta.set_meta
        self.set_lane = e.meta.set_lane
        self.forget_lane = e.meta.forget_lane
        self.machine_up = e.meta.machine_up
        self.machine_seen = e.meta.machine_seen
        self.machine_slept = e.meta.machine_slept

    # The settings the parts share (contract.QueueDefaults): the daemon's, changed
    # in place when its config is reloaded.
    lease_s = Setting(float)
    max_attempts = Setting(int)
    backoff_cap_s = Setting(float)

    @property
    def on_side_change(self) -> SideChange | None:
        """Told, after the commit, of each job a transition queued or
        cancelled besides the one it returns (contract.Store)."""
        return self.engine.store.on_side_change

    @on_side_change.setter
    def on_side_change(self, fn: SideChange | None) -> None:
        self.engine.store.on_side_change = fn

    @property
    def broken(self) -> str | None:
        """Why this queue takes no more writes, or None (contract.Store.broken)."""
        return self.engine.store.broken

    def __enter__(self) -> "Queue":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class ReadOnlyQueue(QueueReads):
    """The reads of a Queue over a read-only engine (contract.ReadEngine),
    for the CLI when no daemon answers: ``ls``, ``show``, ``logs`` and
    ``config`` still work (and say so). ``scan(**kw)``: the listing
    ``listing(**kw)`` would give, read a chunk at a time on this connection;
    ``owns_reader=True``: closing the scan closes this view."""

    def __init__(self, engine: ReadEngine) -> None:
        super().__init__(engine)
        self.engine = engine
        self.identity, self.schedules = engine.identity, engine.schedules
        self.scan, self.close = engine.scan, engine.close

    def __enter__(self) -> "ReadOnlyQueue":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

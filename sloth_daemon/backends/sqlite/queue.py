"""The lease queue on one SQLite file, as its users see it: SqliteQueue
names the objects it is composed of and hands each call to the one that
owns its SQL (see the class docstring); db.py connects and migrates.

Knows nothing of sockets, processes or the CLI. Every write is one short
``BEGIN IMMEDIATE`` transaction (db.transaction, through the store), every
time is a bound parameter read from the injected clock: SQL never reads
the clock.

What ``claim`` picks, and in which order, is backends/sqlite/pick.py's; what a job's
end does to the jobs waiting for it, backends/sqlite/deps.py's.

States: blocked -> queued -> running -> done | failed | cancelled (and
running -> queued for a retry or an interruption). Besides the job it
returns, a transition that ends a job may queue or cancel jobs that were
added after it; those are passed, after the commit, to ``on_side_change``.
"""

from __future__ import annotations

import functools
import os
import sqlite3
from pathlib import Path
from typing import Any, Callable, Collection, ContextManager, Iterable, Mapping, Sequence

from sloth_daemon.backends import rules
from sloth_daemon.backends.edits import Edited
from sloth_daemon.backends.sqlite import db
from sloth_daemon.backends.sqlite.batch import SqliteRequests
from sloth_daemon.backends.sqlite.edits import SqliteEdits
from sloth_daemon.backends.sqlite.ends import JobEnds
from sloth_daemon.backends.sqlite.enqueue import SqliteEnqueue
from sloth_daemon.backends.sqlite.leases import SqliteLeases
from sloth_daemon.backends.sqlite.listing import SqliteListing
from sloth_daemon.backends.sqlite.meta import SqliteMeta
from sloth_daemon.backends.sqlite.reads import JobRows, SqliteReads
from sloth_daemon.backends.sqlite.schedules import SqliteSchedules
from sloth_daemon.backends.sqlite.unit import SqliteStore
from sloth_daemon.clock import Clock, SystemClock
from sloth_daemon.models import Batch, Event, Job, JobState, Listing
from sloth_daemon.spec import JobSpec


class SqliteQueue:
    """A durable lease queue over one SQLite file (see the module docstring).

    Composed of: ``store`` (unit.py: the connection, the one transaction
    helper, the unit of a worker's turn, the broken-file guard), ``rows``
    (reads.py: rows told as Jobs), ``reads`` and ``listings`` (reads.py,
    listing.py), ``adds`` (enqueue.py), ``leases`` (leases.py: claims and
    their holders), ``ends`` (ends.py: a job's end, shared by the writers),
    ``requests`` (batch.py: the user's cancel, retry, restart, prune) and
    ``meta`` (meta.py: meta and lanes). Each public method below says its
    transitions and errors and hands the call to the one that owns its SQL.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        clock: Clock | None = None,
        *,
        lease_s: float = rules.DEFAULT_LEASE_S,
        max_attempts: int = rules.DEFAULT_MAX_ATTEMPTS,
        backoff_cap_s: float = rules.DEFAULT_BACKOFF_CAP_S,
        lock_wait_s: float = 30.0,
    ) -> None:
        """``lock_wait_s``: how long a write waits for another process's lock
        before raising StorageBusy (the daemon uses a short wait and tries
        again later, so its event loop never freezes behind a foreign writer)."""
        self.path = Path(path)
        self.clock: Clock = clock or SystemClock()
        patience_s = float(lock_wait_s)
        conn = db.connect(self.path, busy_timeout_s=min(patience_s, db.BUSY_TIMEOUT_MS / 1000))
        conn.row_factory = sqlite3.Row
        self._conn = conn  # the store's; tests and benchmarks look under the contract through it
        self.rows = JobRows(conn)
        self.store = SqliteStore(conn, self.path, patience_s, self.rows.job)
        self.reads = SqliteReads(conn, self.rows)
        self.listings = SqliteListing(conn, self.rows.job, self.reads.lane_counts)
        self.adds = SqliteEnqueue(self.store, self.clock, int(max_attempts), float(lease_s))
        # enqueue(command, **fields): one job, a batch of one (rules.enqueue_one says its fields)
        self.enqueue = functools.partial(rules.enqueue_one, self.adds.enqueue_many)
        self.ends = JobEnds(self.store, self.rows)
        self.leases = SqliteLeases(self.store, self.rows, self.ends, self.clock, float(backoff_cap_s))
        self.requests = SqliteRequests(self.store, self.rows, self.ends, self.adds, self.clock)
        self.meta = SqliteMeta(self.store, self.clock)
        self.edits = SqliteEdits(self.store, self.rows, self.clock)
        # schedules: their rows and firings (sqlite/schedules.py; the same methods as PostgreSQL's)
        self.schedules = SqliteSchedules(self.store, self.clock, self.adds.insert)
        self.identity: str = self.meta.identity()

    # ---------------------------------------------------------------- settings
    # The defaults a job that sets none gets, and the backoff cap: the
    # daemon's settings, changed in place when its config is reloaded.
    @property
    def lease_s(self) -> float:
        return self.adds.lease_s

    @lease_s.setter
    def lease_s(self, value: float) -> None:
        self.adds.lease_s = float(value)

    @property
    def max_attempts(self) -> int:
        return self.adds.max_attempts

    @max_attempts.setter
    def max_attempts(self, value: int) -> None:
        self.adds.max_attempts = int(value)

    @property
    def backoff_cap_s(self) -> float:
        return self.leases.backoff_cap_s

    @backoff_cap_s.setter
    def backoff_cap_s(self, value: float) -> None:
        self.leases.backoff_cap_s = float(value)

    @property
    def on_side_change(self) -> Callable[[Job], None] | None:
        """Told, after the commit, of each job a transition queued or
        cancelled besides the one it returns (see the module docstring)."""
        return self.store.on_side_change

    @on_side_change.setter
    def on_side_change(self, fn: Callable[[Job], None] | None) -> None:
        self.store.on_side_change = fn

    # ------------------------------------------------------------ the file
    def check(self) -> None:
        """Raise QueueBroken if the file was replaced, truncated or found
        damaged under this queue (then it takes no more writes)."""
        self.store.check()

    def rest(self) -> None:
        """Idle for a while: give back SQLite's page cache (docs/idle.md);
        the next read fills it again from the OS's."""
        self.store.conn.execute("PRAGMA shrink_memory")

    @property
    def broken(self) -> str | None:
        """Why this queue takes no more writes (its file changed under it), or None."""
        return self.store.broken

    def unit(self) -> ContextManager[None]:
        """The writes inside as one transaction, one commit (backends/sqlite/unit.py).
        Raises StorageError at the end if any of them met a storage error:
        then none of them was kept. A write inside that asked to be durable
        makes the commit fsync the WAL (a failed fsync raises too, the
        writes kept: the worker asks for none inside, the group commit
        fsyncs). Nested: part of the outer one, which raises at its end."""
        return self.store.unit()

    def flush(self) -> None:
        """Make every commit made with ``durable=False`` durable now (one fsync)."""
        self.store.flush()

    def sync(self) -> None:
        """Make every commit so far durable: one fsync of the write-ahead
        log. Blocking, and safe to call from another thread (it touches no
        connection, only a descriptor of its own): the daemon runs it off
        its loop, so the next jobs start while the disk catches up, and the
        outcomes that end meanwhile share the next one (group commit).
        Raises StorageError."""
        self.store.sync()

    def close(self) -> None:
        """Close the file. A broken queue's connection is left open instead:
        closing checkpoints the WAL into whatever file is now at the path (into
        a truncated file, a patchwork of old pages that looks like a queue).
        A process that ends with such a queue should leave by os._exit."""
        self.store.close()

    def __enter__(self) -> "SqliteQueue":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---------------------------------------------------------- adding jobs
    def enqueue_many(self, specs: Iterable[Mapping[str, Any] | JobSpec], *, batch: str | None = None) -> list[int]:
        """Enqueue many jobs in one transaction; all or none. Same rules as
        enqueue (rules.enqueue_one). A spec may be a job object or a JobSpec already validated.
        With ``batch`` (a client's token), the ids are recorded under it in
        the same transaction, so a client that lost the answer can ask
        (batch_ids) whether the batch was queued: never "some of it". A
        spec with ``after``/``after_any`` (ids) or ``after_previous`` (on
        the batch's previous job) starts ``blocked`` while any of those is
        unfinished, ``cancelled`` (event ``cancelled``) if one it needs done
        already failed or was cancelled, else ``queued``. Raises BadRequest
        for invalid fields, JobNotFound for a prerequisite that does not exist."""
        return self.adds.enqueue_many(specs, batch=batch)

    def batch_ids(self, batch: str) -> list[int] | None:
        """The ids the batch ``batch`` was queued as, or None if it was not
        (or its record was pruned: records are kept rules.BATCH_RECORD_S)."""
        return self.adds.batch_ids(batch)

    # ------------------------------------------------------ lease holders
    def claim(
        self, worker: str, *, lease_s: float | None = None, lanes: Sequence[str] | None = None,
        exclude_lanes: Collection[str] = (), exclude_ids: Collection[int] = (),
        places: Collection[str] | None = None, reclaim: bool = True,
        gated: tuple[int, dict[str, list[str]] | None] | None = None,
    ) -> Job | None:
        """Lease the most urgent due job to ``worker``, or return None.

        Due means ``queued`` with ``not_before <= now``, or ``running`` with an
        expired lease (``lease_until < now``, strict); never ``blocked``.
        Transition: -> running, ``attempts`` and ``tries`` + 1, fresh token,
        ``lease_until = now + lease``, event ``claimed`` or ``reclaimed``. An
        expired job with no tries left goes
        to ``failed`` instead (event ``lease_expired``) and the search goes on.
        The returned Job keeps the previous attempt's ``runner`` identity so a
        caller can make sure that process is gone before running it again.
        ``exclude_lanes`` skips lanes (full or paused ones, for the daemon);
        ``exclude_ids`` never re-issues these jobs' expired leases (the
        daemon's own running jobs: after a stall it renews them instead);
        ``places``: only jobs placed there ("" anywhere; None: any job).
        ``reclaim=False`` takes queued jobs only, never an expired lease: a
        claim that may be undone (unclaim) must be a plain one.

        A job with a gate (conditions, needs, slots: checks.gate_json) is
        never taken by urgency alone: only as ``gated`` = (id, the resource
        tokens its run holds), which the caller found may run now
        (gates, gated_heads); it is leased instead of the best ungated job
        when at least as urgent and still due (queued, or an expired lease).

        Not fsynced (see db.transaction): after a power cut the claimed
        process is gone anyway, and the job simply runs again.
        """
        return self.leases.claim(worker, lease_s=lease_s, lanes=lanes, exclude_lanes=exclude_lanes,
                                 exclude_ids=exclude_ids, places=places, reclaim=reclaim, gated=gated)

    def gates(self) -> list[str]:
        """The distinct gates (checks.gate_json texts) of queued jobs."""
        return self.reads.gates()

    def held_gates(self) -> list[str]:
        """The distinct gates of held jobs (a scan of them: for a reload or
        a `lane set`, never a claim)."""
        return self.reads.held_gates()

    def gated_heads(self, gates: Collection[str], *, exclude_lanes: Collection[str] = (),
                    exclude_ids: Collection[int] = (),
                    places: Collection[str] | None = None) -> tuple[list[Job], float | None]:
        """For each of ``gates`` and each lane not excluded, its most urgent
        due queued job, and the gated jobs whose lease expired (of any gate),
        most urgent first; and when the first job of those gates that is not
        due yet becomes due (None: none)."""
        return self.reads.gated_heads(self.clock.now(), gates, exclude_lanes=exclude_lanes,
                                      exclude_ids=exclude_ids, places=places)

    def set_waiting(self, gate: str, why: str | None) -> int:
        """Say why the queued jobs of ``gate`` do not start (``ls``, ``show``);
        None: clear it. Returns how many jobs changed."""
        return self.leases.set_waiting(gate, why)

    def heartbeat(self, job_id: int, token: str, *, lease_s: float | None = None) -> Job:
        """Extend the lease of the holder of ``token``: ``lease_until = now + lease``.

        The token decides, not the clock: a lapsed lease that nobody reclaimed
        may still be renewed. Raises LeaseLost (stale token) or JobNotFound.
        """
        return self.leases.heartbeat(job_id, token, lease_s=lease_s)

    def renew_after_resume(self, job_id: int, token: str, message: str) -> Job:
        """Heartbeat after the machine slept, and record a ``resumed`` event."""
        return self.leases.renew_after_resume(job_id, token, message)

    def set_runner(self, job_id: int, token: str, runner: dict[str, Any]) -> Job:
        """Record the identity of the process running this attempt (event ``started``)."""
        return self.leases.set_runner(job_id, token, runner)

    def note_run(self, job_id: int, token: str, kind: str, message: str) -> Job:
        """An event ``kind`` in the history of the run of ``token`` while it
        runs (e.g. "keep-awake": its inhibitor could not be held). Raises
        LeaseLost or JobNotFound."""
        return self.leases.note_run(job_id, token, kind, message)

    def set_paused(self, job_id: int, token: str, paused: bool, message: str, *, at: float | None = None) -> Job:
        """Record that the run of ``token`` is paused on request (or
        continued): event ``paused`` or ``continued`` (``at``: when the keeper
        did it, never later than now); the job reads ``paused`` while it
        holds that token. Raises LeaseLost or JobNotFound."""
        return self.leases.set_paused(job_id, token, paused, message, at=at)

    def complete(self, job_id: int, token: str, *, message: str = "", exit_code: int | None = None,
                 ended_at: float | None = None, runner: dict[str, Any] | None = None,
                 durable: bool = True) -> Job:
        """running -> done (dependents may be queued). ``ended_at``: when the process really ended (it
        may have ended while no daemon ran), else now. ``runner``: the
        attempt's process identity if not recorded yet (set_runner), written
        in the same transaction. ``durable=False`` commits without an fsync:
        for all but the last of a batch of outcomes (group commit), whose one
        fsync, or a flush(), makes them all durable. Raises LeaseLost for a
        stale token."""
        return self.leases.complete(job_id, token, message=message, exit_code=exit_code, ended_at=ended_at,
                                    runner=runner, durable=durable)

    def fail(
        self, job_id: int, token: str, *, message: str = "", retry: bool = True,
        exit_code: int | None = None, ended_at: float | None = None,
        runner: dict[str, Any] | None = None, durable: bool = True,
    ) -> Job:
        """running -> queued with ``not_before = now + min(2**tries, cap)`` while
        tries remain (and ``retry``), else -> failed (dependents that need it
        done are cancelled, the others may be queued). ``ended_at``,
        ``runner`` and ``durable`` as for complete. Raises LeaseLost."""
        return self.leases.fail(job_id, token, message=message, retry=retry, exit_code=exit_code, ended_at=ended_at,
                                runner=runner, durable=durable)

    def release(self, job_id: int, token: str, *, message: str = "interrupted", delay_s: float = 0.0,
                kind: str = "interrupted", runner: dict[str, Any] | None = None,
                durable: bool = True) -> Job:
        """running -> queued, due in ``delay_s``, the try given back (event
        ``kind``: ``interrupted`` by a stopping daemon, ``fenced`` when its
        keeper ended it for want of a lease renewal, ``postponed`` when it
        could not start for the spawner's own lack of resources).

        The end was not the job's fault, so it does not use up its failure
        budget -- a fence only MAX_CRASH_REFUNDS times, as a crash of sloth
        (abandon; one count for both), so a lease its job cannot keep cannot
        loop: past that it counts as a failed try. ``runner``, ``durable``:
        as for complete. Raises LeaseLost.
        """
        return self.leases.release(job_id, token, message=message, delay_s=delay_s, kind=kind, runner=runner,
                                   durable=durable)

    def note_ended(self, job_id: int, attempt: int, message: str, *, ended_at: float | None = None,
                   durable: bool = True, kind: str = "ended") -> Job:
        """A run of a job it no longer holds ended (it was cancelled while
        it ran): event ``ended`` for ``attempt``, nothing else changes, so
        its history says how the run it had started ended. ``kind``: another
        word the keeper had on that run as it ended (its keep-awake), kept
        in its history all the same. Raises JobNotFound."""
        return self.leases.note_ended(job_id, attempt, message, ended_at=ended_at, durable=durable, kind=kind)

    def unclaim(self, job_id: int, token: str, *, durable: bool = True) -> Job:
        """running -> queued as if the claim of ``token`` had not happened:
        its run never started (the daemon held it in the keeper behind
        another run and took it back, or it was dropped before it started).
        ``attempts`` and ``tries`` back, token and lease cleared, and the
        claim's ``claimed`` event deleted, with the ``adopted`` or ``resumed``
        events of its lease after it: nothing ran, so history shows nothing.
        The worker name is cleared on a job that has never run.
        Meant for plain claims (``claim(reclaim=False)``): a reclaim's
        event would stay (the lease it says was lost was lost), beside the
        next claim's of the same attempt. Raises LeaseLost or JobNotFound."""
        return self.leases.unclaim(job_id, token, durable=durable)

    def adopt(self, job_id: int, token: str, worker: str, *, message: str) -> Job:
        """A new holder takes over the lease of ``token`` (a daemon adopting
        a run that outlived the daemon that claimed it): the lease is renewed
        from now and ``worker`` renamed; event ``adopted``. The token decides,
        as for a heartbeat: a lapsed lease that nobody reclaimed is still
        ours. Raises LeaseLost or JobNotFound."""
        return self.leases.adopt(job_id, token, worker, message=message)

    def abandon(self, job_id: int, token: str, *, message: str, refund: bool = False) -> Job:
        """Declare the holder of ``token`` gone (e.g. the daemon that held it
        died: the single-instance lock proves it). The lease counts as expired
        from now, so the next claim re-issues the job with a ``reclaimed``
        event (attempts + 1). Event ``abandoned``. With ``refund`` (the run
        was cut short by a crash of sloth, not of the job) its try is given
        back, at most MAX_CRASH_REFUNDS times between user retries; past that
        the crash counts. Raises LeaseLost."""
        return self.leases.abandon(job_id, token, message=message, refund=refund)

    # ---------------------------------------------------- user requests
    def cancel(self, job_id: int, *, message: str = "cancelled by user") -> Job:
        """blocked|queued|running -> cancelled; what waits for it to be done is
        cancelled too. A running job's holder loses its lease (its token is
        cleared); ending its process is the caller's business. Raises
        IllegalTransition for a finished job, JobNotFound."""
        return self.requests.cancel(job_id, message=message)

    def retry(self, job_id: int) -> Job:
        """failed|cancelled -> queued, due now, with a fresh budget of tries
        (``attempts`` keeps counting runs);
        -> blocked instead while a job it was added after is unfinished (one
        that failed no longer stops it: retrying is the user's say-so).
        Raises IllegalTransition (other states, or its key is taken by an
        active job), JobNotFound."""
        return self.requests.retry(job_id)

    def cancel_many(self, ids: Sequence[int] | None = None, *, lane: str | None = None,
                    states: Sequence[str] | None = None, message: str = "cancelled by user",
                    exclude: Collection[int] = ()) -> Batch:
        """blocked|queued|running -> cancelled for each of ``ids``, or for
        every active job of ``lane`` and/or ``states`` (a selection). Jobs
        waiting for them to be done are cancelled too (in ``Batch.jobs``
        when named). ``exclude``: jobs left out, as if not named (the daemon
        asks the keeper about their runs first). Raises JobNotFound,
        BadRequest (a state that is not active)."""
        return self.requests.cancel_many(ids, lane=lane, states=states, message=message, exclude=exclude)

    def retry_many(self, ids: Sequence[int] | None = None, *, lane: str | None = None,
                   states: Sequence[str] | None = None, busy: Collection[int] = ()) -> Batch:
        """failed|cancelled -> queued (or blocked), as :meth:`retry`, for each
        of ``ids`` or every job of the selection (default state: failed).
        ``busy``: jobs not to touch yet (their cancelled run is still ending).
        Raises JobNotFound, BadRequest."""
        return self.requests.retry_many(ids, lane=lane, states=states, busy=busy)

    def restart(self, ids: Sequence[int]) -> Batch:
        """For each finished job of ``ids``: a new queued job with the same
        command, lane, priority, limits, folder, environment, label and key
        (not its prerequisites), due now. Events: ``restart`` on the new job,
        ``restarted`` on the old. Raises JobNotFound."""
        return self.requests.restart(ids)

    def prune(self, older_than_s: float, *, states: Sequence[str] | None = None, lane: str | None = None,
              dry_run: bool = False) -> int:
        """Delete finished jobs (and their events) that ended more than
        ``older_than_s`` ago, of ``states`` (default: every finished state) and
        ``lane``. Returns how many were (``dry_run``: would be) deleted."""
        return self.requests.prune(older_than_s, states=states, lane=lane, dry_run=dry_run)

    # ---------------------------------------------- queue edits (issue 22)
    def edit(self, job_id: int, changes: Mapping[str, Any], *, expect: Mapping[str, Any] | None = None) -> Edited:
        """Change a job that has not started (queued, blocked or held), in one
        transaction: ``changes`` (backends/edits.py changes_of: command and
        shell, lane, priority, label, not_before, after/after_any replacing
        its prerequisites). Its state follows its new prerequisites (held
        stays held); one event ``edited`` says what changed ("priority 0 ->
        5"); an edit that changes nothing writes nothing. ``expect``: fields
        of the job as the caller read it (its JSON: state, attempts,
        updated_at, ...); if one differs now the edit is refused
        (compare-and-set: claimed, edited, retried meanwhile). Raises
        IllegalTransition (started or finished, stale, a prerequisite that
        failed), BadRequest (bad fields, a cycle), JobNotFound."""
        return self.edits.edit(job_id, changes, expect=expect)

    def bump(self, ids: Sequence[int]) -> Batch:
        """Each waiting job of ``ids`` to the front of its lane (the rule:
        backends/edits.py), the first named first; a delayed one is due now.
        Event ``bumped``. Jobs that started or ended are skipped. Raises
        JobNotFound (nothing changed)."""
        return self.edits.bump(ids)

    def hold(self, ids: Sequence[int] | None = None, *, lane: str | None = None) -> Batch:
        """queued|blocked -> held (event ``held``) for each of ``ids``, or for
        every queued or blocked job of ``lane``: never claimed until
        released. Held already: listed, unchanged; started or finished:
        skipped. Raises JobNotFound, BadRequest."""
        return self.edits.hold(ids, lane=lane)

    def hold_never(self, gate: str, why: str | None, *, lane: str | None = None,
                   place: str | None = None) -> list[int]:
        """The queued and held jobs of ``gate`` (of ``lane`` and ``place``
        when given) that a machine can never run (daemon/worker/gates.py:
        Gates.never): held, with ``why`` as their ``wait_reason`` (event
        ``held`` for those that were queued; a held one that says ``why``
        already is left as it is). ``why`` None: they can run again; the
        held ones that said why forget it (and stay held). Returns the ids
        of the jobs changed."""
        return self.edits.hold_never(gate, why, lane=lane, place=place)

    def unhold(self, ids: Sequence[int] | None = None, *, lane: str | None = None) -> Batch:
        """`sloth release`: held -> queued, or blocked while a prerequisite is unfinished
        (event ``released``), for each of ``ids`` or every held job of
        ``lane``; its priority and due time kept, so its place too. Not
        held: listed, unchanged, or skipped if started or finished. Raises
        JobNotFound, BadRequest."""
        return self.edits.unhold(ids, lane=lane)

    def set_meta(self, key: str, value: Any) -> None:
        """Persist a small setting (a JSON value, read by get_meta)."""
        self.meta.set_meta(key, value)

    def set_lane(self, name: str, concurrency: int | None, config_was: int | None = None) -> None:
        """Record a lane (and, unless None, the concurrency `sloth lane set`
        gave it, with the config's value at that moment)."""
        self.meta.set_lane(name, concurrency, config_was)

    def forget_lane(self, name: str) -> None:
        """Remove a lane from the lanes table (its jobs, if any, keep their lane)."""
        self.meta.forget_lane(name)

    # ---------------------------------------------------------------- reads
    def get(self, job_id: int) -> Job:
        """The job. Raises JobNotFound."""
        return self.reads.get(job_id)

    def jobs(
        self, state: str | JobState | None = None, lane: str | None = None, limit: int = 1000,
        *, states: Sequence[str] | None = None,
    ) -> list[Job]:
        """The newest ``limit`` jobs matching the filters, oldest first."""
        return self.reads.jobs(state, lane, limit, states=states)

    def events(self, job_id: int) -> list[Event]:
        """The job's history, oldest first. Raises JobNotFound."""
        return self.reads.events(job_id)

    def counts(self) -> dict[str, int]:
        """Jobs per state, every state named (0 for none)."""
        return self.reads.counts()

    def latest(self, *, origin: str | None = None, ran: bool = False) -> int | None:
        """The id of the newest job queued from ``origin`` (a daemon's host
        name; None: from anywhere), with ``ran`` the newest that has started
        a run; None when there is none. What `sloth wait`, `logs` and `show`
        mean with no id."""
        return self.reads.latest(origin=origin, ran=ran)

    def running(self) -> list[Job]:
        """All jobs currently leased (running somewhere, or lost)."""
        return self.reads.running()

    claimed = running  # the name of schema v1-v3 days

    def prereqs(self, job_id: int) -> list[dict[str, Any]]:
        """What the job was added after: [{id, need ('done' | 'end'), state}]
        (a pruned prerequisite is no longer listed)."""
        return self.reads.prereqs(job_id)

    def dependents(self, job_id: int) -> list[int]:
        """Ids of the jobs added after this one."""
        return self.reads.dependents(job_id)

    def next_due_at(self, lanes: Sequence[str] | None = None, *,
                    exclude_lanes: Collection[str] = (),
                    exclude_ids: Collection[int] = (),
                    places: Collection[str] | None = None) -> float | None:
        """Earliest wall time at which ``claim`` (with the same filters)
        could return something: the first queued ``not_before``, or just
        after the first lease expiry."""
        return self.reads.next_due_at(lanes, exclude_lanes=exclude_lanes, exclude_ids=exclude_ids, places=places)

    def lanes(self) -> list[str]:
        """Lanes that have blocked, queued or running jobs."""
        return self.reads.lanes()

    def lane_counts(self) -> dict[str, dict[str, int]]:
        """lane -> {blocked, queued, running: n} for lanes with active jobs,
        by index-only scans (finished jobs are not read)."""
        return self.reads.lane_counts()

    def lane_busy(self, lane: str) -> bool:
        """True while the lane has a blocked, queued or running job (index seeks only)."""
        return self.reads.lane_busy(lane)

    def lane_rows(self) -> dict[str, dict[str, Any]]:
        """The lanes table: name -> {concurrency, config_was, created_at}
        (concurrency and config_was are None unless `sloth lane set` set them)."""
        return self.reads.lane_rows()

    def get_meta(self, key: str, default: Any = None) -> Any:
        """A small persisted setting (JSON value), e.g. which lanes are paused."""
        return self.reads.get_meta(key, default)

    def listing(self, *, states: Sequence[str] | None = None, lane: str | None = None,
                limit: int | None = None, offset: int = 0, finished_limit: int | None = None,
                now: float, host: str | None = None) -> Listing:
        """Up to ``limit`` jobs of the selection from ``offset`` on (in the
        order listing.py's docstring gives). ``states``: which (``claimed`` reads
        as ``running``; default all); ``finished_limit``: at most this many
        finished jobs, the most recent (the default view's "last 10").
        ``lanes``: active jobs per lane (the selection's lane, or all).
        ``host``: only jobs that run (or ran) on that host, or are placed
        there. Raises ValueError for an unknown state."""
        return self.listings.listing(states=states, lane=lane, limit=limit, offset=offset,
                                     finished_limit=finished_limit, now=now, host=host)

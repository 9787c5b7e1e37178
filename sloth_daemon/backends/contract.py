"""The queue's contract, declared once: what every engine does, one typed
Protocol per concern, each method's transitions and errors said here and
nowhere else.

An engine (backends/sqlite/engine.py, backends/postgres/engine.py) is the
parts that keep this contract over one storage, named the same on both
(``SqliteLeases`` and ``PgLeases`` keep ``Leases``, and so on); each part
names the Protocol it keeps as its base, so mypy checks its signatures and
``help()`` finds the docstring here. The public face (backends/face.py:
``Queue``, ``ReadOnlyQueue``) binds the parts' methods once, so a call
reaches the part that does the work directly.

What only some engines can do is an optional part typed ``X | None``
(``machines``, ``logs``: a queue shared by several machines), never probed
by name.

States: blocked -> queued -> running -> done | failed | cancelled (and
running -> queued for a retry or an interruption; queued|blocked <-> held).
Besides the job it returns, a transition that ends a job may queue or
cancel jobs that wait for it; those are passed, after the commit, to the
store's ``on_side_change``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import (
    Any, Callable, ClassVar, Collection, ContextManager, Iterable, Mapping, NamedTuple, Protocol, Sequence,
)

from sloth_daemon.backends import rules, run_tally, schedule_rules as sr
from sloth_daemon.backends.edits import Edited
from sloth_daemon.clock import Clock
from sloth_daemon.errors import IllegalTransition, JobNotFound, LeaseLost, SlothError
from sloth_daemon.models import Batch, Event, Job, JobState, Listing
from sloth_daemon.spec import JobSpec

SideChange = Callable[[Job], None]


@dataclass
class QueueDefaults:
    """What a job that sets none gets (``lease_s``, ``max_attempts``) and the
    cap of the delay before a failed try is due again: the daemon's
    settings, one object shared by the parts that read them, changed in
    place when its config is reloaded (through the face's properties)."""

    lease_s: float
    max_attempts: int
    backoff_cap_s: float


class Store(Protocol):
    """The storage itself: its unit of work, durability and health
    (sqlite/unit.py SqliteStore, postgres/store.py PgStore)."""

    #: Whether a unit's commit is durable once it ends (PostgreSQL commits
    #: synchronously); else a group commit's sync() makes it so.
    units_durable: bool
    #: Told, after the commit, of each job a transition queued or cancelled
    #: besides the one it returns.
    on_side_change: SideChange | None

    def unit(self) -> ContextManager[None]:
        """The writes inside as one transaction, one commit. Raises
        StorageError at the end if any of them met a storage error: then none
        of them was kept (a write that raises for its own reason, its lease
        lost, undoes itself alone). A write inside that asked to be durable
        makes the commit durable (a failed fsync raises too, the writes kept:
        the worker asks for none inside, the group commit syncs). Reads
        inside see its writes; dependents it settled are told once it
        commits. Nested: part of the outer one, which raises at its end."""
        ...

    def flush(self) -> None:
        """Make every commit made with ``durable=False`` durable now."""
        ...

    def sync(self) -> None:
        """Make every commit so far durable (on SQLite one fsync of the
        write-ahead log, blocking, safe to call from another thread: it
        touches no connection, only a descriptor of its own). The daemon's
        group commit calls it once for the outcomes that ended meanwhile.
        Raises StorageError."""
        ...

    def check(self) -> None:
        """Raise QueueBroken if the storage changed under this queue (a
        file replaced, truncated or damaged; a database dropped, or a URL
        that now reaches another queue): then it takes no more writes."""
        ...

    @property
    def broken(self) -> str | None:
        """Why this queue takes no more writes, or None."""
        ...

    def rest(self) -> None:
        """Idle for a while: give back what a cache holds (docs/idle.md)."""
        ...

    def checkpoint(self) -> None:
        """Write what the log holds into the database file and empty the
        log (SQLite's WAL), so that closing it changes neither file: the
        dormant process (daemon/dormant.py) takes their stamps before the
        close. Best effort (a reader elsewhere may hold it back); nothing on
        a server."""
        ...

    def revalidate(self) -> None:
        """After a suspend or a network change: connect afresh on the next
        call where there is a connection to lose (nothing to do on a file)."""
        ...

    def close(self) -> None:
        """Close the storage. A broken SQLite queue's connection is left
        open instead: closing checkpoints the WAL into whatever file is now
        at the path. A process that ends with such a queue should leave by
        os._exit."""
        ...


class ScheduleReads(Protocol):
    """The schedules' rows, as `schedule ls` and `show` read them (also on
    a read-only view: sqlite/schedules.py, postgres/schedules.py)."""

    def get(self, name: str) -> dict[str, Any]:
        """The schedule ``name`` (schedule_rules.record). Raises ScheduleNotFound."""
        ...

    def all(self) -> list[dict[str, Any]]:
        """Every schedule, by name."""
        ...

    def stamp(self) -> tuple[Any, ...]:
        """What changes with any change to any schedule (a cheap look before a re-read)."""
        ...

    def runs(self, name: str, limit: int = sr.RUNS_SHOWN) -> list[dict[str, Any]]:
        """The schedule's latest slots and their jobs, newest first."""
        ...

    def last_success(self, name: str) -> float | None:
        """When the newest of the schedule's jobs that ended done finished
        (None: none, or pruned): its dead-man switch (daemon/telling/deadman.py)."""
        ...


class Schedules(ScheduleReads, Protocol):
    """The schedules and their firings (SqliteSchedules, PgSchedules); what
    to fire is the daemon's (daemon/schedules/)."""

    def add(self, name: str, recipe: Mapping[str, Any], next_slot: int) -> dict[str, Any]:
        """A new schedule. Raises BadRequest when the name is taken."""
        ...

    def change(self, name: str, *, version: int | None = None, recipe: Mapping[str, Any] | None = None,
               paused: bool | None = None, next_slot: int | None = None) -> dict[str, Any] | None:
        """An edit, pause or resume; None if ``version`` is given and no longer the schedule's."""
        ...

    def remove(self, name: str) -> None:
        """The schedule and its slots' rows (its jobs stay, as jobs)."""
        ...

    def fire(self, name: str, firing: sr.Firing) -> list[dict[str, Any]] | None:
        """Write ``firing`` (schedule_rules.py) in one transaction: None if
        the schedule's version moved since the plan was made (nothing
        written). Returns one result per occurrence: slot, job_id, and
        ``taken`` (that slot had its row already) or ``deduped`` (a manual
        run still active)."""
        ...


@dataclass(frozen=True)
class Message:
    """One row of the outbox (docs/telling.md): a message a transition
    caused, to deliver once. ``key``: the idempotency key (job, attempt,
    event; or schedule, window, missed); ``channel``: {"kind": ping | webhook
    | mail, "url" or "to", "on"}; ``token``: the sender's lease on it (set by
    ``Outbox.claim``)."""

    id: int
    key: str
    event: str
    channel: dict[str, Any]
    job_id: int | None
    attempt: int
    schedule: str | None
    note: str
    at: float
    state: str
    tries: int
    next_at: float
    last_error: str | None = None
    sent_at: float | None = None
    token: str | None = None
    exit_code: int | None = None  # the job's, as the event left it

    MAX_ERROR: ClassVar[int] = 500  # characters of a delivery's error kept

    @classmethod
    def from_row(cls, row: Any) -> "Message":
        """An ``outbox`` row (either engine's: a mapping by column name)."""
        import json

        return cls(id=row["id"], key=row["key"], event=row["event"], channel=json.loads(row["channel"]),
                   job_id=row["job_id"], attempt=row["attempt"], exit_code=row["exit_code"],
                   schedule=row["schedule"], note=row["note"], at=row["at"], state=row["state"],
                   tries=row["tries"], next_at=row["next_at"], last_error=row["last_error"], sent_at=row["sent_at"],
                   token=row["token"])

    def to_dict(self) -> dict[str, Any]:
        """As the outbox op shows it: the channel's URL masked, no token."""
        from sloth_daemon.models import mask_channel

        return {"id": self.id, "key": self.key, "event": self.event, "channel": mask_channel(self.channel),
                "job_id": self.job_id, "attempt": self.attempt, "exit_code": self.exit_code,
                "schedule": self.schedule, "note": self.note,
                "at": self.at, "state": self.state, "tries": self.tries, "next_at": self.next_at,
                "last_error": self.last_error, "sent_at": self.sent_at}


class Outbox(Protocol):
    """The messages transitions caused (SqliteOutbox, PgOutbox): written by
    the transition itself (the trigger events_tell, in the same
    transaction; ``add`` for a schedule's missed window), delivered after
    the commit by the daemon's sender, leased like jobs so that on a
    shared queue one machine sends each. pending -> sent | failed (kept
    for inspection; ``retry`` makes it pending again, ``drop`` deletes)."""

    def claim(self, sender: str, *, limit: int, lease_s: float) -> list[Message]:
        """Up to ``limit`` pending messages due now (next_at <= now) whose
        lease is free or ran out, oldest first, each leased to ``sender``
        for ``lease_s`` with a fresh token (tries + 1)."""
        ...

    def free(self, prefix: str) -> int:
        """Free at once the leases of senders whose name starts with
        ``prefix``: an earlier daemon of this machine (it is dead: two never
        run on one machine's queue at once), so a restart after a crash
        mid-send need not wait out its lease. Returns how many."""
        ...

    def sent(self, msg_id: int, token: str) -> bool:
        """pending -> sent, if ``token`` still holds it (False: another
        sender took it over after the lease ran out; it may send it again,
        which the key makes harmless)."""
        ...

    def failed_try(self, msg_id: int, token: str, error: str, retry_in_s: float | None) -> bool:
        """A delivery that failed: due again in ``retry_in_s``, or (None)
        failed for good, ``error`` kept as last_error. False if ``token`` no
        longer holds it."""
        ...

    def next_at(self) -> float | None:
        """When the earliest pending message is due (None: none pending)."""
        ...

    def messages(self, states: Sequence[str] = ("pending", "failed"), limit: int = 200) -> list[Message]:
        """Messages in ``states``, oldest first."""
        ...

    def retry(self, ids: Sequence[int]) -> list[int]:
        """failed (or pending) -> pending, due now, tries 0; returns those changed."""
        ...

    def drop(self, ids: Sequence[int]) -> list[int]:
        """Delete pending or failed messages; returns those deleted (a sent one stays)."""
        ...

    def add(self, key: str, event: str, channels: Sequence[Mapping[str, Any]], *, schedule: str | None = None,
            note: str = "") -> int:
        """One row per channel that wants ``event`` under ``key``, in one
        transaction; a key already there adds nothing. Returns rows added."""
        ...

    def prune(self, sent_before_s: float, failed_before_s: float) -> int:
        """Delete messages sent more than ``sent_before_s`` ago, and those
        that failed for good more than ``failed_before_s`` ago (a failed
        message's ``next_at`` is when it failed); returns how many."""
        ...


@dataclass(frozen=True)
class Host:
    """A daemon as its host row shows it."""

    name: str
    tags: tuple[str, ...]
    worker: str
    pid: int
    boot_id: str
    version: str
    started_at: float
    resources: dict[str, int] | None = None  # tokens of each resource it gives out (None: not yet said)

    def row(self) -> dict[str, Any]:
        return {"name": self.name, "tags": list(self.tags), "worker": self.worker, "pid": self.pid,
                "boot_id": self.boot_id, "version": self.version, "started_at": self.started_at,
                "resources": None if self.resources is None else json.dumps(self.resources, sort_keys=True)}


@dataclass(frozen=True)
class LogPart:
    """What a read of an attempt's stored log found: ``data`` from the
    offset asked for, the whole ``size``, whether it is ``done`` (all there),
    which ``host`` ran it. ``size`` None: nothing is stored (yet)."""

    data: bytes
    size: int | None
    done: bool
    host: str | None


class Machines(Protocol):
    """The hosts that serve a shared queue (postgres/hosts.py PgMachines)."""

    def register_host(self, me: Host, *, alive_s: float, pid_alive: Callable[[int], bool]) -> float:
        """Take ``me.name`` for this daemon, or raise ConfigError when a
        daemon of another machine (another boot) refreshed it less than
        ``alive_s`` ago, or another daemon of this boot still runs under it
        (``pid_alive``: whether a pid of this machine runs). Returns the server's now."""
        ...

    def host_seen(self, me: Host) -> float:
        """Refresh this daemon's host row; the server's now."""
        ...

    def forget_host(self, me: Host) -> None:
        """This daemon stops: its row goes, unless another has taken the name."""
        ...

    def hosts(self) -> list[dict[str, Any]]:
        """Every host that served this queue: name, tags, worker, pid,
        version, started_at, last_seen, ago (seconds since, by the server),
        resources (name -> tokens, or None where its daemon did not say)."""
        ...


class Logs(Protocol):
    """The attempts' logs stored in a shared queue, for the machines that
    did not run them (postgres/logs.py PgLogs)."""

    def stored_log(self, job_id: int, attempt: int, offset: int = 0, limit: int = 1 << 20) -> LogPart:
        """Up to ``limit`` bytes of the stored log of an attempt from ``offset`` (see LogPart)."""
        ...


@dataclass(frozen=True)
class Handle:
    """What makes a batch one with a handle (`add --stdin/--file`, an array,
    `--batch NAME`): its name, if any (issue 33)."""

    name: str | None = None


class Adds(Protocol):
    """Adding jobs (sqlite/enqueue.py SqliteAdds, postgres/enqueue.py PgAdds)."""

    def enqueue_many(self, specs: Iterable[Mapping[str, Any] | JobSpec], *, batch: str | None = None,
                     handle: Handle | None = None) -> list[int]:
        """Enqueue many jobs in one transaction; all or none. Same rules as
        enqueue (rules.enqueue_one). A spec may be a job object or a JobSpec already validated.
        With ``batch`` (a client's token), the ids are recorded under it in
        the same transaction, so a client that lost the answer can ask
        (batch_ids) whether the batch was queued: never "some of it". A
        spec with ``after``/``after_any`` (ids) or ``after_previous`` (on
        the batch's previous job) starts ``blocked`` while any of those is
        unfinished, ``cancelled`` (event ``cancelled``) if one it needs done
        already failed or was cancelled, else ``queued``. With ``handle``
        the jobs form a batch with a handle: its record gets an id (and the
        handle's name), each job carries them (Job.batch). Raises BadRequest
        for invalid fields, JobNotFound for a prerequisite that does not exist."""
        ...

    def batch_ids(self, batch: str) -> list[int] | None:
        """The ids the batch ``batch`` was queued as, or None if it was not
        (or its record was pruned: records are kept rules.BATCH_RECORD_S)."""
        ...



class Claims(Protocol):
    """Taking a lease (sqlite/claim.py SqliteClaims, postgres/claim.py PgClaims)."""

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
        ...


    def claim_many(self, worker: str, n: int, *, lane: str, lease_s: float | None = None,
                   places: Collection[str] | None = None) -> list[Job]:
        """Up to ``n`` due ungated queued jobs of ``lane`` leased to ``worker``
        at once, most urgent first (the claim's order): each as
        ``claim(reclaim=False)`` leases it, with a fencing token of its own
        (so each may be unclaimed, renewed, fenced or ended alone), never an
        expired lease. Fewer (or none) when fewer are due or other claimers
        hold them; two claimers never get the same job. One statement on
        PostgreSQL; on SQLite one transaction. ``n`` 0..10,000 (BadRequest)."""
        ...


class Completion(NamedTuple):
    """One of complete_many's outcomes: complete()'s arguments but ``durable``."""

    job_id: int
    token: str
    message: str = ""
    exit_code: int | None = None
    ended_at: float | None = None
    runner: dict[str, Any] | None = None


def complete_each(complete: Callable[..., Job], items: Sequence[Completion], *,
                  durable: bool = True) -> list[Job | SlothError]:
    """complete_many as one complete() per item (an engine with nothing to
    gain from a batch); the errors a lease holder meets, each in its place."""
    out: list[Job | SlothError] = []
    for x in items:
        try:
            out.append(complete(x.job_id, x.token, message=x.message, exit_code=x.exit_code, ended_at=x.ended_at,
                                runner=x.runner, durable=durable))
        except (LeaseLost, JobNotFound, IllegalTransition) as e:
            out.append(e)
    return out


class Leases(Protocol):
    """What the holder of a lease does with it, and how its run ends
    (sqlite/leases.py SqliteLeases, postgres/leases.py PgLeases)."""

    def set_waiting(self, gate: str, why: str | None) -> int:
        """Say why the queued jobs of ``gate`` do not start (``ls``, ``show``);
        None: clear it. Returns how many jobs changed."""
        ...

    def heartbeat(self, job_id: int, token: str, *, lease_s: float | None = None) -> Job:
        """Extend the lease of the holder of ``token``: ``lease_until = now + lease``.

        The token decides, not the clock: a lapsed lease that nobody reclaimed
        may still be renewed. Raises LeaseLost (stale token) or JobNotFound.
        """
        ...

    def renew_after_resume(self, job_id: int, token: str, message: str) -> Job:
        """Heartbeat after the machine slept, and record a ``resumed`` event."""
        ...

    def set_runner(self, job_id: int, token: str, runner: dict[str, Any]) -> Job:
        """Record the identity of the process running this attempt (event ``started``)."""
        ...

    def note_run(self, job_id: int, token: str, kind: str, message: str) -> Job:
        """An event ``kind`` in the history of the run of ``token`` while it
        runs (e.g. "keep-awake": its inhibitor could not be held). Raises
        LeaseLost or JobNotFound."""
        ...

    def set_paused(self, job_id: int, token: str, paused: bool, message: str, *, at: float | None = None) -> Job:
        """Record that the run of ``token`` is paused on request (or
        continued): event ``paused`` or ``continued`` (``at``: when the keeper
        did it, never later than now); the job reads ``paused`` while it
        holds that token. Raises LeaseLost or JobNotFound."""
        ...

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
        ...

    def complete_many(self, items: Sequence[Completion], *, durable: bool = True) -> list[Job | SlothError]:
        """complete() of each item (all in one statement where the engine
        can), each under its own token: a stale token (LeaseLost), a job
        gone (JobNotFound) or never claimed (IllegalTransition) changes
        nothing of its own and nothing of the others; its error stands in
        its place in the answer, the others' Jobs in theirs. ``durable`` as
        for complete. Any other error (StorageError) is the whole call's.
        By default one complete() each (SQLite: a unit's statements cost no
        round trip)."""
        return complete_each(self.complete, items, durable=durable)

    def fail(
        self, job_id: int, token: str, *, message: str = "", retry: bool = True,
        exit_code: int | None = None, ended_at: float | None = None,
        runner: dict[str, Any] | None = None, durable: bool = True, rule: str = "",
    ) -> Job:
        """running -> queued with ``not_before = now + min(2**tries, cap)`` while
        tries remain (and ``retry``), else -> failed (dependents that need it
        done are cancelled, the others may be queued). The wait is the job's
        own ``--backoff BASE..CAP`` where it has one (rules.job_backoff_s).
        ``rule``: the retry rule that decided ``retry`` (outcomes.retry_verdict),
        said in the try's history after ``message`` (the job's message stays
        ``message``). ``ended_at``, ``runner`` and ``durable`` as for
        complete. Raises LeaseLost."""
        ...

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
        ...

    def set_progress(self, job_id: int, token: str, progress: Mapping[str, Any]) -> Job:
        """The running attempt's latest progress (``{"fraction": 0-1,
        "source": "line"|"file"|"tqdm"|"estimate", "eta_s", "at"}``), kept
        on its row with that attempt (a later attempt never shows it; the
        Job's ``progress`` is None once it no longer runs it); no event, no
        fsync. Raises BadRequest (nothing written), LeaseLost, JobNotFound."""
        ...

    def record_cost(self, job_id: int, attempt: int, cost: Mapping[str, Any], *, durable: bool = False) -> None:
        """What ``attempt`` of the job cost (``{"cpu_s", "peak_rss_bytes",
        "wall_s", "ended", "covers": "cgroup"|"rusage"}``, keeper/cost.py),
        kept with it (replacing what was); no lease needed: it ran, whatever
        became of its lease. A job that is gone (pruned) takes nothing.
        Without ``durable`` the next durable write carries it. Raises
        BadRequest (nothing written)."""
        ...

    def note_ended(self, job_id: int, attempt: int, message: str, *, ended_at: float | None = None,
                   durable: bool = True, kind: str = "ended") -> Job:
        """A run of a job it no longer holds ended (it was cancelled while
        it ran): event ``ended`` for ``attempt``, nothing else changes, so
        its history says how the run it had started ended. ``kind``: another
        word the keeper had on that run as it ended (its keep-awake), kept
        in its history all the same. Raises JobNotFound."""
        ...

    def keep_result(self, job_id: int, attempt: int, data: str, *, durable: bool = True) -> None:
        """Keep the JSON text ``data`` that ``attempt`` handed on ($SLOTH_RESULT,
        validated and capped by the keeper) with that attempt: the first
        kept for an attempt stays (the outcome of one run may be offered
        again after a crash). Written before the attempt's end, in the same
        unit of work where there is one, so a dependent queued by that end
        finds it. Changes no state; a job pruned meanwhile keeps nothing."""
        ...

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
        ...

    def adopt(self, job_id: int, token: str, worker: str, *, message: str) -> Job:
        """A new holder takes over the lease of ``token`` (a daemon adopting
        a run that outlived the daemon that claimed it): the lease is renewed
        from now and ``worker`` renamed; event ``adopted``. The token decides,
        as for a heartbeat: a lapsed lease that nobody reclaimed is still
        ours. Raises LeaseLost or JobNotFound."""
        ...

    def abandon(self, job_id: int, token: str, *, message: str, refund: bool = False) -> Job:
        """Declare the holder of ``token`` gone (e.g. the daemon that held it
        died: the single-instance lock proves it). The lease counts as expired
        from now, so the next claim re-issues the job with a ``reclaimed``
        event (attempts + 1). Event ``abandoned``. With ``refund`` (the run
        was cut short by a crash of sloth, not of the job) its try is given
        back, at most MAX_CRASH_REFUNDS times between user retries; past that
        the crash counts. Raises LeaseLost."""
        ...


class Requests(Protocol):
    """A user's requests on jobs (sqlite/batch.py SqliteRequests, postgres/batch.py PgRequests)."""

    def cancel(self, job_id: int, *, message: str = "cancelled by user") -> Job:
        """blocked|queued|running -> cancelled; what waits for it to be done is
        cancelled too. A running job's holder loses its lease (its token is
        cleared); ending its process is the caller's business. Raises
        IllegalTransition for a finished job, JobNotFound."""
        ...

    def retry(self, job_id: int) -> Job:
        """failed|cancelled -> queued, due now, with a fresh budget of tries
        (``attempts`` keeps counting runs);
        -> blocked instead while a job it was added after is unfinished (one
        that failed no longer stops it: retrying is the user's say-so).
        Raises IllegalTransition (other states, or its key is taken by an
        active job), JobNotFound."""
        ...

    def cancel_many(self, ids: Sequence[int] | None = None, *, lane: str | None = None,
                    states: Sequence[str] | None = None, message: str = "cancelled by user",
                    exclude: Collection[int] = ()) -> Batch:
        """blocked|queued|running -> cancelled for each of ``ids``, or for
        every active job of ``lane`` and/or ``states`` (a selection). Jobs
        waiting for them to be done are cancelled too (in ``Batch.jobs``
        when named). ``exclude``: jobs left out, as if not named (the daemon
        asks the keeper about their runs first). Raises JobNotFound,
        BadRequest (a state that is not active)."""
        ...

    def retry_many(self, ids: Sequence[int] | None = None, *, lane: str | None = None,
                   states: Sequence[str] | None = None, busy: Collection[int] = ()) -> Batch:
        """failed|cancelled -> queued (or blocked), as :meth:`retry`, for each
        of ``ids`` or every job of the selection (default state: failed).
        ``busy``: jobs not to touch yet (their cancelled run is still ending).
        Raises JobNotFound, BadRequest."""
        ...

    def restart(self, ids: Sequence[int]) -> Batch:
        """For each finished job of ``ids``: a new queued job with the same
        command, lane, priority, limits, folder, environment, label and key
        (not its prerequisites), due now. Events: ``restart`` on the new job,
        ``restarted`` on the old. Raises JobNotFound."""
        ...

    def prune(self, older_than_s: float, *, states: Sequence[str] | None = None, lane: str | None = None,
              dry_run: bool = False) -> int:
        """Delete finished jobs (and their events) that ended more than
        ``older_than_s`` ago, of ``states`` (default: every finished state) and
        ``lane``. Returns how many were (``dry_run``: would be) deleted."""
        ...


class Edits(Protocol):
    """Changes to jobs that have not started (issue 22; sqlite/edits.py SqliteEdits, postgres/edits.py PgEdits)."""

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
        ...

    def bump(self, ids: Sequence[int]) -> Batch:
        """Each waiting job of ``ids`` to the front of its lane (the rule:
        backends/edits.py), the first named first; a delayed one is due now.
        Event ``bumped``. Jobs that started or ended are skipped. Raises
        JobNotFound (nothing changed)."""
        ...

    def hold(self, ids: Sequence[int] | None = None, *, lane: str | None = None) -> Batch:
        """queued|blocked -> held (event ``held``) for each of ``ids``, or for
        every queued or blocked job of ``lane``: never claimed until
        released. Held already: listed, unchanged; started or finished:
        skipped. Raises JobNotFound, BadRequest."""
        ...

    def hold_never(self, gate: str, why: str | None, *, lane: str | None = None,
                   place: str | None = None) -> list[int]:
        """The queued and held jobs of ``gate`` (of ``lane`` and ``place``
        when given) that a machine can never run (daemon/worker/gates.py:
        Gates.never): held, with ``why`` as their ``wait_reason`` (event
        ``held`` for those that were queued; a held one that says ``why``
        already is left as it is). ``why`` None: they can run again; the
        held ones that said why forget it (and stay held). Returns the ids
        of the jobs changed."""
        ...

    def unhold(self, ids: Sequence[int] | None = None, *, lane: str | None = None) -> Batch:
        """`sloth release`: held -> queued, or blocked while a prerequisite is unfinished
        (event ``released``), for each of ``ids`` or every held job of
        ``lane``; its priority and due time kept, so its place too. Not
        held: listed, unchanged, or skipped if started or finished. Raises
        JobNotFound, BadRequest."""
        ...


class Meta(Protocol):
    """The queue's small persisted settings: meta and lanes (their reads
    are Reads'; sqlite/meta.py SqliteMeta, postgres/meta.py PgMeta)."""

    def set_meta(self, key: str, value: Any) -> None:
        """Persist a small setting (a JSON value, read by get_meta)."""
        ...

    def set_lane(self, name: str, concurrency: int | None, config_was: int | None = None) -> None:
        """Record a lane (and, unless None, the concurrency `sloth lane set`
        gave it, with the config's value at that moment)."""
        ...

    def forget_lane(self, name: str) -> None:
        """Remove a lane from the lanes table (its jobs, if any, keep their lane)."""
        ...

    # The machine's own history, for the timeline (issue 31; docs/timeline.md).
    # Times are the queue's now (on PostgreSQL the server's), as a job's are.

    def machine_up(self, host: str) -> int:
        """A daemon starts on ``host``: a new ``up`` row from now to now
        (detail ``running``). A previous up row of ``host`` still said to be
        running is said ``crashed``: its daemon never stopped cleanly, and
        its end stays the last stamp that daemon wrote (machine_seen).
        Keeps at most rules.MACHINE_EVENTS_KEPT rows of ``host``. Returns the new row's id."""
        ...

    def machine_seen(self, row_id: int, *, ended: str | None = None) -> None:
        """The up row ``row_id`` lasts until now (a stamp its daemon
        refreshes while it runs); ``ended``: how it stopped (its detail,
        once, at a clean stop). A row pruned meanwhile is left pruned."""
        ...

    def machine_slept(self, host: str, seconds: float, why: str) -> None:
        """A sleep of ``host`` of ``seconds`` that ended now (the clock
        watch saw it; ``why``: its description). Keeps at most
        rules.MACHINE_EVENTS_KEPT rows of ``host``."""
        ...


class Reads(Protocol):
    """The read side (sqlite/reads.py SqliteReads, postgres/reads.py PgReads)."""

    def get(self, job_id: int) -> Job:
        """The job. Raises JobNotFound."""
        ...

    def get_many(self, ids: Sequence[int]) -> list[Job]:
        """The jobs of these ids that exist, in one read, by id."""
        ...

    def jobs(
        self, state: str | JobState | None = None, lane: str | None = None, limit: int = 1000,
        *, states: Sequence[str] | None = None,
    ) -> list[Job]:
        """The newest ``limit`` jobs matching the filters, oldest first."""
        ...

    def events(self, job_id: int) -> list[Event]:
        """The job's history, oldest first. Raises JobNotFound."""
        ...

    def outbox_counts(self) -> dict[str, int]:
        """The outbox's messages by state: pending, failed and sent (status,
        `sloth outbox`, the metrics, idle exit), read only."""
        ...

    def batch_find(self, ref: str) -> dict[str, Any]:
        """The batch with a handle ``ref`` names (rules.batch_ref: an id, or
        the newest of a name) as rules.batch_summary. Raises BatchNotFound."""
        ...

    def batch_members(self, batch_id: int, states: Sequence[str] | None = None) -> list[int]:
        """The ids of the batch's jobs (in ``states`` only, if given), in order."""
        ...

    def active_batches(self, limit: int = rules.ACTIVE_BATCHES) -> list[dict[str, Any]]:
        """The newest ``limit`` batches with a handle that have an unfinished
        job (blocked, held, queued, running), newest first, as rules.batch_summary."""
        ...

    def results(self, job_ids: Sequence[int], *, attempts: tuple[int, int] | None = None
                ) -> dict[int, list[dict[str, Any]]]:
        """The results the jobs' attempts handed on (keep_result), by job id,
        each ``{"attempt", "result" (the JSON parsed), "at"}`` oldest first,
        only those of attempts ``lo..hi`` when given (each may be 64 KiB:
        a reader asks for what it shows); a job with none (or unknown) is absent."""
        ...

    def counts(self) -> dict[str, int]:
        """Jobs per state, every state named (0 for none)."""
        ...

    def costs(self, job_ids: Sequence[int]) -> dict[int, list[dict[str, Any]]]:
        """What each run of these jobs cost: job id -> ``[{"attempt": n,
        "cost": {...}}]`` by attempt (record_cost's); jobs with none are left out."""
        ...

    def run_times(self, column: str, value: str, *, prefix: bool = False) -> list[float]:
        """Wall times of the latest done runs (attempt_rules.ESTIMATE_RUNS,
        newest first, among the newest ESTIMATE_SCAN finished jobs) of jobs
        whose ``column`` ("key", "label" or "command", as stored) equals
        ``value`` (``prefix``: begins with it: a schedule's slot keys).
        Raises BadRequest for another column."""
        ...

    def latest(self, *, origin: str | None = None, ran: bool = False) -> int | None:
        """The id of the newest job queued from ``origin`` (a daemon's host
        name; None: from anywhere), with ``ran`` the newest that has started
        a run; None when there is none. What `sloth wait`, `logs` and `show`
        mean with no id."""
        ...

    def running(self) -> list[Job]:
        """All jobs currently leased (running somewhere, or lost)."""
        ...

    def prereqs(self, job_id: int) -> list[dict[str, Any]]:
        """What the job was added after: [{id, need ('done' | 'end'), state}]
        (a pruned prerequisite is no longer listed)."""
        ...

    def dependents(self, job_id: int) -> list[int]:
        """Ids of the jobs added after this one."""
        ...

    def next_due_at(self, lanes: Sequence[str] | None = None, *,
                    exclude_lanes: Collection[str] = (),
                    exclude_ids: Collection[int] = (),
                    places: Collection[str] | None = None) -> float | None:
        """Earliest time (on the queue's clock: on PostgreSQL the server's)
        at which ``claim`` (with the same filters) could return something:
        the first queued ``not_before``, or just after the first lease expiry."""
        ...

    def gates(self) -> list[str]:
        """The distinct gates (checks.gate_json texts) of queued jobs."""
        ...

    def held_gates(self) -> list[str]:
        """The distinct gates of held jobs (a scan of them: for a reload or
        a `lane set`, never a claim)."""
        ...

    def gated_heads(self, gates: Collection[str], *, exclude_lanes: Collection[str] = (),
                    exclude_ids: Collection[int] = (),
                    places: Collection[str] | None = None) -> tuple[list[Job], float | None]:
        """For each of ``gates`` and each lane not excluded, its most urgent
        due queued job, and the gated jobs whose lease expired (of any gate),
        most urgent first; and when the first job of those gates that is not
        due yet becomes due (None: none)."""
        ...

    def lanes(self) -> list[str]:
        """Lanes that have blocked, queued or running jobs."""
        ...

    def lane_counts(self) -> dict[str, dict[str, int]]:
        """lane -> {blocked, queued, running: n} for lanes with active jobs,
        by index-only scans (finished jobs are not read)."""
        ...

    def lane_busy(self, lane: str) -> bool:
        """True while the lane has a blocked, queued or running job (index seeks only)."""
        ...

    def lane_rows(self) -> dict[str, dict[str, Any]]:
        """The lanes table: name -> {concurrency, config_was, created_at}
        (concurrency and config_was are None unless `sloth lane set` set them)."""
        ...

    def get_meta(self, key: str, default: Any = None) -> Any:
        """A small persisted setting (JSON value), e.g. which lanes are paused."""
        ...

    def run_tally(self) -> run_tally.Tally:
        """The runs that ended, by (lane, outcome): how many, how long
        (backends/run_tally.py), the pruned history's included, so no count
        ever goes back while the queue lives. One pass over the history."""
        ...

    def oldest_queued(self) -> dict[str, float]:
        """lane -> the earliest ``not_before`` of its queued jobs (gated
        ones too): since when its oldest job has been due (later than now:
        none is due yet)."""
        ...

    def window_jobs(self, since: float, *, lane: str | None = None, before_id: int | None = None,
                    limit: int = 100) -> list[tuple[Job, list[Event]]]:
        """Up to ``limit`` jobs with an id below ``before_id`` (None: any),
        newest first, that were unfinished at ``since`` (unfinished, or
        finished at or after it), of ``lane`` (None: every lane), each with
        its history (oldest first): the timeline's read, a page at a time
        (backends/timeline.py)."""
        ...

    def machine_events(self, since: float, host: str | None = None) -> list[dict[str, Any]]:
        """The machine's events (Meta.machine_up, machine_slept) that end
        at or after ``since``, of ``host`` (None: every host), by start:
        {id, host, kind ('up' | 'sleep'), start_at, end_at, detail}. [] on
        a queue whose schema predates them (a read-only view of an old file)."""
        ...


class Listings(Protocol):
    """The listing `ls` shows (sqlite/listing.py SqliteListings, postgres/listing.py PgListings)."""

    def listing(self, *, states: Sequence[str] | None = None, lane: str | None = None,
                limit: int | None = None, offset: int = 0, finished_limit: int | None = None,
                now: float, host: str | None = None, batch: int | None = None) -> Listing:
        """Up to ``limit`` jobs of the selection from ``offset`` on (in the
        order listing.py's docstring gives). ``states``: which (``claimed`` reads
        as ``running``; default all); ``finished_limit``: at most this many
        finished jobs, the most recent (the default view's "last 10").
        ``lanes``: active jobs per lane (the selection's lane, or all).
        ``host``: only jobs that run (or ran) on that host, or are placed
        there; ``batch``: only the jobs of that batch (its id). Raises ValueError for an unknown state."""
        ...


class Scan(Protocol):
    """A listing being read a chunk at a time on a read-only view
    (sqlite/scan.py SqliteScan, postgres/scan.py PgScan): what
    ``listing(**kw)`` would give, as of its start, with the jobs as they
    are when each chunk is read."""

    #: What the listing's start knew: total, offset, counts, lanes (rules.scan_head).
    head: dict[str, Any]

    def next(self, n: int = rules.CHUNK) -> list[Job]:
        """The next jobs of the listing, at most ``n`` ([] once it is all read)."""
        ...

    def tail(self) -> dict[str, Any]:
        """What is known once the scan is read: ``left_out`` (the rows of
        the selection not listed: past the limit, or pruned meanwhile)."""
        ...

    def close(self) -> None:
        """Give back what the scan holds (and close the view, when it owns it)."""
        ...


@dataclass
class Engine:
    """One storage's parts that keep the contract, each typed by the
    Protocol it keeps (mypy checks every engine where it builds one:
    sqlite/engine.py, postgres/engine.py). ``target``: the file's path or
    the URL (what open_read_only takes); ``clock``: what a caller that needs
    the queue's "now" compares with (on PostgreSQL the server's)."""

    target: str | Path
    clock: Clock
    identity: str
    defaults: QueueDefaults
    store: Store
    adds: Adds
    claims: Claims
    leases: Leases
    requests: Requests
    edits: Edits
    meta: Meta
    reads: Reads
    listings: Listings
    schedules: Schedules
    outbox: Outbox
    machines: Machines | None = None  # a queue shared by several machines (PostgreSQL)
    logs: Logs | None = None


@dataclass
class ReadEngine:
    """The read side of a storage on a connection that cannot write (for
    the CLI when no daemon answers). ``identity``: a shared queue's, kept in
    its database (None on SQLite, whose identity the CLI reads beside the
    file); ``scan(**kw)``: the listing ``listing(**kw)`` would give, read a
    chunk at a time (sqlite/scan.py, postgres/scan.py)."""

    target: str | Path
    identity: str | None
    reads: Reads
    listings: Listings
    schedules: ScheduleReads
    scan: Callable[..., Scan]
    close: Callable[[], None]
    machines: Machines | None = None
    logs: Logs | None = None

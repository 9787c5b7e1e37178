"""A run's life, as the worker sees it: its stages, why the worker ended
it, and every move between stages (the only place a run changes stage).

    CLAIMED --> RUNNING <--> PAUSED
       |  \\        |          |
       |   WITHDRAWING -> RUNNING
       v       v   v          v
       +-----> ENDED <--------+
                 |  ^ (a write its unit did not keep)
                 v  |
               WRITTEN --> SYNCING --> DONE
                  \\___________________^

- CLAIMED: the worker holds the job's lease; its spawn is sent once the
  claim is in (recording.py). *Pending* if it waits in the keeper behind
  another run of its lane that has not ended (its *successor*, pipeline.py).
- WITHDRAWING: the keeper was asked to withdraw it (``unspawn``): it drops
  it unstarted (the run is *taken back*: ENDED, never started) unless it
  had started it already (RUNNING).
- RUNNING / PAUSED: its process runs (``pid``); paused: its tree is
  stopped on request, keeping its lease and slot (pausing.py).
- ENDED: its ``outcome`` is known, not yet written (a write the database
  refused waits here for its retry time).
- WRITTEN: the outcome is in the database, not yet durable; SYNCING: it
  waits for the group commit's fsync (durability.py); DONE: durable, told,
  dropped from the worker's runs.

Beside its stage a run may carry an ``ending`` (:class:`Ending`): why the
worker asked for its end, which decides how its outcome is written
(outcomes.py). Moving to a stage the table below does not allow is a bug:
it raises :class:`IllegalRunMove`.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

from sloth_daemon.clock import ClockReadings
from sloth_daemon.models import Job
from sloth_daemon.daemon.worker.spawner import Outcome

SETTLE_BACKOFF_S = (0.5, 1, 2, 5, 10, 30)  # retrying a result the database would not take


def boot_of(r: ClockReadings) -> float:
    """The clock trust deadlines are on: one that counts suspend."""
    return r.total if r.total is not None else r.awake


class Stage(enum.Enum):
    CLAIMED = "claimed"
    WITHDRAWING = "withdrawing"
    RUNNING = "running"
    PAUSED = "paused"
    ENDED = "ended"
    WRITTEN = "written"
    SYNCING = "syncing"
    DONE = "done"

    # Enum's __hash__ is Python code (hash of the name), run by every "in LIVE",
    # "in NOT_STARTED" and move: ~40 a job in a burst (pending, slots_in_use,
    # a chain's head and depth). Members are singletons, equal only to
    # themselves: the identity hash, in C, agrees with that equality.
    __hash__ = object.__hash__


MOVES: dict[Stage, frozenset[Stage]] = {
    Stage.CLAIMED: frozenset({Stage.WITHDRAWING, Stage.RUNNING, Stage.ENDED}),
    Stage.WITHDRAWING: frozenset({Stage.RUNNING, Stage.ENDED}),
    Stage.RUNNING: frozenset({Stage.PAUSED, Stage.ENDED}),
    Stage.PAUSED: frozenset({Stage.RUNNING, Stage.ENDED}),
    Stage.ENDED: frozenset({Stage.WRITTEN}),
    Stage.WRITTEN: frozenset({Stage.SYNCING, Stage.DONE, Stage.ENDED}),
    Stage.SYNCING: frozenset({Stage.DONE}),
    Stage.DONE: frozenset(),
}
NOT_STARTED = frozenset({Stage.CLAIMED, Stage.WITHDRAWING})  # the keeper has not said it started
LIVE = frozenset({Stage.RUNNING, Stage.PAUSED})  # its process runs


class IllegalRunMove(RuntimeError):
    """A move the run's life does not have (a bug in the worker)."""


class Why(enum.Enum):
    """Why the worker ended a run (its ``Ending``)."""

    CANCELLED = "cancelled"  # by a user's cancel: nothing more to write but how it ended
    KILLED = "killed"  # by `sloth kill`: as a cancel
    LEASE_LOST = "lease lost"  # the queue no longer gives us its lease: our token is void
    FENCED = "fenced"  # its lease was lost while the machine slept
    INTERRUPTED = "interrupted"  # the daemon stops: the try is given back
    CONDITION_LOST = "condition lost"  # --on-lost stop: requeued, the try not counted (gates.py)
    REPLACED = "replaced"  # --overlap replace: recorded cancelled once it ended


# Its outcome is not the worker's to write: the claim is void.
NOTHING_TO_WRITE = frozenset({Why.CANCELLED, Why.KILLED, Why.LEASE_LOST, Why.FENCED})
BY_REQUEST = frozenset({Why.CANCELLED, Why.KILLED})  # a user's: how a started run ended is noted


@dataclass(frozen=True)
class Ending:
    """Why the worker ended a run, and the words the keeper and the history get."""

    why: Why
    detail: str = ""  # CONDITION_LOST: which; REPLACED: the whole message; FENCED: how

    @property
    def text(self) -> str:
        if self.why is Why.REPLACED:
            return self.detail
        return f"{self.why.value}: {self.detail}" if self.detail else self.why.value


@dataclass(eq=False)
class Attempt:
    """One attempt this worker holds, from claim to durable outcome (see
    the module docstring): its stage and the data each stage has."""

    job: Job
    token: str
    attempt: int
    stage: Stage = Stage.CLAIMED
    pid: int | None = None  # RUNNING and after: its process
    outcome: Outcome | None = None  # ENDED and after: how it ended
    ending: Ending | None = None  # why the worker ended it, if it did
    adopted: bool = False  # from a keeper that outlived the daemon that started it
    identity: dict[str, Any] | None = None  # its process, until its start is written (maybe with its outcome)
    started_awake: float = 0.0  # awake clock: claimed, then heard started (young: pipeline.py)
    written_job: Job | None = None  # WRITTEN: the job as that write left it, told once durable
    record_error: str | None = None  # ENDED: why the last write of its outcome failed
    record_tries: int = 0
    record_after: float = 0.0  # awake clock: when to try writing it again
    renew_at: float = 0.0  # boot clock: when its lease is renewed next
    resume_why: str | None = None  # a sleep's renewal not written yet (the queue unreachable): the next one says it
    after: "Attempt | None" = None  # pending behind this run until it ends (pipeline.py)
    successor: "Attempt | None" = None  # the run pending behind this one, if any (one at most, ever)
    cancelling: bool = False  # a cancel asked the keeper to withdraw it and writes it itself (withdrawal.py)
    pause_asks: int = 0  # pauses or resumes waiting for the keeper: their event goes before its outcome

    # ------------------------------------------------------------ reading
    @property
    def live(self) -> bool:
        return self.stage in LIVE

    @property
    def paused(self) -> bool:
        return self.stage is Stage.PAUSED

    @property
    def pending(self) -> bool:
        """Not started, behind a run that has not ended: no slot of its own
        yet (once that run ends it starts, and counts)."""
        return self.stage in NOT_STARTED and self.after is not None and self.after.outcome is None

    @property
    def renews(self) -> bool:
        """Its lease is renewed by heartbeats: it runs, or is pending, and the worker is not ending it."""
        return self.ending is None and (self.live or self.pending)

    @property
    def write_waits(self) -> bool:
        """Its outcome's write waits: a cancel decides it, or a pause's event goes first."""
        return self.cancelling or self.pause_asks > 0

    def due_to_write(self, awake: float) -> bool:
        return self.stage is Stage.ENDED and self.record_after <= awake and not self.write_waits

    # -------------------------------------------------------------- moves
    def _move(self, to: Stage) -> None:
        if to not in MOVES[self.stage]:
            raise IllegalRunMove(f"job {self.job.id} attempt {self.attempt}: {self.stage.value} -> {to.value}")
        self.stage = to

    def started(self, pid: int, awake: float) -> None:
        """The keeper started it (a withdrawal it asked came too late)."""
        self._move(Stage.RUNNING)
        self.pid, self.started_awake = pid, awake

    def withdraw(self) -> bool:
        """The keeper is to be asked to drop it unstarted; False if it already was."""
        if self.stage is Stage.WITHDRAWING:
            return False
        self._move(Stage.WITHDRAWING)
        return True

    def set_paused(self, paused: bool) -> None:
        """Its tree stopped (or continued), as the keeper says; a run that
        has ended meanwhile stays ended."""
        want = Stage.PAUSED if paused else Stage.RUNNING
        if self.stage is not want and self.live:
            self._move(want)

    def ended(self, outcome: Outcome) -> None:
        """Its process ended, or it never started (taken back, a failed spawn)."""
        self._move(Stage.ENDED)
        self.outcome = outcome

    def stop(self, ending: Ending) -> bool:
        """The worker ends it (``ending``: why); True if its process is to
        be ended. The first ending stays; an outcome already written stays
        as written; one known but unwritten is written for ``ending``."""
        if self.ending is not None or self.stage in (Stage.WRITTEN, Stage.SYNCING, Stage.DONE):
            return False
        self.ending = ending
        return self.stage is not Stage.ENDED

    def written(self, job: Job | None) -> None:
        """Its outcome is in the database (``job``: as it left it; None: nothing was to be written)."""
        self._move(Stage.WRITTEN)
        self.written_job = job

    def unwritten(self, why: str, awake: float) -> None:
        """The unit that wrote its outcome was not kept: written again later."""
        self._move(Stage.ENDED)
        self.written_job = None
        self.postpone_write(why, awake)

    def postpone_write(self, why: str, awake: float) -> None:
        self.record_error = why
        self.record_after = awake + SETTLE_BACKOFF_S[min(self.record_tries, len(SETTLE_BACKOFF_S) - 1)]
        self.record_tries += 1

    def syncing(self) -> None:
        self._move(Stage.SYNCING)

    def done(self) -> None:
        """Durable and told: the worker forgets it."""
        self._move(Stage.DONE)

    def renewed(self, sent: ClockReadings) -> None:
        """Its lease was renewed by a request sent at ``sent``: next time a third into it."""
        self.renew_at = boot_of(sent) + self.job.lease_s / 3

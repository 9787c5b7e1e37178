"""The worker's writes of a turn: the jobs it claims and the outcomes it
records, in one transaction where the queue has units (backends/sqlite/unit.py).

In a burst of short jobs a turn claims the next job and records the last
one's outcome: two commits, most of the cost of each, for pages the two
share. As one unit they cost one. A claim must be in the database before
its process may start (a daemon that dies between the two would leave a
run the queue never gave out), so inside a unit the spawn of a claimed job,
and the news of the claim to watchers, wait for the commit. A unit that
fails (disk full, I/O: the queue keeps none of it) is undone here: its
claims are forgotten unsent (their jobs stay queued), its outcomes are kept
to write again later, never thrown away. Then outcomes are told once
durable (durability.py), as without a unit.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Callable, Collection

from sloth_daemon.backends.contract import Completion
from sloth_daemon.daemon.worker import outcomes
from sloth_daemon.checks import DEFAULT_RETRY_ON
from sloth_daemon.clock import ClockReadings
from sloth_daemon.daemon.worker.durability import GroupCommit
from sloth_daemon.errors import BadRequest, JobNotFound, LeaseLost, SlothError, StorageError
from sloth_daemon.daemon.worker.lifecycle import Attempt, Stage
from sloth_daemon.daemon.worker.runs import Attempts
from sloth_daemon.daemon.worker.signals import Signals
from sloth_daemon.daemon.worker.spawner import Outcome

if TYPE_CHECKING:
    from sloth_daemon.models import Job
    from sloth_daemon.queue import Queue
    from sloth_daemon.daemon.worker.spawner import Spawner

log = logging.getLogger("sloth.worker")
CLAIM_RETRY_S = 0.5  # after a claim the database refused for now (locked, full)
TIMER_SLACK_S = 0.001  # the loop's timers fire this early or so: a deadline that near is due (no spinning)


class Recorder:
    """The worker's writes of a turn (see the module docstring).

    State: the group commit (outcomes written, waiting for their fsync) and,
    inside a unit, what waits for its commit (spawns, news of claims) and
    the runs it claimed. Collaborators: the queue, the spawner (told an
    outcome is durable: ``ack``), the worker's runs (a run is dropped once
    its outcome is durable) and signals (watchers hear; a run back in the
    queue makes the next turn look). ``claims_lost(r)``: a unit failed, so
    its claims never happened (the worker claims again a little later)."""

    def __init__(self, queue: "Queue", spawner: "Spawner", running: Attempts, signals: Signals, *,
                 claims_lost: Callable[[ClockReadings], None], commit_delay_s: float = 0.0,
                 retry_on: Collection[str] = DEFAULT_RETRY_ON) -> None:
        self.queue, self.spawner, self.running, self.signals = queue, spawner, running, signals
        self.retry_on = retry_on  # config's: ends that are no exit code retried by default (a reload sets it)
        self.claims_lost = claims_lost
        self.commits = GroupCommit(queue, self._tell, delay_s=commit_delay_s)
        self._after_commit: list[Callable[[], None]] | None = None  # inside a unit: what waits for its commit
        self._unit_claims: list[Attempt] = []

    def write_turn(self, r: ClockReadings, claim: Callable[[ClockReadings], None] | None) -> None:
        """Claim due work (``claim(r)``, if given) and record the outcomes
        due, as one unit where the queue has them; then tell what is
        durable."""
        written: list[Attempt] = []
        self._after_commit, self._unit_claims = [], []
        try:
            with self.queue.unit():
                if claim is not None:
                    claim(r)
                self.write_outcomes(r.awake, tried=written, durable=False)  # the group commit fsyncs
        except StorageError as e:
            self._unit_failed(r, written, e)
        except BaseException as e:  # a bug: the unit was rolled back all the same
            self._unit_failed(r, written, StorageError(f"{type(e).__name__}: {e}"))
            raise
        else:
            for send in self._after_commit:
                try:
                    send()
                except Exception:  # a bug in one must not keep the others unsent
                    log.exception("after this turn's commit")
        finally:
            self._after_commit = None
        # A queue whose unit commits durably (PostgreSQL) needs no fsync more
        # once the unit wrote something: its commit made every write before it durable.
        durable = self.queue.units_durable and any(x.written_job is not None for x in written)
        self.tell_outcomes(r.awake, written, durable=durable)

    def after_commit(self, fn: Callable[..., None], *args: Any) -> None:
        """``fn(*args)`` once this turn's writes are in (at once outside a unit)."""
        if self._after_commit is None:
            fn(*args)
        else:
            self._after_commit.append(lambda: fn(*args))

    def claimed(self, run: Attempt) -> None:
        """A run of a job this turn claimed: news to watchers, once committed."""
        if self._after_commit is not None:
            self._unit_claims.append(run)
        self.after_commit(self.signals.on_change, run.job)

    def _unit_failed(self, r: ClockReadings, written: list[Attempt], e: StorageError) -> None:
        """None of the unit was kept: its claims never happened (nothing was
        sent), its outcomes are written again later."""
        log.error("this turn's claims and outcomes were not written: %s", e.message)
        for run in reversed(self._unit_claims):
            self.running.drop(run)
            if run.after is not None and run.after.successor is run:
                run.after.successor = None
        for run in written:
            if run.stage is Stage.WRITTEN:
                run.unwritten(e.message, r.awake)
        self.claims_lost(r)

    # ------------------------------------------------------------ outcomes
    def settle(self, awake: float) -> None:
        """Record the outcome of every run whose process ended (an outcome
        the database would not take waits for its retry time), without an
        fsync but the one that makes them all durable; only then is anyone
        told (durability.py)."""
        self.tell_outcomes(awake, self.write_outcomes(awake))

    def write_outcomes(self, awake: float, *, tried: list[Attempt] | None = None,
                       durable: bool | None = None) -> list[Attempt]:
        """Write the outcomes due; the runs tried (``written`` if it took),
        added to ``tried`` as they are (so a unit that fails undoes them all).
        ``durable`` None: the last write carries the fsync if the group
        commit says so; False: none does."""
        todo = [r for r in self.running.values() if r.due_to_write(awake)]
        tried = [] if tried is None else tried
        if durable is False:  # in a unit: its plain completions in one call (one statement on PostgreSQL)
            plain = [(run, c) for run in todo if (c := outcomes.plain_completion(run, run.outcome)) is not None]  # type: ignore[arg-type]
            if len(plain) > 1:
                self._complete_many(plain, awake, tried)
                batched = {id(run) for run, _ in plain}
                todo = [run for run in todo if id(run) not in batched]
        for i, run in enumerate(todo):
            tried.append(run)
            last = self.commits.write_durably(i == len(todo) - 1) if durable is None else durable
            self._settle_one(run, run.outcome, awake, durable=last)  # type: ignore[arg-type]
        return tried

    def tell_outcomes(self, awake: float, tried: list[Attempt], *, durable: bool | None = None) -> None:
        """Hand the written outcomes to the group commit: told once durable.
        ``durable`` None: durable already if the last one tried was written
        with the fsync (not if it wrote nothing: its lease was lost)."""
        if durable is None:
            last = tried[-1] if tried else None
            durable = (last is not None and last.stage is Stage.WRITTEN and last.written_job is not None
                       and self.commits.write_durably(True))
        self.commits.written([r for r in self.running.values() if r.stage is Stage.WRITTEN and r.record_after <= awake],
                             durable=durable, awake=awake)
        if self.commits.due_at is not None and (awake >= self.commits.due_at - TIMER_SLACK_S
                                                or self.commits.now(self.running.values())):
            self.commits.flush(awake)

    def _tell(self, runs: list[Attempt]) -> None:
        """Their outcomes are durable: the keeper may forget them, watchers hear."""
        self.spawner.ack([run.token for run in runs])
        for run in runs:
            run.done()
            self.running.drop(run)
            if run.written_job is not None:
                self.signals.on_change(run.written_job)

    def _record_cost(self, run: Attempt, outcome: Outcome) -> None:
        """What the run cost, kept with its attempt before its outcome (whose
        write makes both durable): a fact of the run, whatever its lease."""
        if outcome.cost is None or not outcome.started:
            return
        try:
            self.queue.record_cost(run.job.id, run.attempt, outcome.cost, durable=False)
        except BadRequest as e:  # a keeper's value no queue takes: the outcome still counts
            log.warning("job %d attempt %d: its cost is not kept: %s", run.job.id, run.attempt, e.message)

    def _complete_many(self, plain: list[tuple[Attempt, Completion]], awake: float, tried: list[Attempt]) -> None:
        """_settle_one of each plain completion (outcomes.plain_completion), in one complete_many."""
        for run, _ in plain:
            tried.append(run)
            _say_log_problem(run, run.outcome)  # type: ignore[arg-type]
        got: list[Job | SlothError]
        try:
            for run, _ in plain:
                self._record_cost(run, run.outcome)  # type: ignore[arg-type]
            got = self.queue.complete_many([c for _, c in plain], durable=False)
        except SlothError as e:  # every one kept, written again later
            got = [e] * len(plain)
        for (run, _), job in zip(plain, got, strict=True):
            _heard(run, job, awake)

    def _settle_one(self, run: Attempt, outcome: Outcome, awake: float, *, durable: bool) -> None:
        """Write one outcome (WRITTEN), or keep it for a later try (ENDED)."""
        _say_log_problem(run, outcome)
        job: Job | SlothError | None
        try:
            self._record_cost(run, outcome)
            job = outcomes.record(self.queue, run, outcome, runner=run.identity, durable=durable,
                                  retry_on=self.retry_on)
        except SlothError as e:
            job = e
        if not _heard(run, job, awake):
            return
        if run.written_job is not None and run.written_job.state.value == "queued":
            self.signals.look = True  # back in the queue (a retry, a release): due at its not_before


def _say_log_problem(run: Attempt, outcome: Outcome) -> None:
    if outcome.log_problem:
        log.warning("job %d attempt %d: %s", run.job.id, run.attempt, outcome.log_problem)


def _heard(run: Attempt, job: Job | SlothError | None, awake: float) -> bool:
    """What the queue said of ``run``'s outcome: written (its Job, or None:
    recorded as nothing), or not ours to write any more (a stale token, a job
    gone: True), or kept to try again later (another error: False; never
    thrown away, never re-run by us)."""
    if isinstance(job, (LeaseLost, JobNotFound)):
        log.warning("outcome of job %d not recorded: %s", run.job.id, job.message)
        job = None
    elif isinstance(job, SlothError):
        log.error("cannot record the outcome of job %d yet (try %d): %s", run.job.id,
                  run.record_tries + 1, job.message)
        run.postpone_write(job.message, awake)
        return False
    run.written(job)
    return True

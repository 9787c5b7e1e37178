"""What the spawner tells of a run, and what the worker does about it:
started, could not start, ended, frozen by a sleep, taken back unstarted,
a note for its history. One :class:`RunNews` per run (the spawner's
RunSink), all sharing one :class:`Hearing` (the worker's parts they act
on). A start is written to the queue a second into the run
(``record_starts``), or with its outcome if it ends sooner: one
transaction, not two, for the many short jobs."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Callable

from sloth_daemon.clock import Clocks
from sloth_daemon.daemon.limits import Postponement
from sloth_daemon.daemon.worker.clockwatch import ClockWatch
from sloth_daemon.daemon.worker.leases import Renewals
from sloth_daemon.daemon.worker.lifecycle import Ending, Attempt, Why
from sloth_daemon.daemon.worker.pipeline import Pipeline, unlink
from sloth_daemon.daemon.worker.runs import Attempts, record_start
from sloth_daemon.daemon.worker.signals import Signals
from sloth_daemon.daemon.worker.spawner import Outcome
from sloth_daemon.daemon.worker.withdrawal import Withdrawals
from sloth_daemon.errors import JobNotFound, LeaseLost, SlothError

if TYPE_CHECKING:
    from sloth_daemon.queue import Queue

log = logging.getLogger("sloth.worker")
RECORD_RUNNER_AFTER_S = 1.0  # a process that ends sooner has its identity written with its outcome


class Hearing:
    """The worker's parts the news of its runs acts on; no state of its
    own. ``instance`` and ``name``: the worker's, written with a start."""

    def __init__(self, queue: "Queue", running: Attempts, clocks: Clocks, signals: Signals,
                 withdrawals: Withdrawals, pipeline: Pipeline, postponed: Postponement, leases: Renewals,
                 clock: ClockWatch, *, end: Callable[[Attempt, Ending], None], instance: str, name: str) -> None:
        self.queue, self.running, self.clocks, self.signals = queue, running, clocks, signals
        self.withdrawals, self.pipeline, self.postponed = withdrawals, pipeline, postponed
        self.leases, self.clock, self.end = leases, clock, end
        self.instance, self.name = instance, name

    def sink(self, run: Attempt) -> "RunNews":
        return RunNews(self, run)

    def record_starts(self, awake: float) -> None:
        """Write the identity of processes that have run a while (for finding
        them after a crash of sloth, and the history's `started` event)."""
        for run in list(self.running.values()):
            if run.identity is None or not run.live or awake < run.started_awake + RECORD_RUNNER_AFTER_S:
                continue
            try:
                record_start(self.queue, run)
            except (LeaseLost, JobNotFound):
                self.end(run, Ending(Why.LEASE_LOST))
                continue
            except SlothError as e:  # it runs; the next turn tries again
                log.warning("cannot record job %d's process yet: %s", run.job.id, e.message)
                continue
            self.signals.on_change(run.job)

    def start_deadlines(self, awake: float) -> list[float]:
        return [run.started_awake + RECORD_RUNNER_AFTER_S - awake for run in self.running.values()
                if run.identity is not None and run.live]


class RunNews:
    """The spawner's news of one run (spawner.RunSink)."""

    def __init__(self, hearing: Hearing, run: Attempt) -> None:
        self.h, self.run = hearing, run

    def started(self, pid: int, identity: dict[str, Any]) -> None:
        """The process runs. Its identity is written later (Hearing.record_starts)."""
        h, run = self.h, self.run
        run.started(pid, h.clocks.read().awake)  # it runs: no answer to a withdrawal can drop it now
        run.identity = {**identity, "instance": h.instance, "worker": h.name}
        h.postponed.started()
        h.withdrawals.heard()
        h.signals.on_change(run.job)  # a follower waiting for the process may start now
        h.signals.event.set()  # a new deadline (record_starts) ...
        pipe = h.pipeline
        h.signals.look |= pipe.pipelines() and pipe.may_lead(run, run.started_awake,  # ... a lead
                                                             h.running.slots_in_use())

    def spawn_failed(self, message: str, retry: bool, resource: bool = False) -> None:
        """Not started. Short of descriptors, processes or memory (the keeper's
        own trouble, not the job's): the job waits without spending a try,
        and nothing else is claimed meanwhile (limits.Postponement)."""
        delay = self.h.postponed.failed(self.h.clocks.read().awake) if resource else None
        dry = self.h.pipeline.ran_dry(self.run)  # before unlink hands its successor on to the run in front
        self.run.ended(Outcome(None, reason=message, spawn_retry=retry, postpone_s=delay))
        unlink(self.run)
        self.h.signals.wake(hurry=dry)

    def exited(self, outcome: Outcome) -> None:
        dry = self.h.pipeline.ran_dry(self.run)  # before run_ended hands on the successor of one never started
        self.run.ended(outcome)
        self.h.pipeline.run_ended(self.run)
        self.h.signals.wake(hurry=dry)

    def frozen(self, why: str) -> None:
        """The machine slept past the run's trust: its lease renewed now (it
        thaws), or it ends if the lease is no longer ours."""
        log.info("job %d frozen by the keeper: %s", self.run.job.id, why)
        self.h.clock.after_jump()  # the machine slept: its connections may be dead
        self.h.leases.thaw(self.run, why)

    def taken_back(self) -> None:
        self.h.pipeline.on_taken_back(self.run)

    def noted(self, what: str, message: str) -> None:
        """The keeper says what the run's history should (keep-awake unavailable ...)."""
        q, run = self.h.queue, self.run
        try:
            record_start(q, run)  # the history in the order it happened
            run.job = q.note_run(run.job.id, run.token, what, message)
        except LeaseLost:  # just ended (a cancel): still that attempt's history
            try:
                q.note_ended(run.job.id, run.attempt, message, kind=what)
            except SlothError as e:
                log.warning("cannot note on job %d: %s (%s)", run.job.id, message, e.message)
            return
        except JobNotFound:
            return
        except SlothError as e:
            log.warning("cannot note on job %d: %s (%s)", run.job.id, message, e.message)
            return
        self.h.signals.on_change(run.job)

    def progressed(self, progress: dict[str, Any]) -> None:
        """How far the run says it is: the latest value on its job's row
        (no fsync: the next durable write carries it, and a lost one is only
        a second old), and watchers hear (`wait`'s live line, views)."""
        run = self.run
        if not run.live:
            return
        try:
            run.job = self.h.queue.set_progress(run.job.id, run.token, progress)
        except (LeaseLost, JobNotFound):
            return
        except SlothError as e:
            log.warning("cannot note job %d's progress: %s", run.job.id, e.message)
            return
        self.h.signals.on_change(run.job)

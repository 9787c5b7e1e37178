"""Keeping the leases of the worker's runs: a heartbeat a third into each
lease (by the boot clock: runs.renew_in), a ``resumed`` renewal of every
one after the machine slept (clockwatch.py), a frozen run thawed; each
renewal passed on to the keeper as the run's new trust deadline. A lease
the queue no longer gives us ends the run (Why.LEASE_LOST: our token is
void, nothing of it is written)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Callable

from sloth_daemon.clock import ClockReadings, Clocks
from sloth_daemon.daemon.worker.lifecycle import Ending, Attempt, Why, boot_of
from sloth_daemon.daemon.worker.recording import TIMER_SLACK_S
from sloth_daemon.daemon.worker.runs import RENEW_RETRY_S, Attempts, record_start, renew_in, trust_until
from sloth_daemon.errors import JobNotFound, LeaseLost, SlothError, StorageError

if TYPE_CHECKING:
    from sloth_daemon.daemon.worker.spawner import Spawner
    from sloth_daemon.queue import Queue

log = logging.getLogger("sloth.worker")
QueueTime = Callable[[ClockReadings], float]


class Renewals:
    """No state of its own. ``queue_time``: the queue's clock where it is
    not this machine's wall time (a shared queue's server: shared/member.py);
    ``end``: the worker's end of a run (Worker.end)."""

    def __init__(self, queue: "Queue", spawner: "Spawner", running: Attempts, clocks: Clocks, *,
                 end: Callable[[Attempt, Ending], None], queue_time: QueueTime | None = None) -> None:
        self.queue, self.spawner, self.running, self.clocks = queue, spawner, running, clocks
        self.end, self.queue_time = end, queue_time

    def now(self, r: ClockReadings) -> float:
        """Now on the queue's clock (due times and leases are on it)."""
        return r.wall if self.queue_time is None else self.queue_time(r)

    def renew_in(self, run: Attempt, r: ClockReadings) -> float:
        return renew_in(run, r, wall_too=self.queue_time is None)

    def deadlines(self, r: ClockReadings) -> list[float]:
        return [self.renew_in(run, r) for run in self.running.values() if run.renews]

    def renew_soon(self, job_id: int) -> bool:
        """Renew the lease of the job's run at the next turn (it was cancelled
        elsewhere: the renewal fails, and the run ends); False if none runs here."""
        run = self.running.get(job_id)
        if run is not None:
            run.renew_at = float("-inf")
        return run is not None

    def heartbeat_due(self, r: ClockReadings) -> None:
        renewed: list[tuple[str, float]] = []
        for run in list(self.running.values()):
            if not run.renews or self.renew_in(run, r) > TIMER_SLACK_S:
                continue
            try:
                if run.resume_why is not None:  # the renewal after a sleep failed: this one is it, with its event
                    run.job = self.queue.renew_after_resume(run.job.id, run.token, run.resume_why)
                    run.resume_why = None
                else:
                    run.job = self.queue.heartbeat(run.job.id, run.token)
            except (LeaseLost, JobNotFound):
                self.end(run, Ending(Why.LEASE_LOST))
                continue
            except StorageError as e:  # not renewed: the keeper ends the run if this lasts a lease
                log.warning("cannot renew the lease of job %d: %s", run.job.id, e.message)
                run.renew_at = boot_of(r) + RENEW_RETRY_S
                continue
            run.renewed(r)
            renewed.append((run.token, trust_until(r, run.job.lease_s)))
        if renewed:
            self.spawner.trust(renewed)

    def renew_after_resume(self, why: str) -> None:
        """The machine slept (``why``): every run's lease renewed with a ``resumed`` event."""
        r = self.clocks.read()
        for run in list(self.running.values()):
            if not run.renews:
                continue
            try:
                record_start(self.queue, run)  # a sleep in its first second reads after its start
                run.job = self.queue.renew_after_resume(run.job.id, run.token, why)
                run.resume_why = None
                run.renewed(r)
            except (LeaseLost, JobNotFound):
                self.end(run, Ending(Why.LEASE_LOST))
            except StorageError as e:  # the heartbeat tries again, and says the sleep then
                log.warning("cannot renew job %d after %s: %s", run.job.id, why, e.message)
                run.resume_why = why

    def thaw(self, run: Attempt, why: str) -> None:
        """The keeper froze ``run``: the machine slept past its trust. Its
        lease renewed now (it thaws), or it ends if the lease is no longer ours."""
        r = self.clocks.read()
        try:
            record_start(self.queue, run)
            run.job = self.queue.renew_after_resume(run.job.id, run.token, why)
        except (LeaseLost, JobNotFound):
            self.end(run, Ending(Why.FENCED, "its lease was lost while the machine slept"))
            return
        except SlothError as e:  # cannot tell yet: it stays frozen; the next heartbeat tries again
            log.error("cannot renew job %d after a freeze: %s", run.job.id, e.message)
            run.resume_why = why  # and writes the resumed event then
            return
        run.resume_why = None
        run.renewed(r)
        self.spawner.trust([(run.token, trust_until(r, run.job.lease_s))])

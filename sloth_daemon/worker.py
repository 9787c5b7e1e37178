"""The worker loop: claim -> run -> heartbeat -> settle, per lane.

Each turn (``Worker.turn(now)``), in this order (the order is what keeps a
sleeping laptop from running a job twice):
  1. compare the clocks; after a sleep, renew our own live jobs' leases with
     a ``resumed`` event (they slept too, they must not be re-run);
  2. heartbeat any of our jobs whose lease is a third used up (by wall time,
     so a lease that lapsed in a sleep the detector missed is renewed before
     step 3 could hand it out again);
  3. claim due work for lanes with free slots: due retries, delayed jobs and
     leases that really expired (holders dead), at once;
  4. record the outcomes of runs that ended: after step 3, so a lane's next
     job is already starting while the result's fsync runs.
Then ``run()`` sleeps until the next due time, heartbeat, clock check or
wake-up. Processes are the spawner's business (spawner.py); the worker
hears of starts and exits through one RunSink per run.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from .clock import ClockReadings, Clocks, Jump, JumpDetector, JumpKind
from .config import Settings
from .durations import format_duration
from .errors import IllegalTransition, JobNotFound, LeaseLost, SlothError
from .lanes import Lanes
from .limits import Postponement
from .models import Job
from .queue import Queue
from .runner import job_env
from .spawner import Outcome, Spawner, SpawnRequest

log = logging.getLogger("sloth.worker")
PRUNE_EVERY_S = 3600.0
FIRST_PRUNE_S = 60.0
WORKER_PREFIX = "sloth-daemon"


def worker_name(instance: str, *, host: str | None = None, pid: int | None = None) -> str:
    """The name a daemon claims under: ``sloth-daemon:HOST:PID:INSTANCE``."""
    return f"{WORKER_PREFIX}:{host or socket.gethostname()}:{pid or os.getpid()}:{instance}"


def is_daemon_on_host(name: str | None, host: str | None = None) -> bool:
    """True if ``name`` was made by worker_name on this host (any daemon)."""
    return (name or "").startswith(f"{WORKER_PREFIX}:{host or socket.gethostname()}:")


def trust_until(sent: ClockReadings, lease_s: float) -> float:
    """Until when (on the boot clock) a run may go on after a renewal sent at
    ``sent``: the lease, measured from before the renewal left, so it can only
    end sooner than the lease the queue records."""
    return (sent.total if sent.total is not None else sent.awake) + lease_s


@dataclass
class Run:
    """One attempt this worker holds, from claim to recorded outcome."""

    job: Job
    token: str
    attempt: int
    pid: int | None = None
    ending: str | None = None  # "cancelled" | "interrupted" | "lease lost": why we ended it
    outcome: Outcome | None = None  # set when the process ended; cleared once recorded

    @property
    def live(self) -> bool:
        return self.pid is not None and self.outcome is None


class _Sink:
    """Routes a spawner's news about one run back to the worker."""

    def __init__(self, worker: "Worker", run: Run) -> None:
        self.w, self.run = worker, run

    def started(self, pid: int, identity: dict[str, Any]) -> None:
        self.w.on_started(self.run, pid, identity)

    def spawn_failed(self, message: str, retry: bool, resource: bool = False) -> None:
        self.w.on_spawn_failed(self.run, message, retry, resource)

    def exited(self, outcome: Outcome) -> None:
        self.w.on_exited(self.run, outcome)


class Worker:
    def __init__(
        self, queue: Queue, settings: Settings, spawner: Spawner, *, clocks: Clocks,
        log_path: Callable[[int, int], Path], instance: str,
        on_change: Callable[[Job], None] = lambda job: None,
    ) -> None:
        self.queue, self.settings, self.spawner, self.clocks = queue, settings, spawner, clocks
        self.log_path, self.instance, self.on_change = log_path, instance, on_change
        self.name = worker_name(instance)
        first = clocks.read()
        self.detector = JumpDetector(first)
        self.running: dict[int, Run] = {}
        self.lanes = Lanes(queue, settings)
        self.last_jump: dict[str, Any] | None = None
        self.last_check_at: float | None = None
        self.timerfd = False
        self.stopping = False
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()  # set whenever nothing is running
        self._idle.set()
        self._next_check = first.awake
        self._next_prune = first.awake + FIRST_PRUNE_S
        self._next_due: float | None = None  # from the last claim_due()
        self.postponed = Postponement()  # claims held after a spawn failed for want of resources

    # ------------------------------------------------------------- control
    def wake(self) -> None:
        self._wake.set()

    def clock_changed(self) -> None:
        """Called when the timerfd says the wall clock was set or we resumed."""
        self._next_check = float("-inf")
        self.wake()

    def pause(self, lane: str | None) -> None:
        self.lanes.pause(lane)

    def resume(self, lane: str | None) -> None:
        self.lanes.resume(lane)
        self.wake()

    def retry(self, job_id: int) -> Job:
        """queue.retry, refused while a cancelled run of the job is still
        being ended: its new run must not start beside the old process."""
        if job_id in self.running:
            raise IllegalTransition(
                f"job {job_id} is still being stopped (its process tree is ending)",
                hint=f"Try again in {format_duration(self.settings.kill_grace_s)} at most.")
        job = self.queue.retry(job_id)
        self.on_change(job)
        self.wake()
        return job

    def cancel(self, job_id: int) -> Job:
        job = self.queue.cancel(job_id)
        run = self.running.get(job_id)
        if run is not None:
            self._end(run, "cancelled")
        self.on_change(job)
        return job

    # ---------------------------------------------------------------- loop
    async def run(self) -> None:
        while not self.stopping:
            self._wake.clear()
            try:
                self.turn()
            except SlothError as e:  # e.g. disk full: keep serving, retry later
                log.error("worker turn failed: %s", e.message)
                await asyncio.sleep(1.0)
            except Exception:  # a bug must not take the daemon (and its jobs) down
                log.exception("worker turn failed")
                await asyncio.sleep(1.0)
            if self.stopping:
                break
            try:
                await asyncio.wait_for(self._wake.wait(), self.next_wake_s())
            except asyncio.TimeoutError:
                pass

    def turn(self, now: ClockReadings | None = None) -> None:
        """One pass of the loop (see the module docstring)."""
        r = now or self.clocks.read()
        if r.awake >= self._next_check:
            self.check_clock(r)
        self.heartbeat_due(r)
        self.claim_due(r.wall)
        self.settle()
        if r.awake >= self._next_prune:
            self._next_prune = r.awake + PRUNE_EVERY_S
            self.prune(self.settings.retention_s)

    def next_wake_s(self, now: ClockReadings | None = None) -> float:
        r = now or self.clocks.read()
        deadlines = [self._next_check - r.awake, self._next_prune - r.awake]
        deadlines += [self._hb_due_at(run) - r.wall for run in self.running.values()
                      if run.live and run.ending is None]
        if self.may_claim() and self._next_due is not None:
            deadlines.append(self._next_due - r.wall)
        if self.postponed.holds(r.awake):
            deadlines.append(self.postponed.until - r.awake)
        return max(0.0, min(deadlines))

    # --------------------------------------------------------------- clock
    def check_clock(self, r: ClockReadings) -> Jump:
        interval = self.settings.clock_check_s
        jump = self.detector.check(r, expected_s=interval)
        self._next_check = r.awake + interval
        self.last_check_at = r.wall
        if jump.kind is not JumpKind.NONE:
            self.last_jump = {"kind": jump.kind.value, "seconds": jump.seconds, "at": r.wall,
                              "describe": jump.describe()}
            log.info("clock: %s", jump.describe())
            if jump.kind is not JumpKind.STEPPED or jump.seconds > 0:
                self.renew_after_resume(jump.describe())
        return jump

    def renew_after_resume(self, why: str) -> None:
        for run in list(self.running.values()):
            if not run.live or run.ending:
                continue
            try:
                run.job = self.queue.renew_after_resume(run.job.id, run.token, why)
            except (LeaseLost, JobNotFound):
                self._end(run, "lease lost")

    # ----------------------------------------------------------- heartbeat
    @staticmethod
    def _hb_due_at(run: Run) -> float:
        return (run.job.lease_until or 0.0) - run.job.lease_s * 2 / 3

    def heartbeat_due(self, r: ClockReadings) -> None:
        renewed: list[tuple[str, float]] = []
        for run in list(self.running.values()):
            if not run.live or run.ending or r.wall < self._hb_due_at(run):
                continue
            try:
                run.job = self.queue.heartbeat(run.job.id, run.token)
            except (LeaseLost, JobNotFound):
                self._end(run, "lease lost")
                continue
            renewed.append((run.token, trust_until(r, run.job.lease_s)))
        if renewed:
            self.spawner.trust(renewed)

    # ---------------------------------------------------------------- claim
    def slots_in_use(self) -> dict[str, int]:
        """lane -> runs whose process has not ended (an ended run whose
        outcome is not yet recorded frees its slot for the next job)."""
        used: dict[str, int] = {}
        for r in self.running.values():
            if r.outcome is None:
                used[r.job.lane] = used.get(r.job.lane, 0) + 1
        return used

    def may_claim(self) -> bool:
        return not (self.lanes.paused_all or self.stopping or self.postponed.holds(self.clocks.read().awake))

    def claim_due(self, now: float) -> None:
        self._next_due = None
        while self.may_claim():
            # A read-only look first: an empty claim would still cost a write
            # transaction, and this answer is also when to wake up next.
            blocked = self.lanes.blocked(self.slots_in_use())
            mine = set(self.running)  # never re-issue our own live or unrecorded jobs to ourselves
            self._next_due = self.queue.next_due_at(exclude_lanes=blocked, exclude_ids=mine)
            if self._next_due is None or self._next_due > now:
                return
            job = self.queue.claim(self.name, exclude_lanes=blocked, exclude_ids=mine)
            if job is None:
                return  # another process took it
            self.on_change(job)
            self._start(Run(job, job.token or "", job.attempts))

    def _start(self, run: Run) -> None:
        job = run.job
        self.running[job.id] = run
        self._idle.clear()
        env = job_env(job.env, {"SLOTH_JOB_ID": str(job.id), "SLOTH_JOB_ATTEMPT": str(run.attempt),
                                "SLOTH_JOB_TOKEN": run.token})
        req = SpawnRequest(
            key=run.token, job_id=job.id, attempt=run.attempt, argv=job.command, cwd=job.cwd,
            env=env, log_path=self.log_path(job.id, run.attempt), log_cap=self.settings.log_cap_bytes,
            timeout_s=job.timeout_s, kill_grace_s=self.settings.kill_grace_s, previous=job.runner)
        self.spawner.spawn(req, _Sink(self, run))

    # ---------------------------------------------------- news from spawner
    def on_started(self, run: Run, pid: int, identity: dict[str, Any]) -> None:
        run.pid = pid
        self.postponed.started()
        if run.ending is not None:
            return
        try:
            run.job = self.queue.set_runner(run.job.id, run.token,
                                            {**identity, "instance": self.instance, "worker": self.name})
        except (LeaseLost, JobNotFound):
            self._end(run, "lease lost")
            return
        except SlothError as e:  # e.g. locked for long: it runs; the history misses its pid
            log.error("cannot record job %d's process: %s", run.job.id, e.message)
        self.on_change(run.job)

    def on_spawn_failed(self, run: Run, message: str, retry: bool, resource: bool = False) -> None:
        self._drop(run)
        if resource:
            self._postpone(run, message)
            return
        self._record(lambda: self.queue.fail(run.job.id, run.token, message=message, retry=retry))

    def _postpone(self, run: Run, message: str) -> None:
        """Short of descriptors, processes or memory: the job waits, its attempt
        refunded, and nothing else is claimed meanwhile (limits.py)."""
        delay = self.postponed.failed(self.clocks.read().awake)
        why = f"not started: {message}; the daemon is short of resources: not counted; next try in {delay:g}s"
        log.warning("job %d %s", run.job.id, why)
        self._record(lambda: self.queue.release(run.job.id, run.token, message=why, delay_s=delay,
                                                kind="postponed"))

    def on_exited(self, run: Run, outcome: Outcome) -> None:
        run.outcome = outcome
        self.wake()

    # ---------------------------------------------------------------- ending
    def _drop(self, run: Run) -> None:
        """Forget ``run`` if it is still the one we track for its job (a
        cancelled-then-retried job may already have a newer run)."""
        if self.running.get(run.job.id) is run:
            del self.running[run.job.id]
        if not self.running:
            self._idle.set()

    def _end(self, run: Run, reason: str) -> None:
        """Begin ending a run's process tree (idempotent)."""
        if run.ending is not None or run.outcome is not None:
            return
        run.ending = reason
        self.spawner.kill(run.token, reason, self.settings.kill_grace_s)

    def settle(self) -> None:
        """Record the outcome of every run whose process ended."""
        for run in [r for r in self.running.values() if r.outcome is not None]:
            self._drop(run)
            self._record_outcome(run, run.outcome)  # type: ignore[arg-type]

    def _record_outcome(self, run: Run, outcome: Outcome) -> None:
        jid, tok = run.job.id, run.token
        ok, message = outcome.describe()
        if outcome.log_problem:
            log.warning("job %d attempt %d: %s", jid, run.attempt, outcome.log_problem)
        if run.ending == "interrupted":
            suffix = f"; {outcome.log_problem}" if outcome.log_problem else ""
            self._record(lambda: self.queue.release(jid, tok, message="interrupted: daemon stopping" + suffix))
        elif run.ending in ("cancelled", "lease lost"):
            pass  # the queue already says so; our token is void
        elif ok:
            self._record(lambda: self.queue.complete(jid, tok, message=message, exit_code=outcome.returncode))
        else:
            self._record(lambda: self.queue.fail(jid, tok, message=message, exit_code=outcome.returncode))
        self.wake()

    def _record(self, fn: Callable[[], Job]) -> None:
        try:
            job = fn()
        except (LeaseLost, JobNotFound) as e:
            log.warning("settle refused: %s", e.message)
            return
        except SlothError as e:
            log.error("cannot record outcome: %s", e.message)
            return
        self.on_change(job)

    async def shutdown(self) -> None:
        """Stop claiming; end running jobs gracefully; requeue them (refunded)."""
        self.stopping = True
        self.wake()
        for run in list(self.running.values()):
            if run.outcome is None:  # one that already exited is settled as it ended
                self._end(run, "interrupted")
        while self.running:
            await self._wait_for_outcomes()
            self.settle()

    async def _wait_for_outcomes(self) -> None:
        while not any(r.outcome is not None for r in self.running.values()):
            self._wake.clear()
            await self._wake.wait()

    # ----------------------------------------------------------------- misc
    def prune(self, older_than_s: float) -> int:
        n = self.queue.prune(older_than_s)
        if n:
            remove_orphan_logs(self.log_path(1, 1).parent, self.queue)
        return n

    def status(self) -> dict[str, Any]:
        return {
            "lanes": self.lanes.status(self.slots_in_use()),
            "paused_all": self.lanes.paused_all,
            "paused_lanes": sorted(self.lanes.paused),
            "running": [{"id": r.job.id, "attempt": r.attempt, "pid": r.pid, "lane": r.job.lane}
                        for r in self.running.values()],
            "last_jump": self.last_jump,
            "clock": {"last_check_at": self.last_check_at,
                      "check_interval_s": self.settings.clock_check_s, "timerfd": self.timerfd},
        }


def remove_orphan_logs(root: Path, queue: Queue) -> None:
    """Delete log files of jobs the queue no longer has (after a prune)."""
    if not root.is_dir():
        return
    exists: dict[int, bool] = {}
    for f in root.iterdir():
        head = f.name.split(".", 1)[0]
        if not head.isdigit():
            continue
        jid = int(head)
        if jid not in exists:
            try:
                queue.get(jid)
                exists[jid] = True
            except JobNotFound:
                exists[jid] = False
        if not exists[jid]:
            f.unlink(missing_ok=True)

"""The worker loop: claim -> run -> heartbeat -> settle, per lane, on one asyncio loop.

Each turn of the loop, in this order (the order is what keeps a sleeping
laptop from running a job twice):
  1. compare the clocks; after a sleep, renew our own live jobs' leases with
     a ``resumed`` event (they slept too, they must not be re-run);
  2. heartbeat any of our jobs whose lease is a third used up (by wall time,
     so a lease that lapsed in a sleep the detector missed is renewed before
     step 3 could hand it out again);
  3. claim due work for lanes with free slots: due retries, delayed jobs and
     leases that really expired (holders dead), at once.
Then sleep until the next due time, heartbeat, clock check or wake-up.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from . import procident
from .clock import Jump, JumpDetector, JumpKind, SystemClocks
from .config import Settings
from .durations import format_duration
from .errors import IllegalTransition, JobNotFound, LeaseLost, SlothError
from .models import Job
from .paths import Paths
from .queue import Queue
from .runner import JobProcess, LogWriter, SpawnError, job_env, make_log_dir

log = logging.getLogger("sloth.worker")
PRUNE_EVERY_S = 3600.0


@dataclass
class Running:
    job: Job
    token: str
    attempt: int
    proc: JobProcess | None = None
    ending: str | None = None  # "cancelled" | "interrupted" | "lease lost" | "timed out"
    timer: asyncio.TimerHandle | None = None
    followers: set[Callable[[bytes | None], None]] = field(default_factory=set)


class Worker:
    def __init__(
        self,
        queue: Queue,
        settings: Settings,
        paths: Paths,
        *,
        instance: str,
        clocks: SystemClocks | None = None,
        on_change: Callable[[Job], None] = lambda job: None,
    ) -> None:
        self.queue, self.settings, self.paths = queue, settings, paths
        self.instance = instance
        self.name = f"sloth-daemon:{socket.gethostname()}:{os.getpid()}:{instance}"
        self.clocks = clocks or SystemClocks()
        self.detector = JumpDetector(self.clocks.read())
        self.on_change = on_change
        self.running: dict[int, Running] = {}
        self.paused_all = bool(queue.get_meta("paused_all", False))
        self.paused_lanes: set[str] = set(queue.get_meta("paused_lanes", []))
        self.last_jump: dict[str, Any] | None = None
        self.last_check_at: float | None = None
        self.timerfd = False
        self.stopping = False
        self._wake = asyncio.Event()
        self._next_check = time.monotonic()
        self._next_prune = time.monotonic() + 60
        self._loop: asyncio.AbstractEventLoop | None = None
        self._next_due: float | None = None  # from the last claim_due()
        self._in_turn = False
        self._settling: set[int] = set()  # exited, result not yet written

    # ------------------------------------------------------------- control
    def wake(self) -> None:
        self._wake.set()

    def clock_changed(self) -> None:
        """Called when the timerfd says the wall clock was set or we resumed."""
        self._next_check = 0.0
        self.wake()

    def pause(self, lane: str | None) -> None:
        if lane is None:
            self.paused_all = True
            self.queue.set_meta("paused_all", True)
        else:
            self.paused_lanes.add(lane)
            self.queue.set_meta("paused_lanes", sorted(self.paused_lanes))

    def resume(self, lane: str | None) -> None:
        if lane is None:
            self.paused_all = False
            self.paused_lanes.clear()
            self.queue.set_meta("paused_all", False)
        else:
            self.paused_lanes.discard(lane)
        self.queue.set_meta("paused_lanes", sorted(self.paused_lanes))
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
        self._loop = asyncio.get_running_loop()
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
            timeout = self.next_wake_s()
            try:
                await asyncio.wait_for(self._wake.wait(), timeout)
            except asyncio.TimeoutError:
                pass

    def turn(self) -> None:
        if self._in_turn:  # a job that exits inside a turn settles without a nested one
            return
        self._in_turn = True
        try:
            now_mono = time.monotonic()
            if now_mono >= self._next_check:
                self.check_clock()
            self.heartbeat_due()
            self.claim_due()
            if now_mono >= self._next_prune:
                self._next_prune = now_mono + PRUNE_EVERY_S
                self.prune(self.settings.retention_s)
        finally:
            self._in_turn = False

    def next_wake_s(self) -> float:
        now_mono, now = time.monotonic(), self.queue.clock.now()
        deadlines = [self._next_check - now_mono, self._next_prune - now_mono]
        for run in self.running.values():
            if run.proc is not None and run.ending is None and run.proc.returncode is None:
                deadlines.append(self._hb_due_at(run) - now)
        if self.may_claim() and self._next_due is not None:
            deadlines.append(self._next_due - now)
        return max(0.0, min(deadlines))

    # --------------------------------------------------------------- clock
    def check_clock(self) -> Jump:
        interval = self.settings.clock_check_s
        readings = self.clocks.read()
        jump = self.detector.check(readings, expected_s=interval)
        self._next_check = time.monotonic() + interval
        self.last_check_at = readings.wall
        if jump.kind is not JumpKind.NONE:
            self.last_jump = {
                "kind": jump.kind.value, "seconds": jump.seconds, "at": readings.wall,
                "describe": jump.describe(),
            }
            log.info("clock: %s", jump.describe())
            if jump.kind is not JumpKind.STEPPED or jump.seconds > 0:
                self.renew_after_resume(jump.describe())
        return jump

    def renew_after_resume(self, why: str) -> None:
        for run in list(self.running.values()):
            if run.proc is None or run.ending or not run.proc.alive():
                continue
            try:
                run.job = self.queue.renew_after_resume(run.job.id, run.token, why)
            except (LeaseLost, JobNotFound):
                self._end(run, "lease lost")

    # ----------------------------------------------------------- heartbeat
    def _hb_due_at(self, run: Running) -> float:
        lease_until = run.job.lease_until or 0.0
        return lease_until - run.job.lease_s * 2 / 3

    def heartbeat_due(self) -> None:
        now = self.queue.clock.now()
        for run in list(self.running.values()):
            if run.proc is None or run.ending or now < self._hb_due_at(run):
                continue
            if not run.proc.alive():
                run.proc.poll()
                continue
            run.proc.refresh_tree()
            try:
                run.job = self.queue.heartbeat(run.job.id, run.token)
            except (LeaseLost, JobNotFound):
                self._end(run, "lease lost")

    # ---------------------------------------------------------------- claim
    def lane_running(self, lane: str) -> int:
        return sum(1 for r in self.running.values() if r.job.lane == lane)

    def may_claim(self) -> bool:
        return not (self.paused_all or self.stopping)

    def blocked_lanes(self) -> set[str]:
        """Lanes we must not claim from: paused, or all their slots busy."""
        busy = {r.job.lane for r in self.running.values()}
        return set(self.paused_lanes) | {
            ln for ln in busy if self.lane_running(ln) >= self.settings.concurrency(ln)}

    def claim_due(self) -> None:
        self._next_due = None
        while self.may_claim():
            # A read-only look first: an empty claim would still cost a write
            # transaction, and this answer is also when to wake up next.
            blocked = self.blocked_lanes()
            # never re-issue our own live (or just-ended, unrecorded) jobs to ourselves
            mine = set(self.running) | self._settling
            self._next_due = self.queue.next_due_at(exclude_lanes=blocked, exclude_ids=mine)
            if self._next_due is None or self._next_due > self.queue.clock.now():
                return
            job = self.queue.claim(self.name, exclude_lanes=blocked, exclude_ids=mine)
            if job is None:
                return  # another process took it
            self.on_change(job)
            run = Running(job, job.token or "", job.attempts)
            self.running[job.id] = run
            prev = job.runner
            if prev and procident.is_same_process(prev):
                # The lease expired but the old process lives (a previous
                # daemon's orphan, or a stalled foreign worker): end it first.
                asyncio.get_running_loop().create_task(self._start_after_kill(run, prev))
            else:
                self._start(run)

    async def _start_after_kill(self, run: Running, prev: dict[str, Any]) -> None:
        loop = asyncio.get_running_loop()
        try:
            await loop.run_in_executor(None, procident.kill_identity_blocking, prev, self.settings.kill_grace_s)
            if run.ending is None:
                self._start(run)
        except Exception:
            log.exception("starting job %d failed", run.job.id)
            if run.proc is None and run.ending is None:
                self._record(lambda: self.queue.release(run.job.id, run.token, message="start failed"))
        finally:
            if run.proc is None:  # cancelled while we waited, or failed: free the slot
                self._drop(run)
                self.wake()

    def _start(self, run: Running) -> None:
        job = run.job
        make_log_dir(self.paths.jobs_log_dir)  # LogWriter makes no folders
        lw = LogWriter(self.paths.job_log(job.id, run.attempt), self.settings.log_cap_bytes)
        env = job_env(job.env, {
            "SLOTH_JOB_ID": str(job.id), "SLOTH_JOB_ATTEMPT": str(run.attempt),
            "SLOTH_JOB_TOKEN": run.token,
        })
        proc = JobProcess(job.command, cwd=job.cwd, env=env, log=lw,
                          on_output=lambda data, r=run: self._output(r, data),
                          on_exit=lambda p, r=run: self._settle(r))
        try:
            proc.start(asyncio.get_running_loop())
        except SpawnError as e:
            lw.note(str(e))
            lw.close()
            self._drop(run)
            msg, retry = str(e), e.retry  # not `e` in the lambda: Python unbinds it after the except
            self._record(lambda: self.queue.fail(job.id, run.token, message=msg, retry=retry))
            return
        run.proc = proc
        if job.timeout_s:  # armed first: nothing below may leave a job without its timeout
            run.timer = asyncio.get_running_loop().call_later(
                job.timeout_s, self._end, run, f"timed out after {format_duration(job.timeout_s)}")
        try:
            run.job = self.queue.set_runner(job.id, run.token, proc.identity(
                instance=self.instance, worker=self.name))
        except (LeaseLost, JobNotFound):
            self._end(run, "lease lost")
            return
        except SlothError as e:  # e.g. locked for long: it runs; the next heartbeat tries again
            log.error("cannot record job %d's process: %s", job.id, e.message)
        self.on_change(run.job)

    # ---------------------------------------------------------------- ending
    def _drop(self, run: Running) -> None:
        """Forget ``run`` if it is still the one we track for its job (a
        cancelled-then-retried job may already have a newer run)."""
        if self.running.get(run.job.id) is run:
            del self.running[run.job.id]

    def _end(self, run: Running, reason: str) -> None:
        """Begin ending a running job's process tree (idempotent)."""
        if run.ending is not None:
            return
        run.ending = reason
        if run.proc is None:
            return  # still waiting to start; _start_after_kill checks ending
        run.proc.log.note(f"{reason}: ending the process tree")
        asyncio.get_running_loop().create_task(
            run.proc.end_tree(self.settings.kill_grace_s, reason))

    def _settle(self, run: Running) -> None:
        """The process ended: record the outcome under the lease we hold."""
        assert run.proc is not None
        if run.timer is not None:
            run.timer.cancel()
        ok, message = run.proc.outcome()
        run.proc.log.close()
        lost = ""  # what the log could not hold, said in the history instead
        if run.proc.log.problem:
            lost = f"; {run.proc.log.problem}"
            log.warning("job %d attempt %d: %s", run.job.id, run.attempt, run.proc.log.problem)
        self._drop(run)
        for f in list(run.followers):
            f(None)
        code = run.proc.returncode
        jid, tok = run.job.id, run.token
        # Start the lane's next job before writing this one's result, so the
        # fork and the new process overlap the result's fsync instead of
        # queueing behind it. A crash in between re-runs this job once, as a
        # crash just before the write would (at-least-once after a crash).
        self._settling.add(jid)
        try:
            self.turn()
        except SlothError as e:  # e.g. disk full: the loop's own turn retries
            log.error("starting the next job after job %d failed: %s", jid, e.message)
        except Exception:  # a bug: the result below must still be written
            log.exception("starting the next job after job %d failed", jid)
        finally:
            self._settling.discard(jid)
        if run.ending == "interrupted":
            self._record(lambda: self.queue.release(jid, tok, message="interrupted: daemon stopping" + lost))
        elif run.ending in ("cancelled", "lease lost"):
            pass  # the queue already says so; our token is void
        elif ok:
            self._record(lambda: self.queue.complete(jid, tok, message=message + lost, exit_code=code))
        else:
            self._record(lambda: self.queue.fail(jid, tok, message=message + lost, exit_code=code))
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

    def _output(self, run: Running, data: bytes) -> None:
        for f in list(run.followers):
            f(data)

    async def shutdown(self) -> None:
        """Stop claiming; end running jobs gracefully; requeue them (refunded)."""
        self.stopping = True
        self.wake()
        runs = list(self.running.values())
        for run in runs:
            # one that already exited (not yet reaped) is settled as it ended
            if run.ending is None and (run.proc is None or run.proc.alive()):
                self._end(run, "interrupted")
        waits = [r.proc.done.wait() for r in runs if r.proc is not None]
        if waits:
            await asyncio.gather(*waits)
        for run in runs:  # claimed but never started (waiting on an old process)
            if run.proc is None and self.running.get(run.job.id) is run:
                self._drop(run)
                self._record(lambda r=run: self.queue.release(r.job.id, r.token))

    # ----------------------------------------------------------------- misc
    def prune(self, older_than_s: float) -> int:
        n = self.queue.prune(older_than_s)
        if n:
            self.remove_orphan_logs()
        return n

    def remove_orphan_logs(self) -> None:
        root = self.paths.jobs_log_dir
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
                    self.queue.get(jid)
                    exists[jid] = True
                except JobNotFound:
                    exists[jid] = False
            if not exists[jid]:
                f.unlink(missing_ok=True)

    def status(self) -> dict[str, Any]:
        lanes = set(self.settings.lanes) | set(self.queue.lanes()) | {r.job.lane for r in self.running.values()}
        return {
            "lanes": {
                ln: {"concurrency": self.settings.concurrency(ln), "running": self.lane_running(ln),
                     "paused": self.paused_all or ln in self.paused_lanes}
                for ln in sorted(lanes)
            },
            "paused_all": self.paused_all,
            "paused_lanes": sorted(self.paused_lanes),
            "running": [
                {"id": r.job.id, "attempt": r.attempt, "pid": r.proc.pid if r.proc else None,
                 "lane": r.job.lane}
                for r in self.running.values()
            ],
            "last_jump": self.last_jump,
            "clock": {
                "last_check_at": self.last_check_at,
                "check_interval_s": self.settings.clock_check_s,
                "timerfd": self.timerfd,
            },
        }

"""The worker loop: claim -> run -> heartbeat -> settle, per lane.

Each turn (``Worker.turn(now)``), in this order (the order is what keeps a
sleeping laptop from running a job twice):
  1. compare the clocks (clockwatch.py); after a sleep, renew our own runs'
     leases with a ``resumed`` event (they slept too, they must not be re-run);
  2. heartbeat any of our runs whose lease is a third used up (leases.py),
     so a lease that lapsed in a sleep the clock watch missed is renewed
     before step 3 could hand it out again; withdraw pending runs whose
     head is no longer young (pipeline.py); look at the conditions
     (conditionwatch.py);
  3. claim due work for lanes with free slots: due retries, delayed jobs and
     leases that really expired (holders dead), at once;
  4. record the outcomes of runs that ended: after step 3, so a lane's next
     job is already starting while the result's fsync runs.
Steps 3 and 4 are one transaction where the queue allows (recording.py).
A burst of short jobs does not wait for the worker at all: the next jobs of
a full lane wait in the keeper behind a young run (pipeline.py).
Then ``run()`` sleeps until the next due time, heartbeat, clock check or
wake-up. Processes are the spawner's business (spawner.py); the worker
hears of starts and exits through one RunNews per run (news.py). A run's
stages are lifecycle.py's.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any, Callable, Coroutine, Sequence

from sloth_daemon.clock import ClockReadings, Clocks
from sloth_daemon.config import Settings
from sloth_daemon.daemon.conditions import Conditions
from sloth_daemon.daemon.gpus import GpuProbe
from sloth_daemon.daemon.limits import Postponement
from sloth_daemon.daemon.resources import Resources, resources_of
from sloth_daemon.daemon.worker.actions import Actions
from sloth_daemon.daemon.worker.adoption import Adopter
from sloth_daemon.daemon.worker.claiming import Claimer
from sloth_daemon.daemon.worker.clockwatch import ClockWatch
from sloth_daemon.daemon.worker.conditionwatch import ConditionWatch
from sloth_daemon.daemon.worker.gates import Gates
from sloth_daemon.daemon.worker.gpuwatch import GpuWatch
from sloth_daemon.daemon.worker.lanes import Lanes
from sloth_daemon.daemon.worker.leases import QueueTime, Renewals
from sloth_daemon.daemon.worker.lifecycle import Ending, Attempt, Stage, Why
from sloth_daemon.daemon.worker.news import Hearing
from sloth_daemon.daemon.worker.pausing import Pauser
from sloth_daemon.daemon.worker.pipeline import PACE_S, TAKE_BACK_WAIT_S, Pipeline
from sloth_daemon.daemon.worker.recording import Recorder
from sloth_daemon.daemon.worker.handing import hand_on
from sloth_daemon.daemon.worker.runs import Attempts, spawn_request, this_host, worker_name
from sloth_daemon.daemon.worker.signals import Signals
from sloth_daemon.daemon.worker.spawner import Spawner, SpawnRequest
from sloth_daemon.daemon.worker.withdrawal import Withdrawals
from sloth_daemon.errors import SlothError
from sloth_daemon.keeper.jobenv import JobEnvs
from sloth_daemon.models import Batch, Job
from sloth_daemon.queue import Queue

log = logging.getLogger("sloth.worker")
PRUNE_EVERY_S = 3600.0
FIRST_PRUNE_S = 60.0


class Worker:
    """The loop (see the module docstring) and what it composes.

    Its own state: when it next prunes; its tasks.
    Given by the composition root: the queue, the spawner, the clocks, the
    clock watch (``clock``), the queue's clock (``queue_time``: a shared
    queue's server), who hears of every job it changes (``on_change``) and
    the conditions' reader. Its parts, each with its own state:
      - ``running``: the runs it holds (Attempts, runs.py), shared by all;
      - ``signals``: job changes to watchers, wake-ups to the loop (signals.py);
      - ``lanes``: concurrency and pauses (lanes.py);
      - ``leases``: heartbeats and renewals after a sleep (leases.py);
      - ``withdrawals``: runs not heard started, decided by the keeper (withdrawal.py);
      - ``claims``: what to claim and when, stopped when the worker stops (claiming.py);
      - ``recorder``: a turn's claims and outcomes written, the group commit (recording.py);
      - ``pipeline``: successors pending in the keeper, pacing, short lanes (pipeline.py);
      - ``pauser``: running jobs paused and continued on request (pausing.py);
      - ``gates``: jobs with conditions, needs, slots (gates.py), and
        ``watch``, when to look at the conditions again (conditionwatch.py);
      - ``hearing``: the spawner's news of runs (news.py);
      - ``adopter``: runs that outlived the daemon taken over (adoption.py);
      - ``actions``: users' requests between turns (actions.py).
    The public methods below are the daemon's face of it (control.py,
    main.py, shared/member.py); a user's request on jobs or lanes goes to
    ``actions`` straight from its handler (daemon/job_ops.py, lane_ops.py),
    but for pause_jobs and set_lane, which add the conditions' part (gates)."""

    def __init__(
        self, queue: Queue, settings: Settings, spawner: Spawner, *, clocks: Clocks,
        log_path: Callable[[int, int], Path], instance: str,
        on_change: Callable[[Job], None] = lambda job: None, commit_delay_s: float = 0.0,
        host: str | None = None, places: Sequence[str] | None = None,
        conditions: Conditions | None = None, resources: Resources | None = None,
        clock: ClockWatch | None = None, queue_time: QueueTime | None = None, gpus: GpuProbe | None = None,
    ) -> None:
        self.queue, self.settings, self.spawner, self.clocks = queue, settings, spawner, clocks
        self.log_path, self.instance = log_path, instance
        self.host = host or this_host()
        self.name = worker_name(instance, host=self.host)
        self.places = None if places is None else list(places)  # daemon/shared/member.py: what may run here
        self.clock = clock or ClockWatch(clocks, interval_s=settings.clock_check_s)
        awake = clocks.read().awake
        self._next_prune = awake + FIRST_PRUNE_S
        self._tasks: set[asyncio.Task[Any]] = set()
        self.postponed = Postponement()  # claims held after a spawn failed for want of resources
        self.envs = JobEnvs()
        self.running = Attempts()
        self.withdrawals = Withdrawals(spawner, self.running)  # what became of runs not heard started
        self.signals = Signals(on_change, self.withdrawals.heard)
        self.lanes = Lanes(queue, settings, host=None if places is None else self.host)
        self.leases = Renewals(queue, spawner, self.running, clocks, end=self.end, queue_time=queue_time)
        self.pipeline = Pipeline(queue, spawner, self.running, self.lanes, clocks, self.withdrawals, self.signals,
                                 name=self.name, places=self.places)
        self.pauser = Pauser(queue, spawner, self.running, self.signals)
        self.gates = Gates(queue, self.running, self.lanes, settings,
                           conditions or Conditions(max_age_s=settings.conditions_check_s),
                           resources or resources_of(settings), places=self.places,
                           host=None if places is None else self.host,
                           meta_key="cond_paused" if places is None else f"cond_paused@{self.host}",
                           gpus=gpus or GpuProbe())
        self.gates.gpus.on_fresh = lambda reading: self.gpuwatch.fresh(reading)  # a reading came: claim again
        self.gpuwatch = GpuWatch(self.gates, queue, self.running, self.signals, clocks)
        self.watch = ConditionWatch(self.gates, self.pauser, self.signals, clocks, settings, end=self.end,
                                    spawn_task=self.spawn_task)
        self.claims = Claimer(queue, self.running, self.lanes, self.gates, self.pipeline, self.leases, self.watch,
                             self.postponed, clocks, settings, name=self.name, places=self.places, begin=self._begin)
        self.recorder = Recorder(queue, spawner, self.running, self.signals, claims_lost=self.claims.later,
                                 commit_delay_s=commit_delay_s, retry_on=settings.retry_on)
        self.hearing = Hearing(queue, self.running, clocks, self.signals, self.withdrawals, self.pipeline,
                               self.postponed, self.leases, self.clock, end=self.end, instance=instance,
                               name=self.name)
        self.adopter = Adopter(queue, spawner, self.running, self.pipeline, self.signals, clocks,
                               sink=self.hearing.sink, name=self.name, host=self.host, reattached=self.pauser.adopted)
        self.actions = Actions(queue, self.running, self.lanes, self.withdrawals, self.recorder, self.pipeline,
                               self.signals, clocks, end=self.end, log_path=log_path)

    def spawn_task(self, coro: Coroutine[Any, Any, None]) -> None:
        """Run ``coro`` on the loop, keeping a reference (the loop keeps only weak ones)."""
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def clock_changed(self) -> None:
        """The timerfd says the wall clock was set or the machine resumed: compare the clocks now."""
        self.clock.soon()
        self.signals.wake()

    # ---------------------------------------------------------------- loop
    async def run(self) -> None:
        try:  # resources or lanes may have changed while no daemon ran: what a held job says is judged again
            self.gates.sweep()
        except Exception:  # a broken database, a row another machine wrote: the loop below must still run
            log.exception("cannot judge held jobs again")
        while not self.claims.stopped:
            self.signals.event.clear()
            try:
                self.turn()
            except SlothError as e:  # e.g. disk full: keep serving, retry later
                log.error("worker turn failed: %s", e.message)
                await asyncio.sleep(1.0)
            except Exception:  # a bug must not take the daemon (and its jobs) down
                log.exception("worker turn failed")
                await asyncio.sleep(1.0)
            if self.claims.stopped:
                break
            if self.pipeline.paced():  # a burst: the keeper has work in hand; let a few more ends come in
                await self._pace()
            await self._sleep(self.next_wake_s())

    async def _pace(self) -> None:
        """PACE_S, or less if a slot runs dry meanwhile (Signals.hurry)."""
        self.signals.hurry.clear()  # a slot that ran dry before this turn was this turn's to fill
        await _until(self.signals.hurry, PACE_S)

    async def _sleep(self, timeout_s: float) -> None:
        """Until woken or ``timeout_s`` passes."""
        await _until(self.signals.event, timeout_s)

    def turn(self, now: ClockReadings | None = None) -> None:
        """One pass of the loop (see the module docstring)."""
        r = now or self.clocks.read()
        if self.clock.due(r):
            slept = self.clock.check(r)
            if slept is not None:
                self.leases.renew_after_resume(slept)
            self.signals.look = True  # now and then, for jobs another process queued in the file
            self.gates.look_expired = True  # ... and for gated leases that expired (gates.py)
        self.leases.heartbeat_due(r)
        self.pipeline.take_back_due(r.awake)
        self.watch.watch(r)
        self.gpuwatch.watch(r)
        claim = self.signals.look or self.claims.due(r)
        self.signals.look = False  # a turn for a heartbeat or an fsync alone skips the claim queries
        # a job queued, released, retried or due behind a gate already told is told why it waits too
        self.gates.retell = claim
        # claims and outcomes: one transaction (recording.py)
        self.recorder.write_turn(r, self.claims.claim if claim else None)
        self.hearing.record_starts(r.awake)
        if r.awake >= self._next_prune:
            self._next_prune = r.awake + PRUNE_EVERY_S
            self.actions.prune(self.settings.retention_s)

    def next_wake_s(self, now: ClockReadings | None = None) -> float:
        """Seconds until the next turn is due: the earliest of what each part waits for."""
        r = now or self.clocks.read()
        if self.signals.look:
            return 0.0
        deadlines = [self.clock.next_at - r.awake, self._next_prune - r.awake]
        deadlines += self.leases.deadlines(r)
        deadlines += self.pipeline.take_back_deadlines(r.awake)
        deadlines += [run.record_after - r.awake for run in self.running.values()  # a write to try again
                      if run.stage is Stage.ENDED and not run.write_waits]
        deadlines += self.hearing.start_deadlines(r.awake)
        deadlines += [d for d in (self.claims.deadline(r), self.watch.deadline(r), self.gpuwatch.deadline(r))
                      if d is not None]
        if self.postponed.holds(r.awake):
            deadlines.append(self.postponed.until - r.awake)
        if self.recorder.commits.due_at is not None:  # an fsync
            deadlines.append(self.recorder.commits.due_at - r.awake)
        return max(0.0, min(deadlines))

    # ---------------------------------------------------------------- start
    def _begin(self, run: Attempt, claimed: ClockReadings) -> None:
        """A run of a job claimed at ``claimed``: added to the runs, its spawn sent once the claim is in."""
        self.recorder.claimed(run)
        self.running.add(run)
        run.renewed(claimed)
        run.started_awake = claimed.awake  # young from now (pipeline.py); a start heard renews it
        log_path = self.log_path(run.job.id, run.attempt)
        req = spawn_request(run, claimed, self.settings, env=self.envs.base(run.job.env), log_path=log_path,
                            host=self.host, handed=hand_on(self.queue, run.job, log_path))
        self.recorder.after_commit(self._send_spawn, run, req)  # never before the claim is in

    def _send_spawn(self, run: Attempt, req: SpawnRequest) -> None:
        news = self.hearing.sink(run)
        try:
            self.spawner.spawn(req, news)
        except Exception as e:  # a bug: the run must not sit in a slot with no process
            log.exception("cannot hand job %d to the spawner", run.job.id)
            news.spawn_failed(f"not started: internal error {e!r}", True)

    # ---------------------------------------------------------------- ending
    def end(self, run: Attempt, ending: Ending, grace_s: float | None = None) -> None:
        """End a run for ``ending`` (Attempt.stop): its process tree, if it has
        not ended, with ``grace_s`` between SIGTERM and SIGKILL (default:
        the kill_grace_s setting)."""
        if run.stop(ending):
            self.spawner.kill(run.token, ending.text, self.settings.kill_grace_s if grace_s is None else grace_s)

    async def shutdown(self, *, keep_jobs: bool = False) -> None:
        """Stop claiming. By default end running jobs gracefully and requeue
        them (refunded). With ``keep_jobs`` leave them running: the keeper
        keeps them for the next daemon; only outcomes already in are recorded.
        Either way what has not started goes back to the queue as never
        claimed, as the keeper decides (withdrawal.py): it is asked first,
        and a run it had started meanwhile is then ended (or kept) as one
        that runs, and recorded as it ran."""
        self.claims.stopped = True
        self.watch.stop()
        self.gates.gpus.stop()  # an nvidia-smi being read is killed, not left behind
        self.signals.wake()
        if keep_jobs:
            await self.pipeline.take_back_all()
            self.recorder.settle(float("inf"))
            return
        await self.withdrawals.wait(self.withdrawals.ask(list(self.running.values())), TAKE_BACK_WAIT_S)
        for run in list(self.running.values()):
            if run.outcome is None:  # one that already exited is settled as it ended
                self.end(run, Ending(Why.INTERRUPTED))
        # Until every run has ended. An outcome the database still refuses
        # stays with the keeper (not acknowledged) for the next daemon.
        self.recorder.settle(float("inf"))
        while any(r.outcome is None for r in self.running.values()):
            self.signals.event.clear()  # until a run's end is heard (its news wakes us)
            await self.signals.event.wait()
            self.recorder.settle(float("inf"))

    # ------------------------------------------------------ news, requests
    def side_change(self, job: Job) -> None:
        """A job changed by another's transition (a dependent queued or cancelled)."""
        self.signals.on_change(job)
        self.signals.wake()

    async def reconcile(self, kept: list[dict[str, Any]]) -> None:
        """Take over the runs the keeper lists (adoption.py)."""
        await self.adopter.reconcile(kept, kill_grace_s=self.settings.kill_grace_s)

    async def pause_jobs(self, ids: Sequence[int] | None = None, *, lane: str | None = None,
                         resume: bool = False) -> Batch:
        """Pause (``resume``: continue) running jobs' trees (pausing.py).
        Asked by hand, so a pause a lost condition made becomes the user's:
        the conditions holding again no longer continue it."""
        mine = [] if resume else [j for j in self.gates.cond_paused if (run := self.running.get(j)) is not None
                                  and (j in ids if ids is not None else lane is None or run.job.lane == lane)]
        done = await self.pauser.pause(ids, lane=lane, resume=resume)  # bad ids: an error, nothing changed
        for job_id in mine + [j.id for j in done.jobs if resume and j.id in self.gates.cond_paused]:
            self.gates.paused_by_condition(job_id, False)
        return done

    def set_lane(self, lane: str, concurrency: int, *, create: bool = False) -> dict[str, Any]:
        """`sloth lane set`; ``held``: what it held, as jobs that need more slots than the lane now has."""
        out = self.actions.set_lane(lane, concurrency, create=create)
        return {**out, "held": self.gates.sweep([lane]) if concurrency else []}

    def apply_settings(self, settings: Settings) -> list[str]:
        """A config reload: new jobs get the new defaults, the next claim,
        heartbeat, kill or prune the new limits. Returns notes on lanes whose
        `sloth lane set` value the new config replaces and on jobs it held
        because this machine can no longer run them (Gates.sweep)."""
        self.settings = self.watch.settings = self.claims.settings = settings
        self.clock.interval_s = settings.clock_check_s
        self.queue.lease_s, self.queue.max_attempts = settings.lease_s, settings.max_attempts
        self.queue.backoff_cap_s = settings.backoff_cap_s
        self.recorder.retry_on = settings.retry_on
        notes = self.lanes.reload(settings)
        self.gates.reload(settings, resources_of(settings))
        notes += self.gates.sweep()  # what the new resources or lanes can never run: held, and said
        self.pipeline.take_back()  # lanes may have changed
        self.signals.wake()
        return notes

    # --------------------------------------------------------------- status
    def status(self) -> dict[str, Any]:
        try:
            counts = self.queue.lane_counts()
        except SlothError:  # a broken database: status must still answer
            counts = {}
        running = self.running.values()
        return {
            "lanes": self.lanes.status(self.running.slots_in_use(), counts),
            "paused_all": self.lanes.paused_all,
            "paused_lanes": sorted(self.lanes.paused),
            "running": [{"id": r.job.id, "attempt": r.attempt, "pid": r.pid, "lane": r.job.lane,
                         "adopted": r.adopted, "paused": r.paused}
                        for r in running if r.outcome is None and not r.pending],
            "pending": self.pipeline.pending_status(), "pipeline": self.pipeline.status(),
            "pending_outcomes": [{"id": r.job.id, "attempt": r.attempt, "tries": r.record_tries,
                                  "error": r.record_error} for r in running if r.record_error],
            "last_jump": self.clock.last_jump, "host": self.host, "places": self.places,
            "conditions": self.gates.status(), "clock": self.clock.status(),
        }


async def _until(event: asyncio.Event, timeout_s: float) -> None:
    """Until ``event`` is set or ``timeout_s`` passes. A timer that sets the
    event, not wait_for: that makes a task and cancels it on every timeout,
    two or three loop passes more per turn."""
    if event.is_set():
        return
    timer = asyncio.get_running_loop().call_later(timeout_s, event.set)
    try:
        await event.wait()
    finally:
        timer.cancel()

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
Steps 3 and 4 are one transaction where the queue allows (recording.py).
A burst of short jobs does not wait for the worker at all: the next jobs of
a full lane wait in the keeper behind a young run (pipeline.py).
Then ``run()`` sleeps until the next due time, heartbeat, clock check or
wake-up. Processes are the spawner's business (spawner.py); the worker
hears of starts and exits through one RunSink per run.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any, Callable, Sequence

from sloth_daemon.clock import ClockReadings, Clocks, Jump, JumpDetector, JumpKind
from sloth_daemon.config import Settings
from sloth_daemon.daemon.limits import Postponement
from sloth_daemon.daemon.worker.actions import Actions
from sloth_daemon.daemon.conditions import Conditions, PowerEvents
from sloth_daemon.daemon.resources import Resources, environment
from sloth_daemon.daemon.worker.adoption import Adopter
from sloth_daemon.daemon.worker.gates import Gates
from sloth_daemon.daemon.worker.lifecycle import Ending, Run, Stage, Why, boot_of
from sloth_daemon.daemon.worker.lanes import Lanes
from sloth_daemon.daemon.worker.pausing import Pauser
from sloth_daemon.daemon.worker.pipeline import PACE_S, TAKE_BACK_WAIT_S, Pipeline, unlink
from sloth_daemon.daemon.worker.recording import CLAIM_RETRY_S, TIMER_SLACK_S, Recorder
from sloth_daemon.daemon.worker.runs import (
    RENEW_RETRY_S, RunTable, Sink, ran_here, record_start, renew_in, term_lead, this_host, trust_until,
    worker_name,
)
from sloth_daemon.daemon.worker.signals import Signals
from sloth_daemon.daemon.worker.spawner import Outcome, Spawner, SpawnRequest
from sloth_daemon.daemon.worker.withdrawal import Withdrawals
from sloth_daemon.errors import JobNotFound, LeaseLost, SlothError, StorageError
from sloth_daemon.keeper.jobenv import JobEnvs
from sloth_daemon.models import Batch, Job
from sloth_daemon.queue import Queue

log = logging.getLogger("sloth.worker")
PRUNE_EVERY_S = 3600.0
RECORD_RUNNER_AFTER_S = 1.0  # a process that ends sooner has its identity written with its outcome
FIRST_PRUNE_S = 60.0
POWER_EVENTS_RETRY_S = 60.0  # between starts of `udevadm monitor` (conditions.PowerEvents)


class Worker:
    """The loop (see the module docstring) and what it composes.

    Its own state: the clocks' watch (jump detector, last check), when it
    next claims, prunes and checks the clock, the spawn postponement, and
    the collaborators it owns, each with its own state:
      - ``running``: the runs it holds (RunTable, runs.py), shared by all;
      - ``signals``: job changes to watchers, wake-ups to the loop (signals.py);
      - ``lanes``: concurrency and pauses (lanes.py);
      - ``withdrawals``: runs not heard started, decided by the keeper (withdrawal.py);
      - ``recorder``: a turn's claims and outcomes written, the group commit (recording.py);
      - ``pipeline``: successors held in the spawner, pacing, short lanes (pipeline.py);
      - ``pauser``: running jobs paused and continued on request (pausing.py);
      - ``adopter``: runs that outlived the daemon taken over (adoption.py);
      - ``actions``: users' requests between turns (actions.py).
    The public methods below are the daemon's face of it (control.py,
    main.py, shared/member.py); the actions delegate to ``actions``."""

    def __init__(
        self, queue: Queue, settings: Settings, spawner: Spawner, *, clocks: Clocks,
        log_path: Callable[[int, int], Path], instance: str,
        on_change: Callable[[Job], None] = lambda job: None, commit_delay_s: float = 0.0,
        host: str | None = None, places: Sequence[str] | None = None,
        conditions: Conditions | None = None, resources: Resources | None = None,
    ) -> None:
        self.queue, self.settings, self.spawner, self.clocks = queue, settings, spawner, clocks
        self.log_path, self.instance = log_path, instance
        self.host = host or this_host()
        self.name = worker_name(instance, host=self.host)
        self.places = None if places is None else list(places)  # daemon/shared/member.py: what may run here
        self.queue_time: Callable[[ClockReadings], float] | None = None  # None: the queue keeps our wall time
        self.after_jump: Callable[[], None] = lambda: None
        self.clock_watchers: list[Callable[[], None]] = []  # told of every jump, back too (the schedules)
        self.clock_checks: list[Callable[[], None]] = []  # called at every clock check (the schedules' zone)
        first = clocks.read()
        self.detector = JumpDetector(first)
        self.last_jump: dict[str, Any] | None = None
        self.last_check_at: float | None = None
        self.timerfd = False
        self.stopping = False
        self._next_check = first.awake
        self._next_prune = first.awake + FIRST_PRUNE_S
        self._next_due: float | None = None  # from the last claim_due()
        self._tasks: set[asyncio.Task[Any]] = set()
        self.postponed = Postponement()  # claims held after a spawn failed for want of resources
        self.envs = JobEnvs()
        self.running = RunTable()
        self.withdrawals = Withdrawals(spawner, self.running)  # what became of runs not heard started
        self.signals = Signals(on_change, self.withdrawals.heard)
        self.lanes = Lanes(queue, settings, host=None if places is None else self.host)
        self.recorder = Recorder(queue, spawner, self.running, self.signals, claims_lost=self._claim_later,
                                 commit_delay_s=commit_delay_s)
        self.pipeline = Pipeline(queue, spawner, self.running, self.lanes, clocks, self.withdrawals, self.signals,
                                 name=self.name, places=self.places)
        self.pauser = Pauser(queue, spawner, self.running, self.signals)
        self.adopter = Adopter(queue, spawner, self.running, self.pipeline, self.signals, clocks,
                               sink=self._sink, name=self.name, host=self.host, reattached=self.pauser.adopted)
        self.actions = Actions(queue, self.running, self.lanes, self.withdrawals, self.recorder, self.pipeline,
                               self.signals, clocks, end=self._end, log_path=log_path)
        self.gates = Gates(queue, self.running, self.lanes, settings,
                           conditions or Conditions(max_age_s=settings.conditions_check_s),
                           resources or Resources(settings.resources), places=self.places,
                           host=None if places is None else self.host,
                           meta_key="cond_paused" if places is None else f"cond_paused@{self.host}")
        self._next_look = first.awake  # conditions: looked at again from then, while watched (gates.py)
        self.power_events = PowerEvents(lambda: self.conditions_changed(["power"]))
        self._power_task: asyncio.Task[Any] | None = None
        self._power_retry_at = float("-inf")
        queue.on_side_change = self.side_change

    @property
    def on_change(self) -> Callable[[Job], None]:
        """Called with every job the worker changes (the daemon's Control sets it once built)."""
        return self.signals.on_change

    @on_change.setter
    def on_change(self, fn: Callable[[Job], None]) -> None:
        self.signals.on_change = fn

    # ------------------------------------------------------------- control
    def spawn_task(self, coro: Any) -> None:
        """Run ``coro`` on the loop, keeping a reference (the loop keeps only weak ones)."""
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def clock_changed(self) -> None:
        """Called when the timerfd says the wall clock was set or we resumed."""
        self._next_check = float("-inf")
        self.wake()

    # ---------------------------------------------------------------- loop
    async def run(self) -> None:
        try:  # resources or lanes may have changed while no daemon ran: what a held job says is judged again
            self.gates.sweep()
        except Exception:  # a broken database, a row another machine wrote: the loop below must still run
            log.exception("cannot judge held jobs again")
        while not self.stopping:
            self.signals.event.clear()
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
            if self.pipeline.paced():  # a burst: the keeper has work in hand; let a few more ends come in
                await asyncio.sleep(PACE_S)
            await self._sleep(self.next_wake_s())

    async def _sleep(self, timeout_s: float) -> None:
        """Until woken or ``timeout_s`` passes. A timer that sets the wake-up
        event, not wait_for: that makes a task and cancels it on every
        timeout, two or three loop passes more per turn."""
        wake = self.signals.event
        if wake.is_set():
            return
        timer = asyncio.get_running_loop().call_later(timeout_s, wake.set)
        try:
            await wake.wait()
        finally:
            timer.cancel()

    def turn(self, now: ClockReadings | None = None) -> None:
        """One pass of the loop (see the module docstring)."""
        r = now or self.clocks.read()
        if r.awake >= self._next_check:
            self.check_clock(r)
            self.signals.look = True  # now and then, for jobs another process queued in the file
            self.gates.look_expired = True  # ... and for gated leases that expired (gates.py)
        self.heartbeat_due(r)
        self.pipeline.take_back_due(r.awake)
        self.watch_conditions(r)
        claim = self.signals.look or (self._next_due is not None and self._next_due <= self.queue_now(r))
        self.signals.look = False  # a turn for a heartbeat or an fsync alone skips the claim queries
        # a job queued, released, retried or due behind a gate already told is told why it waits too
        self.gates.retell = claim
        # claims and outcomes: one transaction (recording.py)
        self.recorder.write_turn(r, self.claim_due if claim else None)
        self.record_runners(r.awake)
        if r.awake >= self._next_prune:
            self._next_prune = r.awake + PRUNE_EVERY_S
            self.actions.prune(self.settings.retention_s)

    def next_wake_s(self, now: ClockReadings | None = None) -> float:
        r = now or self.clocks.read()
        if self.signals.look:
            return 0.0
        deadlines = [self._next_check - r.awake, self._next_prune - r.awake]
        deadlines += [renew_in(run, r, wall_too=self.queue_time is None) for run in self.running.values()
                      if run.renews]
        deadlines += self.pipeline.take_back_deadlines(r.awake)
        deadlines += [run.record_after - r.awake for run in self.running.values()
                      if run.stage is Stage.ENDED and not run.write_waits]  # written: the fsync deadline below
        deadlines += [run.started_awake + RECORD_RUNNER_AFTER_S - r.awake for run in self.running.values()
                      if run.identity is not None and run.live]
        if self.may_claim() and self._next_due is not None:
            deadlines.append(self._next_due - self.queue_now(r))
        if self.gates.watching:
            deadlines.append(self._next_look - r.awake)
        if self.postponed.holds(r.awake):
            deadlines.append(self.postponed.until - r.awake)
        commits = self.recorder.commits
        if commits.due_at is not None:
            deadlines.append(commits.due_at - r.awake)
        return max(0.0, min(deadlines))

    # --------------------------------------------------------------- clock
    def check_clock(self, r: ClockReadings) -> Jump:
        interval = self.settings.clock_check_s
        jump = self.detector.check(r, expected_s=interval)
        self._next_check = r.awake + interval
        self.last_check_at = r.wall
        for check in self.clock_checks:
            check()
        if jump.kind is not JumpKind.NONE:
            self.last_jump = {"kind": jump.kind.value, "seconds": jump.seconds, "at": r.wall,
                              "describe": jump.describe()}
            log.info("clock: %s", jump.describe())
            for watcher in self.clock_watchers:
                watcher()
            if jump.kind is not JumpKind.STEPPED or jump.seconds > 0:
                self.after_jump()
                self.renew_after_resume(jump.describe())
        return jump

    def renew_after_resume(self, why: str) -> None:
        r = self.clocks.read()
        for run in list(self.running.values()):
            if not run.renews:
                continue
            try:
                record_start(self.queue, run)  # a sleep in its first second reads after its start
                run.job = self.queue.renew_after_resume(run.job.id, run.token, why)
                run.renewed(r)
            except (LeaseLost, JobNotFound):
                self._end(run, Ending(Why.LEASE_LOST))
            except StorageError as e:  # the heartbeat tries again
                log.warning("cannot renew job %d after %s: %s", run.job.id, why, e.message)

    # ---------------------------------------------------------- conditions
    def watch_conditions(self, r: ClockReadings) -> None:
        """While jobs wait on conditions (or run under --on-lost stop): every
        conditions_check_s a claim turn looks again; a run whose conditions
        were lost is ended and requeued without spending a try."""
        self._hear_power(self.gates.watching_power)
        if not self.gates.watching or r.awake < self._next_look:
            return
        self._next_look = r.awake + self.settings.conditions_check_s
        self.signals.look = True
        for run, why, policy in self.gates.lost():
            log.info("job %d: its conditions no longer hold (%s): %s", run.job.id, why,
                     "ending it" if policy == "stop" else "pausing it")
            ending = Ending(Why.CONDITION_LOST, why)
            if policy == "stop":
                self._end(run, ending)
            else:
                self._pause_for_conditions(run, ending.text)
        for run in self.gates.regained():
            self._pause_for_conditions(run, None)

    def _pause_for_conditions(self, run: Run, why: str | None) -> None:
        """--on-lost pause: stop the run's tree (``why``), or continue it (None)."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:  # a turn driven by a test without an event loop
            return
        self.gates.pausing.add(run.job.id)
        self.spawn_task(self._conditions_pause(run, why))

    async def _conditions_pause(self, run: Run, why: str | None) -> None:
        resume = why is None
        try:
            done = await self.pauser.pause([run.job.id], resume=resume,
                                           why=why or "its conditions hold again")
            if done.jobs:
                self.gates.paused_by_condition(run.job.id, not resume)
            for _, reason in done.skipped:
                log.info("job %d not %s: %s", run.job.id, "continued" if resume else "paused", reason)
        except SlothError as e:  # the next look tries again
            log.warning("cannot %s job %d for its conditions: %s", "continue" if resume else "pause",
                        run.job.id, e.message)
        finally:
            self.gates.pausing.discard(run.job.id)
            self.wake()

    def _hear_power(self, wanted: bool) -> None:
        """Power events (udevadm monitor) while a job waits on, or runs under, ac or battery."""
        if not wanted:
            self.power_events.stop()
            return
        now = self.clocks.read().awake
        if self.power_events.available and (self._power_task is None or self._power_task.done()) \
                and now >= self._power_retry_at:
            self._power_retry_at = now + POWER_EVENTS_RETRY_S  # a udevadm that exits at once is not run hot
            try:
                self._power_task = asyncio.get_running_loop().create_task(self.power_events.run())
            except RuntimeError:  # a turn driven by a test, no event loop
                pass

    def conditions_hold(self, when: Sequence[str], cwd: str | None = None) -> str | None:
        """None if the run conditions ``when`` (checks.when_list's spellings)
        hold here now, else why not ("waiting for mains power"), from the
        looks the gates keep (for schedules, and anyone else who asks)."""
        return self.gates.conditions.first_reason(when, cwd)

    def conditions_changed(self, kinds: Sequence[str] = ()) -> None:
        """A power event (or a test): look at the conditions now."""
        self.gates.conditions.forget(kinds)
        self._next_look = float("-inf")
        self.wake()

    # ----------------------------------------------------------- heartbeat
    def queue_now(self, r: ClockReadings) -> float:
        """Now on the queue's clock (due times and leases are on it)."""
        return r.wall if self.queue_time is None else self.queue_time(r)

    def heartbeat_due(self, r: ClockReadings) -> None:
        renewed: list[tuple[str, float]] = []
        for run in list(self.running.values()):
            if not run.renews or renew_in(run, r, wall_too=self.queue_time is None) > TIMER_SLACK_S:
                continue
            try:
                run.job = self.queue.heartbeat(run.job.id, run.token)
            except (LeaseLost, JobNotFound):
                self._end(run, Ending(Why.LEASE_LOST))
                continue
            except StorageError as e:  # not renewed: the keeper ends the run if this lasts a lease
                log.warning("cannot renew the lease of job %d: %s", run.job.id, e.message)
                run.renew_at = boot_of(r) + RENEW_RETRY_S
                continue
            run.renewed(r)
            renewed.append((run.token, trust_until(r, run.job.lease_s)))
        if renewed:
            self.spawner.trust(renewed)

    # ---------------------------------------------------------------- claim
    def slots_in_use(self) -> dict[str, int]:
        """lane -> runs that hold a slot (RunTable.slots_in_use)."""
        return self.running.slots_in_use()

    def may_claim(self) -> bool:
        return not (self.lanes.paused_all or self.stopping or self.postponed.holds(self.clocks.read().awake))

    def claim_due(self, r: ClockReadings) -> None:
        try:
            self._claim_due(r)
            if self.gates.watching and self._next_look <= r.awake:  # it just looked: the next look in a while
                self._next_look = r.awake + self.settings.conditions_check_s
            if self.may_claim():
                self.pipeline.claim_successors(r, self._begin, self.gates.reserved)
        except StorageError as e:  # locked by another process, disk full: claim later, do the rest now
            log.warning("not claiming for now: %s", e.message)
            self._claim_later(r)

    def _claim_later(self, r: ClockReadings) -> None:
        """A claim the database refused (or a unit of claims it did not keep): again in CLAIM_RETRY_S."""
        self._next_due = self.queue_now(r) + CLAIM_RETRY_S

    def _claim_due(self, r: ClockReadings) -> None:
        self._next_due = None
        waiting_lanes = self.gates.lanes_waiting() if self.settings.lane_when else set()
        while self.may_claim():
            # A read-only look first: an empty claim would still cost a write
            # transaction, and this answer is also when to wake up next.
            blocked = self.lanes.blocked(self.slots_in_use()) | waiting_lanes
            mine = set(self.running)  # never re-issue our own live or unrecorded jobs to ourselves
            gated, reserved = self.gates.pick(blocked, mine)  # jobs with conditions, needs, slots (gates.py)
            blocked |= reserved
            due = self.queue.next_due_at(exclude_lanes=blocked, exclude_ids=mine, places=self.places)
            later = self.gates.later
            self._next_due = due if later is None or (due is not None and due < later) else later
            if gated is None and (due is None or due > self.queue_now(r)):
                return
            job = self.queue.claim(self.name, exclude_lanes=blocked, exclude_ids=mine, places=self.places,
                                   gated=None if gated is None else (gated[0].id, gated[1]))
            if job is None:
                return  # another process took it
            self._begin(Run(job, job.token or "", job.attempts), r)

    def _begin(self, run: Run, claimed: ClockReadings) -> None:
        """A run of a job claimed at ``claimed``: held, its spawn sent once the claim is in."""
        self.recorder.claimed(run)
        job = run.job
        self.running.add(run)
        run.renewed(claimed)
        run.started_awake = claimed.awake  # young from now (pipeline.py); a start heard renews it
        extra = {"SLOTH_JOB_ID": str(job.id), "SLOTH_JOB_ATTEMPT": str(run.attempt), "SLOTH_JOB_TOKEN": run.token,
                 "SLOTH_FENCE_TOKEN": run.token, **environment(job.tokens)}
        req = SpawnRequest(
            key=run.token, job_id=job.id, attempt=run.attempt, argv=job.command, cwd=job.cwd,
            env=self.envs.base(job.env), env_extra=extra, log_path=self.log_path(job.id, run.attempt),
            log_cap=self.settings.log_cap_bytes,
            timeout_s=job.timeout_s, kill_grace_s=self.settings.kill_grace_s, previous=ran_here(job.runner, self.host),
            trust_until=trust_until(claimed, job.lease_s),
            term_lead_s=term_lead(job.lease_s, self.settings.kill_grace_s),
            after=run.after.token if run.after is not None else None,
            keep_awake=job.keep_awake, limits=job.limits)
        self.recorder.after_commit(self._send_spawn, run, req)  # never before the claim is in

    def _send_spawn(self, run: Run, req: SpawnRequest) -> None:
        try:
            self.spawner.spawn(req, self._sink(run))
        except Exception as e:  # a bug: the run must not sit in a slot with no process
            log.exception("cannot hand job %d to the spawner", run.job.id)
            self.on_spawn_failed(run, f"not started: internal error {e!r}", True)

    # ---------------------------------------------------- news from spawner
    def on_started(self, run: Run, pid: int, identity: dict[str, Any]) -> None:
        """The process runs. Its identity is written later: with the outcome
        if it ends within RECORD_RUNNER_AFTER_S (one transaction, not two,
        for the many short jobs), else on its own by a turn."""
        run.started(pid, self.clocks.read().awake)  # it runs: no answer to a withdrawal can drop it now
        run.identity = {**identity, "instance": self.instance, "worker": self.name}
        self.postponed.started()
        self.withdrawals.heard()
        self.signals.on_change(run.job)  # a follower waiting for the process may start now
        self.signals.event.set()  # a new deadline (record_runners) ...
        pipe = self.pipeline
        self.signals.look |= pipe.pipelines() and pipe.may_lead(run, run.started_awake,  # ... a lead
                                                                 self.running.slots_in_use())

    def record_runners(self, awake: float) -> None:
        """Write the identity of processes that have run a while (for finding
        them after a crash of sloth, and the history's `started` event)."""
        for run in list(self.running.values()):
            if run.identity is None or not run.live or awake < run.started_awake + RECORD_RUNNER_AFTER_S:
                continue
            try:
                record_start(self.queue, run)
            except (LeaseLost, JobNotFound):
                self._end(run, Ending(Why.LEASE_LOST))
                continue
            except SlothError as e:  # it runs; the next turn tries again
                log.warning("cannot record job %d's process yet: %s", run.job.id, e.message)
                continue
            self.signals.on_change(run.job)

    def on_spawn_failed(self, run: Run, message: str, retry: bool, resource: bool = False) -> None:
        """Not started. Short of descriptors, processes or memory (the keeper's
        own trouble, not the job's): the job waits without spending a try,
        and nothing else is claimed meanwhile (limits.Postponement)."""
        delay = self.postponed.failed(self.clocks.read().awake) if resource else None
        run.ended(Outcome(None, reason=message, spawn_retry=retry, postpone_s=delay))
        unlink(run)
        self.wake()

    def on_exited(self, run: Run, outcome: Outcome) -> None:
        run.ended(outcome)
        self.pipeline.run_ended(run)
        self.wake()

    def on_frozen(self, run: Run, why: str) -> None:
        """The machine slept past the run's trust: renew its lease now (it
        thaws), or end it if the lease is no longer ours."""
        log.info("job %d frozen by the keeper: %s", run.job.id, why)
        self.after_jump()  # the machine slept: its connections may be dead
        r = self.clocks.read()
        try:
            record_start(self.queue, run)
            run.job = self.queue.renew_after_resume(run.job.id, run.token, why)
        except (LeaseLost, JobNotFound):
            self._end(run, Ending(Why.FENCED, "its lease was lost while the machine slept"))
            return
        except SlothError as e:  # cannot tell yet: it stays frozen; the next heartbeat tries again
            log.error("cannot renew job %d after a freeze: %s", run.job.id, e.message)
            return
        run.renewed(r)
        self.spawner.trust([(run.token, trust_until(r, run.job.lease_s))])

    def on_noted(self, run: Run, what: str, message: str) -> None:
        """The keeper says what the run's history should (keep-awake unavailable ...)."""
        try:
            record_start(self.queue, run)  # the history in the order it happened
            run.job = self.queue.note_run(run.job.id, run.token, what, message)
        except LeaseLost:  # just ended (a cancel): still that attempt's history
            try:
                self.queue.note_ended(run.job.id, run.attempt, message, kind=what)
            except SlothError as e:
                log.warning("cannot note on job %d: %s (%s)", run.job.id, message, e.message)
            return
        except JobNotFound:
            return
        except SlothError as e:
            log.warning("cannot note on job %d: %s (%s)", run.job.id, message, e.message)
            return
        self.signals.on_change(run.job)

    def on_taken_back(self, run: Run) -> None:
        self.pipeline.on_taken_back(run)

    def _sink(self, run: Run) -> Sink:
        return Sink(self, run)

    # ---------------------------------------------------------------- ending
    def _end(self, run: Run, ending: Ending, grace_s: float | None = None) -> None:
        """End a run for ``ending`` (Run.stop): its process tree, if it has
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
        self.stopping = True
        self.power_events.stop()
        self.wake()
        if keep_jobs:
            await self.pipeline.take_back_all()
            self.recorder.settle(float("inf"))
            return
        await self.withdrawals.wait(self.withdrawals.ask(list(self.running.values())), TAKE_BACK_WAIT_S)
        for run in list(self.running.values()):
            if run.outcome is None:  # one that already exited is settled as it ended
                self._end(run, Ending(Why.INTERRUPTED))
        # Until every run has ended. An outcome the database still refuses
        # stays with the keeper (not acknowledged) for the next daemon.
        self.recorder.settle(float("inf"))
        while any(r.outcome is None for r in self.running.values()):
            await self._wait_for_outcomes()
            self.recorder.settle(float("inf"))

    async def _wait_for_outcomes(self) -> None:
        """Until a run's end is heard (the sink wakes us)."""
        self.signals.event.clear()
        await self.signals.event.wait()

    # ------------------------------------------------------ news, requests
    def wake(self) -> None:
        """Something changed (a job queued or ended, a lane, a pause): the
        next turn looks for work to claim (and a cancel waiting for the
        keeper's word on a run may have it now)."""
        self.signals.wake()

    def side_change(self, job: Job) -> None:
        """A job changed by another's transition (a dependent queued or cancelled)."""
        self.signals.on_change(job)
        self.wake()

    async def reconcile(self, held: list[dict[str, Any]]) -> None:
        """Take over the runs the keeper lists (adoption.py)."""
        await self.adopter.reconcile(held, kill_grace_s=self.settings.kill_grace_s)

    async def cancel(self, job_id: int) -> Job:
        return await self.actions.cancel(job_id)

    async def cancel_many(self, ids: Sequence[int] | None = None, *, lane: str | None = None,
                          states: Sequence[str] | None = None) -> Batch:
        return await self.actions.cancel_many(ids, lane=lane, states=states)

    async def kill(self, ids: Sequence[int], *, now: bool = False) -> Batch:
        return await self.actions.kill(ids, now=now)

    def retry(self, job_id: int) -> Job:
        return self.actions.retry(job_id, kill_grace_s=self.settings.kill_grace_s)

    def retry_many(self, ids: Sequence[int] | None = None, *, lane: str | None = None,
                   states: Sequence[str] | None = None) -> Batch:
        return self.actions.retry_many(ids, lane=lane, states=states)

    def restart(self, ids: Sequence[int]) -> Batch:
        return self.actions.restart(ids)

    def prune(self, older_than_s: float, *, states: Sequence[str] | None = None, lane: str | None = None,
              dry_run: bool = False) -> int:
        return self.actions.prune(older_than_s, states=states, lane=lane, dry_run=dry_run)

    def pause(self, lane: str | None) -> None:
        self.actions.pause(lane)

    def resume(self, lane: str | None) -> None:
        self.actions.resume(lane)

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

    def remove_lane(self, lane: str) -> None:
        self.actions.remove_lane(lane)

    def apply_settings(self, settings: Settings) -> list[str]:
        """A config reload: new jobs get the new defaults, the next claim,
        heartbeat, kill or prune the new limits. Returns notes on lanes whose
        `sloth lane set` value the new config replaces and on jobs it held
        because this machine can no longer run them (Gates.sweep)."""
        self.settings = settings
        self.queue.lease_s, self.queue.max_attempts = settings.lease_s, settings.max_attempts
        self.queue.backoff_cap_s = settings.backoff_cap_s
        notes = self.lanes.reload(settings)
        self.gates.reload(settings, Resources(settings.resources))
        notes += self.gates.sweep()  # what the new resources or lanes can never run: held, and said
        self.pipeline.take_back()  # lanes may have changed
        self.wake()
        return notes

    # --------------------------------------------------------------- status
    def _lane_counts(self) -> dict[str, dict[str, int]]:
        try:
            return self.queue.lane_counts()
        except SlothError:  # a broken database: status must still answer
            return {}

    def status(self) -> dict[str, Any]:
        running = self.running.values()
        return {
            "lanes": self.lanes.status(self.running.slots_in_use(), self._lane_counts()),
            "paused_all": self.lanes.paused_all,
            "paused_lanes": sorted(self.lanes.paused),
            "running": [{"id": r.job.id, "attempt": r.attempt, "pid": r.pid, "lane": r.job.lane,
                         "adopted": r.adopted, "paused": r.paused}
                        for r in running if r.outcome is None and not r.pending],
            "pending": self.pipeline.pending_status(), "pipeline": self.pipeline.status(),
            "pending_outcomes": [{"id": r.job.id, "attempt": r.attempt, "tries": r.record_tries,
                                  "error": r.record_error} for r in running if r.record_error],
            "last_jump": self.last_jump, "host": self.host, "places": self.places,
            "conditions": self.gates.status(),
            "clock": {"last_check_at": self.last_check_at,
                      "check_interval_s": self.settings.clock_check_s, "timerfd": self.timerfd},
        }

"""What users ask of the worker between its turns: cancel, kill, retry,
restart, prune, pause, resume and lane settings.

The worker's :class:`Actions` (daemon/worker/loop.py delegates to it): each
action is one queue transaction (one request, however many jobs), then the
worker's own part: ending the process trees of cancelled runs, telling
watchers of every job that changed, waking the loop so freed slots fill at
once.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

from sloth_daemon.durations import format_duration
from sloth_daemon.errors import IllegalTransition, JobNotFound, LeaseLost, SlothError
from sloth_daemon.daemon.worker.lanes import Lanes
from sloth_daemon.daemon.worker.pipeline import Pipeline
from sloth_daemon.daemon.worker.recording import Recorder
from sloth_daemon.daemon.worker.lifecycle import Ending, Attempt, Why
from sloth_daemon.daemon.worker.runs import Attempts
from sloth_daemon.daemon.worker.signals import Signals
from sloth_daemon.models import Batch, Job, state_name

if TYPE_CHECKING:
    from sloth_daemon.queue import Queue
    from sloth_daemon.clock import Clocks
    from sloth_daemon.daemon.worker.withdrawal import Withdrawals

End = Callable[[Attempt, Ending, "float | None"], None]


class Actions:
    """Users' requests on jobs and lanes. No state of its own; its
    collaborators: the queue, the worker's runs and lanes, the withdrawals
    (the keeper decides runs not heard started), the recorder (what is
    known is recorded first), the pipeline (a pause takes pending runs back),
    signals, and ``end`` (the worker ends a run's tree: run, reason,
    grace_s or None for the kill_grace_s setting)."""

    def __init__(self, queue: "Queue", running: Attempts, lanes: Lanes, withdrawals: "Withdrawals",
                 recorder: Recorder, pipeline: Pipeline, signals: Signals, clocks: "Clocks", *, end: End,
                 log_path: Callable[[int, int], Path]) -> None:
        self.queue, self.running, self.lanes, self.withdrawals = queue, running, lanes, withdrawals
        self.recorder, self.pipeline, self.signals, self.clocks = recorder, pipeline, signals, clocks
        self.end, self.log_path = end, log_path

    # ---------------------------------------------------------------- jobs
    # A cancel or a kill records nothing about a run whose start the daemon
    # has not heard of until the keeper has decided what became of it
    # (withdrawal.py): first what is decided, then, once the keeper has
    # answered, the rest. A run that started is recorded as started first.
    async def cancel(self, job_id: int, *, message: str = "cancelled by user") -> Job:
        """queue.cancel, once the keeper has decided the job's run, if it has one
        not heard started. Raises as queue.cancel, or IllegalTransition if
        the keeper does not answer in time (nothing changed)."""
        runs = [r for r in self.running.values() if r.job.id == job_id]
        res = await self._withdrawn_first(runs, lambda ids, exclude: Batch([] if job_id in exclude else
                                                                   [self.queue.cancel(job_id, message=message)]),
                                  Why.CANCELLED)
        if res.skipped:
            raise IllegalTransition(res.skipped[0][1], hint="Try again in a moment.")
        return res.jobs[0]

    async def replace(self, job_id: int, why: str) -> None:
        """--overlap replace: end the job's run here and record it cancelled
        (``why``, Why.REPLACED) once its process has ended, so that its
        lane slot and the next occurrence (queued after it) wait for that and
        the two never run side by side. A job not running here (queued, or
        on another machine) is cancelled at once, with ``why``."""
        run = next((r for r in self.running.values() if r.job.id == job_id), None)
        if run is not None and run.live and run.ending is None and not run.cancelling:
            self.end(run, Ending(Why.REPLACED, why), None)
            return
        await self.cancel(job_id, message=why)

    async def cancel_many(self, ids: Sequence[int] | None = None, *, lane: str | None = None,
                          states: Sequence[str] | None = None) -> Batch:
        """Cancel by ids or selection (one transaction, then one for the runs
        the keeper had to decide); end the trees of those running here."""
        if lane is not None:
            self.lanes.check(lane)

        def write(decided: Sequence[int] | None, exclude: set[int]) -> Batch:
            if decided is not None:
                return self.queue.cancel_many(decided)
            return self.queue.cancel_many(ids, lane=lane, states=states, exclude=exclude)
        return await self._withdrawn_first(self._selected(ids, lane, states), write, Why.CANCELLED)

    async def kill(self, ids: Sequence[int], *, now: bool = False) -> Batch:
        """`sloth kill`: cancel running jobs (only), ending their trees at
        once with ``now`` (SIGKILL, no grace). Queued ones are left alone."""
        states = {i: self.queue.get(i).state.value for i in ids}  # JobNotFound before any change
        running = [i for i, s in states.items() if s == "running"]

        def write(decided: Sequence[int] | None, exclude: set[int]) -> Batch:
            todo = [i for i in (running if decided is None else decided) if i not in exclude]
            return self.queue.cancel_many(todo, message="killed by user") if todo else Batch([])
        res = await self._withdrawn_first(self._selected(running, None, None), write, Why.KILLED,
                                  grace_s=0.0 if now else None)
        res.skipped[:0] = [(i, f"job {i} is {s}, not running") for i, s in states.items() if s != "running"]
        return res

    def _selected(self, ids: Sequence[int] | None, lane: str | None, states: Sequence[str] | None) -> list[Attempt]:
        """Our runs of the jobs a request names (a selection's: running ones)."""
        if ids is not None:
            wanted = set(ids)
            return [r for r in self.running.values() if r.job.id in wanted]
        try:
            names = None if states is None else {state_name(s) for s in states}
        except ValueError:
            return []  # the queue refuses the request, saying why
        if (names is not None and "running" not in names) or (lane is None and not names):
            return []
        return [r for r in self.running.values() if lane is None or r.job.lane == lane]

    async def _withdrawn_first(self, runs: list[Attempt], write: Callable[[Sequence[int] | None, set[int]], Batch],
                       reason: Why, grace_s: float | None = None) -> Batch:
        """``write(None, exclude)`` for the request but the jobs of unstarted
        runs (the keeper is asked about those first), then, once the keeper
        has answered, ``write(ids, set())`` for those; the trees of running
        ones are ended with ``reason``. A run still unstarted after
        WITHDRAW_WAIT_S is left as it is, skipped."""
        asked = self.withdrawals.ask(runs, hold=True)  # sent before this pass's kills: nothing they end starts it
        try:
            self._record_known(runs)
            res = self._ended(write(None, {r.job.id for r in asked}), reason, grace_s)
            stuck = await self.withdrawals.wait(asked) if asked else []
        finally:
            for run in asked:
                run.cancelling = False
            self.signals.wake()
        decided = [r for r in asked if r not in stuck]
        if decided:  # no await from here to the write: nothing can claim them again in between
            self._record_known(decided)
            more = self._ended(write([r.job.id for r in decided], set()), reason, grace_s)
            res.jobs.extend(more.jobs)
            res.skipped.extend(more.skipped)
        res.skipped.extend([(r.job.id, f"job {r.job.id} was just handed to the keeper, which has not said whether "
                                   "it started; nothing was changed") for r in stuck])
        return res

    def _record_known(self, runs: list[Attempt]) -> None:
        """What the spawner told of ``runs`` before a cancel is recorded: the
        outcomes of those that ended (a job that finished is finished, not
        cancelled; one never started is given back) and the start of those
        that run (their history says they started, then were cancelled)."""
        if not runs:
            return
        self.recorder.settle(self.clocks.read().awake)
        for run in runs:
            if run.live and run.identity is not None and self.running.get(run.job.id) is run:
                ident, run.identity = run.identity, None
                try:
                    run.job = self.queue.set_runner(run.job.id, run.token, ident)
                except (LeaseLost, JobNotFound):
                    continue
                except SlothError:  # nothing is cancelled then; a turn writes it later
                    run.identity = ident
                    raise

    def _ended(self, res: Batch, reason: Why, grace_s: float | None = None) -> Batch:
        for job in res.jobs:
            run = self.running.get(job.id)
            if run is not None:  # one that ended, its outcome not written yet, is written for the cancel (Attempt.stop)
                self.end(run, Ending(reason), grace_s)
            self.signals.on_change(job)
        return res

    def retry(self, job_id: int, *, kill_grace_s: float) -> Job:
        """queue.retry, refused while a cancelled run of the job is still
        being ended (within ``kill_grace_s``): its new run must not start
        beside the old process."""
        if job_id in self.running:
            raise IllegalTransition(
                f"job {job_id} is still being stopped (its process tree is ending)",
                hint=f"Try again in {format_duration(kill_grace_s)} at most.")
        return self._changed(self.queue.retry(job_id))

    def retry_many(self, ids: Sequence[int] | None = None, *, lane: str | None = None,
                   states: Sequence[str] | None = None) -> Batch:
        if lane is not None:
            self.lanes.check(lane)
        res = self.queue.retry_many(ids, lane=lane, states=states, busy=set(self.running))
        for job in res.jobs:
            self._changed(job)
        return res

    def restart(self, ids: Sequence[int]) -> Batch:
        res = self.queue.restart(ids)
        for job in res.jobs:
            self._changed(job)
        return res

    def _changed(self, job: Job) -> Job:
        self.signals.on_change(job)
        self.signals.wake()
        return job

    def prune(self, older_than_s: float, *, states: Sequence[str] | None = None, lane: str | None = None,
              dry_run: bool = False) -> int:
        n = self.queue.prune(older_than_s, states=states, lane=lane, dry_run=dry_run)
        if n and not dry_run:
            remove_orphan_logs(self.log_path(1, 1).parent, self.queue)
        return n

    # --------------------------------------------------------------- lanes
    def pause(self, lane: str | None) -> None:
        """Nothing more starts: a successor pending in the keeper is taken back too (pipeline.py)."""
        self.lanes.pause(lane)
        self.pipeline.take_back(None if lane is None else [lane])

    def resume(self, lane: str | None) -> None:
        self.lanes.resume(lane)
        self.signals.wake()

    def set_lane(self, lane: str, concurrency: int, *, create: bool = False) -> dict[str, Any]:
        """Takes effect at the next turn, which comes at once: running jobs
        are never touched; freed or added slots fill."""
        out = self.lanes.set(lane, concurrency, create=create)
        self.pipeline.take_back([lane])  # a pending successor would start beside a lowered limit's runs
        self.signals.wake()
        return out

    def remove_lane(self, lane: str) -> None:
        active = self.queue.lane_counts().get(lane, {})
        self.lanes.remove(lane, sum(active.values()))


def remove_orphan_logs(root: Path, queue: "Queue") -> None:
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

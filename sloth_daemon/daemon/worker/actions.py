"""What users ask of the worker between its turns: cancel, kill, retry,
restart, prune, pause, resume, lane settings, a settings reload, and its
status.

A base class of Worker (daemon/worker/loop.py): each action is one queue transaction
(one request, however many jobs), then the worker's own part: ending the
process trees of cancelled runs, telling watchers of every job that
changed, waking the loop so freed slots fill at once.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

from sloth_daemon.config import Settings
from sloth_daemon.durations import format_duration
from sloth_daemon.errors import IllegalTransition, JobNotFound, LeaseLost, SlothError
from sloth_daemon.daemon.worker.lanes import Lanes
from sloth_daemon.models import Batch, Job, state_name

if TYPE_CHECKING:
    from sloth_daemon.queue import Queue
    from sloth_daemon.clock import Clocks
    from sloth_daemon.daemon.worker.spawner import Spawner
    from sloth_daemon.daemon.worker.withdrawal import Withdrawals
    from sloth_daemon.daemon.worker.loop import Run


class WorkerActions:
    queue: "Queue"
    settings: Settings
    spawner: "Spawner"
    lanes: Lanes
    running: dict[int, "Run"]
    on_change: Callable[[Job], None]
    log_path: Callable[[int, int], Path]
    _wake: asyncio.Event
    _look: bool
    last_jump: dict[str, Any] | None
    last_check_at: float | None
    timerfd: bool
    host: str
    places: Any
    clocks: "Clocks"
    withdrawals: "Withdrawals"

    if TYPE_CHECKING:
        def _end(self, run: "Run", reason: str, grace_s: float | None = None) -> None: ...
        def settle(self, awake: float) -> None: ...
        def take_back(self, lanes: "Sequence[str] | None" = None) -> None: ...
        def slots_in_use(self) -> dict[str, int]: ...
        def pending_status(self) -> list[dict[str, object]]: ...
        def pipeline_status(self) -> dict[str, object]: ...

    def wake(self) -> None:
        """Something changed (a job queued or ended, a lane, a pause): the
        next turn looks for work to claim (and a cancel waiting for the
        keeper's word on a run may have it now)."""
        self._look = True
        self._wake.set()
        self.withdrawals.heard()

    def side_change(self, job: Job) -> None:
        """A job changed by another's transition (a dependent queued or cancelled)."""
        self.on_change(job)
        self.wake()

    # ---------------------------------------------------------------- jobs
    # A cancel or a kill records nothing about a run whose start the daemon
    # has not heard of until the keeper has decided what became of it
    # (withdrawal.py): first what is decided, then, once the keeper has
    # answered, the rest. A run that started is recorded as started first.
    async def cancel(self, job_id: int) -> Job:
        """queue.cancel, once the keeper has decided the job's run, if it has one
        not heard started. Raises as queue.cancel, or IllegalTransition if
        the keeper does not answer in time (nothing changed)."""
        runs = [r for r in self.running.values() if r.job.id == job_id]
        res = await self._decided(runs, lambda ids, exclude: Batch([] if job_id in exclude else
                                                                   [self.queue.cancel(job_id)]), "cancelled")
        if res.skipped:
            raise IllegalTransition(res.skipped[0][1], hint="Try again in a moment.")
        return res.jobs[0]

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
        return await self._decided(self._selected(ids, lane, states), write, "cancelled")

    async def kill(self, ids: Sequence[int], *, now: bool = False) -> Batch:
        """`sloth kill`: cancel running jobs (only), ending their trees at
        once with ``now`` (SIGKILL, no grace). Queued ones are left alone."""
        states = {i: self.queue.get(i).state.value for i in ids}  # JobNotFound before any change
        running = [i for i, s in states.items() if s == "running"]

        def write(decided: Sequence[int] | None, exclude: set[int]) -> Batch:
            todo = [i for i in (running if decided is None else decided) if i not in exclude]
            return self.queue.cancel_many(todo, message="killed by user") if todo else Batch([])
        res = await self._decided(self._selected(running, None, None), write, "killed",
                                  grace_s=0.0 if now else None)
        res.skipped[:0] = [(i, f"job {i} is {s}, not running") for i, s in states.items() if s != "running"]
        return res

    def _selected(self, ids: Sequence[int] | None, lane: str | None, states: Sequence[str] | None) -> list["Run"]:
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

    async def _decided(self, runs: list["Run"], write: Callable[[Sequence[int] | None, set[int]], Batch],
                       reason: str, grace_s: float | None = None) -> Batch:
        """``write(None, exclude)`` for the request but the jobs of undecided
        runs (the keeper is asked about those first), then, once the keeper
        has answered, ``write(ids, set())`` for those; the trees of running
        ones are ended with ``reason``. A run still undecided after
        WITHDRAW_WAIT_S is left as it is, skipped."""
        asked = self.withdrawals.ask(runs, hold=True)  # sent before this pass's kills: nothing they end starts it
        try:
            self._record_known(runs)
            res = self._ended(write(None, {r.job.id for r in asked}), reason, grace_s)
            stuck = await self.withdrawals.wait(asked) if asked else []
        finally:
            for run in asked:
                run.deciding = False
            self.wake()
        decided = [r for r in asked if r not in stuck]
        if decided:  # no await from here to the write: nothing can claim them again in between
            self._record_known(decided)
            more = self._ended(write([r.job.id for r in decided], set()), reason, grace_s)
            res.jobs.extend(more.jobs)
            res.skipped.extend(more.skipped)
        res.skipped.extend([(r.job.id, f"job {r.job.id} was just handed to the keeper, which has not said whether "
                                   "it started; nothing was changed") for r in stuck])
        return res

    def _record_known(self, runs: list["Run"]) -> None:
        """What the spawner told of ``runs`` before a cancel is recorded: the
        outcomes of those that ended (a job that finished is finished, not
        cancelled; one never started is given back) and the start of those
        that run (their history says they started, then were cancelled)."""
        if not runs:
            return
        self.settle(self.clocks.read().awake)
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

    def _ended(self, res: Batch, reason: str, grace_s: float | None = None) -> Batch:
        for job in res.jobs:
            run = self.running.get(job.id)
            if run is not None:
                if run.outcome is not None and run.ending is None:  # it ended, its outcome not written yet:
                    run.ending = reason  # the claim is void now; how it ended is noted if it had started
                self._end(run, reason, grace_s)
            self.on_change(job)
        return res

    def retry(self, job_id: int) -> Job:
        """queue.retry, refused while a cancelled run of the job is still
        being ended: its new run must not start beside the old process."""
        if job_id in self.running:
            raise IllegalTransition(
                f"job {job_id} is still being stopped (its process tree is ending)",
                hint=f"Try again in {format_duration(self.settings.kill_grace_s)} at most.")
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
        self.on_change(job)
        self.wake()
        return job

    def prune(self, older_than_s: float, *, states: Sequence[str] | None = None, lane: str | None = None,
              dry_run: bool = False) -> int:
        n = self.queue.prune(older_than_s, states=states, lane=lane, dry_run=dry_run)
        if n and not dry_run:
            remove_orphan_logs(self.log_path(1, 1).parent, self.queue)
        return n

    # --------------------------------------------------------------- lanes
    def pause(self, lane: str | None) -> None:
        """Nothing more starts: a successor held in the keeper is taken back too (pipeline.py)."""
        self.lanes.pause(lane)
        self.take_back(None if lane is None else [lane])

    def resume(self, lane: str | None) -> None:
        self.lanes.resume(lane)
        self.wake()

    def set_lane(self, lane: str, concurrency: int, *, create: bool = False) -> dict[str, Any]:
        """Takes effect at the next turn, which comes at once: running jobs
        are never touched; freed or added slots fill."""
        out = self.lanes.set(lane, concurrency, create=create)
        self.take_back([lane])  # a held successor would start beside a lowered limit's runs
        self.wake()
        return out

    def remove_lane(self, lane: str) -> None:
        active = self.queue.lane_counts().get(lane, {})
        self.lanes.remove(lane, sum(active.values()))

    def apply_settings(self, settings: Settings) -> list[str]:
        """A config reload: new jobs get the new defaults, the next claim,
        heartbeat, kill or prune the new limits. Returns notes on lanes whose
        `sloth lane set` value the new config replaces."""
        self.settings = settings
        self.queue.lease_s, self.queue.max_attempts = settings.lease_s, settings.max_attempts
        self.queue.backoff_cap_s = settings.backoff_cap_s
        notes = self.lanes.reload(settings)
        self.take_back()  # lanes may have changed
        self.wake()
        return notes

    # --------------------------------------------------------------- status
    def _lane_counts(self) -> dict[str, dict[str, int]]:
        try:
            return self.queue.lane_counts()
        except SlothError:  # a broken database: status must still answer
            return {}

    def status(self) -> dict[str, Any]:
        return {
            "lanes": self.lanes.status(self.slots_in_use(), self._lane_counts()),
            "paused_all": self.lanes.paused_all,
            "paused_lanes": sorted(self.lanes.paused),
            "running": [{"id": r.job.id, "attempt": r.attempt, "pid": r.pid, "lane": r.job.lane,
                         "adopted": r.adopted} for r in self.running.values() if r.outcome is None and not r.pending],
            "pending": self.pending_status(), "pipeline": self.pipeline_status(),
            "pending_outcomes": [{"id": r.job.id, "attempt": r.attempt, "tries": r.record_tries,
                                  "error": r.record_error} for r in self.running.values() if r.record_error],
            "last_jump": self.last_jump, "host": self.host, "places": self.places,
            "clock": {"last_check_at": self.last_check_at,
                      "check_interval_s": self.settings.clock_check_s, "timerfd": self.timerfd},
        }


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

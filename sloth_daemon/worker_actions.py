"""What users ask of the worker between its turns: cancel, kill, retry,
restart, prune, pause, resume, lane settings, a settings reload, and its
status.

A base class of Worker (worker.py): each action is one queue transaction
(one request, however many jobs), then the worker's own part: ending the
process trees of cancelled runs, telling watchers of every job that
changed, waking the loop so freed slots fill at once.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

from .config import Settings
from .durations import format_duration
from .errors import IllegalTransition, JobNotFound, SlothError
from .lanes import Lanes
from .models import Batch, Job

if TYPE_CHECKING:
    from .queue import Queue
    from .spawner import Spawner
    from .worker import Run


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

    if TYPE_CHECKING:
        def _end(self, run: "Run", reason: str, grace_s: float | None = None) -> None: ...
        def take_back(self, lanes: "Sequence[str] | None" = None) -> None: ...
        def slots_in_use(self) -> dict[str, int]: ...
        def pending_status(self) -> list[dict[str, object]]: ...
        def pipeline_status(self) -> dict[str, object]: ...

    def wake(self) -> None:
        """Something changed (a job queued or ended, a lane, a pause): the
        next turn looks for work to claim."""
        self._look = True
        self._wake.set()

    def side_change(self, job: Job) -> None:
        """A job changed by another's transition (a dependent queued or cancelled)."""
        self.on_change(job)
        self.wake()

    # ---------------------------------------------------------------- jobs
    def cancel(self, job_id: int) -> Job:
        job = self.queue.cancel(job_id)
        run = self.running.get(job_id)
        if run is not None:
            self._end(run, "cancelled")
        self.on_change(job)
        return job

    def cancel_many(self, ids: Sequence[int] | None = None, *, lane: str | None = None,
                    states: Sequence[str] | None = None) -> Batch:
        """Cancel by ids or selection in one transaction; end the trees of those running here."""
        if lane is not None:
            self.lanes.check(lane)
        return self._ended(self.queue.cancel_many(ids, lane=lane, states=states), "cancelled")

    def kill(self, ids: Sequence[int], *, now: bool = False) -> Batch:
        """`sloth kill`: cancel running jobs (only), ending their trees at
        once with ``now`` (SIGKILL, no grace). Queued ones are left alone."""
        states = {i: self.queue.get(i).state.value for i in ids}  # JobNotFound before any change
        running = [i for i, s in states.items() if s == "running"]
        res = self.queue.cancel_many(running, message="killed by user") if running else Batch([])
        res.skipped[:0] = [(i, f"job {i} is {s}, not running") for i, s in states.items() if s != "running"]
        return self._ended(res, "killed", grace_s=0.0 if now else None)

    def _ended(self, res: Batch, reason: str, grace_s: float | None = None) -> Batch:
        for job in res.jobs:
            run = self.running.get(job.id)
            if run is not None:
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

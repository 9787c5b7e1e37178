"""What the socket server may ask of the daemon: a narrow facade over the
queue, the worker, the spawner and the paths.

The server and its handlers see only this (no worker internals, no process
objects), so they can be driven in-process on a real queue with a fake
spawner, and the worker can change without touching them.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, AsyncIterator, Callable, Iterable, Mapping

from .config import Settings
from .models import Event, Job
from .paths import Paths
from .queue import Queue
from .spawner import Spawner
from .worker import Worker

Watcher = Callable[[Job], None]


class Control:
    def __init__(self, queue: Queue, worker: Worker, spawner: Spawner, paths: Paths, settings: Settings,
                 *, request_stop: Callable[..., None], instance: str) -> None:
        self.queue, self.worker, self.spawner = queue, worker, spawner
        self.paths, self.settings = paths, settings
        self.request_stop = request_stop
        self.instance = instance
        self.started_at = time.time()
        self._watchers: set[Watcher] = set()

    # ------------------------------------------------------------ changes
    def job_changed(self, job: Job) -> None:
        """Called by the worker for every transition it makes."""
        for fn in list(self._watchers):
            fn(job)

    def watch(self, fn: Watcher) -> Callable[[], None]:
        """Call ``fn(job)`` on every change from now on; returns the undo."""
        self._watchers.add(fn)
        return lambda: self._watchers.discard(fn)

    # -------------------------------------------------------------- reads
    def get(self, job_id: int) -> Job:
        return self.queue.get(job_id)

    def events(self, job_id: int) -> list[Event]:
        return self.queue.events(job_id)

    def jobs(self, *, states: list[str] | None, lane: str | None, limit: int) -> list[Job]:
        return self.queue.jobs(lane=lane, limit=limit, states=states)

    def status(self) -> dict[str, Any]:
        return {
            "pid": os.getpid(), "started_at": self.started_at, "uptime_s": time.time() - self.started_at,
            "instance": self.instance, "paths": self.paths.as_dict(), "counts": self.queue.counts(),
            "keeper": {"pid": getattr(self.spawner, "pid", None)},
            **self.worker.status(),
        }

    # ------------------------------------------------------------ actions
    def add(self, specs: Iterable[Mapping[str, Any]]) -> list[int]:
        ids = self.queue.enqueue_many(specs)
        self.worker.wake()
        return ids

    def cancel(self, job_id: int) -> Job:
        return self.worker.cancel(job_id)

    def retry(self, job_id: int) -> Job:
        return self.worker.retry(job_id)

    def pause(self, lane: str | None) -> None:
        self.worker.pause(lane)

    def resume(self, lane: str | None) -> None:
        self.worker.resume(lane)

    def prune(self, older_than_s: float) -> int:
        return self.worker.prune(older_than_s)

    def shutdown(self, why: str, *, keep_jobs: bool = False) -> None:
        """Stop the daemon; ``keep_jobs``: its running jobs go on in the keeper."""
        self.request_stop(why, keep_jobs=keep_jobs)

    # --------------------------------------------------------------- logs
    def log_path(self, job_id: int, attempt: int) -> Path:
        return self.paths.job_log(job_id, attempt)

    def has_process(self, job_id: int) -> bool:
        """True while an attempt of the job has a live process of ours."""
        run = self.worker.running.get(job_id)
        return run is not None and run.live

    def follow(self, job_id: int, attempt: int) -> AsyncIterator[bytes] | None:
        """The live output of that attempt (what it printed so far, then
        more as it comes, until it ends), or None if it is not running here."""
        run = self.worker.running.get(job_id)
        if run is None or run.attempt != attempt or not run.live:
            return None
        return self.spawner.tap(run.token)

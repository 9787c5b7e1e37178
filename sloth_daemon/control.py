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
from typing import Any, AsyncIterator, Callable, Iterable, Mapping, Sequence

from .config import Settings
from .errors import FieldError, SlothError
from .models import Event, Job
from .paths import Paths
from .queue import Queue
from .spawner import Spawner
from .spec import Defaults, EnvCache, JobSpec
from .worker import Worker

Watcher = Callable[[Job], None]


class Control:
    def __init__(self, queue: Queue, worker: Worker, spawner: Spawner, paths: Paths, settings: Settings,
                 *, request_stop: Callable[[str], None], instance: str) -> None:
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
        """Answers even when the database is broken or gone (then ``counts``
        is None and ``queue.problem`` says why), so `sloth daemon status` and
        `stop` work whatever happened to the file."""
        queue: dict[str, Any] = {"id": self.queue.identity, "problem": None}
        try:
            self.queue.check()
            counts: dict[str, int] | None = self.queue.counts()
        except SlothError as e:
            queue["problem"], counts = e.message, None
        return {
            "pid": os.getpid(), "started_at": self.started_at, "uptime_s": time.time() - self.started_at,
            "instance": self.instance, "paths": self.paths.as_dict(), "counts": counts, "queue": queue,
            **self.worker.status(),
        }

    # ------------------------------------------------------------ actions
    def add(self, specs: Iterable[Mapping[str, Any] | JobSpec], *, batch: str | None = None) -> list[int]:
        """Queue the jobs, all or none (recorded under ``batch`` if given)."""
        ids = self.queue.enqueue_many(specs, batch=batch)
        self.worker.wake()
        return ids

    def validate(self, jobs: Sequence[Mapping[str, Any]], *, first: int = 1) -> list[JobSpec]:
        """Each job checked as the queue would (so a batch is refused before any
        of it is queued); an error names the job's place in its batch."""
        defaults = Defaults(self.settings.max_attempts, self.settings.lease_s)
        cache: EnvCache = {}
        out = []
        for i, job in enumerate(jobs, first):
            try:
                out.append(JobSpec.parse(job, defaults, cache))
            except FieldError as e:
                raise FieldError(e.field, f"{e.problem} (job {i} of the batch)", e.hint) from None
        return out

    def batch_ids(self, token: str) -> list[int] | None:
        return self.queue.batch_ids(token)

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

    def shutdown(self, why: str) -> None:
        self.request_stop(why)

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

"""Nobody hears of an outcome before it is durable (group commit).

The worker writes outcomes without an fsync, then makes them durable with
one, and only then acknowledges them to the keeper (which keeps an outcome
until then) and tells watchers (``wait`` returns, notifications go out).

Two ways, the same promise:
- inline (tests, a queue without ``sync``, such as PostgreSQL's, whose
  commits are durable on return): the last write of a batch is durable, or
  ``queue.flush()`` runs on the caller's thread;
- threaded (the daemon on SQLite): ``queue.sync()`` -- an fsync of the
  write-ahead log on a descriptor of its own -- runs in a thread, so the
  loop claims and starts the next jobs while the disk catches up, and the
  outcomes that end meanwhile share the next fsync. A short job no longer
  waits for the previous one's fsync to start.
"""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

from .errors import SlothError
from .queue import Queue
from .runs import Run

log = logging.getLogger("sloth.worker")
RETRY_SYNC_S = 1.0  # after an fsync failed (EIO, a full disk): the outcomes wait, untold


class GroupCommit:
    def __init__(self, queue: Queue, tell: Callable[[list[Run]], None], *, threaded: bool = False) -> None:
        self.queue, self.tell = queue, tell
        self.threaded = threaded and callable(getattr(queue, "sync", None))
        self.waiting: list[Run] = []  # written, to be told after the next fsync
        self._task: asyncio.Task[None] | None = None
        self._pool: ThreadPoolExecutor | None = None
        self._closing = False

    def write_durably(self, last: bool) -> bool:
        """Whether this write (the ``last`` of a batch) should carry the fsync itself."""
        return last and not self.threaded

    def written(self, runs: list[Run], *, durable: bool) -> None:
        """``runs`` have their outcomes written (``durable``: the last write
        fsynced them all). Tell once durable; until then they stay in the
        worker's table (never claimed again by us, never forgotten)."""
        runs = [r for r in runs if not r.syncing]
        if not runs:
            return
        if durable:
            self.tell(runs)
        elif not self.threaded:
            if self._flush():
                self.tell(runs)  # else the next settle tries again
        else:
            for r in runs:
                r.syncing = True
            self.waiting += runs
            if self._task is None:
                self._task = asyncio.get_running_loop().create_task(self._sync_loop())

    def _flush(self) -> bool:
        try:
            self.queue.flush()
            return True
        except SlothError as e:
            log.error("cannot make recorded outcomes durable yet: %s", e.message)
            return False

    async def _sync_loop(self) -> None:
        loop = asyncio.get_running_loop()
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sloth-fsync")
        try:
            while self.waiting:
                batch, self.waiting = self.waiting, []
                try:
                    await loop.run_in_executor(self._pool, self.queue.sync)
                except SlothError as e:
                    log.error("cannot make %d recorded outcome(s) durable yet: %s", len(batch), e.message)
                    self.waiting = batch + self.waiting
                    if self._closing:
                        return  # untold and unacknowledged: the keeper offers them to the next daemon
                    await asyncio.sleep(RETRY_SYNC_S)
                    continue
                self.tell(batch)
        finally:
            self._task = None

    async def drain(self) -> None:
        """Until every written outcome is durable and told (before the queue
        closes); a sync that fails now is not retried."""
        self._closing = True
        while self._task is not None:
            await asyncio.wait([self._task])
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None

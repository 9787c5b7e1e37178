"""Nobody hears of an outcome before it is durable (group commit).

The worker writes outcomes without an fsync, then makes them durable with
one, and only then acknowledges them to the keeper (which keeps an outcome
until then) and tells watchers (``wait`` returns, notifications go out).

``delay_s`` 0 (tests, a library): the last write of a turn's batch carries
the fsync. The daemon waits up to ``delay_s`` (a few milliseconds) for more
outcomes to share it, as PostgreSQL's commit_delay does: a run of short
jobs pays one fsync per few jobs instead of one each, and the next job
starts before it. An outcome that comes alone -- long after the one
before it, or with no other run held that could end meanwhile -- is made
durable at once: the delay would only make its `add --wait` wait. The fsync is ``queue.sync()`` where the queue has one
(SQLite: an fsync of its write-ahead log, with no write of its own), else
``queue.flush()``. An fsync in a thread was tried and measured worse: the
handoff of the interpreter lock between the loop and the thread cost more
CPU per job than the fsync it moved.
"""

from __future__ import annotations

import logging
from typing import Callable, Iterable

from sloth_daemon.errors import SlothError
from sloth_daemon.queue import Queue
from sloth_daemon.daemon.worker.lifecycle import Attempt, Stage

log = logging.getLogger("sloth.worker")
RETRY_SYNC_S = 1.0  # after an fsync failed (EIO, a full disk): the outcomes wait, untold
# An outcome this long after the one before it starts no group: the ones
# that could share its fsync come within the delay of each other, in bursts.
ISOLATED_S = 0.05


class GroupCommit:
    def __init__(self, queue: Queue, tell: Callable[[list[Attempt]], None], *, delay_s: float = 0.0) -> None:
        self.queue, self.tell, self.delay_s = queue, tell, delay_s
        self.waiting: list[Attempt] = []  # written, to be told after the next fsync
        self.due_at: float | None = None  # awake clock: when to fsync them
        self.retrying = False  # the last fsync failed: the next waits RETRY_SYNC_S, alone or not
        self.last_at: float | None = None  # awake clock: when the last outcome was written
        self.isolated = False  # the waiting group began with an outcome long after the one before

    def write_durably(self, last: bool) -> bool:
        """Whether this write (the ``last`` of a turn's batch) should carry the fsync itself."""
        return last and self.delay_s <= 0

    def written(self, runs: list[Attempt], *, durable: bool, awake: float) -> None:
        """``runs`` have their outcomes written (``durable``: the last write
        fsynced them all). Tell once durable; until then they stay in the
        worker's table (never claimed again by us, never forgotten)."""
        runs = [r for r in runs if r.stage is Stage.WRITTEN]
        if not runs:
            return
        if durable:
            self.tell(runs)
            return
        for r in runs:
            r.syncing()
        self.waiting += runs
        if self.due_at is None:
            self.due_at = awake + max(self.delay_s, 0.0)
            self.isolated = self.last_at is None or awake - self.last_at > ISOLATED_S
        self.last_at = awake
        if self.delay_s <= 0:
            self.flush(awake)

    def now(self, held: Iterable[Attempt]) -> bool:
        """Whether to fsync the waiting outcomes now rather than at the end
        of the delay, when none is likely to come and share it: they began
        in no burst (``isolated``: an outcome long after the one before), or
        nothing else is ``held`` (no run running, claimed, pending, or ended
        but not written). An `add --wait -- true` hears of its end delay_s
        sooner. Not while an fsync that failed waits to be tried again."""
        if not self.waiting or self.retrying:
            return False
        return self.isolated or all(r.stage is Stage.SYNCING for r in held)

    def flush(self, awake: float) -> None:
        """Make the waiting outcomes durable now (one fsync) and tell; if
        the fsync fails they stay untold, and it is tried again later."""
        if not self.waiting:
            self.due_at = None
            return
        try:
            self.queue.sync()
        except SlothError as e:
            log.error("cannot make %d recorded outcome(s) durable yet: %s", len(self.waiting), e.message)
            self.due_at, self.retrying = awake + RETRY_SYNC_S, True
            return
        batch, self.waiting, self.due_at, self.retrying = self.waiting, [], None, False
        self.tell(batch)

"""Runs whose start the daemon has not heard of: the keeper decides what
became of them, and the daemon records only what it was told.

A run is *unstarted* (lifecycle.NOT_STARTED) from its spawn until the
spawner says it started, ended, never started or could not start. A run
pending in the keeper behind another (pipeline.py) is unstarted for its
whole wait, and in a burst the keeper starts pending runs one after
another with no round trip: what the daemon believes pending may have
started, or ended, a moment ago. So a cancel, a kill or a stop never
records anything about an unstarted run on the daemon's guess. It asks
the keeper to withdraw it (the wire's ``unspawn``);
the keeper, the one place that knows, either drops it unstarted (the sink
hears ``taken_back``: it never ran, and never will), or it had started it
already, and then its ``started`` (and ``exited``, if it ended) came
before the answer on the same connection. Only once the keeper has
answered for each run does the daemon write: a run that never started is given back or
cancelled as never started; a run that started is recorded as started,
then cancelled or interrupted as a running job, and its end as it ended.

A cancel holds the outcome of a run it withdrew (``Attempt.cancelling``): a
run dropped unstarted must not be given back to the queue, and claimed
again, before the cancel that asked for it is recorded.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Iterable

from sloth_daemon.daemon.worker.lifecycle import NOT_STARTED, Attempt
from sloth_daemon.daemon.worker.runs import Attempts

if TYPE_CHECKING:
    from sloth_daemon.daemon.worker.spawner import Spawner

WITHDRAW_WAIT_S = 5.0  # at most, for the keeper's answers; a run still unstarted then is left as it is


class Withdrawals:
    """Asks the spawner to withdraw unstarted runs and wakes who waits for
    its answers. ``running``: the worker's runs (a run no longer there is
    answered for: the worker has settled it)."""

    def __init__(self, spawner: "Spawner", running: Attempts) -> None:
        self.spawner, self.running = spawner, running
        self._waiting: list[tuple[list[Attempt], asyncio.Future[None]]] = []

    def unstarted(self, run: Attempt) -> bool:
        return run.stage in NOT_STARTED and self.running.get(run.job.id) is run

    def ask(self, runs: Iterable[Attempt], *, hold: bool = False) -> list[Attempt]:
        """Ask the spawner to withdraw each unstarted run of ``runs`` (once:
        one already being withdrawn keeps its question); the unstarted.
        ``hold``: their outcomes wait (Attempt.cancelling) until the caller is done."""
        out = [r for r in runs if self.unstarted(r)]
        for run in out:
            run.cancelling = run.cancelling or hold
            if run.withdraw():
                self.spawner.unspawn(run.token)
        return out

    async def wait(self, runs: list[Attempt], wait_s: float | None = None) -> list[Attempt]:
        """Until the keeper has answered for each of ``runs``, ``wait_s``
        (WITHDRAW_WAIT_S) at most; those still unstarted."""
        wait_s = WITHDRAW_WAIT_S if wait_s is None else wait_s
        if any(self.unstarted(r) for r in runs):
            fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            entry = (runs, fut)
            self._waiting.append(entry)
            try:
                await asyncio.wait_for(asyncio.shield(fut), wait_s)
            except asyncio.TimeoutError:
                pass
            finally:
                self._waiting.remove(entry)
        return [r for r in runs if self.unstarted(r)]

    def heard(self) -> None:
        """News of a run came (started, ended, taken back, settled): wake
        each waiter whose runs are all answered for now."""
        for runs, fut in self._waiting:
            if not fut.done() and not any(self.unstarted(r) for r in runs):
                fut.set_result(None)

"""Pausing running jobs on request (`sloth pause --job ID`, `sloth pause
LANE --jobs`) and continuing them (`sloth resume --job ID`).

The keeper stops a run's whole tree (SIGSTOP, until a look at the tree
finds nothing new) and holds that state (keeper/kept_runs.py: it survives a
daemon restart, and the run's timeout does not count paused time); the
queue records it (``paused_run``: ``ls`` shows ``paused``). A paused run
keeps its lease (the worker renews it as ever: it is alive) and its lane's
slot. A cancel or kill of a paused run works as of any other: the keeper
continues the tree after its SIGTERM so it can end.

Named by the worker (loop.py) as ``pauser``; no state of its own.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Sequence

from sloth_daemon.errors import JobNotFound, LeaseLost, SlothError
from sloth_daemon.daemon.worker.lifecycle import NOT_STARTED, Attempt
from sloth_daemon.daemon.worker.runs import Attempts, record_start
from sloth_daemon.daemon.worker.signals import Signals
from sloth_daemon.models import Batch, Job, JobState

if TYPE_CHECKING:
    from sloth_daemon.queue import Queue
    from sloth_daemon.daemon.worker.spawner import Spawner

log = logging.getLogger("sloth.worker")


class Pauser:
    """Pauses and continues the runs the worker holds (``running``) through
    the spawner (the keeper), recording each change in the queue and
    telling watchers (``signals``)."""

    def __init__(self, queue: "Queue", spawner: "Spawner", running: Attempts, signals: Signals) -> None:
        self.queue, self.spawner, self.running, self.signals = queue, spawner, running, signals

    async def pause(self, ids: Sequence[int] | None = None, *, lane: str | None = None,
                    resume: bool = False, why: str | None = None) -> Batch:
        """Pause (or with ``resume`` continue) the running jobs ``ids``, or
        every running job of ``lane``, or (neither) every running job here.
        Jobs named that are not running here, or already paused (resume:
        not paused), are skipped, each with why; a lane's or every job
        leaves those out. Raises JobNotFound
        (an unknown id, before any change) or KeeperError. ``why``: said
        first in the history's event (a condition lost: gates.py)."""
        runs, skipped = self._select(ids, lane, resume)
        if not runs:
            return Batch([], skipped)
        for run in runs:  # an end heard meanwhile is written after this change's event
            run.pause_asks += 1
        try:
            answer = await self.spawner.pause([r.token for r in runs], resume=resume)
        finally:
            for run in runs:
                run.pause_asks -= 1
            self.signals.event.set()  # an outcome that waited meanwhile is written now
        jobs: list[Job] = []
        for run in runs:
            res: dict[str, Any] = answer.get("runs", {}).get(run.token) or {}
            if res.get("error"):
                skipped.append((run.job.id, str(res["error"].get("message"))))
            elif res.get("already"):
                skipped.append((run.job.id, f"job {run.job.id} is already paused"))
            elif res.get("resumed" if resume else "paused"):
                jobs.append(self._record(run, not resume, res, why))
            elif resume and res.get("state") not in (None, "exited"):
                skipped.append((run.job.id, f"job {run.job.id} is not paused"))
            elif run.token in answer.get("runs", {}):
                skipped.append((run.job.id, f"job {run.job.id}'s process has ended"))
        unknown = set(answer.get("unknown", ()))
        skipped += [(r.job.id, f"job {r.job.id}'s process is not held by the keeper")
                    for r in runs if r.token in unknown]
        return Batch(jobs, skipped)

    def _select(self, ids: Sequence[int] | None, lane: str | None,
                resume: bool) -> tuple[list[Attempt], list[tuple[int, str]]]:
        skipped: list[tuple[int, str]] = []
        if ids is None:
            return [r for r in self.running.values() if r.live and not r.ending and r.paused == resume
                    and (lane is None or r.job.lane == lane)], skipped
        runs = []
        for job_id in dict.fromkeys(ids):
            job = self.queue.get(job_id)  # JobNotFound before any change
            run = self.running.get(job_id)
            if job.state is not JobState.RUNNING:
                skipped.append((job_id, f"job {job_id} is {job.state.value}, not running"))
            elif run is None or run.token != job.token:
                skipped.append((job_id, f"job {job_id} runs on another machine ({job.worker or '?'})"))
            elif not run.live or run.ending:
                skipped.append((job_id, f"job {job_id} has not started yet" if run.stage in NOT_STARTED
                                else f"job {job_id}'s process is ending"))
            else:
                runs.append(run)
        return runs, skipped

    def _record(self, run: Attempt, paused: bool, res: dict[str, Any], why: str | None = None) -> Job:
        run.set_paused(paused)
        if paused:
            message = f"{res.get('processes', 0)} process(es) stopped; its lease and slot are kept"
        else:
            message = f"after {format_span(res.get('paused_s'))} paused"
        if why:
            message = f"{why}; {message}"
        try:
            record_start(self.queue, run)  # a pause in the run's first second reads after its start
            at = res.get("paused_at" if paused else "resumed_at")
            at = at if isinstance(at, (int, float)) else None
            run.job = self.queue.set_paused(run.job.id, run.token, paused, message, at=at)
        except LeaseLost:  # no longer ours: what the keeper did is still that attempt's history
            try:
                self.queue.note_ended(run.job.id, run.attempt, message, ended_at=at,
                                      kind="paused" if paused else "continued")
            except SlothError as e:
                log.warning("cannot note job %d %s: %s", run.job.id, "paused" if paused else "continued", e.message)
            return run.job
        except JobNotFound:
            return run.job
        except SlothError as e:  # the keeper holds the truth; the next daemon's adoption writes it
            log.error("cannot record job %d as %s: %s", run.job.id, "paused" if paused else "continued", e.message)
            return run.job
        self.signals.on_change(run.job)
        return run.job

    def adopted(self, run: Attempt, kept: dict[str, Any]) -> None:
        """A run taken over from the keeper (adoption.py): the keeper's word
        on whether it is paused is the truth; the queue is made to agree."""
        paused = bool(kept.get("paused"))
        run.set_paused(paused)
        if run.job.paused != paused and run.outcome is None:
            try:
                run.job = self.queue.set_paused(run.job.id, run.token, paused, "as the keeper holds it")
            except SlothError as e:
                log.warning("cannot record job %d's pause as the keeper holds it: %s", run.job.id, e.message)


def format_span(s: Any) -> str:
    from sloth_daemon.durations import format_duration

    return format_duration(float(s)) if isinstance(s, (int, float)) and not isinstance(s, bool) else "a while"

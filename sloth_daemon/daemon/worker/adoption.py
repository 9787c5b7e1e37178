"""Taking over runs that outlived the daemon that started them.

At start (and whenever the connection to the keeper is made again) the
keeper lists the runs it holds: running, frozen by a suspend, or ended with
an outcome nobody has recorded yet. Each is matched by its token to a job
the queue says a daemon of this host holds:
  - running or frozen: adopted (lease renewed, worker renamed, an
    ``adopted`` event), trusted again (a frozen one thaws), and watched as
    if we had started it;
  - ended: adopted with its real exit status and end time, recorded by the
    next turn, not run again;
  - pending (to start after another run, pipeline.py): adopted as
    such behind that run and taken back at once (nothing it waits for is
    young any more): the queue gets it back as never claimed, unless it
    started meanwhile (then it is an ordinary run);
  - kept by the keeper but not ours in the queue (cancelled, or its lease
    taken): ended, and its outcome acknowledged.
A job the queue says we hold that no keeper knows lost its supervision with
the keeper (a reboot, a power cut, everything killed): its leftover
processes are ended (by identity, else by the token in their environment)
and the job is given back to the queue (``abandoned``), to run again.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any, Callable

from sloth_daemon.clock import Clocks
from sloth_daemon.errors import JobNotFound, LeaseLost, SlothError
from sloth_daemon.models import Job
from sloth_daemon.daemon.worker.pipeline import Pipeline
from sloth_daemon.daemon.worker.lifecycle import NOT_STARTED, Attempt, Stage
from sloth_daemon.daemon.worker.runs import Attempts, is_daemon_on_host, record_start, trust_until
from sloth_daemon.daemon.worker.signals import Signals
from sloth_daemon.daemon.worker.spawner import Outcome, RunSink

if TYPE_CHECKING:
    from sloth_daemon.queue import Queue
    from sloth_daemon.daemon.worker.spawner import Spawner

log = logging.getLogger("sloth.worker")


class Adopter:
    """Reconciles the worker's runs with the keeper's (see the module
    docstring). No state of its own: it adds the runs it adopts to the
    worker's runs, each with a sink from ``sink`` (the worker hears of them
    as of its own), under the worker's ``name`` on ``host``; a pending one
    it hands to the pipeline to take back."""

    def __init__(self, queue: "Queue", spawner: "Spawner", running: Attempts, pipeline: Pipeline, signals: Signals,
                 clocks: Clocks, *, sink: Callable[[Attempt], RunSink], name: str, host: str,
                 reattached: Callable[[Attempt, dict[str, Any]], None] = lambda run, kept: None) -> None:
        self.queue, self.spawner, self.running, self.pipeline = queue, spawner, running, pipeline
        self.signals, self.clocks = signals, clocks
        self.sink, self.name, self.host = sink, name, host
        self.reattached = reattached  # what else the keeper holds of a live run (a pause: pausing.py)

    async def reconcile(self, kept: list[dict[str, Any]], *, kill_grace_s: float) -> None:
        """Match the runs the keeper lists (``kept``) with the queue's; end
        what is neither's with ``kill_grace_s`` between SIGTERM and SIGKILL."""
        by_key = {h["key"]: h for h in kept if isinstance(h, dict) and isinstance(h.get("key"), str)}
        # A run of ours the keeper no longer knows, and whose end we have not
        # heard: the keeper that ran it is gone (a new one answered).
        lost = [run for run in self.running.values() if run.token not in by_key and run.outcome is None]
        for run in list(self.running.values()):
            h = by_key.pop(run.token, None)
            if h is not None:
                self._reattach(run, h)
        orphaned = []
        for job in self.queue.claimed():
            if job.id in self.running or not is_daemon_on_host(job.worker, self.host) or not job.token:
                continue
            h = by_key.pop(job.token, None)
            if h is None:
                orphaned.append(job)
            else:
                self._adopt(job, h, kill_grace_s)
        self._disown(list(by_key.values()), kill_grace_s)
        self._link_pending(kept)
        await self._end_leftovers(orphaned, lost, kill_grace_s)
        self.signals.wake()

    def _link_pending(self, kept: list[dict[str, Any]]) -> None:
        """Each pending run behind its predecessor where we hold both (else
        it counts as running: a slot, until it starts or is dropped), and
        taken back at once: no run it waits for is young any more."""
        by_token: dict[Any, Attempt] = {run.token: run for run in self.running.values()}
        for h in (h for h in kept if isinstance(h, dict) and h.get("state") == "pending"):
            run, pred = by_token.get(h.get("key")), by_token.get(h.get("after"))
            if run is None or run.stage not in NOT_STARTED:
                continue
            if pred is not None:
                run.after, pred.successor = pred, run
            self.pipeline.take_back_run(run)

    def _adopt(self, job: Job, h: dict[str, Any], kill_grace_s: float) -> None:
        what = {"exited": "its outcome kept", "pending": "held to start after another run"}.get(
            str(h.get("state")), f"pid {h.get('pid')} kept running")
        try:
            if unwritten_start(job, h):  # its daemon died in its first second: the start goes first
                job = self.queue.set_runner(job.id, job.token or "", {**h["identity"], "worker": job.worker})
            job = self.queue.adopt(job.id, job.token or "", self.name, message=f"by {self.name}; {what}")
        except (LeaseLost, JobNotFound):
            self._disown([h], kill_grace_s)
            return
        pid = _int(h.get("pid"))
        run = Attempt(job, job.token or "", _int(h.get("attempt")) or job.attempts, pid=pid, adopted=True,
                  stage=Stage.CLAIMED if pid is None else Stage.RUNNING)
        self.running.add(run)
        self.signals.on_change(job)
        self._reattach(run, h)

    def _reattach(self, run: Attempt, h: dict[str, Any]) -> None:
        self.spawner.attach(run.token, self.sink(run))
        if h.get("state") == "exited" and run.outcome is None:
            run.ended(Outcome.from_wire(h.get("outcome") or {}))
        elif run.outcome is None:
            if run.stage in NOT_STARTED and (pid := _int(h.get("pid"))) is not None:
                run.started(pid, run.started_awake)
            self.spawner.trust([(run.token, trust_until(self.clocks.read(), run.job.lease_s))])
            self.reattached(run, h)

    def _disown(self, kept: list[dict[str, Any]], kill_grace_s: float) -> None:
        """Runs the keeper keeps that are not ours in the queue: ended, and
        their ends acknowledged (nothing recorded), so neither the keeper
        nor its client holds them on (a daemon with idle_exit_s would stay
        for them for ever)."""
        for h in kept:
            if h.get("state") == "exited":
                self.spawner.ack([h["key"]])
            else:
                log.warning("keeper run %s (job %s) is not ours in the queue; ending it", h["key"], h.get("job_id"))
                self.spawner.attach(h["key"], Disowned(h["key"], self.spawner))
                self.spawner.kill(h["key"], "lease lost", kill_grace_s)

    async def _end_leftovers(self, orphaned: list[Job], lost: list[Attempt], kill_grace_s: float) -> None:
        """Jobs whose supervision is gone: end what is left of their
        processes (all at once, off the event loop), then give them back."""
        if not orphaned and not lost:
            return
        runs = {j.token or "": j.runner for j in orphaned} | {r.token: r.job.runner for r in lost}
        loop = asyncio.get_running_loop()
        ended = await loop.run_in_executor(None, _end_processes, runs, kill_grace_s)
        for run in lost:
            self.running.drop(run)
        for run in lost:  # it had started: its history says so before it was given back
            try:
                record_start(self.queue, run)
            except SlothError:
                pass
        for job in orphaned + [r.job for r in lost]:
            why = "its supervision was lost (the keeper is gone)"
            if job.token in ended:
                why += "; its leftover process was ended"
            try:
                self.signals.on_change(self.queue.abandon(job.id, job.token or "", message=why, refund=True))
            except (LeaseLost, JobNotFound):
                pass
            except SlothError as e:
                log.error("cannot give job %d back to the queue: %s", job.id, e.message)


class Disowned:
    """The sink of a kept run that is not ours (Adopter._disown): its end
    (or its failed start) is acknowledged; nothing else is ours to hear."""

    def __init__(self, key: str, spawner: "Spawner") -> None:
        self.key, self.spawner = key, spawner

    def _ended(self) -> None:
        self.spawner.ack([self.key])

    def exited(self, outcome: Outcome) -> None:
        self._ended()

    def spawn_failed(self, message: str, retry: bool, resource: bool = False) -> None:
        self._ended()

    def started(self, pid: int, identity: dict[str, Any]) -> None:
        pass

    def frozen(self, why: str) -> None:
        pass

    def taken_back(self) -> None:
        pass

    def noted(self, what: str, message: str) -> None:
        pass

    def progressed(self, progress: dict[str, Any]) -> None:
        pass


def _end_processes(runs: dict[str, dict[str, Any] | None], grace_s: float) -> set[str]:
    """End the processes of these runs (token -> recorded identity), found by
    identity or by the job token in their environment; the tokens whose
    processes were found."""
    from sloth_daemon.keeper import procident  # here: psutil only when leftovers are looked for (docs/idle.md)

    by_token = procident.find_by_env_values("SLOTH_JOB_TOKEN", set(runs))
    procs, groups, found = [p for ps in by_token.values() for p in ps], [], {t for t, ps in by_token.items() if ps}
    for token, ident in runs.items():
        tree = procident.tree_of(ident)
        if tree:
            groups.append(tree[0].pid)
            procs += tree
            found.add(token)
    if procs:  # all at once: one grace period, however many leftovers
        procident.end_all(procs, grace_s, groups=groups)
    return found


def unwritten_start(job: Job, h: dict[str, Any]) -> bool:
    """The keeper started this run but the queue has not written so (its
    ``started`` event; the identity is written a second into a run)."""
    ident = h.get("identity")
    if not isinstance(ident, dict) or _int(ident.get("pid")) is None:
        return False
    mine = job.runner or {}
    return (mine.get("pid"), mine.get("start")) != (ident.get("pid"), ident.get("start"))


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None

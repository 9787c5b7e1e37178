"""One handler per request type of the control socket, one module per
family of commands (as on the client):

  - here: the daemon (ping, status, config, reload, shutdown), adding jobs
    (add, and the batches: stage, commit, batch, batch_show) and reading them (list,
    scan, show, logs, latest, timeline);
  - job_ops.py: cancel, retry, restart, kill, prune, pause_jobs, resume_jobs;
  - lane_ops.py: pause, resume, lanes, lane_set, lane_rm;
  - edit_ops.py: edit, bump, hold, release;
  - schedules/ops.py: the schedule_* ops;
  - telling/ops.py: outbox, outbox_retry, outbox_drop;
  - streams.py: wait, follow, subscribe (a Streams the Handlers own: it
    holds the open streams, ended together on close); ``scan`` (a listing of
    any size, streamed) is here beside ``list``, its stream listing_stream.py's.

Each handler checks its arguments (the frame is untrusted: request_args.py)
and asks the object that does the work -- the queue, the worker's Actions,
the scheduler -- or the daemon's Control for what it adds (placement,
validation, watchers, the composed status); a SlothError becomes the error
response. Connections, framing and peer checks are server.py's.

The families a job's path and the idle loop never use (edits, schedules,
the outbox) and the timeline and the streamed listing are imported at their
first request (LAZY: a daemon at rest holds only what it ran; docs/idle.md).

Ops on jobs answer with job objects of one shape everywhere (Job.to_dict);
one that names several jobs answers ``{"jobs": [...], "skipped": [{id,
why}]}``, one job by ``id`` answers ``{"job": ...}``.
"""

from __future__ import annotations

import asyncio
import inspect
import os
from typing import Any, Awaitable, Callable

from sloth_daemon import __version__
from sloth_daemon import protocol
from sloth_daemon.backends import metrics
from sloth_daemon.daemon import renewal
from sloth_daemon.daemon.control import Control
from sloth_daemon.daemon.job_ops import JobOps
from sloth_daemon.daemon.lane_ops import LaneOps
from sloth_daemon.daemon.worker.handing import one_result
from sloth_daemon.daemon.request_args import (
    MAX_LIST, attempt_of, batch_ref_arg, batch_token, flag, handle_arg, job_id, job_ids, jobs_of, listing_args,
    states_arg, whole,
)
from sloth_daemon.errors import BadRequest, SlothError, StorageBusy
from sloth_daemon.daemon.streams import Emit, Streams
from sloth_daemon.spec import JobSpec

WRITE_PATIENCE_S = 30.0  # a client's write waits this long for a foreign lock on the database
MAX_BATCH_JOBS = 1_000_000  # staged on one connection (~250 MB at most): say so, queue nothing
Op = Callable[[dict[str, Any]], Any]

# Families made at their first request: module, class, the ops its table
# answers (tests/unit/daemon/test_handlers_lazy.py checks they are the
# table's), and what it is made of (named from Control, as the others).
LAZY: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "edits": ("sloth_daemon.daemon.edit_ops", "EditOps", ("edit", "bump", "hold", "release")),
    "schedules": ("sloth_daemon.daemon.schedules.ops", "ScheduleOps",
                  ("schedule_add", "schedule_edit", "schedule_ls", "schedule_show", "schedule_pause",
                   "schedule_resume", "schedule_rm", "schedule_run")),
    "outbox": ("sloth_daemon.daemon.telling.ops", "OutboxOps", ("outbox", "outbox_retry", "outbox_drop")),
}


class Session:
    """What one connection holds between its requests: a batch being staged
    (validated jobs, not queued). Dropped with the connection, so a client or
    a daemon that dies before ``commit`` leaves nothing queued."""

    def __init__(self) -> None:
        self.staged: list[JobSpec] = []

    def take(self) -> list[JobSpec]:
        out, self.staged = self.staged, []
        return out

    def close(self) -> None:
        self.staged = []


class Handlers:
    """The op tables the server dispatches on: ``ops`` (a request, a
    response), ``stream_ops`` (events, then a response) and ``session_ops``
    (ops that use what the connection holds).

    The collaborators of every family are named here, once, from the
    daemon's ``control`` (which main.build made with the daemon's parts):
    the ``queue``, the ``paths``, the worker's Actions, lanes and gates, the
    worker itself, the scheduler; each handler asks one of them, never
    through another."""

    def __init__(self, control: Control, stats: dict[str, int]) -> None:
        worker = control.worker
        self.control, self.queue, self.paths, self.stats = control, control.queue, control.paths, stats
        self.metrics = control.metrics  # metrics_file.DaemonMetrics
        self.streaming = Streams(control.queue, control, control.paths)
        self.close = self.streaming.close  # ends every open stream (the daemon is stopping)
        w = self._patiently
        self.ops: dict[str, Callable[[dict[str, Any]], Any]] = {
            "ping": self.op_ping, "status": self.op_status, "add": w(self.op_add),
            "list": self.op_list, "show": self.op_show, "logs": self.op_logs, "latest": self.op_latest,
            "result": lambda a: one_result(self.queue, job_id(a.get("id")), a.get("attempt")),
            "batch": self.op_batch, "batch_show": self.op_batch_show,
            "config": _bare(control.config), "reload": _bare(control.request_reload),
            "shutdown": self.op_shutdown, "metrics": self.op_metrics, "timeline": self.op_timeline,
        }
        self.families: list[Any] = [JobOps(worker.actions, worker, worker.lanes, lambda: control.settings),
                                    LaneOps(worker.actions, worker, worker.lanes, control)]  # + LAZY's, once made
        for family in self.families:
            self.ops.update(family.table(w))
        self._parts: dict[str, Callable[[], tuple[Any, ...]]] = {
            "edits": lambda: (control.queue, control, worker.gates, worker.lanes, worker),
            "schedules": lambda: (control.scheduler,),
            "outbox": lambda: (control.queue.outbox, control.sender, control.queue.outbox_counts),
        }
        for name, (_, _, names) in LAZY.items():
            self.ops.update({op: self._first_request(name, op) for op in names})
        self.stream_ops: dict[str, Callable[[dict[str, Any], Emit], Awaitable[Any]]] = {
            "wait": self.streaming.op_wait, "follow": self.streaming.op_follow,
            "subscribe": self.streaming.op_subscribe, "scan": self.op_scan,
        }
        # ops that use what the connection holds (a staged batch)
        self.session_ops: dict[str, Callable[[dict[str, Any], Session], Any]] = {
            "stage": self.op_stage, "commit": w(self.op_commit),
        }

    def made(self, name: str) -> Any:
        """The LAZY family ``name``, made now: imported, built, its table in
        ``ops`` in place of the first-request stubs."""
        module, cls, _ = LAZY[name]
        family = getattr(renewal.import_late(module), cls)(*self._parts[name]())
        self.families.append(family)
        self.ops.update(family.table(self._patiently))
        return family

    def _first_request(self, name: str, op: str) -> Op:
        def answer(a: dict[str, Any]) -> Any:
            self.made(name)
            return self.ops[op](a)
        return answer

    @staticmethod
    def _patiently(op: Callable[..., Any]) -> Callable[..., Any]:
        """A writing op that, while another process holds the database's
        write lock, waits and tries again -- without blocking the event loop
        (the daemon's own writes wait only briefly for a lock)."""
        async def run(*args: Any) -> Any:
            loop = asyncio.get_running_loop()
            deadline, delay = loop.time() + WRITE_PATIENCE_S, 0.05
            while True:
                try:
                    out = op(*args)
                    return await out if inspect.isawaitable(out) else out
                except StorageBusy:
                    if loop.time() + delay > deadline:
                        raise
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, 1.0)
        return run

    # ------------------------------------------------------------- simple
    def op_ping(self, a: dict[str, Any]) -> dict[str, Any]:
        return {"pong": True, "version": __version__}

    def op_status(self, a: dict[str, Any]) -> dict[str, Any]:
        return {"version": __version__, "protocol": protocol.VERSION, **self.control.status(),
                "server": dict(self.stats), "batches": self.queue.active_batches()}

    async def op_metrics(self, a: dict[str, Any]) -> dict[str, Any]:
        """Result: ``text``, the metrics in ``format`` (docs/metrics.md)."""
        fmt = a.get("format", metrics.OPENMETRICS)
        if fmt not in metrics.FORMATS:
            raise BadRequest(f"unknown metrics format {fmt!r}", hint=f"One of: {', '.join(metrics.FORMATS)}.")
        if self.metrics is None:
            raise BadRequest("this daemon keeps no metrics")
        return {"text": await self.metrics.text(fmt)}

    def op_add(self, a: dict[str, Any]) -> dict[str, Any]:
        """Result: ``ids`` (one per job, in order), ``new_lanes`` (lanes this
        add made) and ``waiting`` (lane -> why its jobs wait whatever they ask: paused...)."""
        jobs = jobs_of(a)
        ids, new = self.control.add(jobs)
        waiting = self.control.lanes_waiting((str(j.get("lane") or "default"), j.get("place")) for j in jobs)
        return {"ids": ids, "new_lanes": new, "waiting": waiting}

    # ------------------------------------------------- batches (protocol v2)
    def op_stage(self, a: dict[str, Any], session: Session) -> dict[str, Any]:
        """Validate jobs and hold them on this connection; queue nothing yet."""
        self._stage(jobs_of(a), session)
        return {"staged": len(session.staged)}

    def op_commit(self, a: dict[str, Any], session: Session) -> dict[str, Any]:
        """Queue the staged jobs and these in one transaction, under ``batch``."""
        token, handle = batch_token(a.get("batch")), handle_arg(a.get("handle"))
        if a.get("jobs") is not None:
            self._stage(jobs_of(a), session)
        specs = session.take()
        if not specs:
            raise BadRequest("nothing to commit: no jobs were staged on this connection")
        ids, new = self.control.add(specs, batch=token, handle=handle)
        waiting = self.control.lanes_waiting((s.lane, s.place) for s in specs)
        tag = self.queue.get(ids[-1]).batch if handle is not None else None  # a batch's jobs carry its id
        return {"batch": token, "ids": ids, "new_lanes": new, "waiting": waiting,
                **({"handle": tag} if tag is not None else {})}

    def op_batch(self, a: dict[str, Any]) -> dict[str, Any]:
        """Whether the batch ``batch`` was queued (all its jobs), and as which ids."""
        token = batch_token(a.get("batch"))
        ids = self.queue.batch_ids(token)
        return {"batch": token, "queued": ids is not None, "ids": ids or []}

    def op_batch_show(self, a: dict[str, Any]) -> dict[str, Any]:
        """A batch with a handle (its id, or the newest of its name): its
        counts by state and its jobs' ids (those in ``states``, if given)."""
        found = self.queue.batch_find(batch_ref_arg(a.get("batch")))
        return {"batch": found, "ids": self.queue.batch_members(found["id"], states_arg(a.get("states")))}

    def _stage(self, jobs: list[dict[str, Any]], session: Session) -> None:
        try:
            if len(session.staged) + len(jobs) > MAX_BATCH_JOBS:
                raise BadRequest(f"a batch holds at most {MAX_BATCH_JOBS:,} jobs",
                                 hint="Split the input; each `sloth add` is all or nothing on its own.")
            session.staged += self.control.validate(jobs, first=len(session.staged) + 1)
        except SlothError:
            session.close()  # one bad job spoils the batch: nothing of it will be queued
            raise

    def op_list(self, a: dict[str, Any]) -> dict[str, Any]:
        """A page of the listing (see SqliteListing.listing) with ``total`` and
        ``left_out``: it never stops short without saying so."""
        limit = whole(a.get("limit", MAX_LIST), "limit", 1, MAX_LIST)
        return self.control.listing(**listing_args(a), limit=limit)

    async def op_scan(self, a: dict[str, Any], emit: Emit) -> dict[str, Any]:
        """The listing of ``list`` of any size (without ``limit``: all of
        it), streamed as it is read (listing_stream.py): a ``head`` event,
        ``jobs`` events, then ``left_out``."""
        kw = listing_args(a)
        limit = None if a.get("limit") is None else whole(a["limit"], "limit", 1, 2**62)
        stream_scan = renewal.import_late("sloth_daemon.daemon.listing_stream").stream_scan  # its pool: at first
        return await stream_scan(self.control.scan(**kw, limit=limit), emit, lambda: self.streaming.closing,
                                 explain=self.control.explain, head={"paused": self.control.paused()})

    def op_show(self, a: dict[str, Any]) -> dict[str, Any]:
        if "id" in a:
            return self.control.detail(job_id(a.get("id")))
        ids = job_ids(a.get("ids"))
        for i in ids:
            self.queue.get(i)  # every id exists, or the answer is an error
        return {"jobs": [flat_detail(self.control.detail(i)) for i in ids]}

    def op_logs(self, a: dict[str, Any]) -> dict[str, Any]:
        """Where the attempt's log is; ``stored``: not here, but in the shared
        queue's database (read it with ``follow``, live false)."""
        job = self.queue.get(job_id(a.get("id")))
        n = attempt_of(job, a.get("attempt")) or job.attempts  # not None: allow_none is False
        path = self.paths.job_log(job.id, n)
        elsewhere = self.control.shared is not None and not path.exists() and not self.control.attempt_live(job.id, n)
        return {"id": job.id, "attempt": n, "attempts": job.attempts, "path": str(path), "stored": elsewhere}

    def op_latest(self, a: dict[str, Any]) -> dict[str, Any]:
        """The newest job's id queued from this machine (on a shared queue
        another machine's jobs are not ours to wait on), ``ran``: the newest
        of those that has started a run; None when there is none. What
        `sloth wait` and `show` (and, with ``ran``, `logs`) mean with no id."""
        ran = flag(a.get("ran", False), "ran")
        return {"id": self.queue.latest(origin=self.control.default_place or None, ran=ran)}

    async def op_timeline(self, a: dict[str, Any]) -> dict[str, Any]:
        """The timeline of the last ``since_s`` seconds (default a day), of
        ``lane`` or all (backends/timeline.py), read a hundred jobs at a
        time with the loop free between (heartbeats, other clients)."""
        timeline = renewal.import_late("sloth_daemon.backends.timeline")  # at its first request (LAZY)

        steps = timeline.answering(self.queue, a, self.queue.clock)
        while True:
            try:
                next(steps)
            except StopIteration as done:
                return dict(done.value)
            await asyncio.sleep(0)

    def op_shutdown(self, a: dict[str, Any]) -> dict[str, Any]:
        keep = a.get("keep_jobs", False)
        if not isinstance(keep, bool):
            raise BadRequest("keep_jobs must be true or false")
        why = "restart requested over the socket" if keep else "shutdown requested over the socket"
        asyncio.get_running_loop().call_soon(lambda: self.control.request_stop(why, keep_jobs=keep))
        # Not from status: it must work without the database.
        return {"stopping": True, "keep_jobs": keep, "pid": os.getpid(), "running": self.control.running_count()}


def flat_detail(d: dict[str, Any]) -> dict[str, Any]:
    """A job object with its history beside its fields (the shape of `show` for many)."""
    return {**d["job"], "events": d["events"], "prereqs": d["prereqs"], "dependents": d["dependents"],
            "results": d["results"]}


def _bare(fn: Callable[[], Any]) -> Callable[[dict[str, Any]], Any]:
    """An op with no arguments: the doer's own method, answering as it does."""
    return lambda a: fn()


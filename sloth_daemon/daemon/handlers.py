"""One handler per request type of the control socket.

Each handler checks its arguments (the frame is untrusted), asks the
daemon's :class:`~sloth_daemon.daemon.control.Control` and returns the result; a
SlothError becomes the error response. The streaming ops (``wait``,
``follow``, ``subscribe``) are daemon/streams.py's (a Streams the Handlers
own: it holds the open streams, ended together on close); ``scan`` (a listing of
any size, streamed) is here beside ``list``, its stream listing_stream.py's.
Connections, framing and peer checks are server.py's.

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
from sloth_daemon.checks import MAX_CONCURRENCY
from sloth_daemon.daemon.control import Control
from sloth_daemon.daemon.edit_ops import EditOps
from sloth_daemon.errors import BadRequest, SlothError, StorageBusy
from sloth_daemon.daemon.streams import Emit, Streams, attempt_of, job_id, job_ids
from sloth_daemon.daemon.listing_stream import stream_scan
from sloth_daemon.models import STATE_NAMES, state_name
from sloth_daemon.spec import JobSpec

MAX_LIST = 100_000  # jobs per listing page
WRITE_PATIENCE_S = 30.0  # a client's write waits this long for a foreign lock on the database
MAX_BATCH_JOBS = 1_000_000  # staged on one connection (~250 MB at most): say so, queue nothing
_TOKEN_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-")


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
    response), ``streams`` (events, then a response) and ``session_ops``
    (ops that use what the connection holds). Collaborators: the daemon's
    Control (``c``) and the Streams (``streaming``) that serve wait,
    follow and subscribe."""

    def __init__(self, control: Control, stats: dict[str, int]) -> None:
        self.c = control
        self.stats = stats
        self.streaming = Streams(control)
        w = self._patiently
        self.ops: dict[str, Callable[[dict[str, Any]], Any]] = {
            "ping": self.op_ping, "status": self.op_status, "add": w(self.op_add),
            "list": self.op_list, "show": self.op_show, "cancel": w(self.op_cancel),
            "retry": w(self.op_retry), "restart": w(self.op_restart), "kill": w(self.op_kill),
            "pause": w(self.op_pause), "resume": w(self.op_resume), "lanes": self.op_lanes,
            "pause_jobs": w(self.op_pause_jobs), "resume_jobs": w(self.op_resume_jobs),
            "lane_set": w(self.op_lane_set), "lane_rm": w(self.op_lane_rm), "prune": w(self.op_prune),
            "logs": self.op_logs, "latest": self.op_latest, "config": self.op_config, "reload": self.op_reload,
            "shutdown": self.op_shutdown,
        }
        self.streams: dict[str, Callable[[dict[str, Any], Emit], Awaitable[Any]]] = {
            "wait": self.streaming.op_wait, "follow": self.streaming.op_follow,
            "subscribe": self.streaming.op_subscribe, "scan": self.op_scan,
        }
        self.ops["batch"] = self.op_batch
        self.ops.update(EditOps(control).table(w))  # edit, bump, hold, release (edit_ops.py)
        from sloth_daemon.daemon.schedules.ops import READS, ops as schedule_ops  # cronsim: only with the daemon

        self.ops.update({op: fn if op in READS else w(fn) for op, fn in schedule_ops(control.scheduler).items()})
        # ops that use what the connection holds (a staged batch)
        self.session_ops: dict[str, Callable[[dict[str, Any], Session], Any]] = {
            "stage": self.op_stage, "commit": w(self.op_commit),
        }

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

    def close(self) -> None:
        """End every open stream (the daemon is stopping)."""
        self.streaming.close()

    # ------------------------------------------------------------- simple
    def op_ping(self, a: dict[str, Any]) -> dict[str, Any]:
        return {"pong": True, "version": __version__}

    def op_status(self, a: dict[str, Any]) -> dict[str, Any]:
        return {"version": __version__, "protocol": protocol.VERSION, **self.c.status(),
                "server": dict(self.stats)}

    def op_add(self, a: dict[str, Any]) -> dict[str, Any]:
        """Result: ``ids`` (one per job, in order), ``new_lanes`` (lanes this
        add made) and ``waiting`` (lane -> why its jobs wait whatever they ask: paused...)."""
        jobs = jobs_of(a)
        ids, new = self.c.add(jobs)
        waiting = self.c.lanes_waiting((str(j.get("lane") or "default"), j.get("place")) for j in jobs)
        return {"ids": ids, "new_lanes": new, "waiting": waiting}

    # ------------------------------------------------- batches (protocol v2)
    def op_stage(self, a: dict[str, Any], session: Session) -> dict[str, Any]:
        """Validate jobs and hold them on this connection; queue nothing yet."""
        self._stage(jobs_of(a), session)
        return {"staged": len(session.staged)}

    def op_commit(self, a: dict[str, Any], session: Session) -> dict[str, Any]:
        """Queue the staged jobs and these in one transaction, under ``batch``."""
        token = batch_token(a.get("batch"))
        if a.get("jobs") is not None:
            self._stage(jobs_of(a), session)
        specs = session.take()
        if not specs:
            raise BadRequest("nothing to commit: no jobs were staged on this connection")
        ids, new = self.c.add(specs, batch=token)
        waiting = self.c.lanes_waiting((s.lane, s.place) for s in specs)
        return {"batch": token, "ids": ids, "new_lanes": new, "waiting": waiting}

    def op_batch(self, a: dict[str, Any]) -> dict[str, Any]:
        """Whether the batch ``batch`` was queued (all its jobs), and as which ids."""
        token = batch_token(a.get("batch"))
        ids = self.c.batch_ids(token)
        return {"batch": token, "queued": ids is not None, "ids": ids or []}

    def _stage(self, jobs: list[dict[str, Any]], session: Session) -> None:
        try:
            if len(session.staged) + len(jobs) > MAX_BATCH_JOBS:
                raise BadRequest(f"a batch holds at most {MAX_BATCH_JOBS:,} jobs",
                                 hint="Split the input; each `sloth add` is all or nothing on its own.")
            session.staged += self.c.validate(jobs, first=len(session.staged) + 1)
        except SlothError:
            session.close()  # one bad job spoils the batch: nothing of it will be queued
            raise

    def op_list(self, a: dict[str, Any]) -> dict[str, Any]:
        """A page of the listing (see SqliteListing.listing) with ``total`` and
        ``left_out``: it never stops short without saying so."""
        limit = whole(a.get("limit", MAX_LIST), "limit", 1, MAX_LIST)
        return self.c.listing(**listing_args(a), limit=limit)

    async def op_scan(self, a: dict[str, Any], emit: Emit) -> dict[str, Any]:
        """The listing of ``list`` of any size (without ``limit``: all of
        it), streamed as it is read (listing_stream.py): a ``head`` event,
        ``jobs`` events, then ``left_out``."""
        kw = listing_args(a)
        limit = None if a.get("limit") is None else whole(a["limit"], "limit", 1, 2**62)
        return await stream_scan(self.c.scan(**kw, limit=limit), emit, lambda: self.streaming.closing,
                                 explain=self.c.explain)

    def op_show(self, a: dict[str, Any]) -> dict[str, Any]:
        if "id" in a:
            return self.c.detail(job_id(a.get("id")))
        ids = job_ids(a.get("ids"))
        for i in ids:
            self.c.get(i)  # every id exists, or the answer is an error
        return {"jobs": [flat_detail(self.c.detail(i)) for i in ids]}

    async def op_cancel(self, a: dict[str, Any]) -> dict[str, Any]:
        if "id" in a:
            return {"job": (await self.c.cancel(job_id(a.get("id")))).to_dict()}
        ids, lane, states = selection(a)
        return (await self.c.cancel_many(ids, lane=lane, states=states)).to_dict()

    def op_retry(self, a: dict[str, Any]) -> dict[str, Any]:
        if "id" in a:
            return {"job": self.c.retry(job_id(a.get("id"))).to_dict()}
        ids, lane, states = selection(a)
        return self.c.retry_many(ids, lane=lane, states=states).to_dict()

    def op_restart(self, a: dict[str, Any]) -> dict[str, Any]:
        """Result: ``jobs`` (the new ones), ``skipped``, ``restarted``: [[old id, new id]]."""
        ids = job_ids(a.get("ids"))
        res = self.c.restart(ids)
        skipped = {i for i, _ in res.skipped}
        done = [i for i in dict.fromkeys(ids) if i not in skipped]
        return {**res.to_dict(), "restarted": [[old, new.id] for old, new in zip(done, res.jobs, strict=True)]}

    async def op_kill(self, a: dict[str, Any]) -> dict[str, Any]:
        return (await self.c.kill(job_ids(a.get("ids")), now=flag(a.get("now", False), "now"))).to_dict()

    def op_pause(self, a: dict[str, Any]) -> dict[str, Any]:
        self.c.pause(lane_name(a.get("lane")))
        return self.c.worker.status()

    def op_resume(self, a: dict[str, Any]) -> dict[str, Any]:
        self.c.resume(lane_name(a.get("lane")))
        return self.c.worker.status()

    async def op_pause_jobs(self, a: dict[str, Any], *, resume: bool = False) -> dict[str, Any]:
        if "ids" in a and "lane" in a:
            raise BadRequest("give ids or a lane, not both")
        ids = job_ids(a["ids"]) if "ids" in a else None
        lane = lane_name(a.get("lane"))
        if lane is not None:
            self.c.worker.lanes.check(lane)
        return (await self.c.pause_jobs(ids, lane=lane, resume=resume)).to_dict()

    async def op_resume_jobs(self, a: dict[str, Any]) -> dict[str, Any]:
        return await self.op_pause_jobs(a, resume=True)

    def op_lanes(self, a: dict[str, Any]) -> dict[str, Any]:
        lanes = self.c.worker.lanes
        return {"lanes": self.c.lanes(), "paused_all": lanes.paused_all, "known": lanes.known()}

    def op_lane_set(self, a: dict[str, Any]) -> dict[str, Any]:
        lane = lane_name(a.get("lane"))
        if lane is None:
            raise BadRequest("lane must be a non-empty string")
        return self.c.set_lane(lane, whole(a.get("concurrency"), "concurrency", 0, MAX_CONCURRENCY),
                               create=flag(a.get("create", False), "create"))

    def op_lane_rm(self, a: dict[str, Any]) -> dict[str, Any]:
        lane = lane_name(a.get("lane"))
        if lane is None:
            raise BadRequest("lane must be a non-empty string")
        self.c.remove_lane(lane)
        return {"removed": lane}

    def op_prune(self, a: dict[str, Any]) -> dict[str, Any]:
        older = a.get("older_than_s", self.c.settings.retention_s)
        if (isinstance(older, bool) or not isinstance(older, (int, float))
                or not 0 <= older < 1e15):  # also NaN, inf and ints too big for a float
            raise BadRequest("older_than_s must be a non-negative number of seconds")
        dry = flag(a.get("dry_run", False), "dry_run")
        n = self.c.prune(float(older), states=states_arg(a.get("states")), lane=lane_name(a.get("lane")),
                         dry_run=dry)
        return {"would_prune" if dry else "pruned": n}

    def op_logs(self, a: dict[str, Any]) -> dict[str, Any]:
        """Where the attempt's log is; ``stored``: not here, but in the shared
        queue's database (read it with ``follow``, live false)."""
        job = self.c.get(job_id(a.get("id")))
        n = attempt_of(job, a.get("attempt")) or job.attempts  # not None: allow_none is False
        path = self.c.log_path(job.id, n)
        elsewhere = self.c.shared is not None and not path.exists() and not self.c.attempt_live(job.id, n)
        return {"id": job.id, "attempt": n, "attempts": job.attempts, "path": str(path), "stored": elsewhere}

    def op_latest(self, a: dict[str, Any]) -> dict[str, Any]:
        """The newest job's id queued from this machine (on a shared queue
        another machine's jobs are not ours to wait on), ``ran``: the newest
        of those that has started a run; None when there is none. What
        `sloth wait` and `show` (and, with ``ran``, `logs`) mean with no id."""
        ran = flag(a.get("ran", False), "ran")
        return {"id": self.c.queue.latest(origin=self.c.default_place or None, ran=ran)}

    def op_config(self, a: dict[str, Any]) -> dict[str, Any]:
        return self.c.config()

    def op_reload(self, a: dict[str, Any]) -> dict[str, Any]:
        return self.c.reload()

    def op_shutdown(self, a: dict[str, Any]) -> dict[str, Any]:
        keep = a.get("keep_jobs", False)
        if not isinstance(keep, bool):
            raise BadRequest("keep_jobs must be true or false")
        why = "restart requested over the socket" if keep else "shutdown requested over the socket"
        asyncio.get_running_loop().call_soon(lambda: self.c.shutdown(why, keep_jobs=keep))
        # Not from status: it must work without the database.
        return {"stopping": True, "keep_jobs": keep, "pid": os.getpid(), "running": self.c.running_count()}


def flat_detail(d: dict[str, Any]) -> dict[str, Any]:
    """A job object with its history beside its fields (the shape of `show` for many)."""
    return {**d["job"], "events": d["events"], "prereqs": d["prereqs"], "dependents": d["dependents"]}


def selection(a: dict[str, Any]) -> tuple[list[int] | None, str | None, list[str] | None]:
    """(ids, lane, states) of a request on many jobs: ids, or a lane and/or states."""
    ids = a.get("ids")
    lane, states = lane_name(a.get("lane")), states_arg(a.get("states"))
    if ids is not None and (lane is not None or states is not None):
        raise BadRequest("name jobs by ids or by lane/states, not both")
    if ids is None and lane is None and states is None:
        raise BadRequest("name the jobs: id, ids, lane or states")
    return (None if ids is None else job_ids(ids)), lane, states


def listing_args(a: dict[str, Any]) -> dict[str, Any]:
    """The selection of ``list`` and ``scan`` (all but the limit), checked."""
    fl = a.get("finished_limit")
    return {"states": states_arg(a.get("states")), "lane": lane_name(a.get("lane")),
            "offset": whole(a.get("offset", 0), "offset", 0, 2**62),
            "finished_limit": None if fl is None else whole(fl, "finished_limit", 0, MAX_LIST),
            **host_arg(a.get("host"))}


def states_arg(v: Any) -> list[str] | None:
    """A list of state names; ``claimed`` is read as ``running``."""
    if v is None:
        return None
    if not isinstance(v, list) or not v or not all(isinstance(s, str) for s in v):
        raise BadRequest("states must be a non-empty list of strings")
    try:
        return [state_name(s) for s in v]
    except ValueError:
        bad = next(s for s in v if s not in STATE_NAMES and s != "claimed")
        raise BadRequest(f"unknown state {bad!r}", hint=f"States: {', '.join(STATE_NAMES)}.") from None


def whole(v: Any, name: str, lo: int, hi: int) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
        raise BadRequest(f"{name} must be a whole number from {lo} to {hi}")
    return v


def flag(v: Any, name: str) -> bool:
    if not isinstance(v, bool):
        raise BadRequest(f"{name} must be true or false")
    return v


def jobs_of(a: dict[str, Any]) -> list[dict[str, Any]]:
    """The request's jobs, each with the request's ``common`` fields under it."""
    jobs, common = a.get("jobs"), a.get("common") or {}
    if not isinstance(jobs, list) or not jobs:
        raise BadRequest("jobs must be a non-empty list of job objects")
    if not isinstance(common, dict):
        raise BadRequest("common must be an object")
    if not all(isinstance(j, dict) for j in jobs):
        raise BadRequest("each job must be an object")
    return [{**common, **j} for j in jobs]


def batch_token(v: Any) -> str:
    if not isinstance(v, str) or not 1 <= len(v) <= 64 or not set(v) <= _TOKEN_CHARS:
        raise BadRequest("batch must be a token of 1 to 64 letters, digits, '_' or '-'")
    return v


def host_arg(v: Any) -> dict[str, str]:
    """``host`` of a listing: only jobs that run, ran or are placed there."""
    if v is None:
        return {}
    if not isinstance(v, str) or not v:
        raise BadRequest("host must be a non-empty string")
    return {"host": v}


def lane_name(v: Any) -> str | None:
    if v is not None and (not isinstance(v, str) or not v):
        raise BadRequest("lane must be a non-empty string")
    return v

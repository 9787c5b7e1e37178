"""One handler per request type of the control socket.

Each handler checks its arguments (the frame is untrusted), asks the
daemon's :class:`~sloth_daemon.control.Control` and returns the result; a
SlothError becomes the error response. Streaming handlers (``wait``,
``follow``, ``subscribe``) emit events before their one response.
Connections, framing and peer checks are server.py's.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any, AsyncIterator, Awaitable, Callable

from . import __version__, protocol
from .control import Control
from .errors import BadRequest, JobNotFound, SlothError
from .models import Job, JobState
from .private import open_log
from .spec import JobSpec

Emit = Callable[[dict[str, Any]], Awaitable[None]]
MAX_STREAM_BACKLOG = 1024  # queued events per subscriber before it is told it overflowed
LOG_CHUNK = 256 * 1024  # bytes of log per streamed event
_OVERFLOW: dict[str, Any] = {"overflow": True}
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


class Subscription:
    """Job changes matching a predicate, as a bounded queue. A subscriber that
    falls behind is not dropped silently: it gets an overflow marker."""

    def __init__(self, control: Control, match: Callable[[Job], bool]) -> None:
        self.q: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue(MAX_STREAM_BACKLOG)
        self.match = match
        self._unwatch = control.watch(self._on_change)

    def _on_change(self, job: Job) -> None:
        if not self.match(job):
            return
        try:
            self.q.put_nowait(job.to_dict())
        except asyncio.QueueFull:
            while not self.q.empty():
                self.q.get_nowait()
            self.q.put_nowait(_OVERFLOW)

    def end(self) -> None:
        """The daemon is closing: the reader sees None next."""
        if self.q.full():
            self.q.get_nowait()
        self.q.put_nowait(None)

    def close(self) -> None:
        self._unwatch()


class Handlers:
    def __init__(self, control: Control, stats: dict[str, int]) -> None:
        self.c = control
        self.stats = stats
        self.closing = False
        self._subs: set[Subscription] = set()
        self._wakers: set[asyncio.Event] = set()  # waits, woken to end on close
        self.ops: dict[str, Callable[[dict[str, Any]], Any]] = {
            "ping": self.op_ping, "status": self.op_status, "add": self.op_add,
            "list": self.op_list, "show": self.op_show, "cancel": self.op_cancel,
            "retry": self.op_retry, "pause": self.op_pause, "resume": self.op_resume,
            "prune": self.op_prune, "logs": self.op_logs, "shutdown": self.op_shutdown,
        }
        self.streams: dict[str, Callable[[dict[str, Any], Emit], Awaitable[Any]]] = {
            "wait": self.op_wait, "follow": self.op_follow, "subscribe": self.op_subscribe,
        }
        self.ops["batch"] = self.op_batch
        # ops that use what the connection holds (a staged batch)
        self.session_ops: dict[str, Callable[[dict[str, Any], Session], Any]] = {
            "stage": self.op_stage, "commit": self.op_commit,
        }

    def close(self) -> None:
        """End every open stream (the daemon is stopping)."""
        self.closing = True
        for ev in list(self._wakers):
            ev.set()
        for sub in list(self._subs):
            sub.end()

    # ------------------------------------------------------------- simple
    def op_ping(self, a: dict[str, Any]) -> dict[str, Any]:
        return {"pong": True, "version": __version__}

    def op_status(self, a: dict[str, Any]) -> dict[str, Any]:
        return {"version": __version__, "protocol": protocol.VERSION, **self.c.status(),
                "server": dict(self.stats)}

    def op_add(self, a: dict[str, Any]) -> dict[str, Any]:
        return {"ids": self.c.add(jobs_of(a))}

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
        return {"batch": token, "ids": self.c.add(specs, batch=token)}

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
        states = a.get("states")
        if states is not None and (not isinstance(states, list) or not all(isinstance(s, str) for s in states)):
            raise BadRequest("states must be a list of strings")
        for s in states or []:
            if s not in JobState._value2member_map_:
                raise BadRequest(f"unknown state {s!r}", hint="States: queued, claimed, done, failed, cancelled.")
        lane = a.get("lane")
        if lane is not None and not isinstance(lane, str):
            raise BadRequest("lane must be a string")
        limit = a.get("limit", 1000)
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 100_000:
            raise BadRequest("limit must be a whole number from 1 to 100000")
        return {"jobs": [j.to_dict() for j in self.c.jobs(states=states, lane=lane, limit=limit)]}

    def op_show(self, a: dict[str, Any]) -> dict[str, Any]:
        jid = job_id(a.get("id"))
        job = self.c.get(jid)
        return {"job": job.to_dict(), "events": [e.to_dict() for e in self.c.events(jid)]}

    def op_cancel(self, a: dict[str, Any]) -> dict[str, Any]:
        return {"job": self.c.cancel(job_id(a.get("id"))).to_dict()}

    def op_retry(self, a: dict[str, Any]) -> dict[str, Any]:
        return {"job": self.c.retry(job_id(a.get("id"))).to_dict()}

    def op_pause(self, a: dict[str, Any]) -> dict[str, Any]:
        self.c.pause(lane_name(a.get("lane")))
        return self.c.worker.status()

    def op_resume(self, a: dict[str, Any]) -> dict[str, Any]:
        self.c.resume(lane_name(a.get("lane")))
        return self.c.worker.status()

    def op_prune(self, a: dict[str, Any]) -> dict[str, Any]:
        older = a.get("older_than_s", self.c.settings.retention_s)
        if (isinstance(older, bool) or not isinstance(older, (int, float))
                or not 0 <= older < 1e15):  # also NaN, inf and ints too big for a float
            raise BadRequest("older_than_s must be a non-negative number of seconds")
        return {"pruned": self.c.prune(float(older))}

    def op_logs(self, a: dict[str, Any]) -> dict[str, Any]:
        job = self.c.get(job_id(a.get("id")))
        n = attempt_of(job, a.get("attempt")) or job.attempts  # not None: allow_none is False
        return {"id": job.id, "attempt": n, "attempts": job.attempts, "path": str(self.c.log_path(job.id, n))}

    def op_shutdown(self, a: dict[str, Any]) -> dict[str, Any]:
        asyncio.get_running_loop().call_soon(self.c.shutdown, "shutdown requested over the socket")
        return {"stopping": True, "pid": os.getpid()}  # not from status: it must work without the database

    # ---------------------------------------------------------- streaming
    async def op_wait(self, a: dict[str, Any], emit: Emit) -> Any:
        ids = a.get("ids")
        if not isinstance(ids, list) or not ids:
            raise BadRequest("ids must be a non-empty list of job ids")
        ids = [job_id(i) for i in ids]
        pending = {i for i in ids if not self.c.get(i).state.finished}
        # Not a bounded queue of events: the latest state per pending job, so
        # waiting on thousands of jobs never drops the change that ends it.
        latest: dict[int, Job] = {}
        changed = asyncio.Event()

        def on_change(job: Job) -> None:
            if job.id in pending:
                latest[job.id] = job
                changed.set()
        unwatch = self.c.watch(on_change)
        self._wakers.add(changed)
        try:
            while pending:
                await changed.wait()
                changed.clear()
                if self.closing:
                    raise SlothError("the daemon is stopping", hint="Run the wait again after it restarts.")
                while latest:
                    jid, job = latest.popitem()
                    await emit({"kind": "state", "job": job.to_dict()})
                    if job.state.finished:
                        pending.discard(jid)
        finally:
            unwatch()
            self._wakers.discard(changed)
        return {"jobs": [self.c.get(i).to_dict() for i in ids]}

    async def op_subscribe(self, a: dict[str, Any], emit: Emit) -> Any:
        ids = a.get("ids")
        if ids is not None and (not isinstance(ids, list) or not ids):
            raise BadRequest("ids must be a non-empty list of job ids (or absent, for all jobs)")
        wanted = None if ids is None else {self.c.get(job_id(i)).id for i in ids}
        sub = self._subscribe(lambda job: wanted is None or job.id in wanted)
        try:
            while (item := await sub.q.get()) is not None:
                if item is _OVERFLOW:
                    raise SlothError(
                        f"this subscriber fell more than {MAX_STREAM_BACKLOG} events behind",
                        hint="Read events faster, or subscribe again and re-read state with `list`.")
                await emit({"kind": "state", "job": item})
        finally:
            self._unsubscribe(sub)
        return {"ended": "daemon stopping"}

    async def op_follow(self, a: dict[str, Any], emit: Emit) -> Any:
        job = self.c.get(job_id(a.get("id")))
        if a.get("attempt") is None and not job.state.finished:
            job = await self._until_started(job.id)  # `sloth add ... && sloth logs -f ID`
        n = attempt_of(job, a.get("attempt"), allow_none=True)
        live = None if n is None else self.c.follow(job.id, n)
        if live is not None:
            await _stream(live, emit)
        elif n is not None:
            await _send_file(self.c.log_path(job.id, n), emit)
        return {"job": self.c.get(job.id).to_dict()}

    async def _until_started(self, jid: int) -> Job:
        """Wait until job ``jid`` has a live process or has finished; return it."""
        sub = self._subscribe(lambda job: job.id == jid)  # before the check: no change missed
        try:
            while True:
                job = self.c.get(jid)
                if job.state.finished or self.c.has_process(jid):
                    return job
                if await sub.q.get() is None:
                    raise SlothError("the daemon is stopping", hint="Follow the job again after it restarts.")
        finally:
            self._unsubscribe(sub)

    def _subscribe(self, match: Callable[[Job], bool]) -> Subscription:
        sub = Subscription(self.c, match)
        self._subs.add(sub)
        return sub

    def _unsubscribe(self, sub: Subscription) -> None:
        sub.close()
        self._subs.discard(sub)


async def _stream(chunks: AsyncIterator[bytes], emit: Emit) -> None:
    async for data in chunks:
        for i in range(0, len(data), LOG_CHUNK):
            await emit(log_event(data[i:i + LOG_CHUNK]))


async def _send_file(path: Path, emit: Emit) -> None:
    try:
        # A local log file read in 256 KiB chunks between sends: short blocking
        # reads, not worth a thread per follower. Never through a link, never
        # a FIFO or device in its place (private.open_log).
        f = open_log(path)
    except FileNotFoundError:
        return  # the attempt printed nothing
    with f:
        while chunk := f.read(LOG_CHUNK):
            await emit(log_event(chunk))


def log_event(data: bytes) -> dict[str, Any]:
    # surrogateescape: bytes that are not UTF-8 travel and come back exact
    return {"kind": "log", "data": data.decode("utf-8", "surrogateescape")}


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


def job_id(v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise BadRequest(f"job id must be a whole number, got {v!r}")
    if not 1 <= v < 2**63:  # SQLite integers are 64-bit
        raise JobNotFound(v)
    return v


def lane_name(v: Any) -> str | None:
    if v is not None and (not isinstance(v, str) or not v):
        raise BadRequest("lane must be a non-empty string")
    return v


def attempt_of(job: Job, v: Any, *, allow_none: bool = False) -> int | None:
    if v is None:
        if job.attempts == 0:
            if allow_none:
                return None
            raise SlothError(f"job {job.id} has not started yet, so it has no log",
                             hint="Follow it with `sloth logs -f ID` to see output once it starts.")
        return job.attempts
    if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= max(job.attempts, 1):
        raise BadRequest(f"job {job.id} has attempts 1..{job.attempts}, not {v!r}")
    return v

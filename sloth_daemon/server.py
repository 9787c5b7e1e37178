"""The Unix-socket control server: one handler per request type.

Every connection: the peer's uid is checked first (another user, root
included, is refused). Then frames are read one line at a time with a hard
size cap; each request gets exactly one response. Bad input never changes
anything and never ends the daemon: only the offending connection suffers.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Awaitable, Callable

from . import __version__, peercred, protocol
from .errors import BadRequest, JobNotFound, LogUnreadable, PermissionDenied, ProtocolError, SlothError
from .models import Job, JobState

if TYPE_CHECKING:
    from .daemon import Daemon

log = logging.getLogger("sloth.server")
IDLE_TIMEOUT_S = 300.0  # a client that connects and says nothing is dropped
WRITE_TIMEOUT_S = 30.0  # a client that does not read is dropped
MAX_STREAM_BACKLOG = 1024  # queued events per streaming client before we drop it
LOG_CHUNK = 256 * 1024  # bytes of log per streamed event


OVERFLOW: dict[str, Any] = {"overflow": True}  # a stream fell more than MAX_STREAM_BACKLOG behind


class Server:
    def __init__(self, daemon: "Daemon") -> None:
        self.d = daemon
        self.server: asyncio.base_events.Server | None = None
        self.streams: set[asyncio.Queue[dict[str, Any] | None]] = set()
        self.wakers: set[asyncio.Event] = set()  # waits, woken to end on close
        self.closing = False
        self.handlers: dict[str, Callable[[dict[str, Any]], Any]] = {
            "ping": self.op_ping, "status": self.op_status, "add": self.op_add,
            "list": self.op_list, "show": self.op_show, "cancel": self.op_cancel,
            "retry": self.op_retry, "pause": self.op_pause, "resume": self.op_resume,
            "prune": self.op_prune, "logs": self.op_logs, "shutdown": self.op_shutdown,
        }
        self.streamers: dict[str, Callable[..., Awaitable[Any]]] = {
            "wait": self.op_wait, "follow": self.op_follow, "subscribe": self.op_subscribe,
        }
        self.subscribers: set[Callable[[Job], None]] = set()
        self.stats = {"connections": 0, "requests": 0, "bad_frames": 0, "refused_peers": 0}

    async def start(self, path: Path) -> None:
        old_umask = os.umask(0o177)  # the socket is born 0600, no window
        try:
            self.server = await asyncio.start_unix_server(
                self.handle, path=str(path), limit=protocol.MAX_FRAME + 2
            )
        finally:
            os.umask(old_umask)
        os.chmod(path, 0o600)

    async def close(self) -> None:
        self.closing = True
        for ev in list(self.wakers):
            ev.set()
        for q in list(self.streams):
            try:
                q.put_nowait(None)
            except asyncio.QueueFull:  # a full stream: make room for the end
                q.get_nowait()
                q.put_nowait(None)
        if self.server is not None:
            self.server.close()

    def job_changed(self, job: Job) -> None:
        for fn in list(self.subscribers):
            fn(job)

    # ---------------------------------------------------------- connection
    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.stats["connections"] += 1
        try:
            sock = writer.get_extra_info("socket")
            uid = peercred.peer_uid(sock)
            if uid != os.getuid():
                self.stats["refused_peers"] += 1
                err = PermissionDenied(f"uid {uid} may not use the sloth daemon of uid {os.getuid()}")
                await self._send(writer, protocol.error(None, err))
                return
            while not reader.at_eof():
                try:
                    line = await asyncio.wait_for(reader.readuntil(b"\n"), IDLE_TIMEOUT_S)
                except asyncio.IncompleteReadError:
                    return  # disconnected mid-request: nothing was done
                except asyncio.LimitOverrunError:
                    self.stats["bad_frames"] += 1
                    await self._send(writer, protocol.error(None, ProtocolError(
                        f"frame over {protocol.MAX_FRAME} bytes; closing this connection")))
                    return
                except (asyncio.TimeoutError, ConnectionError):
                    return
                if not await self.dispatch(line[:-1], writer):
                    return
        except (ConnectionError, OSError):
            pass
        except Exception:  # never let one connection take the daemon down
            log.exception("connection handler failed")
        finally:
            try:
                writer.close()
            except Exception:
                pass

    async def dispatch(self, line: bytes, writer: asyncio.StreamWriter) -> bool:
        """Answer one frame. Returns False to close the connection."""
        self.stats["requests"] += 1
        try:
            req = protocol.parse_request(line)
        except ProtocolError as e:
            self.stats["bad_frames"] += 1
            return await self._send(writer, protocol.error(None, e))
        try:
            if req.op in self.streamers:
                async def emit(ev: dict[str, Any]) -> None:
                    if not await self._send(writer, protocol.event(req.id, ev)):
                        raise ConnectionError("client went away")
                result = await self.streamers[req.op](req.args, emit)
            else:
                result = self.handlers[req.op](req.args)
            msg = protocol.ok(req.id, result)
        except SlothError as e:
            msg = protocol.error(req.id, e)
        except ConnectionError:
            return False
        except Exception as e:  # a bug in a handler: answer, log, keep serving
            log.exception("handler %s failed", req.op)
            msg = protocol.error(req.id, SlothError(f"internal error in {req.op}: {e}",
                                                    hint="This is a bug; see the daemon log."))
        return await self._send(writer, msg)

    async def _send(self, writer: asyncio.StreamWriter, msg: dict[str, Any]) -> bool:
        try:
            data = protocol.encode(msg, protocol.MAX_RESPONSE)
        except ProtocolError as e:
            data = protocol.encode(protocol.error(msg.get("id"), ProtocolError(
                f"the answer is too large to send ({e.message})",
                hint="Ask for less, e.g. `sloth ls --limit 1000` or a --state/--lane filter.")))
        try:
            writer.write(data)
            await asyncio.wait_for(writer.drain(), WRITE_TIMEOUT_S)
            return True
        except (ConnectionError, asyncio.TimeoutError, OSError):
            return False

    # ------------------------------------------------------------ handlers
    def op_ping(self, a: dict[str, Any]) -> dict[str, Any]:
        return {"pong": True, "version": __version__}

    def op_status(self, a: dict[str, Any]) -> dict[str, Any]:
        d = self.d
        return {
            "pid": os.getpid(), "version": __version__, "protocol": protocol.VERSION,
            "started_at": d.started_at, "uptime_s": time.time() - d.started_at,
            "instance": d.instance, "paths": d.paths.as_dict(), "counts": d.queue.counts(),
            "server": dict(self.stats), **d.worker.status(),
        }

    def op_add(self, a: dict[str, Any]) -> dict[str, Any]:
        jobs, common = a["jobs"], a.get("common") or {}
        if not isinstance(jobs, list) or not jobs:
            raise BadRequest("jobs must be a non-empty list of job objects")
        if not isinstance(common, dict):
            raise BadRequest("common must be an object")
        specs = []
        for j in jobs:
            if not isinstance(j, dict):
                raise BadRequest("each job must be an object")
            specs.append({**common, **j})
        ids = self.d.queue.enqueue_many(specs)
        self.d.worker.wake()
        return {"ids": ids}

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
        jobs = self.d.queue.jobs(lane=lane, limit=limit, states=states)
        return {"jobs": [j.to_dict() for j in jobs]}

    def op_show(self, a: dict[str, Any]) -> dict[str, Any]:
        jid = _job_id(a.get("id"))
        job = self.d.queue.get(jid)
        return {"job": job.to_dict(), "events": [e.to_dict() for e in self.d.queue.events(jid)]}

    def op_cancel(self, a: dict[str, Any]) -> dict[str, Any]:
        return {"job": self.d.worker.cancel(_job_id(a.get("id"))).to_dict()}

    def op_retry(self, a: dict[str, Any]) -> dict[str, Any]:
        return {"job": self.d.worker.retry(_job_id(a.get("id"))).to_dict()}

    def op_pause(self, a: dict[str, Any]) -> dict[str, Any]:
        self.d.worker.pause(_lane(a.get("lane")))
        return self.d.worker.status()

    def op_resume(self, a: dict[str, Any]) -> dict[str, Any]:
        self.d.worker.resume(_lane(a.get("lane")))
        return self.d.worker.status()

    def op_prune(self, a: dict[str, Any]) -> dict[str, Any]:
        older = a.get("older_than_s", self.d.settings.retention_s)
        if (isinstance(older, bool) or not isinstance(older, (int, float))
                or not 0 <= older < 1e15):  # also NaN, inf and ints too big for a float
            raise BadRequest("older_than_s must be a non-negative number of seconds")
        return {"pruned": self.d.worker.prune(float(older))}

    def op_logs(self, a: dict[str, Any]) -> dict[str, Any]:
        job = self.d.queue.get(_job_id(a.get("id")))
        mb = a.get("max_bytes")  # reserved: accepted, checked, not used yet
        if mb is not None and (isinstance(mb, bool) or not isinstance(mb, int) or mb < 1):
            raise BadRequest("max_bytes must be a whole number >= 1")
        attempt = _attempt(job, a.get("attempt"))
        return {"id": job.id, "attempt": attempt, "attempts": job.attempts,
                "path": str(self.d.paths.job_log(job.id, attempt))}

    def op_shutdown(self, a: dict[str, Any]) -> dict[str, Any]:
        asyncio.get_running_loop().call_soon(self.d.request_stop, "shutdown requested over the socket")
        return {"stopping": True, "pid": os.getpid()}

    # ----------------------------------------------------------- streaming
    async def op_wait(self, a: dict[str, Any], emit: Callable[[dict[str, Any]], Awaitable[None]]) -> Any:
        ids = a.get("ids")
        if not isinstance(ids, list) or not ids:
            raise BadRequest("ids must be a non-empty list of job ids")
        ids = [_job_id(i) for i in ids]
        pending = {i for i in ids if not self.d.queue.get(i).state.finished}
        # Not a bounded queue of events: the latest state per pending job, so
        # waiting on thousands of jobs never drops the change that ends it.
        latest: dict[int, Job] = {}
        changed = asyncio.Event()

        def on_change(job: Job) -> None:
            if job.id in pending:
                latest[job.id] = job
                changed.set()
        self.subscribers.add(on_change)
        self.wakers.add(changed)
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
            self.subscribers.discard(on_change)
            self.wakers.discard(changed)
        return {"jobs": [self.d.queue.get(i).to_dict() for i in ids]}

    async def op_subscribe(self, a: dict[str, Any], emit: Callable[[dict[str, Any]], Awaitable[None]]) -> Any:
        ids = a.get("ids")
        if ids is not None and (not isinstance(ids, list) or not ids):
            raise BadRequest("ids must be a non-empty list of job ids (or absent, for all jobs)")
        wanted = None if ids is None else {self.d.queue.get(_job_id(i)).id for i in ids}
        q = self._subscribe(lambda job: wanted is None or job.id in wanted)
        try:
            while (item := await q.get()) is not None:
                if item is OVERFLOW:
                    raise SlothError(
                        f"this subscriber fell more than {MAX_STREAM_BACKLOG} events behind",
                        hint="Read events faster, or subscribe again and re-read state with `list`.")
                await emit({"kind": "state", "job": item})
        finally:
            self._unsubscribe(q)
        return {"ended": "daemon stopping"}

    async def op_follow(self, a: dict[str, Any], emit: Callable[[dict[str, Any]], Awaitable[None]]) -> Any:
        job = self.d.queue.get(_job_id(a.get("id")))
        if a.get("attempt") is None and not job.state.finished:
            job = await self._until_started(job.id)  # `sloth add ... && sloth logs -f ID`
        attempt = _attempt(job, a.get("attempt"), allow_none=True)
        # Unbounded, but fed at most MAX_STREAM_BACKLOG chunks: past that a
        # client too slow to keep up misses live output and is told how much
        # where it was cut, and the end always gets through.
        q: asyncio.Queue[bytes | None] = asyncio.Queue()
        run = self.d.worker.running.get(job.id)
        live = run is not None and run.attempt == attempt and run.proc is not None
        skipped = 0

        def feed(data: bytes | None) -> None:
            nonlocal skipped
            if data is not None and q.qsize() >= MAX_STREAM_BACKLOG:
                skipped += len(data)
                return
            if skipped:
                q.put_nowait(f"\n[sloth] ... {skipped} bytes of live output skipped here: this follower "
                             f"fell behind (`sloth logs {job.id}` has them once the job ends) ...\n".encode())
                skipped = 0
            q.put_nowait(data)
        try:
            if live:
                # Snapshot and subscribe with no await in between: every byte
                # is sent exactly once, from the snapshot or live.
                past = run.proc.log.snapshot()
                run.followers.add(feed)
                for i in range(0, len(past), LOG_CHUNK):
                    await emit(_log_event(past[i:i + LOG_CHUNK]))
            elif attempt is not None:
                await self._send_file(self.d.paths.job_log(job.id, attempt), emit)
            if live:
                while (data := await q.get()) is not None:
                    await emit(_log_event(data))
        finally:
            if live:
                run.followers.discard(feed)
        return {"job": self.d.queue.get(job.id).to_dict()}

    async def _until_started(self, jid: int) -> Job:
        """Wait until job ``jid`` has a live process or has finished; return it."""
        q = self._subscribe(lambda job: job.id == jid)  # before the check: no change missed
        try:
            while True:
                job = self.d.queue.get(jid)
                run = self.d.worker.running.get(jid)
                if job.state.finished or (run is not None and run.proc is not None):
                    return job
                if await q.get() is None:
                    raise SlothError("the daemon is stopping", hint="Follow the job again after it restarts.")
        finally:
            self._unsubscribe(q)

    async def _send_file(self, path: Path, emit: Callable[[dict[str, Any]], Awaitable[None]]) -> None:
        try:
            f = open(path, "rb")
        except FileNotFoundError:
            return  # the attempt printed nothing
        except OSError as e:
            raise LogUnreadable(path, e) from None
        with f:
            while chunk := f.read(LOG_CHUNK):
                await emit(_log_event(chunk))

    def _subscribe(self, match: Callable[[Job], bool]) -> asyncio.Queue[dict[str, Any] | None]:
        q: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue(MAX_STREAM_BACKLOG)

        def on_change(job: Job) -> None:
            if match(job):
                try:
                    q.put_nowait(job.to_dict())
                except asyncio.QueueFull:
                    # Never drop silently: the reader learns it missed events.
                    while not q.empty():
                        q.get_nowait()
                    q.put_nowait(OVERFLOW)
        q._sloth_cb = on_change  # type: ignore[attr-defined]
        self.subscribers.add(on_change)
        self.streams.add(q)
        return q

    def _unsubscribe(self, q: asyncio.Queue[Any]) -> None:
        self.subscribers.discard(q._sloth_cb)  # type: ignore[attr-defined]
        self.streams.discard(q)


def _log_event(data: bytes) -> dict[str, Any]:
    # surrogateescape: bytes that are not UTF-8 travel and come back exact
    return {"kind": "log", "data": data.decode("utf-8", "surrogateescape")}


def _job_id(v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise BadRequest(f"job id must be a whole number, got {v!r}")
    if not 1 <= v < 2**63:  # SQLite integers are 64-bit
        raise JobNotFound(v)
    return v


def _lane(v: Any) -> str | None:
    if v is not None and (not isinstance(v, str) or not v):
        raise BadRequest("lane must be a non-empty string")
    return v


def _attempt(job: Job, v: Any, *, allow_none: bool = False) -> int | None:
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

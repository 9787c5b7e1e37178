"""The streaming ops of the control socket: ``wait``, ``follow``, ``subscribe``.

Each emits events before its one response. :class:`Streams` is owned by
the Handlers (handlers.py), which route the ops to it and end it when the
daemon stops.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, AsyncIterator, Awaitable, Callable

from sloth_daemon.daemon.control import Control
from sloth_daemon.daemon.keeper_errors import KeeperError
from sloth_daemon.errors import BadRequest, SlothError
from sloth_daemon.paths import Paths, open_log
from sloth_daemon.queue import Queue
from sloth_daemon.daemon.request_args import attempt_of, job_id, job_ids
from sloth_daemon.daemon.waking import woken
from sloth_daemon.models import Job, mask_channel

Emit = Callable[[dict[str, Any]], Awaitable[None]]
MAX_STREAM_BACKLOG = 1024  # queued events per subscriber before it is told it overflowed
LOG_CHUNK = 256 * 1024  # bytes of log per streamed event
_OVERFLOW: dict[str, Any] = {"overflow": True}
_STOPPING = "the daemon is stopping"
# A shared queue: what other machines' daemons change is not heard here,
# so waits look again this often, and a log stored by another machine is
# read again this often (until it is marked done, or its run ended and
# nothing came for STORED_GRACE_S: its daemon died before it could finish).
REMOTE_POLL_S = 1.0
STORED_GRACE_S = 5.0
# A wait sends at most one frame per this (all that changed meanwhile in it):
# a thousand jobs ending in a second cost a waiter ten frames, not three
# thousand. The frame that ends the wait is never held back.
WAIT_WINDOW_S = 0.1


WIRE_FIELDS = tuple(f for f in Job.__dataclass_fields__ if f != "env")


def wire(job: Job, fields: tuple[str, ...] = WIRE_FIELDS) -> dict[str, Any]:
    """What Job.to_dict() gives (``fields`` of it), without its copies of
    lists and dicts: for a frame that is encoded as it is sent, and that
    nothing changes meanwhile (a wait on thousands of jobs makes thousands
    of these). Its channels' URLs masked as to_dict masks them (a URL's
    path and query are its token: `sloth wait --json` printed them whole)."""
    have = job.__dict__  # a dataclass's fields, read without getattr's lookup on the class first
    d = {f: have[f] for f in fields}
    d["state"] = job.state.value
    if job.tell and "tell" in d:
        d["tell"] = [mask_channel(ch) for ch in job.tell]
    return d


def wire_fields(v: Any) -> tuple[str, ...]:
    """A wait's ``fields``: absent, every field; else a list of job field
    names (env is never sent), id and state added if missing."""
    if v is None:
        return WIRE_FIELDS
    if not isinstance(v, list) or not v or len(v) > len(WIRE_FIELDS) * 2 \
            or not all(isinstance(f, str) for f in v):
        raise BadRequest(f"fields must be a list of job field names (at most {len(WIRE_FIELDS) * 2})")
    unknown = [f for f in v if f not in WIRE_FIELDS]
    if unknown:
        # `sloth wait` asks again without fields on this (cli/wait.py _refused): a CLI newer than the daemon
        raise BadRequest(f"fields: no job field {unknown[0][:64]!r}",
                         hint="Job fields: " + ", ".join(WIRE_FIELDS) + ".")
    return tuple(dict.fromkeys(["id", "state", *v]))


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


class Waiting:
    """What one wait holds: the jobs not ended yet (``pending``), the state
    each was last told in (``told``), the latest state heard since
    (``latest``: not a queue of events, so waiting on thousands of jobs
    never drops the change that ends one, nor piles up the ones between),
    and two wake-ups: ``heard`` (something changed) and ``all_ended``
    (every pending job's latest state is final: send it now)."""

    def __init__(self, jobs: list[Job], fields: tuple[str, ...] = WIRE_FIELDS) -> None:
        self.fields = fields  # what of each job is sent (wire)
        self.told = {j.id: j for j in jobs}
        self.pending = {j.id for j in jobs if not j.state.finished}
        self.latest: dict[int, Job] = {}
        self._ended: set[int] = set()  # pending jobs whose latest state is final
        self.heard, self.all_ended = asyncio.Event(), asyncio.Event()
        self._dicts: dict[int, dict[str, Any]] = {}  # told[id] as sent (made once, sent again at the end)

    def told_dict(self, jid: int) -> dict[str, Any]:
        """``told[jid]`` as a frame carries it (Job.to_dict's shape)."""
        d = self._dicts.get(jid)
        if d is None:
            d = self._dicts[jid] = wire(self.told[jid], self.fields)
        return d

    def on_change(self, job: Job) -> None:
        """A watcher (Control.watch): O(1), whatever the number of jobs waited on."""
        if job.id not in self.pending:
            return
        self.latest[job.id] = job
        if job.state.finished:
            self._ended.add(job.id)
            if len(self._ended) == len(self.pending):
                self.all_ended.set()
        else:
            self._ended.discard(job.id)
            self.all_ended.clear()
        self.heard.set()

    def take(self) -> list[Job]:
        """What changed since the last take, to tell now; the ended leave ``pending``."""
        jobs = list(self.latest.values())
        self.latest.clear()
        self.told.update((j.id, j) for j in jobs)
        for j in jobs:
            self._dicts.pop(j.id, None)
        self.pending -= self._ended
        self._ended.clear()
        self.heard.clear()
        self.all_ended.clear()
        return jobs


class Streams:
    """The streaming ops. Collaborators: the ``queue`` (the jobs read), the
    daemon's ``control`` (its watchers, a shared queue's reads, the runs
    live here) and the ``paths`` (the log files). State: the open
    subscriptions and the waits' wake-up events, all ended by ``close``
    (then ``closing``: a stream still reading stops)."""

    def __init__(self, queue: Queue, control: Control, paths: Paths, *,
                 wait_window_s: float = WAIT_WINDOW_S) -> None:
        self.queue, self.control, self.paths = queue, control, paths
        self.wait_window_s = wait_window_s
        self.closing = False
        self._subs: set[Subscription] = set()
        self._wakers: set[asyncio.Event] = set()  # waits, woken to end on close

    def close(self) -> None:
        """End every open stream (the daemon is stopping)."""
        self.closing = True
        for ev in list(self._wakers):
            ev.set()
        for sub in list(self._subs):
            sub.end()

    async def op_wait(self, a: dict[str, Any], emit: Emit) -> Any:
        """First a ``jobs`` event (every job as it is now, for a progress
        view), then, until all have ended, what changed: with ``batched``
        one ``states`` event of many jobs at a time, else a ``state`` event
        per job. Coalesced (Waiting): at most one send per
        ``wait_window_s``, each job's latest state only, but the change
        that ends the last job goes at once. The response is every job as
        it ended, from what the wait heard (no read per job). With
        ``fields``, only those of each job, in the events and the response
        (`sloth wait` asks for what it shows: a tenth of the bytes)."""
        ids = job_ids(a.get("ids"))
        batched = a.get("batched", False)
        if not isinstance(batched, bool):
            raise BadRequest("batched must be true or false")
        w = Waiting(self._read(ids), wire_fields(a.get("fields")))
        unwatch = self.control.watch(w.on_change)
        self._wakers |= {w.heard, w.all_ended}
        loop = asyncio.get_running_loop()
        try:
            await emit({"kind": "jobs", "jobs": [w.told_dict(i) for i in ids]})
            sent_at = loop.time()
            while w.pending:
                if not await self._heard(w.heard):
                    for job in self._polled(w):
                        w.on_change(job)
                hold = sent_at + self.wait_window_s - loop.time()
                if hold > 0 and w.latest and not w.all_ended.is_set() and not self.closing:
                    await woken(w.all_ended, hold)  # more changes come in meanwhile
                if self.closing:
                    raise SlothError(_STOPPING, hint="Run the wait again after it restarts.")
                jobs = w.take()
                if not jobs:
                    continue
                if batched:
                    await emit({"kind": "states", "jobs": [w.told_dict(j.id) for j in jobs]})
                else:
                    for j in jobs:
                        await emit({"kind": "state", "job": w.told_dict(j.id)})
                sent_at = loop.time()
        finally:
            unwatch()
            self._wakers -= {w.heard, w.all_ended}
        return {"jobs": [w.told_dict(i) for i in ids]}

    def _read(self, ids: list[int]) -> list[Job]:
        """The jobs waited on, in one read (not one per id: a wait on a
        sweep's thousands); an id that is no job raises JobNotFound, the
        first such as the CLI gave it."""
        jobs = self.queue.get_many(ids)
        if len(jobs) < len(set(ids)):
            found = {j.id for j in jobs}
            for i in ids:
                if i not in found:  # JobNotFound, or a job its read missed
                    jobs.append(self.queue.get(i))
                    found.add(i)
        return jobs

    async def _heard(self, changed: asyncio.Event) -> bool:
        """Wait for a change heard here; on a shared queue at most
        REMOTE_POLL_S (False: look again, another machine may have changed it)."""
        if self.control.shared is None:
            await changed.wait()
            return True
        return await woken(changed, REMOTE_POLL_S)

    def _polled(self, w: Waiting) -> list[Job]:
        """The pending jobs another machine changed since we last said."""
        jobs = self.control.get_many(sorted(w.pending))
        return [j for j in jobs if (seen := w.latest.get(j.id) or w.told[j.id]).state != j.state
                or seen.attempts != j.attempts]

    async def op_subscribe(self, a: dict[str, Any], emit: Emit) -> Any:
        ids = a.get("ids")
        if ids is not None and (not isinstance(ids, list) or not ids):
            raise BadRequest("ids must be a non-empty list of job ids (or absent, for all jobs)")
        wanted = None if ids is None else {self.queue.get(job_id(i)).id for i in ids}
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
        """A job's output: the attempt asked for (default: the latest, once
        one starts), live while it runs. With ``all_attempts``, from the
        first attempt (default) or the one asked for, then each later one,
        each after an ``attempt`` event, until the job is final. The
        response is the job as it ends."""
        through, live = a.get("all_attempts", False), a.get("live", True)
        if not isinstance(through, bool) or not isinstance(live, bool):
            raise BadRequest("all_attempts and live must be true or false")
        job, n = await self._first_attempt(job_id(a.get("id")), a.get("attempt"), through)
        while n is not None:
            if n > 1 and through:
                await emit({"kind": "attempt", "attempt": n, "previous": self._how_it_ended(job.id, n - 1)})
            await self._send_attempt(job.id, n, emit, live)
            if not through:
                break
            job = await self._until_attempt(job.id, n)
            if job.attempts <= n:
                break  # final (or stopped waiting) without another attempt
            n += 1
        return {"job": self.queue.get(job.id).to_dict()}

    async def _first_attempt(self, jid: int, asked: Any, through: bool) -> tuple[Job, int | None]:
        """The job and the attempt to send first (None: it ended without one)."""
        job = self.queue.get(jid)
        if asked is None and not job.state.finished:
            job = await self._until_attempt(job.id, 0)  # `sloth add ... && sloth logs -f ID`
        n = attempt_of(job, asked, allow_none=True)
        if through and asked is None and n is not None:
            n = 1  # the whole story: attempts that failed before we came, then the live one
        return job, n

    async def _send_attempt(self, jid: int, n: int, emit: Emit, live: bool = True) -> None:
        """Live from the keeper, else the file here, else (a shared queue)
        the copy another machine's daemon stores; ``live``: follow it."""
        tap = self.control.follow(jid, n)
        path = self.paths.job_log(jid, n)
        if tap is not None:
            if not await _stream(tap, emit):  # it ended, and the keeper let it go, before the tap reached it
                await _send_file(path, emit)
        elif self.control.shared is not None and not path.exists():
            await self._send_stored(jid, n, emit, live)
        else:
            await _send_file(path, emit)

    async def _send_stored(self, jid: int, n: int, emit: Emit, live: bool) -> None:
        """The stored copy; an attempt that ended is read until its copy is
        complete (its machine ships the rest after the end), even when not
        ``live``: `sloth logs ID` right after the job ended elsewhere."""
        offset, quiet = 0, 0.0
        while not self.closing:
            part = self.control.stored_log(jid, n, offset)
            if part.data:
                await emit(log_event(part.data))
                offset, quiet = offset + len(part.data), 0.0
            if part.done:
                return
            if part.size is not None and offset < part.size:
                continue  # more than one read's worth is stored
            job = self.queue.get(jid)
            running = job.state.value == "running" and job.attempts == n
            if running and not live:
                return  # what it printed so far
            if not running:  # it ended: its machine ships the rest within a second or two
                quiet += REMOTE_POLL_S
                if quiet > STORED_GRACE_S:
                    return
            await asyncio.sleep(REMOTE_POLL_S / 2)

    def _how_it_ended(self, jid: int, n: int) -> str:
        ends = [e for e in self.queue.events(jid)
                if e.attempt == n and e.kind in ("failed", "interrupted", "abandoned")]
        return f"{ends[-1].kind}: {ends[-1].message}" if ends else ""

    async def _until_attempt(self, jid: int, after: int) -> Job:
        """Wait until an attempt later than ``after`` has started (it has a
        live process, or it already ran) or the job is final; return the job."""
        sub = self._subscribe(lambda job: job.id == jid)  # before the check: no change missed
        try:
            while True:
                job = self.queue.get(jid)
                if job.state.finished:
                    return job
                if job.attempts > after and (self.control.attempt_live(jid, job.attempts)
                                             or job.state.value != "running" or job.attempts > after + 1):
                    return job
                if await self._next_change(sub) is None:
                    raise SlothError(_STOPPING, hint="Follow the job again after it restarts.")
        finally:
            self._unsubscribe(sub)

    async def _next_change(self, sub: Subscription) -> Any:
        """The next change heard here; on a shared queue a timeout after
        REMOTE_POLL_S is a change too (look again: another machine may act)."""
        if self.control.shared is None:
            return await sub.q.get()
        try:
            return await asyncio.wait_for(sub.q.get(), REMOTE_POLL_S)
        except asyncio.TimeoutError:
            return True

    def _subscribe(self, match: Callable[[Job], bool]) -> Subscription:
        sub = Subscription(self.control, match)
        self._subs.add(sub)
        return sub

    def _unsubscribe(self, sub: Subscription) -> None:
        sub.close()
        self._subs.discard(sub)


async def _stream(chunks: AsyncIterator[bytes], emit: Emit) -> bool:
    """Send a live run's output; False if the keeper no longer held the run
    when asked (a run that ends in milliseconds: its whole log is in its file)."""
    sent = False
    try:
        async for data in chunks:
            sent = True
            for i in range(0, len(data), LOG_CHUNK):
                await emit(log_event(data[i:i + LOG_CHUNK]))
    except KeeperError as e:
        if sent or not e.gone:
            raise
        return False
    return True


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

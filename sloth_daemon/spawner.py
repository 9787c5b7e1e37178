"""The seam between the worker loop and the job processes.

The worker decides *what* runs (claims, leases, results); a :class:`Spawner`
runs it: starts a job's process, captures its log, enforces its timeout,
ends its tree on request and reports back through a :class:`RunSink`. Every
call returns at once; what happens later arrives as sink callbacks on the
event loop, so the worker's own steps stay synchronous and can be driven
in-process by tests with a fake spawner.

:class:`LocalSpawner` runs jobs as children of this process (runner.py).
"""

from __future__ import annotations

import asyncio
import signal
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, AsyncIterator, Protocol

from . import procident
from .durations import format_duration
from .errors import SpawnError
from .runner import JobProcess, LogWriter

MAX_TAP_BYTES = 1 << 20  # live output queued per follower before the rest is skipped (and said so)


@dataclass(frozen=True)
class SpawnRequest:
    key: str  # names the run: the claim's fencing token
    job_id: int
    attempt: int
    argv: list[str]
    cwd: str | None
    env: dict[str, str]
    log_path: Path
    log_cap: int
    timeout_s: float | None
    kill_grace_s: float
    previous: dict[str, Any] | None = None  # an earlier attempt's process: ended before this starts


@dataclass(frozen=True)
class Outcome:
    """How a run ended. ``returncode`` as Popen's (negative: killed by that
    signal), None when it never started; ``reason`` is set when it was ended
    on purpose (a kill request's reason, or the spawner's own timeout)."""

    returncode: int | None
    reason: str | None = None
    log_problem: str | None = None

    def describe(self) -> tuple[bool, str]:
        """(succeeded, message) for the job's history."""
        code = self.returncode
        if self.reason:
            ok, msg = False, self.reason
        elif code == 0:
            ok, msg = True, "exit 0"
        elif code is not None and code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = f"signal {-code}"
            ok, msg = False, f"killed by {name}"
        else:
            ok, msg = False, f"exit {code}"
        return ok, msg + (f"; {self.log_problem}" if self.log_problem else "")


class RunSink(Protocol):
    """What a spawner tells the worker about one run (on the event loop)."""

    def started(self, pid: int, identity: dict[str, Any]) -> None: ...

    def spawn_failed(self, message: str, retry: bool, resource: bool = False) -> None:
        """``resource``: the daemon itself lacked descriptors, processes or
        memory (not the job's fault: the attempt must not count)."""

    def exited(self, outcome: Outcome) -> None: ...


class Spawner(Protocol):
    def spawn(self, req: SpawnRequest, sink: RunSink) -> None: ...

    def kill(self, key: str, reason: str, grace_s: float) -> None: ...

    def trust(self, items: list[tuple[str, float]]) -> None:
        """Each (key, until): the run's lease was just renewed; ``until`` is
        on the boot clock (ClockReadings.total)."""

    def tap(self, key: str) -> AsyncIterator[bytes] | None: ...


@dataclass
class _Local:
    req: SpawnRequest
    sink: RunSink
    proc: JobProcess | None = None
    ending: str | None = None
    timer: asyncio.TimerHandle | None = None
    taps: set["_Tap"] = field(default_factory=set)


@dataclass(eq=False)
class _Tap:
    """One follower's queue: at most MAX_TAP_BYTES waiting. Past that a
    follower too slow to keep up (a paused pager) misses live output and is
    told how much, where it was cut, and goes on following; the end always
    gets through. Feeding it never waits: the job's output is never held up."""

    job_id: int
    q: asyncio.Queue[bytes | None] = field(default_factory=asyncio.Queue)
    queued: int = 0  # bytes in q
    skipped: int = 0

    def put(self, data: bytes | None) -> None:
        if data is not None and self.queued + len(data) > MAX_TAP_BYTES and self.queued:
            self.skipped += len(data)
            return
        if self.skipped:
            self._put(f"\n[sloth] ... {self.skipped} bytes of live output skipped here: this "
                      f"follower fell behind (`sloth logs {self.job_id}` has them once the job "
                      "ends) ...\n".encode())
            self.skipped = 0
        self._put(data)

    def _put(self, data: bytes | None) -> None:
        self.queued += len(data or b"")
        self.q.put_nowait(data)

    async def get(self) -> bytes | None:
        data = await self.q.get()
        self.queued -= len(data or b"")
        return data


class LocalSpawner:
    """Runs each job as a child of this process, in its own session."""

    def __init__(self) -> None:
        self.runs: dict[str, _Local] = {}
        self._tasks: set[asyncio.Task[None]] = set()  # kept: the loop holds only weak references

    def spawn(self, req: SpawnRequest, sink: RunSink) -> None:
        run = self.runs[req.key] = _Local(req, sink)
        if req.previous and procident.is_same_process(req.previous):
            # The lease expired but the old process lives (a previous daemon's
            # orphan, or a stalled foreign worker): end it first.
            self._track(asyncio.get_running_loop().create_task(self._start_after_kill(run)))
        else:
            self._start(run)

    def kill(self, key: str, reason: str, grace_s: float) -> None:
        run = self.runs.get(key)
        if run is None or run.ending is not None:
            return
        run.ending = reason
        if run.proc is None:
            return  # still ending an old process; _start_after_kill sees `ending`
        run.proc.log.note(f"{reason}: ending the process tree")
        self._track(asyncio.get_running_loop().create_task(run.proc.end_tree(grace_s, reason)))

    def trust(self, items: list[tuple[str, float]]) -> None:
        """A renewed lease: remember the tree as it is now, so a grandchild
        whose parent has exited can still be found and ended. (A child of
        this process dies with it, so there is no deadline to keep.)"""
        for key, _until in items:
            run = self.runs.get(key)
            if run is not None and run.proc is not None:
                if run.proc.alive():
                    run.proc.refresh_tree()
                else:
                    run.proc.poll()  # exited and missed: settle it now

    def tap(self, key: str) -> AsyncIterator[bytes] | None:
        run = self.runs.get(key)
        if run is None or run.proc is None or run.proc.returncode is not None:
            return None
        # Snapshot and subscribe with no await in between: every byte is sent
        # exactly once, from the snapshot or live.
        tap = _Tap(run.req.job_id)
        past = run.proc.log.snapshot()
        run.taps.add(tap)
        return _follow(run, tap, past)

    def _track(self, task: asyncio.Task[None]) -> None:
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _start_after_kill(self, run: _Local) -> None:
        loop = asyncio.get_running_loop()
        previous = run.req.previous or {}
        try:
            await loop.run_in_executor(None, procident.kill_identity_blocking, previous, run.req.kill_grace_s)
        except Exception as e:  # a bug or a psutil surprise: do not start beside it
            self.runs.pop(run.req.key, None)
            run.sink.spawn_failed(f"cannot end the previous attempt's process: {e}", True)
            return
        if run.ending is None:
            self._start(run)
        else:
            self._finish(run, Outcome(None, run.ending))

    def _start(self, run: _Local) -> None:
        req = run.req
        lw = LogWriter(req.log_path, req.log_cap)
        proc = JobProcess(req.argv, cwd=req.cwd, env=req.env, log=lw,
                          on_output=lambda data: _feed(run, data),
                          on_exit=lambda p: self._exited(run))
        try:
            proc.start(asyncio.get_running_loop())
        except SpawnError as e:
            if not e.resource:  # an attempt that does not count leaves no log
                lw.note(e.message)
            lw.close()
            del self.runs[req.key]
            run.sink.spawn_failed(e.message, e.retry, e.resource)
            return
        run.proc = proc
        if req.timeout_s:  # armed first: nothing below may leave a job without its timeout
            run.timer = asyncio.get_running_loop().call_later(
                req.timeout_s, self.kill, req.key, f"timed out after {format_duration(req.timeout_s)}",
                req.kill_grace_s)
        run.sink.started(proc.pid, proc.identity())

    def _exited(self, run: _Local) -> None:
        assert run.proc is not None
        if run.timer is not None:
            run.timer.cancel()
        run.proc.log.close()
        self._finish(run, Outcome(run.proc.returncode, run.proc.kill_reason, run.proc.log.problem))

    def _finish(self, run: _Local, outcome: Outcome) -> None:
        self.runs.pop(run.req.key, None)
        _feed(run, None)
        run.sink.exited(outcome)


def _feed(run: _Local, data: bytes | None) -> None:
    for tap in list(run.taps):
        tap.put(data)


async def _follow(run: _Local, tap: _Tap, past: bytes) -> AsyncIterator[bytes]:
    try:
        if past:
            yield past
        while (data := await tap.get()) is not None:
            yield data
    finally:
        run.taps.discard(tap)

"""What nvidia-smi says of the GPUs, read off the loop (docs/gpus.md).

Two queries, both in nvidia-smi's CSV form without header and units
(``--format=csv,noheader,nounits``; a header or `` MiB`` units are read too):

  ``--query-gpu=index,uuid,memory.total,memory.used,memory.free``
      ``0, GPU-fd189414-e0f6-58a0-7031-fefe0ce43b1d, 81920, 2, 81226``
  ``--query-compute-apps=pid,gpu_uuid,used_memory``
      ``10042, GPU-777aa4a9-8dac-a61b-5b5a-118d3e947546, 4435``

(memory in MiB; a field the driver cannot report reads ``[N/A]``). Each
process listed is sloth's if it, or a process above it, carries a
``SLOTH_JOB_TOKEN`` in its environment (keeper/procident.py reads it);
anything else is a process outside sloth.

A reading is kept ``max_age_s`` (2 s by default) and read again when a
claim wants one older: in a task beside the worker's loop, each query
under a timeout (5 s) and read to at most 1 MiB (then its process group is
killed), so a dead, hanging or babbling nvidia-smi never blocks the worker. While the reading is being
taken, jobs that need it wait (said in ``ls``); a failed reading is kept
like a good one (and said), so a broken nvidia-smi is asked again only
every ``max_age_s``.
"""

from __future__ import annotations

import asyncio
import logging
import os
from sloth_daemon.daemon.which import which as path_which
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Collection, Mapping, Sequence

from sloth_daemon.checks import format_size

log = logging.getLogger("sloth.gpus")
MIB = 1024 * 1024
GPU_QUERY = ("nvidia-smi", "--query-gpu=index,uuid,memory.total,memory.used,memory.free",
             "--format=csv,noheader,nounits")
APPS_QUERY = ("nvidia-smi", "--query-compute-apps=pid,gpu_uuid,used_memory", "--format=csv,noheader,nounits")
PRESENT_RECHECK_S = 60.0
MAX_ROWS = 4096  # of either query: more is no GPU listing
MAX_OUTPUT = 1024 * 1024  # bytes of either query's output read; more is an error


@dataclass(frozen=True)
class Gpu:
    index: str
    uuid: str
    total: int | None  # bytes; None: [N/A]
    used: int | None
    free: int | None

    def named(self, token: str) -> bool:
        """Whether ``token`` (a [resources] gpu token) names this GPU: its index or its UUID."""
        return token in (self.index, self.uuid)


@dataclass(frozen=True)
class App:
    pid: int
    gpu_uuid: str
    used: int | None  # bytes; None: [N/A]


@dataclass
class Reading:
    """One look: the GPUs, the compute processes on them and whose each is
    (pid -> its SLOTH_JOB_TOKEN, None: outside sloth); or why there is none."""

    at: float  # the probe's clock
    gpus: list[Gpu] = field(default_factory=list)
    apps: list[App] = field(default_factory=list)
    owners: dict[int, str | None] = field(default_factory=dict)
    error: str | None = None

    def gpu(self, token: str) -> Gpu | None:
        return next((g for g in self.gpus if g.named(token)), None)

    def used_by(self, run_token: str, gpu: Gpu) -> int:
        """Memory the processes of the run of ``run_token`` use on ``gpu``."""
        return sum(a.used or 0 for a in self.apps if a.gpu_uuid == gpu.uuid and self.owners.get(a.pid) == run_token)

    def outside(self, gpu: Gpu, ours: Collection[str] | None = None) -> tuple[int | None, list[int]]:
        """Memory used on ``gpu`` by processes outside sloth (None: some
        does not say how much) and their pids; ``ours``: the tokens of the
        runs this daemon holds (a sloth process of none of them, e.g. a
        finished job's leftover, is outside what it counts too)."""
        apps = [a for a in self.apps if a.gpu_uuid == gpu.uuid and (
            self.owners.get(a.pid) is None or ours is not None and self.owners.get(a.pid) not in ours)]
        used = None if any(a.used is None for a in apps) else sum(a.used or 0 for a in apps)
        return used, [a.pid for a in apps]


def _mib(field_: str) -> int | None:
    t = field_.strip().removesuffix("MiB").strip()
    return int(t) * MIB if t.isdigit() else None  # [N/A], [Not Supported], [Insufficient Permissions]


def _rows(text: str, width: int) -> list[list[str]]:
    """CSV rows of ``width`` fields; a header row (nvidia-smi's without
    noheader) and blank lines are skipped. ValueError for anything else."""
    out = []
    for line in text.splitlines()[:MAX_ROWS + 1]:
        if not line.strip():
            continue
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != width:
            raise ValueError(f"a line of {len(parts)} fields where {width} were asked: {line[:80]!r}")
        if parts[0] in ("index", "pid"):
            continue
        out.append(parts)
    return out


def parse_gpus(text: str) -> list[Gpu]:
    """``--query-gpu=index,uuid,memory.total,memory.used,memory.free`` lines."""
    out = []
    for index, uuid, total, used, free in _rows(text, 5):
        if not index.isdigit():
            raise ValueError(f"GPU index {index[:20]!r} is no number")
        out.append(Gpu(index, uuid, _mib(total), _mib(used), _mib(free)))
    return out


def parse_apps(text: str) -> list[App]:
    """``--query-compute-apps=pid,gpu_uuid,used_memory`` lines (none: no process)."""
    out = []
    for pid, uuid, used in _rows(text, 3):
        if not pid.isdigit():
            raise ValueError(f"pid {pid[:20]!r} is no number")
        out.append(App(int(pid), uuid, _mib(used)))
    return out


def owners_of(pids: Sequence[int], read_token: Callable[[int], str | None] | None = None,
              parent: Callable[[int], int | None] | None = None) -> dict[int, str | None]:
    """Each pid's SLOTH_JOB_TOKEN: its own, or the nearest ancestor's (None:
    outside sloth, or not ours to read)."""
    read_token, parent = read_token or _token, parent or _ppid
    out: dict[int, str | None] = {}
    for pid in pids:
        p: int | None = pid
        for _ in range(64):  # a chain of ancestors, never a loop
            if p is None or p <= 1:
                break
            tok = read_token(p)
            if tok is not None:
                out[pid] = tok
                break
            p = parent(p)
        out.setdefault(pid, None)
    return out


def _token(pid: int) -> str | None:
    from sloth_daemon.keeper.procident import _proc_token

    return _proc_token(str(pid))


def _ppid(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
        return int(data[data.rfind(b")") + 2:].split()[1])
    except (OSError, IndexError, ValueError):
        return None


class GpuProbe:
    """See the module docstring. State: the last reading and the task
    taking the next. Collaborators: ``on_fresh`` (told when a reading came:
    the worker looks again), ``clock`` (monotonic), ``which``."""

    def __init__(self, *, max_age_s: float = 2.0, timeout_s: float = 5.0,
                 clock: Callable[[], float] = time.monotonic, on_fresh: Callable[[Reading], None] = lambda r: None,
                 which: Callable[[str], str | None] = path_which,
                 owners: Callable[[Sequence[int]], dict[int, str | None]] = owners_of) -> None:
        self.max_age_s, self.timeout_s, self.clock, self.on_fresh = max_age_s, timeout_s, clock, on_fresh
        self.which, self.owners = which, owners
        self.reading: Reading | None = None
        self.reads = 0  # readings taken (status, tests)
        self._task: asyncio.Task[Any] | None = None
        self._present: tuple[float, bool] | None = None  # (when looked, found)

    def present(self) -> bool:
        """Whether there is an nvidia-smi to ask (looked for on PATH once a minute)."""
        now = self.clock()
        if self._present is None or now - self._present[0] >= PRESENT_RECHECK_S:
            self._present = (now, self.which("nvidia-smi") is not None)
        return self._present[1]

    def fresh(self) -> Reading | None:
        """The reading if it is younger than max_age_s; else None, and a new
        one is being taken (on_fresh says when it came)."""
        r = self.reading
        if r is not None and self.clock() - r.at < self.max_age_s:
            return r
        self.soon()
        return None

    def soon(self) -> None:
        """Take a reading beside the loop (nothing if one is being taken, or no loop runs)."""
        if self._task is not None and not self._task.done():
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # a turn driven by a test without a loop
            return
        self._task = loop.create_task(self.read())

    async def read(self) -> Reading:
        """Take a reading now (kept, and told to on_fresh)."""
        started = self.clock()
        try:
            gpus = parse_gpus(await self._run(GPU_QUERY))
            apps = parse_apps(await self._run(APPS_QUERY)) if gpus else []
            owners = await asyncio.to_thread(self.owners, [a.pid for a in apps]) if apps else {}
            r = Reading(self.clock(), gpus, apps, owners)
        except (OSError, ValueError, RuntimeError) as e:
            r = Reading(self.clock(), error=str(e) or type(e).__name__)
            if self.reading is None or self.reading.error != r.error:  # said once, not at every look
                log.warning("nvidia-smi: %s", r.error)
        if r.error is None and self.reading is not None and self.reading.error is not None:
            log.info("nvidia-smi answers again")
        if self.clock() - started > 1.0:
            log.info("nvidia-smi took %.1f s", self.clock() - started)
        self.reading = r
        self.reads += 1
        try:
            self.on_fresh(r)
        except Exception:  # the reading stays; the worker looks at its next turn anyway
            log.exception("cannot act on the GPUs' reading")
        return r

    async def _run(self, argv: Sequence[str]) -> str:
        """Its output (stderr with it), at most MAX_OUTPUT bytes, within timeout_s."""
        proc = await asyncio.create_subprocess_exec(*argv, stdin=asyncio.subprocess.DEVNULL,
                                                    stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
                                                    start_new_session=True)
        try:
            out = await asyncio.wait_for(_read(proc, MAX_OUTPUT + 1), self.timeout_s)
            if len(out) > MAX_OUTPUT:
                raise RuntimeError(f"{argv[1].split('=')[0]} said more than {MAX_OUTPUT // 1024} KiB")
            await asyncio.wait_for(proc.wait(), self.timeout_s)
        except asyncio.TimeoutError:
            raise RuntimeError(f"{argv[1].split('=')[0]} gave no answer in {self.timeout_s:g} s") from None
        finally:
            if proc.returncode is None:  # timed out, too much, or the daemon stops (cancelled)
                _kill(proc)
                try:  # its output read to the end: asyncio's wait() returns only once the pipe is closed
                    await asyncio.wait_for(_read(proc, None), 2.0)
                    await asyncio.wait_for(proc.wait(), 2.0)
                except asyncio.TimeoutError:  # a child of its own kept the pipe: left to the kernel
                    log.warning("nvidia-smi (pid %d) killed, but its output is still open", proc.pid)
        text = out.decode("utf-8", "replace")
        if proc.returncode != 0:
            said = text.strip().splitlines()
            raise RuntimeError(f"exit {proc.returncode}" + (f": {said[0][:200]}" if said else ""))
        return text

    def stop(self) -> None:
        """The daemon stops: a reading being taken is given up (its nvidia-smi killed)."""
        if self._task is not None and not self._task.done():
            self._task.cancel()

    def status(self) -> dict[str, Any] | None:
        r = self.reading
        if r is None:
            return None
        return {"age_s": round(self.clock() - r.at, 1), "error": r.error, "reads": self.reads,
                "gpus": [{"index": g.index, "uuid": g.uuid, "total": g.total, "free": g.free,
                          "outside": r.outside(g)[0]} for g in r.gpus]}


async def _read(proc: asyncio.subprocess.Process, cap: int | None) -> bytes:
    """Its output to the end, or the first ``cap`` bytes (None: all, kept to nothing)."""
    assert proc.stdout is not None
    buf = bytearray()
    while cap is None or len(buf) < cap:
        chunk = await proc.stdout.read(65536)
        if not chunk:
            break
        if cap is not None:
            buf += chunk
    return bytes(buf)


def _kill(proc: asyncio.subprocess.Process) -> None:
    try:
        os.killpg(proc.pid, 9)  # its own session: a child it left goes too
    except (ProcessLookupError, PermissionError):
        pass


def unfit(reading: Reading, token: str, *, outside_max: int, want_mem: int | None,
          promised: Mapping[str, Sequence[tuple[str, int]]], ours: Collection[str] | None = None) -> str | None:
    """Why GPU ``token`` may not be given now by this reading (None: it
    may): used by processes outside sloth beyond ``outside_max`` bytes, or
    less than ``want_mem`` free. Free is what nvidia-smi says less what
    sloth's runs on it asked for and have not yet taken (``promised``:
    token -> (run token, gpu-mem asked) of each run given it), so two jobs
    started a moment apart are not both given the same free memory."""
    g = reading.gpu(token)
    if g is None:
        return None if want_mem is None else f"gpu {token}: nvidia-smi does not list it"
    used, pids = reading.outside(g, ours)
    if pids and (used is None or used > outside_max):
        shown = "an unknown amount" if used is None else format_size_short(used)
        more = f" and {len(pids) - 3} more" if len(pids) > 3 else ""
        return (f"gpu {token} busy outside sloth ({shown} by pid {', '.join(map(str, pids[:3]))}{more};"
                f" allowed: {format_size_short(outside_max)})")
    if want_mem is None:
        return None
    if g.free is None:
        return f"gpu {token}: nvidia-smi does not say its free memory"
    owed = sum(max(0, mem - reading.used_by(run, g)) for run, mem in promised.get(token, ()))
    have = max(0, g.free - owed)
    if have < want_mem:
        return f"gpu {token} has {format_size_short(have)} free" + (
            f" ({format_size_short(owed)} of it promised to running jobs)" if owed else "")
    return None


def format_size_short(n: int) -> str:
    """1.5G, 300M, 0: sizes as a person reads them (MiB precision)."""
    if n <= 0:
        return "0"
    for unit, k in (("T", 1024 ** 4), ("G", 1024 ** 3), ("M", MIB)):
        if n >= k:
            v = n / k
            return format_size(n) if n % k == 0 else f"{v:.1f}{unit}"
    return f"{n}B"


def wrong_gpu(reading: Reading, token: str, given: Sequence[str]) -> list[tuple[int, str]]:
    """The processes of the run of ``token`` that use a GPU it was not
    given: (pid, that GPU's index)."""
    allowed = {g.uuid for g in reading.gpus if any(g.named(t) for t in given)}
    index = {g.uuid: g.index for g in reading.gpus}
    return [(a.pid, index.get(a.gpu_uuid, a.gpu_uuid)) for a in reading.apps
            if reading.owners.get(a.pid) == token and a.gpu_uuid not in allowed]

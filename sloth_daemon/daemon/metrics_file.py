"""The daemon's metrics (docs/metrics.md): what `sloth metrics` asks it
for (the op ``metrics``), and the file ``metrics_file`` it keeps for
node_exporter's textfile collector.

``DaemonMetrics`` reads the queue's families (backends/metrics.py) on a
read-only view of its own, opened for each reading in a thread: one pass
over a long history (~0.2 s for 100,000 jobs) costs the event loop -- the
socket, the heartbeats -- nothing. It adds what only this process knows:
its clock jumps and sleeps (ClockWatch), its keepers started and lost
(KeeperSpawner), each counted since it started (``_created``: its start).

``MetricsFile`` writes the file when something changed (a job, the clock),
never on a timer: at rest the daemon wakes for it not once. A burst is
coalesced: the first change is written QUIET_S later, then at most every
MIN_GAP_S while changes go on, the last one always. The text is
Prometheus's text format (the collector reads no OpenMetrics), written to a
temporary file beside it (not ``*.prom``: the collector never reads half a
file) and renamed over it; a text that did not change is not written.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from pathlib import Path
from typing import Any, Callable, Mapping

from sloth_daemon.backends import metrics
from sloth_daemon.backends.metrics import Family, Series
from sloth_daemon.errors import SlothError
from sloth_daemon.safefile import read_file, replace_file
from sloth_daemon.daemon.supervision import KeeperSpawner
from sloth_daemon.daemon.worker.clockwatch import ClockWatch

log = logging.getLogger("sloth.metrics")
QUIET_S = 0.2  # a burst's first change waits this long for the rest of it
MIN_GAP_S = 5.0  # then the file is written at most this often (a scrape is every 15 s or more)
FILE_MODE = 0o644  # node_exporter runs as another user: it must read it


class DaemonMetrics:
    """The queue's families read on ``target`` (the daemon's queue: a path
    or a URL) and the daemon's own, from ``clock`` and ``keeper``."""

    def __init__(self, target: str | os.PathLike[str], clock: ClockWatch, keeper: KeeperSpawner) -> None:
        self.target, self.clock, self.keeper = target, clock, keeper
        self.started_at = time.time()
        # One reading at a time (the op and the file may ask at once), waited
        # for on the loop: a flood of `sloth metrics` holds one thread of the
        # default pool, not all of them (GPU and process lookups use it too).
        self._reading: asyncio.Lock | None = None
        # The reading not begun yet, by format: every request that asks
        # meanwhile waits for it (a burst costs two readings, not one each).
        self._next: dict[str, asyncio.Future[str]] = {}

    def counted(self) -> dict[str, Any]:
        """What ``own`` counts, to carry across a renewal (renewal.py): one
        daemon to its users, so its counters go on and never reset."""
        return {"started_at": self.started_at, "jumps": dict(self.clock.jumps), "slept_s": self.clock.slept_s,
                "keeper_connects": self.keeper.connects, "keeper_losses": self.keeper.losses}

    def carry(self, counted: Mapping[str, Any]) -> None:
        """Go on from ``counted`` (the process before this one renewed itself)."""
        try:
            self.started_at = float(counted.get("started_at", self.started_at))
            self.clock.jumps.update({str(k): int(v) for k, v in dict(counted.get("jumps") or {}).items()})
            self.clock.slept_s += float(counted.get("slept_s") or 0.0)
            self.keeper.connects += int(counted.get("keeper_connects") or 0)
            self.keeper.losses += int(counted.get("keeper_losses") or 0)
        except (TypeError, ValueError, AttributeError) as e:
            log.error("renewal: the counters handed over are not readable (%s); counting afresh", e)

    def own(self) -> list[Family]:
        """What this daemon counted since it started."""
        born = self.started_at
        jumps = Family("sloth_clock_jumps", "counter",
                       "Clock jumps this daemon saw, by kind: slept (the machine was suspended), stepped "
                       "(the wall clock was set), stalled (the daemon did not run).")
        jumps.series = [Series((("kind", k),), self.clock.jumps.get(k, 0), born)
                        for k in ("slept", "stepped", "stalled")]
        slept = Family("sloth_slept_seconds", "counter", "Time the machine spent suspended, as this daemon saw it.",
                       "seconds", [Series((), self.clock.slept_s, born)])
        starts = Family("sloth_keeper_starts", "counter",
                        "Keepers this daemon connected to: the first, each one started after the last was let "
                        "go, each reconnect.", "", [Series((), self.keeper.connects, born)])
        lost = Family("sloth_keeper_lost", "counter",
                      "Connections to the keeper lost (it died or was killed): each is a keeper restart.", "",
                      [Series((), self.keeper.losses, born)])
        start = Family("sloth_daemon_start_time_seconds", "gauge", "When this daemon started.", "seconds",
                       [Series((), born)])
        return [jumps, slept, starts, lost, start]

    async def text(self, fmt: str) -> str:
        """The metrics as text in ``fmt`` (metrics.FORMATS), from a reading
        begun after this request: the next one, shared by every request
        that asks before it begins (never the one running: it may have
        read the queue before what this request asks after)."""
        shared = self._next.get(fmt)
        if shared is not None:
            return await asyncio.shield(shared)
        mine: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self._next[fmt] = mine
        try:
            if self._reading is None:
                self._reading = asyncio.Lock()
            async with self._reading:
                del self._next[fmt]  # begun: a request from now on waits for the one after
                own = self.own()  # on the loop: its counters are the loop's
                text = await asyncio.to_thread(self._text, own, fmt)
        except BaseException as e:
            if self._next.get(fmt) is mine:
                del self._next[fmt]
            if isinstance(e, asyncio.CancelledError):
                mine.cancel()
            else:
                mine.set_exception(e)
                mine.exception()  # said to whoever shares it; none may: never 'never retrieved'
            raise
        mine.set_result(text)
        return text

    def _text(self, own: list[Family], fmt: str) -> str:
        from sloth_daemon.backends import open_read_only

        view = open_read_only(self.target)
        try:
            queue = metrics.queue_families(view, now=time.time())
        finally:
            view.close()
        return metrics.expose([*queue, *own], fmt)


class MetricsFile:
    """Keeps the file ``path()`` names (config's metrics_file, read at each
    write: a reload applies; "" writes none) up to date with ``source``."""

    def __init__(self, source: DaemonMetrics, path: Callable[[], str]) -> None:
        self.source, self.path = source, path
        self._timer: asyncio.TimerHandle | None = None
        self._writing: asyncio.Task[None] | None = None
        self._again = False  # a change came while writing: write once more after
        self._last_at = float("-inf")  # monotonic time of the last write
        self._written: tuple[str, str] | None = None  # (path, text) last written (or found there at start)
        self._problem: str | None = None  # the last failure, logged once

    def changed(self, *_: object) -> None:
        """Something the metrics show changed: write it soon (a job's
        change, a clock jump; the daemon's start)."""
        if not self.path():
            return
        if self._writing is not None:
            self._again = True
            return
        if self._timer is None:
            delay = max(QUIET_S, self._last_at + MIN_GAP_S - time.monotonic())
            self._timer = asyncio.get_running_loop().call_later(delay, self._write_now)

    def _write_now(self) -> None:
        self._timer = None
        self._writing = asyncio.get_running_loop().create_task(self._write())

    async def _write(self) -> None:
        path = self.path()
        try:
            if path:
                text = await self.source.text(metrics.PROMETHEUS)
                if self._written is None:  # a renewed daemon's first write: the file may say it already
                    self._written = (path, await asyncio.to_thread(_read_small, Path(path)))
                if self._written != (path, text):
                    await asyncio.to_thread(write_atomically, Path(path), text)
                    self._written = (path, text)
                self._problem = None
        except (SlothError, OSError) as e:
            problem = getattr(e, "message", None) or str(e)
            if problem != self._problem:
                log.warning("metrics_file %s not written: %s", path, problem)
            self._problem = problem
        finally:
            self._writing, self._last_at = None, time.monotonic()
            if self._again:
                self._again = False
                self.changed()

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


def write_atomically(path: Path, text: str) -> None:
    """``text`` into ``path`` whole or not at all, a name no textfile
    collector reads renamed over it; never in the place of a FIFO, a device,
    a link or a folder (safefile.replace_file)."""
    replace_file(path, text.encode(), FILE_MODE)


def _read_small(path: Path, cap: int = 4 << 20) -> str:
    """The file's text if it is a regular file we can read (at most ``cap``), else ""."""
    try:
        return read_file(path, cap).decode("utf-8", "replace")
    except OSError:  # missing, a link, a FIFO, too large: not what we wrote
        return ""

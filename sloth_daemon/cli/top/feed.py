"""Where `sloth top` gets what it shows: the daemon's change stream, and
reads coalesced behind it; or, with no daemon, the queue file read-only.

Two threads, owned by the Feed and ended by ``close``:

- the listener holds the daemon's ``subscribe`` stream (daemon/streams.py:
  every job change, as ``wait`` and ``logs -f`` hear them) and marks what
  changed; it reconnects after a daemon restart (every ``retry_s``);
- the reader turns marks into a Snapshot: at most one read of the daemon
  per ``gap_s`` however many jobs change (a thousand jobs a minute cost the
  daemon one status and two short listings a second, not a read per
  change), one per ``idle_s`` when nothing changes (a lane's settings, a
  schedule's next slot), and reads the queue file every ``offline_s`` while
  no daemon answers (nothing streams then), saying so.

CPU and memory of the running jobs are read here from /proc (psutil), on
this machine: they cost the daemon nothing.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from sloth_daemon import errors
from sloth_daemon.cli.client import Client
from sloth_daemon.cli.top.view import start_of_day

GAP_S = 1.0
IDLE_S = 10.0
OFFLINE_S = 2.0
RETRY_S = 1.0
USAGE_S = 2.0  # CPU and memory of the running jobs, read this often (locally)
SCHEDULES_S = 30.0  # schedules read again this often (their countdowns tick on the screen)
FAILURES_S = 60.0  # failed jobs read again this often besides when one fails
MAX_RUNNING = 100
MAX_NEXT = 50
MAX_FAILED = 500  # of the day's failures, at most this many grouped (the newest)
LOG_LINES = 12
MAX_SCHEDULE_JOBS = 20  # schedules' waiting last jobs read by id (beyond the MAX_NEXT listed)
WAITING_STATES = ("queued", "held", "blocked")
SCHEDULE_DUE_S = 5.0  # a schedule past its next slot is read again at most this often (it fired, or it waits)
_GONE = (errors.DaemonNotRunning, errors.ConnectionLost, errors.DaemonNotAnswering, errors.DaemonBusy,
         errors.ProtocolError)


@dataclass
class Snapshot:
    """One look at the queue. ``source``: "daemon", or what was read
    read-only; ``note``: news of the connection to say (a restart)."""

    source: str
    status: dict[str, Any] | None = None
    running: list[dict[str, Any]] = field(default_factory=list)
    waiting: list[dict[str, Any]] = field(default_factory=list)
    failures: list[tuple[dict[str, Any], str]] = field(default_factory=list)  # today's failed jobs, last lines
    schedules: list[dict[str, Any]] = field(default_factory=list)
    schedule_jobs: dict[int, dict[str, Any]] = field(default_factory=dict)  # their last jobs, if still waiting
    usage: dict[int, tuple[float, int]] = field(default_factory=dict)
    power: tuple[bool, float | None] | None = None  # (on mains, battery percent or None)
    changed: set[int] = field(default_factory=set)
    note: str | None = None
    live: bool = False  # the change stream is open: what is shown follows the daemon


class Reader:
    """The reading ops, asked of the daemon over one connection kept open,
    or answered from the queue file when none answers (cli/offline.py).
    Safe from several threads (one request at a time)."""

    def __init__(self, paths: Any) -> None:
        self.paths = paths
        self._client: Client | None = None
        self._lock = threading.Lock()
        self.offline = False  # the last answer came from the file

    def call(self, op: str, **args: Any) -> Any:
        with self._lock:
            try:
                if self._client is None:
                    from sloth_daemon.cli.connection import connect

                    self._client = connect(timeout_s=10.0, start=False)
                res = self._client.call(op, **args)
                self.offline = False
                return res
            except _GONE:
                self._drop()
            from sloth_daemon.cli.offline import answer

            self.offline = True
            return answer(self.paths, op, **args)

    def _drop(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def close(self) -> None:
        with self._lock:
            self._drop()


class Usage:
    """CPU (percent of one core) and resident memory of each running job's
    process tree, from /proc; the Process objects are kept between samples
    (psutil's cpu_percent measures since the last call)."""

    def __init__(self) -> None:
        self._procs: dict[int, Any] = {}

    def sample(self, jobs: list[dict[str, Any]], host: str | None) -> dict[int, tuple[float, int]]:
        import psutil

        out: dict[int, tuple[float, int]] = {}
        keep: dict[int, Any] = {}
        for j in jobs:
            pid = (j.get("runner") or {}).get("pid")
            worker = j.get("worker") or ""
            if not pid or (host and f":{host}:" not in worker):
                continue  # another machine's run
            try:
                root = self._procs.get(pid) or psutil.Process(pid)
                tree = [root, *root.children(recursive=True)]
                cpu = rss = 0.0
                for p in tree:
                    kept = self._procs.get(p.pid, p)
                    keep[p.pid] = kept
                    cpu += kept.cpu_percent(None)
                    rss += kept.memory_info().rss
                out[j["id"]] = (cpu, int(rss))
            except psutil.Error:
                continue
        self._procs = keep
        return out


def power() -> tuple[bool, float | None] | None:
    """On mains or not, and the battery's level (None: no battery), as this
    machine says (psutil reads /sys/class/power_supply on Linux)."""
    import psutil

    try:
        bat = psutil.sensors_battery()
    except (OSError, RuntimeError, AttributeError):
        return None
    return (True, None) if bat is None else (bat.power_plugged is not False, float(bat.percent))


@dataclass
class Detail:
    """The selected job as `show` tells it (``info``: job, events, prereqs,
    dependents), its log's last lines, which attempt's (``where``) and the
    log's path here (None: not here), read again each second while it runs."""

    info: dict[str, Any]
    tail: list[str]
    where: str
    path: str | None = None


class Feed:
    """Snapshots for the view, handed to ``deliver`` (from the reader
    thread). State: the marks the listener sets (``_dirty``, the changed
    ids, a failure seen), the connection's story (the daemon's pid last
    seen, whether it was lost), the failures' last lines (read once per
    attempt)."""

    def __init__(self, deliver: Callable[[Snapshot], None], *, gap_s: float = GAP_S, idle_s: float = IDLE_S,
                 offline_s: float = OFFLINE_S, retry_s: float = RETRY_S) -> None:
        from sloth_daemon.cli.connection import log_paths

        self.deliver = deliver
        self.gap_s, self.idle_s, self.offline_s, self.retry_s = gap_s, idle_s, offline_s, retry_s
        self.paths = log_paths()
        self.reader = Reader(self.paths)
        self.usage = Usage()
        self._closed = threading.Event()
        self._dirty = threading.Event()
        self._lock = threading.Lock()
        self._changed: set[int] = set()
        self._failed_seen = True
        self._stream: Client | None = None
        self.live = False  # the listener holds the stream
        self._pid: int | None = None  # the daemon last seen
        self._up = False  # ... and it answered the last read
        self._running: list[dict[str, Any]] = []
        self._host: str | None = None
        self._last_lines: dict[tuple[int, int], str] = {}
        self._schedules: list[dict[str, Any]] = []
        self._schedule_jobs: dict[int, dict[str, Any]] = {}
        self._schedules_at = 0.0
        self._failures: list[tuple[dict[str, Any], str]] = []
        self._failures_at = 0.0
        self._threads = [threading.Thread(target=self._listen, name="sloth-top-listen", daemon=True),
                         threading.Thread(target=self._read_loop, name="sloth-top-read", daemon=True)]

    def start(self) -> None:
        for t in self._threads:
            t.start()

    def poke(self) -> None:
        """Read again now (the user acted)."""
        self._dirty.set()

    def close(self) -> None:
        self._closed.set()
        self._dirty.set()
        stream = self._stream
        if stream is not None:
            try:
                stream.sock.shutdown(2)  # the listener's recv returns at once
            except OSError:
                pass
        for t in self._threads:
            if t.ident is not None:
                t.join(2.0)
        self.reader.close()

    # ------------------------------------------------------------ listener
    def _listen(self) -> None:
        from sloth_daemon.cli.connection import connect

        while not self._closed.is_set():
            try:
                with connect(timeout_s=None, start=False) as c:
                    self._stream = c
                    self.live = True
                    self._dirty.set()  # what changed while we were not listening
                    for ev in c.stream("subscribe"):
                        if ev.get("kind") == "state":
                            self._mark(ev["job"])
                        elif ev.get("kind") == "end":
                            break
            except (errors.SlothError, OSError, KeyError, TypeError):
                pass  # gone, restarting, we fell behind (overflow), or a frame we cannot read: listen again
            finally:
                self._stream = None
                self.live = False
            self._dirty.set()
            self._closed.wait(self.retry_s)

    def _mark(self, job: dict[str, Any]) -> None:
        with self._lock:
            self._changed.add(job["id"])
            if job.get("state") == "failed":
                self._failed_seen = True
        self._dirty.set()

    # -------------------------------------------------------------- reader
    def _read_loop(self) -> None:
        last = 0.0
        while not self._closed.is_set():
            wait = self.idle_s if self.live else self.offline_s
            self._dirty.wait(min(wait, USAGE_S))
            if self._closed.is_set():
                return
            now = time.monotonic()
            if not self._dirty.is_set() and now - last < wait:
                self._deliver_usage()
                continue
            hold = last + self.gap_s - now
            if hold > 0 and self._closed.wait(hold):  # coalesce: all that changes meanwhile in one read
                return
            self._dirty.clear()
            last = time.monotonic()
            try:
                snap = self.snapshot()
            except errors.SlothError as e:
                snap = Snapshot(source=f"cannot read the queue: {e.message}")
            except (OSError, KeyError, TypeError, ValueError) as e:  # an answer not as expected: said, tried again
                snap = Snapshot(source=f"cannot read the queue: {type(e).__name__}: {e}")
            self.deliver(snap)

    def _deliver_usage(self) -> None:
        """Between reads: the running jobs' CPU and memory only (read here, not asked of the daemon)."""
        self.deliver(Snapshot(source="usage", usage=self.usage.sample(self._running, self._host), power=power()))

    def snapshot(self) -> Snapshot:
        """Read everything the view shows, from the daemon or the file."""
        with self._lock:
            changed, self._changed = self._changed, set()
            failed_seen, self._failed_seen = self._failed_seen, False
        r = self.reader
        status = r.call("status")
        running = r.call("list", states=["running"], limit=MAX_RUNNING)["jobs"]
        waiting = r.call("list", states=list(WAITING_STATES), limit=MAX_NEXT)["jobs"]
        now = time.time()
        if failed_seen or not self.live or now - self._failures_at > FAILURES_S:
            self._failures = self._read_failures(now)
            self._failures_at = now
        if self._schedules_stale(changed, now):
            self._schedules, self._schedule_jobs = self._read_schedules(waiting)
            self._schedules_at = now
        offline = r.offline
        self._running, self._host = running, status.get("host")
        source = "daemon" if not offline else f"no daemon: reading {self._where()} read-only"
        return Snapshot(source=source, status=status, running=running, waiting=waiting,
                        failures=self._failures, schedules=self._schedules, schedule_jobs=self._schedule_jobs,
                        usage=self.usage.sample(running, status.get("host")), power=power(), changed=changed,
                        note=self._story(None if offline else status.get("pid"), now), live=self.live and not offline)

    def _schedules_stale(self, changed: set[int], now: float) -> bool:
        """Read the schedules again: without a stream, every read; else every
        SCHEDULES_S, when one's last job changed, or one came due (it fired)."""
        if not self.live or now - self._schedules_at > SCHEDULES_S:
            return True
        if any(sc.get("last_job") in changed for sc in self._schedules):
            return True
        due = any(not sc.get("paused") and (sc.get("next_run") or now + 1) <= now for sc in self._schedules)
        return due and now - self._schedules_at > SCHEDULE_DUE_S

    def _read_schedules(self, waiting: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], dict[int, dict[str, Any]]]:
        """The schedules, and the last job of each whose last job still waits
        (what a blocked one waits for), read by id if not among ``waiting``."""
        try:
            schedules = self.reader.call("schedule_ls")["schedules"]
        except errors.SlothError:
            return [], {}
        seen = {j["id"] for j in waiting}
        jobs: dict[int, dict[str, Any]] = {}
        for sc in schedules:
            jid = sc.get("last_job")
            if jid is not None and jid not in seen and sc.get("last_state") in WAITING_STATES \
                    and len(jobs) < MAX_SCHEDULE_JOBS:
                try:
                    jobs[jid] = self.reader.call("show", id=jid)["job"]
                except errors.SlothError:
                    continue  # pruned meanwhile
        return schedules, jobs

    def _where(self) -> str:
        from sloth_daemon.cli.offline import where

        return where(self.paths)

    def _story(self, pid: int | None, now: float) -> str | None:
        """What happened to the connection since the last read, said once:
        the daemon went away, came back, or was replaced by another."""
        from sloth_daemon.durations import local_time

        was, note = self._pid, None
        if pid is None:
            if self._up:
                note = (f"the daemon (pid {was}) went away at {local_time(now)}; showing the queue file "
                        "read-only until it is back")
            self._up = False
            return note
        if was is not None and (pid != was or not self._up):
            again = f"pid {was} -> {pid}" if pid != was else f"pid {pid}"
            note = f"the daemon restarted ({again}); reconnected" if pid != was else f"reconnected ({again})"
        self._up, self._pid = True, pid
        return note

    def _read_failures(self, now: float) -> list[tuple[dict[str, Any], str]]:
        """The failed jobs that ended today, each with its last log line (or
        its message, when its log says nothing): what signatures.group takes."""
        jobs = self.reader.call("list", states=["failed"], limit=MAX_FAILED)["jobs"]
        day = start_of_day(now)
        todays = [j for j in jobs if (j.get("finished_at") or j.get("updated_at") or 0) >= day]
        return [(j, self._last_line(j)) for j in todays]

    def _last_line(self, job: dict[str, Any]) -> str:
        from sloth_daemon.cli.render import tail_lines

        key = (job["id"], job["attempts"])
        line = self._last_lines.get(key)
        if line is None:
            tail = tail_lines(str(self.paths.job_log(job["id"], job["attempts"])), 1) if job["attempts"] else []
            line = self._last_lines[key] = (tail[-1] if tail else "") or job.get("message") or ""
        return line

    # -------------------------------------------------------------- detail
    def detail(self, job_id: int) -> Detail:
        """The job as `show` tells it, and its log's last lines."""
        from sloth_daemon.cli.render import tail_lines

        d = self.reader.call("show", id=job_id)
        if not d["job"]["attempts"]:
            return Detail(d, [], "no attempt yet")
        where = self.reader.call("logs", id=job_id)
        if where.get("stored"):
            return Detail(d, [], f"stored by another machine: `sloth logs {job_id}`")
        return Detail(d, tail_lines(where["path"], LOG_LINES), f"attempt {where['attempt']}", where["path"])

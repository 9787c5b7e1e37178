"""Composition root: single-instance lock, startup recovery, signals, shutdown.

Start-up order matters:
  0. a 077 umask, and every folder made 0700 and checked (ours, no link,
     not writable by others; private.py) before anything is made in it;
  1. take the flock on the data dir's lock file (before touching anything,
     the socket included): a second daemon stops here and names the first;
  2. refuse a queue this folder had and lost (identity.py: never a new empty
     one in its place); raise the descriptor limit (limits.py);
     open the queue; for jobs a previous daemon left ``claimed``, end any
     process of theirs still running, then mark their leases abandoned so
     they are re-issued at once (``reclaimed``, attempts + 1);
  3. replace the stale socket (the lock proves nobody serves it) and listen;
  4. tell systemd READY=1; run the worker loop until SIGTERM/SIGINT;
  5. drain: interrupt running jobs, requeue them refunded, exit 0.
"""

from __future__ import annotations

import asyncio
import errno
import fcntl
import logging
import os
import secrets
import signal
import sys
import time
from typing import Callable

from . import __version__, config, identity, limits, procident, timerfd
from .clock import SystemClocks
from .control import Control
from .errors import DaemonAlreadyRunning, LeaseLost, StorageError
from .notify import Notifier
from .paths import Paths, check_socket_path, ensure_private_dir, resolve, secure_all
from .queue import Queue
from .server import Server
from .spawner import LocalSpawner
from .worker import Worker, is_daemon_on_host

log = logging.getLogger("sloth.daemon")


LOCK_PATIENCE_S = 0.5  # a client's probe (launcher.lock_holder) holds it for an instant


class InstanceLock:
    """An flock on ``paths.lock`` held for the daemon's lifetime. The kernel
    drops it when the process dies, however it dies: no stale pid files."""

    def __init__(self, paths: Paths) -> None:
        self.path = paths.lock
        ensure_private_dir(paths.data_dir)
        try:
            self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        except OSError as e:
            raise StorageError(f"cannot open lock file {self.path}: {e.strerror or e}") from e
        if not self._lock():
            holder = os.pread(self.fd, 64, 0).decode("ascii", "replace").strip() or "unknown"
            os.close(self.fd)
            raise DaemonAlreadyRunning(f"another sloth daemon (pid {holder}) is already running on {paths.data_dir}")
        os.ftruncate(self.fd, 0)
        os.pwrite(self.fd, f"{os.getpid()}\n".encode(), 0)

    def _lock(self) -> bool:
        deadline = time.monotonic() + LOCK_PATIENCE_S
        while True:
            try:
                fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return True
            except OSError as e:
                if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    os.close(self.fd)
                    raise StorageError(f"cannot lock {self.path}: {e.strerror or e}") from e
            if time.monotonic() > deadline:
                return False
            time.sleep(0.02)

    def release(self) -> None:
        try:
            os.close(self.fd)
        except OSError:
            pass


class Daemon:
    """The running daemon, composed from parts made elsewhere (``build`` for
    production; tests pass their own)."""

    def __init__(self, *, paths: Paths, settings: config.Settings, queue: Queue, worker: Worker,
                 server: Server) -> None:
        self.paths, self.settings = paths, settings
        self.queue, self.worker, self.server = queue, worker, server
        self._stop = asyncio.Event()
        self.stop_reason = ""

    def request_stop(self, reason: str) -> None:
        if not self._stop.is_set():
            log.info("stopping: %s", reason)
            self.stop_reason = reason
            self._stop.set()

    # ------------------------------------------------------------ recovery
    def recover(self) -> int:
        """Re-issue jobs that a previous daemon on this data dir left claimed.

        We hold the instance lock, so that daemon is dead; but its job
        processes may not be (kill -9 leaves orphans). End them first, by
        recorded identity or, failing that, by the job token in their
        environment. Then abandon the lease so the next claim re-issues it.
        """
        stale = [j for j in self.queue.claimed()
                 if is_daemon_on_host(j.worker) and j.token]  # foreign holders: wait out their lease
        if not stale:
            return 0
        by_token = procident.find_by_env_values("SLOTH_JOB_TOKEN", {j.token for j in stale if j.token})
        procs, groups, ended = [], [], set()
        for job in stale:
            tree = procident.tree_of(job.runner)
            if tree:
                groups.append(tree[0].pid)
            found = tree + by_token.get(job.token or "", [])
            if found:
                ended.add(job.id)
                procs += found
        if procs:  # all at once: one grace period, however many leftovers
            procident.end_all(procs, self.settings.kill_grace_s, groups=groups)
        n = 0
        for job in stale:
            why = "daemon restarted; the previous daemon is gone"
            if job.id in ended:
                why += "; its leftover job process was ended"
            try:
                self.queue.abandon(job.id, job.token or "", message=why)
                n += 1
            except LeaseLost:
                pass
        return n

    # ------------------------------------------------------------------ run
    async def run(self) -> int:
        """Serve until asked to stop; then drain. Returns the exit code."""
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.request_stop, f"signal {signal.Signals(sig).name}")
        loop.add_signal_handler(signal.SIGHUP, lambda: None)  # survive terminal hang-up
        await self._listen()
        watch = self._watch_clock(loop)
        notifier = Notifier.from_env()
        worker = loop.create_task(self.worker.run())
        tasks = [worker]
        if notifier.watchdog_interval_s:
            tasks.append(loop.create_task(_watchdog(notifier, notifier.watchdog_interval_s)))
        notifier.ready(f"serving {self.paths.socket}")
        log.info("sloth %s ready: pid %d, socket %s, db %s", __version__, os.getpid(),
                 self.paths.socket, self.paths.db)
        stop = loop.create_task(self._stop.wait())
        done, _ = await asyncio.wait([stop, worker], return_when=asyncio.FIRST_COMPLETED)
        if worker in done and worker.exception() is not None:
            log.error("worker loop died: %r", worker.exception())
        notifier.stopping()
        await self._drain(tasks, watch)
        return 0 if worker not in done else 1

    async def _listen(self) -> None:
        ensure_private_dir(self.paths.runtime_dir)
        check_socket_path(self.paths.socket)
        self.paths.socket.unlink(missing_ok=True)  # stale: the instance lock proves nobody serves it
        await self.server.start(self.paths.socket)

    def _watch_clock(self, loop: asyncio.AbstractEventLoop) -> timerfd.ClockSetWatch | None:
        watch = timerfd.create()
        if watch is not None:
            self.worker.timerfd = True
            loop.add_reader(watch.fd, self._on_clock_set, watch)
        return watch

    async def _drain(self, tasks: list[asyncio.Task[None]], watch: timerfd.ClockSetWatch | None) -> None:
        await self.worker.shutdown()
        await self.server.close()
        for t in tasks:
            t.cancel()
        if watch is not None:
            asyncio.get_running_loop().remove_reader(watch.fd)
            watch.close()
        self.paths.socket.unlink(missing_ok=True)
        self.queue.close()
        log.info("stopped")

    def _on_clock_set(self, watch: timerfd.ClockSetWatch) -> None:
        if watch.consume():
            self.worker.clock_changed()


async def _watchdog(notifier: Notifier, interval_s: float) -> None:
    while True:
        notifier.watchdog()
        await asyncio.sleep(interval_s)


def build(paths: Paths, settings: config.Settings, *, max_connections: int = 256) -> Daemon:
    """The production daemon: real clocks, the SQLite queue in the data dir
    (its logs under its identity), job processes run by this process, the
    socket server."""
    clocks = SystemClocks()
    instance = secrets.token_hex(4)
    queue = Queue(paths.db, clocks, lease_s=settings.lease_s, max_attempts=settings.max_attempts,
                  backoff_cap_s=settings.backoff_cap_s)
    try:
        paths = identity.adopt(paths, queue.identity, had_jobs=sum(queue.counts().values()) > 0)
    except BaseException:
        queue.close()
        raise
    spawner = LocalSpawner()
    worker = Worker(queue, settings, spawner, clocks=clocks, log_path=paths.job_log, instance=instance)
    stop = _StopRelay()
    control = Control(queue, worker, spawner, paths, settings, request_stop=stop, instance=instance)
    worker.on_change = control.job_changed
    server = Server(control, max_connections=max_connections)
    daemon = Daemon(paths=paths, settings=settings, queue=queue, worker=worker, server=server)
    stop.target = daemon.request_stop
    return daemon


class _StopRelay:
    """Breaks the cycle Control -> Daemon.request_stop -> (Daemon built last)."""

    target: Callable[[str], None] | None = None

    def __call__(self, reason: str) -> None:
        if self.target is not None:
            self.target(reason)


def main() -> int:
    """``sloth daemon run``: returns the process exit code."""
    logging.basicConfig(
        level=logging.DEBUG if os.environ.get("SLOTH_DEBUG") else logging.INFO,
        format="%(asctime)s sloth[%(process)d] %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    os.umask(0o077)  # whatever started us: nothing we make is for others (jobs: runner.JOB_UMASK)
    paths = resolve()
    check_socket_path(paths.socket)  # fail before creating anything
    secure_all(paths)  # our folders 0700 and ours, no links: before anything is made in them
    lock = InstanceLock(paths)  # first: before the socket or the db is touched
    try:
        identity.check_before_open(paths)  # a lost queue is refused, not made anew
        settings = config.load(paths.config_file)
        nofile = limits.raise_nofile()
        d = build(paths, settings, max_connections=limits.connection_cap(nofile))
        n = d.recover()
        if n:
            log.info("re-issuing %d job(s) left running by a previous daemon", n)
        code = asyncio.run(d.run())
        if d.queue.broken:
            # Leave without closing the database: its close would write the WAL
            # into the truncated or replaced file (SqliteQueue.close).
            log.error("the queue database %s; exiting without touching it", d.queue.broken)
            logging.shutdown()
            os._exit(code or 1)
        return code
    finally:
        lock.release()

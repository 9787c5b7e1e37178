"""Composition root: single-instance lock, the keeper, signals, shutdown.

Start-up order matters:
  0. a 077 umask, and every folder made 0700 and checked (ours, no link,
     not writable by others; paths.py) before anything is made in it;
  1. take the flock on the data dir's lock file (before touching anything,
     the socket included): a second daemon stops here and names the first;
  2. refuse a queue this folder had and lost (identity.py: never a new empty
     one in its place); raise the descriptor limit (limits.py); open the
     queue; connect to the keeper (starting one if none answers) and take
     over the runs it holds: still running, or ended with an outcome nobody
     recorded (adoption.py); a job a previous daemon held that no keeper
     knows lost its supervision: its leftovers are ended and it is given
     back to the queue;
  3. replace the stale socket (the lock proves nobody serves it) and listen;
  4. tell systemd READY=1; run the worker loop until asked to stop (SIGHUP,
     or `sloth daemon reload`, re-reads config.toml);
  5. stop: SIGTERM (what a service manager's stop and restart send) and
     `sloth daemon stop --keep-jobs` hand running jobs over -- they keep
     running in the keeper for the next daemon; SIGINT and `sloth daemon
     stop` interrupt them and requeue them refunded, and let the keeper go.

The lock file holds the daemon's pid and its socket's path: a client whose
runtime dir differs from the daemon's (cron, su, ssh without
XDG_RUNTIME_DIR) finds the socket through it (locate.py).
"""

from __future__ import annotations

from sloth_daemon.daemon import lean  # first: asyncio without ssl (docs/idle.md)
import asyncio
import contextlib
import errno
import fcntl
import logging
import os
import signal
import socket
import time
from typing import TYPE_CHECKING, Any, Callable, Mapping

from sloth_daemon import __version__
from sloth_daemon import config
from sloth_daemon.text import log_to_stderr
from sloth_daemon.backends.sqlite import identity
from sloth_daemon.daemon import activation, idle_exit, limits, renewal
from sloth_daemon.keeper import lockholder, timerfd
from sloth_daemon.clock import Clocks, SystemClocks
from sloth_daemon.daemon.control import Control
from sloth_daemon.errors import ConfigError, DaemonAlreadyRunning, JobNotFound, SlothError, StorageError
from sloth_daemon.daemon.sdnotify import Notifier
from sloth_daemon.paths import Paths, check_socket_path, ensure_dir, resolve, secure_all
from sloth_daemon.queue import Queue
from sloth_daemon.safefile import open_file
from sloth_daemon.daemon.server import Server
from sloth_daemon.daemon.worker.runs import worker_name
from sloth_daemon.daemon.supervision import KeeperSpawner
from sloth_daemon.daemon.tell import Teller
from sloth_daemon.daemon.telling.deadman import DeadMan
from sloth_daemon.daemon.telling.sender import Sender
from sloth_daemon.daemon.metrics_file import DaemonMetrics, MetricsFile
from sloth_daemon.daemon.worker.clockwatch import ClockWatch
from sloth_daemon.daemon.machine_log import MachineLog
from sloth_daemon.daemon.worker.loop import Worker
from sloth_daemon.daemon.schedules import slots
from sloth_daemon.daemon.schedules.scheduler import Ports, Scheduler, machine_id
from sloth_daemon.models import ACTIVE_STATES
from sloth_daemon.spec import JobSpec

if TYPE_CHECKING:
    from sloth_daemon.daemon.shared.member import Shared

log = logging.getLogger("sloth.daemon")
# How long one write of the daemon waits for another process's lock on the
# queue file before giving up for now (and trying again later): short, so
# the event loop -- the socket, heartbeats, other jobs -- never freezes
# behind a foreign writer.
LOCK_WAIT_S = 0.2
# How long a recorded outcome may wait for others to share its fsync
# (durability.py): `wait` hears of a result this much later at most.
COMMIT_DELAY_S = 0.005


LOCK_PATIENCE_S = 0.5  # a client's probe (launcher.lock_holder) holds it for an instant


class InstanceLock:
    """An flock on ``paths.lock`` held for the daemon's lifetime. The kernel
    drops it when the process dies, however it dies: no stale pid files."""

    def __init__(self, paths: Paths, *, handed: int | None = None) -> None:
        """``handed``: the lock's descriptor, held by this process before it
        renewed itself (renewal.py): taken over, not locked again."""
        self.path = paths.lock
        ensure_dir(paths.data_dir)
        if handed is not None:
            try:
                if renewal.same_file(handed, self.path):
                    fcntl.flock(handed, fcntl.LOCK_EX | fcntl.LOCK_NB)  # the same open file: ours already
                    os.set_inheritable(handed, False)  # the keeper and jobs never hold our lock
                    self.fd = handed
                    return
            except OSError:
                pass
            with contextlib.suppress(OSError):
                os.close(handed)
        try:
            self.fd = open_file(self.path, os.O_RDWR | os.O_CREAT)  # a FIFO there is refused, not waited on
        except OSError as e:
            raise StorageError(f"cannot open lock file {self.path}: {e.strerror or e}",
                               hint=f"Move it away (mv {self.path} {self.path}.away); sloth makes its own.") from e
        if not self._lock():
            holder = (os.pread(self.fd, 64, 0).decode("ascii", "replace").split() or ["unknown"])[0]
            os.close(self.fd)
            raise DaemonAlreadyRunning(f"another sloth daemon (pid {holder}) is already running on {paths.data_dir}")
        os.ftruncate(self.fd, 0)
        os.pwrite(self.fd, f"{os.getpid()}\n{paths.socket}\n".encode(), 0)  # the socket: for locate.py

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
                 server: Server, keeper: KeeperSpawner, control: Control | None = None,
                 teller: Teller | None = None, shared: "Shared | None" = None,
                 clock_set: timerfd.ClockSetWatch | None = None, machine: MachineLog | None = None,
                 deadman: DeadMan | None = None, metrics_file: MetricsFile | None = None,
                 handover: renewal.Handover | None = None) -> None:
        self.paths, self.settings = paths, settings
        self.queue, self.worker, self.server, self.keeper = queue, worker, server, keeper
        self.control, self.teller, self.shared = control, teller, shared
        self.clock_set = clock_set  # the wall clock set, a resume: heard at once where Linux tells (timerfd)
        self.machine = machine  # its time up and the machine's sleeps, for the timeline
        self.deadman = deadman  # the schedules' dead-man switch (daemon/telling/deadman.py)
        self.metrics_file = metrics_file  # config's metrics_file, written on changes (metrics_file.py)
        self.notifier = Notifier.from_env()
        self._stop = asyncio.Event()
        self.stop_reason = ""
        self.keep_jobs = True
        self.handover = handover  # taken over from this process before it renewed itself (renewal.py)
        self.renewing: renewal.HeldSignals | None = None  # at rest: stopping to exec a fresh process (renewal.py)
        self.renewal_config: str | None = None  # config.toml's text in force, for the fresh process
        self.looking = False  # a renewal's look (accepting paused) or the renewal: no idle exit meanwhile
        self.ready_kb: int | None = None  # resident when it became ready: what a fresh process holds
        self.dormancy: renewal.Dormancy | None = None  # the renewal is to the dormant process (dormant.py)

    def reload(self) -> dict[str, Any]:
        """Re-read config.toml and apply it at once (running jobs untouched).
        Returns what changed. A file that does not load raises ConfigError
        and changes nothing: the daemon keeps its settings."""
        new = self._load_config()
        for lane in new.lane_when:  # a `when` this machine cannot observe would hold the lane for ever
            try:
                self.worker.gates.check_lane(lane, new)
            except SlothError as e:
                log.error("reload refused: %s", e.message)
                self.notifier.ready("reload refused: " + e.message)
                raise ConfigError(f"{new.file}: {e.message}", hint=e.hint) from None
        changed = config.changes(self.settings, new)
        self.settings = new
        notes = self.worker.apply_settings(new)
        if self.shared is not None:
            self.shared.publish(self.worker.gates.resources)
        if self.control is not None:
            self.control.settings = new
        if self.teller is not None:
            self.teller.apply(new)
        self.keeper.linger(new.keeper_linger_s)
        log.info("reloaded %s: %s", new.file, "; ".join(changed + notes) or "nothing changed")
        self.notifier.ready(f"serving {self.paths.socket}")
        return {"file": str(new.file), "changed": changed, "notes": notes}

    def _load_config(self) -> config.Settings:
        """config.toml for a reload, systemd told RELOADING=1 (and READY=1 again if it does not load)."""
        self.notifier.reloading()
        try:
            return config.load(self.paths.config_file)
        except SlothError as e:
            log.error("reload refused: %s", e.message)
            self.notifier.ready("reload refused: " + e.message)
            raise

    def _on_sighup(self) -> None:
        try:
            self.reload()
        except SlothError:
            pass  # logged; the old settings stay

    def request_stop(self, reason: str, *, keep_jobs: bool) -> None:
        """Stop serving; ``keep_jobs``: leave running jobs to the keeper."""
        if not self._stop.is_set():
            log.info("stopping (%s running jobs): %s", "keeping" if keep_jobs else "interrupting", reason)
            self.stop_reason, self.keep_jobs = reason, keep_jobs
            self._stop.set()

    def rested(self) -> None:
        """The keeper let go, nothing in hand (supervision.py): renew the
        process if that is worth it and nothing is lost, else give back what
        the heap can (renewal.py, lean.py)."""
        if self.server.server is not None and self._why_not_renew() is None:  # else an idle exit is looking
            self.looking = True  # from now: one leaving at a time (idle_exit.py's view)
            self.worker.spawn_task(self._renew())
        else:
            lean.give_back(self.queue.rest)

    def _why_not_renew(self) -> str | None:
        if (why := self._why_not_leave()) is not None:
            return why
        if not renewal.worth_it(self.ready_kb):
            return "no more resident than a fresh process"
        return None

    def _why_not_leave(self) -> str | None:
        """Why this process cannot be replaced now (by a fresh daemon or the dormant one)."""
        if self.shared is not None:
            return "a shared queue"  # its machine's registration and polls: not worth a restart
        if self._stop.is_set():
            return "stopping"
        if self.worker.running or self.keeper.client is not None:
            return "runs in hand or a keeper"
        if self.server.active:
            return "a client connected"
        return None

    def go_dormant(self, wake_at: float | None, reason: str, quiet_since: float) -> str | None:
        """Nothing but timers needs this daemon (idle_exit.py looked twice,
        its accepting paused): exec the dormant process in its place, to be
        woken at ``wake_at`` or before (dormant.py). Returns why it cannot
        go, else None (the stop is asked: main() execs)."""
        if self.looking:
            return "the process renewing itself"
        why = self._why_not_leave()
        if why is None and lockholder.held(self.paths.keeper_lock):
            why = "a keeper runs"  # one a daemon before us started, not let go yet
        if why is None:
            why, self.renewal_config = renewal.same_daemon(self.settings)
        if why is None and self.renewal_config is not None and renewal.handed(self.renewal_config) is None:
            # The woken daemon would read it from the file, hours later: an
            # edit not reloaded would apply, a broken one end it at its start.
            why = (f"{self.settings.file} is too long to hand over (over {renewal.HANDED_TEXT_MAX // 1024} KiB):"
                   " the daemon stays whole")
        if why is not None:
            return why
        db = str(self.paths.db)
        self.dormancy = renewal.Dormancy(wake_at, quiet_since, min(self.settings.clock_check_s * 6, 30.0),
                                         (db, db + "-wal"), zone=slots.local_key()[1])
        self.renewing = renewal.HeldSignals(asyncio.get_running_loop())  # a stop or reload from now: heard there
        self.request_stop(reason, keep_jobs=True)
        return None

    async def _renew(self) -> None:
        """Two steps, as an idle exit's: stop accepting, let what was accepted start, look again."""
        self.server.pause()
        await asyncio.sleep(renewal.SETTLE_S)
        why = self._why_not_renew()
        if why is None:  # the last look: the process exec'd would be this daemon (same code, same settings)
            why, self.renewal_config = renewal.same_daemon(self.settings)
        if why is not None:
            log.info("renewal called off: %s", why)
            try:
                if not self._stop.is_set():
                    await self.server.start(self.paths.socket)
            finally:
                self.looking = False  # an idle exit may look again (even if listening again failed)
            lean.give_back(self.queue.rest)
            return
        self.renewing = renewal.HeldSignals(asyncio.get_running_loop())  # a stop or reload from now: heard there
        self.request_stop("at rest: renewing the process, which gives back what the jobs left (docs/idle.md)",
                          keep_jobs=True)

    # ------------------------------------------------------------------ run
    async def run(self) -> int:
        """Serve until asked to stop; then drain. Returns the exit code."""
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGTERM, lambda: self.request_stop("signal SIGTERM", keep_jobs=True))
        loop.add_signal_handler(signal.SIGINT, lambda: self.request_stop("signal SIGINT", keep_jobs=False))
        loop.add_signal_handler(signal.SIGHUP, self._on_sighup)  # systemctl reload; harmless on a hang-up
        signal.pthread_sigmask(signal.SIG_UNBLOCK, renewal.SIGNALS)  # blocked across a renewal's exec
        await self._take_over()
        if self.machine is not None:
            self.machine.start()
        if self.control is not None and self.control.scheduler is not None:
            self.control.scheduler.load()  # its one timer, on this loop
            if self.handover is not None and self.handover.schedules is not None:
                self.control.scheduler.carry(self.handover.schedules)  # a clock set back, a zone changed meanwhile
        if self.shared is not None:
            self.shared.start()  # a queue shared by several machines: its polls, wakeups, log shipping
        await self._listen()
        if self.clock_set is not None:
            loop.add_reader(self.clock_set.fd, self._on_clock_set)
        notifier = self.notifier
        worker = loop.create_task(self.worker.run())
        tasks = [worker, loop.create_task(idle_exit.watch_daemon(self))]  # idle_exit_s (docs/idle.md)
        if notifier.watchdog_interval_s:
            tasks.append(loop.create_task(_watchdog(notifier, notifier.watchdog_interval_s)))
        if self.teller is not None and self.teller.sender is not None:
            tasks.append(loop.create_task(self.teller.sender.run()))  # the outbox (daemon/telling/)
        if self.deadman is not None:
            tasks.append(loop.create_task(self.deadman.run()))
        if self.metrics_file is not None:
            self.metrics_file.changed()  # a new daemon: its own counters start again
        notifier.ready(f"serving {self.paths.socket}")
        self.ready_kb = renewal.resident_kb()
        log.info("sloth %s ready: pid %d, socket %s, queue %s", __version__, os.getpid(), self.paths.socket,
                 self.paths.db if self.shared is None else self.shared.describe())
        stop = loop.create_task(self._stop.wait())
        done, _ = await asyncio.wait([stop, worker], return_when=asyncio.FIRST_COMPLETED)
        if worker in done and worker.exception() is not None:
            log.error("worker loop died: %r", worker.exception())
        if self.renewing is None:  # a renewal is no stop: STOPPING=1 put the service in stop-sigterm, and
            notifier.stopping()  # systemd killed the daemon TimeoutStopSec later (READY=1 does not undo it)
        await self._drain(tasks)
        return 0 if worker not in done else 1

    async def _take_over(self) -> None:
        """Connect to the keeper and adopt what it holds (module docstring)."""
        ensure_dir(self.paths.jobs_log_dir)  # the keeper writes logs there, and makes no folders
        if self.handover is not None and self.handover.woke:
            log.info("woken from dormancy (pid %d): %s", os.getpid(), self.handover.woke)
        if self.handover is not None and not lockholder.held(self.paths.keeper_lock):
            log.info("renewed at rest (pid %d): no keeper runs; the next job starts one", os.getpid())
            await self.worker.reconcile([])
            return
        held = await self.keeper.connect()
        await self.worker.reconcile(held)
        log.info("keeper pid %s: %d run(s) adopted", self.keeper.pid, len(self.worker.running))

    async def _listen(self) -> None:
        ensure_dir(self.paths.runtime_dir)
        check_socket_path(self.paths.socket)
        await self.server.start(self.paths.socket)  # its own, or its service manager's (activation.py)

    async def _drain(self, tasks: list[asyncio.Task[None]]) -> None:
        await self.worker.shutdown(keep_jobs=self.keep_jobs)
        if self.shared is not None:
            await self.shared.close()
        await self.keeper.close(bye=not self.keep_jobs)
        await self.server.close(keep_listener=self.renews)
        if self.metrics_file is not None:
            self.metrics_file.close()
        if self.teller is not None:
            await self.teller.close()
        for t in tasks:
            t.cancel()
        if self.clock_set is not None:
            asyncio.get_running_loop().remove_reader(self.clock_set.fd)
            self.clock_set.close()
        if self.machine is not None and not self.renews:  # renewed: the next process continues its row
            self.machine.stop(self.stop_reason)
        if self.renews and self.dormancy is not None:
            self._seal_dormancy()
        self.queue.close()
        log.info("stopped")

    def _seal_dormancy(self) -> None:
        """The queue files' stamps the dormant process compares with, taken
        before the close and the queue looked at once more after: a job
        another process queued since the idle exit's last look is in the
        stamps, so nothing would wake the daemon for it. Such a job makes
        the exec a renewal's instead (the fresh daemon runs it). The log is
        checkpointed first, so that the close changes neither file."""
        assert self.dormancy is not None
        try:
            self.queue.checkpoint()
            self.dormancy.seal()
            why = idle_exit.active_jobs(self.queue.counts())
            if not why and (n := self.queue.outbox_counts()["pending"]):
                why = f"{n} message(s) to deliver"
        except SlothError as e:
            why = f"the queue cannot be read now ({e.message})"
        if why:
            log.info("dormancy called off at the last look (renewing instead): %s", why)
            self.dormancy = None

    @property
    def renews(self) -> bool:
        """Stopping to exec a fresh process, and no stop signal came meanwhile (renewal.HeldSignals)."""
        return self.renewing is not None and self.renewing.stop() is None

    def _on_clock_set(self) -> None:
        if self.clock_set is not None and self.clock_set.consume():
            self.worker.clock_changed()


async def _watchdog(notifier: Notifier, interval_s: float) -> None:
    while True:
        notifier.watchdog()
        await asyncio.sleep(interval_s)


def build(paths: Paths, settings: config.Settings, *, max_connections: int = 256,
          listener: socket.socket | None = None, handover: renewal.Handover | None = None) -> Daemon:
    """The production daemon: real clocks, the queue (the SQLite file in the
    data dir, or a PostgreSQL queue shared by several machines: daemon/shared/member.py),
    its logs under its identity, job processes run by the keeper, the
    socket server (on ``listener``, if its service manager passed one)."""
    clocks = SystemClocks()
    instance = os.urandom(4).hex()
    target = config.queue_target(settings, paths.db)
    shared = None
    if isinstance(target, str):
        from sloth_daemon.daemon.shared.member import Shared, open_shared  # psycopg: only for a URL

        machine = open_shared(target, paths, settings, clocks, instance)
        queue = machine.queue
        paths, shared = machine.paths, Shared(machine, settings, clocks)
    else:
        queue = _open_local(paths, settings, clocks)
        paths = paths.for_queue(queue.identity)
    host = shared.host if shared is not None else None
    worker: Worker
    keeper = KeeperSpawner(paths, name=worker_name(instance, host=host), check_s=settings.clock_check_s,
                           linger_s=settings.keeper_linger_s,
                           on_resync=lambda runs: worker.spawn_task(worker.reconcile(runs)),
                           on_rest=lambda: daemon.rested())
    clock_set = timerfd.create()
    clock = ClockWatch(clocks, interval_s=settings.clock_check_s, timerfd=clock_set is not None,
                       after_jump=shared.after_jump if shared is not None else lambda: None,
                       resting=lambda: shared is None and keeper.client is None and not worker.running)
    if handover is not None and handover.clock is not None:
        clock.carry(handover.clock)  # a sleep while dormant is recorded (machine_log.py)
    # ^ at rest (docs/idle.md); a shared queue's daemon wakes every poll_s anyway
    # Each part is built whole, in the order they need each other; where two
    # need each other (the worker tells Control of every change, Control
    # asks the Daemon to stop), the later one is named in a closure.
    control: Control
    daemon: Daemon
    worker = Worker(queue, settings, keeper, clocks=clocks, log_path=paths.job_log, instance=instance,
                    commit_delay_s=COMMIT_DELAY_S, host=host, places=shared.m.places if shared is not None else None,
                    clock=clock, queue_time=shared.time.now if shared is not None else None,
                    on_change=lambda job: control.job_changed(job))
    queue.on_side_change = worker.side_change  # a dependent queued or cancelled by another's transition
    sender = Sender(queue, settings, prefix=f"{host or socket.gethostname()}/", log_path=paths.job_log,
                    shared_poll_s=settings.poll_s if shared is not None else None)
    teller = Teller(settings, log_path=paths.job_log, lane_busy=queue.lane_busy, sender=sender,
                    renewed=handover is not None)
    if shared is not None:
        shared.attach(worker, paths.job_log)
    scheduler = compose_scheduler(queue, worker, clocks, shared,
                                  job=lambda d: control.validate([d], first=None, fired=True)[0],
                                  place=lambda d: dict(control._placed(d)))
    metrics = DaemonMetrics(target, clock, keeper)  # `sloth metrics`, and the metrics file's text
    if handover is not None:
        metrics.carry(handover.counted)  # one daemon to its users: its counters go on (renewal.py)
    metrics_file = MetricsFile(metrics, lambda: control.settings.metrics_file)
    control = Control(queue, worker, keeper, paths, settings, instance=instance,
                      request_stop=lambda reason, *, keep_jobs: daemon.request_stop(reason, keep_jobs=keep_jobs),
                      request_reload=lambda: daemon.reload(), shared=shared, scheduler=scheduler, teller=teller,
                      sender=sender, metrics=metrics, started_at=handover.started_at if handover else None)
    control.watch(teller.job_changed)
    record = MachineLog(queue, host or socket.gethostname(), clock, lambda: clocks.read().awake,
                        row_id=handover.up_row if handover else None)  # one daemon to its users: renewal.py
    clock.listen(check=record.check, jump=record.jump)
    control.watch(metrics_file.changed)  # the file follows changes, and only changes (docs/metrics.md)
    clock.listen(check=lambda: None, jump=metrics_file.changed)
    if shared is not None:
        control.watch(shared.shipper.job_changed)
    daemon = Daemon(paths=paths, settings=settings, queue=queue, worker=worker,
                    server=Server(control, max_connections=max_connections,
                                  given=None if handover is not None and handover.owned else listener,
                                  adopted=listener if handover is not None and handover.owned else None),
                    keeper=keeper, control=control, teller=teller, shared=shared, clock_set=clock_set,
                    machine=record, metrics_file=metrics_file, handover=handover,
                    deadman=DeadMan(queue.schedules, queue.outbox, queue, job=queue.get, notify=teller.notify,
                                    now=queue.clock.now))
    return daemon


def compose_scheduler(queue: Queue, worker: Worker, clocks: Clocks, shared: "Shared | None", *,
                      job: Callable[[Mapping[str, Any]], JobSpec],
                      place: Callable[[dict[str, Any]], dict[str, Any]]) -> Scheduler:
    """The schedules (daemon/schedules/): fired on the queue's wall time,
    their jobs checked (``job``) and placed (``place``) as an add's,
    re-armed by the clock watch; on a shared queue re-read at each poll
    (another machine may change them)."""
    def active(job_id: int) -> bool:
        try:
            return queue.get(job_id).state.value in ACTIVE_STATES
        except JobNotFound:
            return False

    def cancel(job_id: int, why: str) -> None:
        worker.spawn_task(_replace_quietly(worker, job_id, why))

    ports = Ports(now=lambda: worker.leases.now(clocks.read()), active=active, job=job, place=place,
                  queued=worker.signals.wake, cancel=cancel)
    scheduler = Scheduler(queue.schedules, ports, machine=shared.host if shared is not None else machine_id(),
                          fixed_zone=shared is not None)
    worker.clock.listen(check=scheduler.zone_check, jump=scheduler.clock_jumped)
    if shared is not None:
        shared.polls.append(scheduler.reload)
    return scheduler


async def _replace_quietly(worker: Worker, job_id: int, why: str) -> None:
    """--overlap replace: end the previous occurrence (it may have ended meanwhile)."""
    try:
        await worker.actions.replace(job_id, why)
    except SlothError as e:
        log.info("schedule: job %d not replaced: %s", job_id, e.message)


def _open_local(paths: Paths, settings: config.Settings, clocks: SystemClocks) -> Queue:
    """The SQLite queue in the data dir, its identity recorded beside it (identity.py)."""
    queue = Queue(paths.db, clocks, lease_s=settings.lease_s, max_attempts=settings.max_attempts,
                  backoff_cap_s=settings.backoff_cap_s, lock_wait_s=LOCK_WAIT_S)
    try:
        identity.adopt(paths, queue.identity, had_jobs=sum(queue.counts().values()) > 0)
    except BaseException:
        queue.close()
        raise
    return queue


def main() -> int:
    """``sloth daemon run``: returns the process exit code."""
    log_to_stderr(logging.DEBUG if os.environ.get("SLOTH_DEBUG") else logging.INFO,
                          "%(asctime)s sloth[%(process)d] %(levelname)s %(name)s: %(message)s")
    os.umask(0o077)  # whatever started us: nothing we make is for others (jobs: runner.JOB_UMASK)
    paths = resolve()
    # The socket a service manager passed sits at fds 3.. (LISTEN_FDS): taken
    # before this process opens anything, so a count larger than what was
    # passed can never name (and close) a descriptor of ours (activation.py).
    handover = renewal.taken()  # this daemon renewed itself at rest: its socket and lock (renewal.py)
    listener = activation.inherited(paths.socket) if handover is None else _handed_socket(handover, paths)
    check_socket_path(paths.socket)  # fail before creating anything
    secure_all(paths)  # our folders 0700 and ours, no links: before anything is made in them
    lock = InstanceLock(paths, handed=handover.lock_fd if handover is not None else None)  # first: before
    # the socket or the db is touched
    try:
        settings = config.load(paths.config_file, text=handover.config if handover is not None else None)
        if not isinstance(config.queue_target(settings, paths.db), str):
            identity.check_before_open(paths)  # a lost queue is refused, not made anew
        nofile = limits.raise_nofile()
        d = build(paths, settings, max_connections=limits.connection_cap(nofile), listener=listener,
                  handover=handover)
        code = asyncio.run(d.run())
        if d.renewing is not None and not d.queue.broken:
            if d.renews and d.server.listener is not None:
                renewal.execute(d.server.listener, lock.fd, d.renewing, owned=d.server.given is None,
                                started_at=d.control.started_at if d.control is not None else time.time(),
                                up_row=d.machine.row_id if d.machine is not None else None,
                                counted=d.control.metrics.counted() if d.control is not None else None,
                                config_text=d.renewal_config, dormancy=d.dormancy,
                                schedules=d.control.scheduler.saw()
                                if d.control is not None and d.control.scheduler is not None else None,
                                clock=d.worker.clock.saw())
                code = 1  # the exec failed (said on stderr): the next command starts a daemon
            else:
                log.info("stopped instead of renewing: %s", d.renewing.stop() or "no listener to hand over")
            d.server.stop_listening()  # not renewed: its own socket goes, as at any stop
        if d.queue.broken:
            # Leave without closing the database: its close would write the WAL
            # into the truncated or replaced file (the SQLite store's close, backends/sqlite/unit.py).
            log.error("the queue database %s; exiting without touching it", d.queue.broken)
            logging.shutdown()
            os._exit(code or 1)
        return code
    finally:
        lock.release()


def _handed_socket(handover: renewal.Handover, paths: Paths) -> socket.socket | None:
    """The listener this process had before it renewed itself, if it is still one at our path."""
    sock, why = activation.checked(handover.listen_fd, paths.socket)
    if sock is None:
        log.error("renewal: the socket handed over (fd %d) is %s; binding %s myself", handover.listen_fd, why,
                  paths.socket)
        with contextlib.suppress(OSError):
            os.close(handover.listen_fd)
    return sock

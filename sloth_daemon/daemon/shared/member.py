"""A daemon on a queue shared by several machines (PostgreSQL): what it
does besides the worker loop. Imported only when the queue is a URL (it
loads psycopg); daemon.build wires it.

* **This machine** has a name (config ``host``, by default its hostname)
  and tags. A job runs where it is placed: the machine that queued it (the
  default: its cwd and environment are that machine's), anywhere, or a
  host or tag named with ``--on``. The worker claims with ``places`` =
  anywhere, this host, its tags; the daemon registers its host row at start
  (refusing a name another live daemon uses) and refreshes it every
  ``poll_s`` (`sloth status` lists the hosts).
* **One clock, the server's.** Due times and leases are on it. ServerTime
  maps this machine's boot clock onto it (an offset measured at every
  refresh), so the worker sleeps until the server-computed next due time
  whatever this machine's wall clock says. Renewals are timed on the boot
  clock alone (runs.renew_in).
* **Wakeups**: a poll every ``poll_s`` and, unless ``listen = false``,
  LISTEN/NOTIFY as a hint (daemon/shared/listen.py): jobs queued anywhere wake every
  daemon, a job cancelled elsewhere is renewed (and so ended) at once.
* **Network**: every wait is bounded below the lease (options_for), a lost
  server fails calls at once for a moment instead of each waiting again
  (pgdb), and after a jump of the clocks (a resume) the connections are
  made afresh before anything is renewed.
* **Logs**: each attempt's log goes to the database too (logship.py).
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping

import psutil

from sloth_daemon import __version__
from sloth_daemon.backends.sqlite import identity
from sloth_daemon.keeper import procident
from sloth_daemon.backends.postgres import db as pgdb
from sloth_daemon.backends.postgres.errors import describe
from sloth_daemon.backends.postgres.hosts import Host
from sloth_daemon.backends.contract import Machines
from sloth_daemon.queue import Queue
from sloth_daemon.clock import ClockReadings, Clocks
from sloth_daemon.config import Settings, machine_name
from sloth_daemon.errors import BadRequest, SlothError, StorageError
from sloth_daemon.paths import Paths
from sloth_daemon.daemon.resources import Resources, never_met
from sloth_daemon.daemon.worker.lifecycle import boot_of
from sloth_daemon.daemon.worker.runs import worker_name

if TYPE_CHECKING:
    from sloth_daemon.daemon.worker.loop import Worker

log = logging.getLogger("sloth.shared")


def options_for(lease_s: float, origin: str | None = None) -> pgdb.PgOptions:
    """Connection settings whose waits end well inside a lease: a dead
    network or server must become an error while the daemon can still act
    (its keeper fences the jobs anyway when renewals stop); ``origin``, this
    daemon's host name, is recorded with every job it inserts."""
    share = max(1.0, min(lease_s / 6, 10.0))
    return pgdb.PgOptions(
        connect_timeout_s=max(2, int(share)), keepalives_idle_s=max(1, int(share)),
        keepalives_interval_s=max(1, int(share / 2)), keepalives_count=3,
        tcp_user_timeout_s=share, statement_timeout_s=max(2.0, min(lease_s / 3, 30.0)),
        idle_in_transaction_s=max(5.0, min(lease_s, 60.0)), reconnect_s=share, lock_wait_s=0.2,
        application_name="sloth-daemon", origin=origin)


class ServerTime:
    """Now on the database server's clock as this machine best knows it:
    its boot clock plus an offset, measured as the server's now (read by a
    statement) less the boot clock before the statement was sent. That is
    never less than the true offset, so due times and renewals come a round
    trip early, never late; it drifts only by the clocks' rates (ppm)."""

    def __init__(self) -> None:
        self.offset: float | None = None

    def sample(self, sent: ClockReadings, server_now: float) -> None:
        self.offset = server_now - boot_of(sent)

    def now(self, r: ClockReadings) -> float:
        return r.wall if self.offset is None else boot_of(r) + self.offset


@dataclass
class Machine:
    """This daemon on the shared queue."""

    url: str
    queue: Queue
    machines: Machines  # the queue's (a shared queue has them)
    paths: Paths  # with the queue's own log folder
    me: Host
    places: list[str]
    options: pgdb.PgOptions


def open_shared(url: str, paths: Paths, settings: Settings, clocks: Clocks, instance: str) -> Machine:
    """Open the shared queue (refusing a schema that is not exactly this
    code's: `sloth db migrate`), register this host, and make the queue's log
    folder. Raises SlothError (ConfigError for a host name in use)."""
    host = machine_name(settings)
    options = options_for(settings.lease_s, host)
    queue = Queue(url, clocks, lease_s=settings.lease_s, max_attempts=settings.max_attempts,
                  backoff_cap_s=settings.backoff_cap_s, migrate=False, options=options)
    try:
        me = Host(host, tuple(settings.tags), worker_name(instance, host=host), os.getpid(), procident.boot_id(),
                  __version__, time.time())
        machines = queue.machines
        assert machines is not None  # a URL's queue
        machines.register_host(me, alive_s=3 * settings.poll_s + 10, pid_alive=_alive)
        mine = paths.for_queue(queue.identity)
        identity.ensure_log_dir(mine)
    except BaseException:
        queue.close()
        raise
    return Machine(url, queue, machines, mine, me, ["", host, *settings.tags], options)


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


class Shared:
    """The tasks of a daemon on a shared queue: refresh its host row and its
    estimate of the server's clock, wake the worker every ``poll_s``, listen
    for NOTIFY, ship logs. ``worker`` is the daemon's Worker."""

    def __init__(self, machine: Machine, settings: Settings, clocks: Clocks) -> None:
        self.m, self.settings, self.clocks = machine, settings, clocks
        self.time = ServerTime()
        self.worker: "Worker | None" = None
        self.listener: Any = None
        self.shipper: Any = None
        self._tasks: list[asyncio.Task[None]] = []
        self.polls: list[Callable[[], None]] = []  # called every poll_s too (the schedules re-read)
        self.refresh()

    @property
    def host(self) -> str:
        return self.m.me.name

    def describe(self) -> str:
        return f"{describe(self.m.url)} as host {self.host}"

    def attach(self, worker: "Worker", log_path: Callable[[int, int], Path]) -> None:
        """The worker this machine runs (built with this queue's clock,
        ``time.now``, and ``after_jump``): woken by polls and NOTIFY, its
        resources published, its runs' logs shipped."""
        from sloth_daemon.daemon.shared.logship import LogShipper

        self.worker = worker
        self.publish(worker.gates.resources)
        self.shipper = LogShipper(self.m.url, self.m.options, worker, log_path, self.settings.log_cap_bytes)

    def start(self) -> None:
        """After the take-over: the loops."""
        loop = asyncio.get_running_loop()
        self._tasks.append(loop.create_task(self._refresh_loop()))
        if self.shipper is not None:
            self._tasks.append(loop.create_task(self.shipper.run()))
        if self.settings.listen:
            from sloth_daemon.daemon.shared.listen import Listener

            self.listener = Listener(self.m.url, self.m.options, on_jobs=self._wake, on_cancel=self._cancelled)
            self._tasks.append(loop.create_task(self.listener.run()))

    def publish(self, resources: Resources) -> None:
        """Say this machine's resources with its host row (now, and at every
        refresh), so that another machine refuses a job placed here that
        could never get what it needs (check_needs). At start and at a reload."""
        self.m.me = replace(self.m.me, resources=resources.counts())
        self.refresh()

    def check_needs(self, needs: Mapping[str, int], place: str) -> None:
        """Refuse (BadRequest) needs that no live machine a job placed at
        ``place`` may run on ("" anywhere, a host, a tag) could ever meet, by
        the resources each published. Not judged where a machine did not say
        (an older daemon) or none is known: it may come later."""
        if not needs:
            return
        hosts = [h for h in self.m.machines.hosts() if h["ago"] < 3 * self.settings.poll_s + 10
                 and (place in ("", "*") or h["name"] == place or place in h["tags"])]
        if not hosts or any(h["resources"] is None for h in hosts):
            return
        errs = [never_met(h["resources"], needs, f"machine {h['name']} (as its daemon published)") for h in hosts]
        if all(e is not None for e in errs):
            if len(errs) == 1:
                raise errs[0]  # type: ignore[misc]
            raise BadRequest("no live machine it may run on can ever meet its needs: "  # each says what it has
                             + "; ".join(e.message for e in errs if e is not None),
                             hint="Ask for what one of them has, or add tokens under [resources] on one of them.")

    # ------------------------------------------------------------ the loops
    def refresh(self) -> None:
        """This host's row, and a sample of the server's clock."""
        sent = self.clocks.read()
        try:
            self.time.sample(sent, self.m.machines.host_seen(self.m.me))
        except SlothError as e:
            log.warning("cannot refresh this host's row: %s", e.message)

    async def _refresh_loop(self) -> None:
        while True:
            await asyncio.sleep(self.settings.poll_s)
            self.refresh()
            for poll in self.polls:
                poll()
            self._wake()

    def _wake(self) -> None:
        if self.worker is not None:
            self.worker.signals.wake()

    def _cancelled(self, job_id: int) -> None:
        """A job was cancelled elsewhere: if it runs here, renew it now (the
        renewal fails, and the worker ends it)."""
        if self.worker is not None and self.worker.leases.renew_soon(job_id):
            self._wake()

    def after_jump(self) -> None:
        """The clocks jumped (a resume): connections may be dead; the offset may be stale."""
        self.m.queue.revalidate()
        if self.listener is not None:
            self.listener.revalidate()
        self.refresh()

    # ------------------------------------------------------------- reading
    def status(self) -> dict[str, Any]:
        """Hosts for `sloth status`: every one that served the queue."""
        try:
            hosts = self.m.machines.hosts()
        except StorageError as e:
            return {"host": self.host, "hosts": None, "hosts_problem": e.message}
        return {"host": self.host, "hosts": [_shown(h, self.settings.poll_s) for h in hosts]}

    async def close(self) -> None:
        """The daemon stops: the last logs go, then the host row."""
        for t in self._tasks:
            t.cancel()
        if self.shipper is not None:
            await self.shipper.close()
        if self.listener is not None:
            self.listener.close()
        try:
            self.m.machines.forget_host(self.m.me)
        except SlothError as e:
            log.warning("cannot remove this host's row: %s", e.message)


def _shown(h: dict[str, Any], poll_s: float) -> dict[str, Any]:
    return {k: h[k] for k in ("name", "tags", "pid", "version", "started_at", "last_seen", "ago")} | {
        "alive": h["ago"] < 3 * poll_s + 10}


__all__ = ["Machine", "ServerTime", "Shared", "open_shared", "options_for"]

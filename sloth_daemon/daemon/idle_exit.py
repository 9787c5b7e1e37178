"""The daemon's exit for want of work (``idle_exit_s``, docs/idle.md).

``IdleExit`` decides, from what the daemon's parts say through their public
faces, whether anything needs a daemon now or could need one without a
command waking it: a job queued, blocked or running (any holder: an expired
lease is reclaimed by a daemon), a run in hand (pending or running) or held
by the keeper, a client connected, a schedule with a next slot. Nothing wakes
a daemon that is gone at a given time (only a command, or a connection to a
socket its service manager holds), so whatever will be due *at any time*
keeps it, not only what is due within the window: nothing is run late. The
window is how long it must have had nothing before it goes (a command served
counts as something: a loop of commands does not pay a start each).

Leaving is two steps so that no request is accepted and then dropped: stop
listening, let the loop run whatever connection it had accepted, look again;
only then ask the daemon to stop (as `sloth daemon stop` does: nothing runs,
so nothing is interrupted). If anything came meanwhile, listen again and stay.
A shared (PostgreSQL) queue never exits: other machines queue work for this
one without a command here.

Dormancy (``dormant_after_s``, on by default) is the same look with one
difference: a schedule's next slot and a dead-man deadline do not keep the
daemon whole, since the dormant process (dormant.py) wakes for them. After
that long with nothing else to do the daemon execs it in its place
(main.Daemon.go_dormant), pausing its accepting first as a renewal does (the
socket stays, connections wait in its queue), looking again, and going only
if nothing came.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from dataclasses import dataclass
from typing import Any, Callable, Collection, Mapping

from sloth_daemon.durations import format_duration
from sloth_daemon.errors import SlothError

log = logging.getLogger("sloth.idle")
SETTLE_S = 0.05  # after the listener is closed: connections already accepted get their task started
OFF_RECHECK_S = 60.0  # idle exit off: look at the setting again this often (a reload may turn it on)
MIN_PERIOD_S, MAX_PERIOD_S = 0.25, 30.0  # a look every window/4 within these: <= 0.04 wake-ups/s at 10m
ACTIVE = ("queued", "blocked", "running")  # held jobs wait for `sloth release`, a command: they keep nothing


@dataclass
class Views:
    """What IdleExit reads, each from the part that owns it."""
    counts: Callable[[], dict[str, int]]  # the queue's jobs per state
    runs: Collection[Any]  # the worker's runs in hand (pending, running, ended and not written)
    keeper_holding: Callable[[], int]  # runs the keeper holds for us (0 when there is none)
    next_slot: Callable[[], int | None]  # the earliest slot of an enabled schedule
    connections: Callable[[], int]  # clients connected now
    requests: Callable[[], int]  # requests served so far (a counter)
    watching: Callable[[], bool] = lambda: False  # run conditions looked at for waiting jobs
    outbox: Callable[[], int] = lambda: 0  # messages not delivered yet (docs/telling.md): a ping must not wait days
    renewing: Callable[[], bool] = lambda: False  # the daemon renewing itself (renewal.py): one leaving at a time
    deadline: Callable[[], float | None] = lambda: None  # the dead-man switch's next check (wall clock)


def active_jobs(counts: Mapping[str, int]) -> str | None:
    """The jobs that need a daemon, in words ("3 queued, 1 running"), or None."""
    return ", ".join(f"{counts[s]} {s}" for s in ACTIVE if counts.get(s)) or None


WAKE_LEAD_S = 15.0  # a dormant process wakes this long before a slot or deadline: the daemon's start, loaded


def wake_lead_s() -> float:
    """WAKE_LEAD_S, or $SLOTH_DORMANT_LEAD_S (tests: a slot a few seconds away)."""
    try:
        return max(float(os.environ.get("SLOTH_DORMANT_LEAD_S") or WAKE_LEAD_S), 0.0)
    except ValueError:
        return WAKE_LEAD_S


class IdleExit:
    """Owns when the daemon was last busy and the last request count seen;
    ``window_s`` is read at every look (a reload may change it)."""

    def __init__(self, views: Views, window_s: Callable[[], float], *,
                 dormant_s: Callable[[], float] = lambda: 0.0, quiet_since: float | None = None,
                 clock: Callable[[], float] = time.monotonic, wall: Callable[[], float] = time.time) -> None:
        """``quiet_since``: the wall time since which nothing needed a daemon,
        handed over by a dormant process (its quiet counts: an idle exit it
        woke for comes at the first look)."""
        self.views, self.window_s, self.dormant_s, self.clock, self.wall = views, window_s, dormant_s, clock, wall
        self.busy_at = self.working_at = clock() - (max(wall() - quiet_since, 0.0) if quiet_since else 0.0)
        self._requests = views.requests()

    def why_stay(self) -> str | None:
        """The first thing that needs a daemon (in words), or None. Something
        found restarts the window (a schedule's slot: the idle exit's only)."""
        why = self._first_need()
        if why is not None:
            self.busy_at = self.working_at = self.clock()
            return why
        if (slot := self.views.next_slot()) is not None:
            self.busy_at = self.clock()
            return f"a schedule's next slot at {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(slot))}"
        return None

    def wake_at(self) -> float | None:
        """When a dormant process must wake the daemon: a lead before the
        next slot or dead-man deadline; with no such timer and the idle exit
        on, when the idle exit comes due (the daemon woken then leaves at its
        first look); None: only a command, a signal or a write wakes it."""
        times = [t for t in (self.views.next_slot(), self.views.deadline()) if t is not None]
        if times:
            return min(times) - wake_lead_s()
        window = self.window_s()
        return self.quiet_since() + window if window > 0 else None

    def quiet_since(self) -> float:
        """The wall time since which nothing needed a daemon (a schedule's slot included)."""
        return self.wall() - (self.clock() - self.busy_at)

    def dormant_due(self) -> bool:
        """Whether the daemon may go dormant now: on, nothing but timers for a
        whole window, and the next timer not within the lead (it would wake at once)."""
        window = self.dormant_s()
        if window <= 0:
            return False
        self.why_stay()  # a need found restarts the window
        if self.clock() - self.working_at < window:
            return False
        wake = self.wake_at()
        return wake is None or wake > self.wall()

    def _first_need(self) -> str | None:
        v = self.views
        if v.renewing():  # its pause is not ours to end: the socket stays, the fresh process looks anew
            return "the process renewing itself"
        if (n := v.connections()) > 0:
            return f"{n} client(s) connected"
        if (r := v.requests()) != self._requests:
            self._requests = r
            return "a request was served"
        if v.runs:
            return f"{len(v.runs)} run(s) in hand"
        if (k := v.keeper_holding()) > 0:
            return f"the keeper holds {k} run(s)"
        try:
            counts = v.counts()
        except SlothError as e:  # a full disk, a foreign lock: what it holds is unknown, so stay
            return f"the queue cannot be read now ({e.message})"
        if active := active_jobs(counts):
            return active
        if v.watching():
            return "run conditions watched"
        if (n := v.outbox()) > 0:
            return f"{n} message(s) to deliver"
        return None

    def quiet_for(self) -> float | None:
        """Seconds it has had nothing (a look now), or None while it has something."""
        return None if self.why_stay() is not None else self.clock() - self.busy_at

    def due(self) -> bool:
        """Whether the daemon may go now: idle exit on, and nothing for a whole window."""
        window = self.window_s()
        if window <= 0:
            return False  # no look: dormancy's (dormant_due) is the one look of a period then
        quiet = self.quiet_for()
        return quiet is not None and quiet >= window

    def period_s(self) -> float:
        windows = [w for w in (self.window_s(), self.dormant_s()) if w > 0]
        return OFF_RECHECK_S if not windows else min(max(min(windows) / 4, MIN_PERIOD_S), MAX_PERIOD_S)

    async def watch(self, *, close: Callable[[], None], reopen: Callable[[], Any],
                    leave: Callable[[str], None], pause: Callable[[], None] = lambda: None,
                    dormant: Callable[[float | None, str, float], str | None] | None = None) -> None:
        """Look every period; when due, close the listener (``close``), let
        accepted connections start, look again: still nothing, ``leave``
        with the reason, else ``reopen`` (awaitable) and stay. Dormancy the
        same with ``pause`` (the listener kept) and ``dormant(wake_at,
        reason, quiet_since)``, which returns why it cannot go (then: reopen)."""
        while True:
            await asyncio.sleep(self.period_s())
            if self.due():
                close()
                await asyncio.sleep(SETTLE_S)
                if (why := self.why_stay()) is None:
                    window = format_duration(self.window_s())
                    leave(f"idle exit: nothing queued, running, held or scheduled for {window} (idle_exit_s)")
                    return
                log.info("idle exit called off: %s", why)
                await reopen()
            elif dormant is not None and self.dormant_due():
                pause()
                await asyncio.sleep(SETTLE_S)
                why = self._first_need()
                if why is None:
                    self.working_at = self.clock()  # not again at once if it cannot go
                    window = format_duration(self.dormant_s())
                    why = dormant(self.wake_at(), f"dormant: nothing queued, running or held for {window}"
                                  " (dormant_after_s); it wakes on a command, a signal, a schedule's slot",
                                  self.quiet_since())
                    if why is None:
                        return
                else:
                    self.busy_at = self.working_at = self.clock()
                log.info("dormancy called off: %s", why)
                await reopen()


async def watch_daemon(d: Any) -> None:
    """The idle exit of the daemon ``d`` (main.Daemon: not imported, it imports us), made from its parts: a
    shared queue never exits (the module docstring)."""
    if d.shared is not None:
        if d.settings.idle_exit_s > 0:
            log.info("idle_exit_s is ignored on a shared queue: other machines queue work for this one")
        return
    scheduler = d.control.scheduler if d.control is not None else None
    server, keeper, gates = d.server, d.keeper, d.worker.gates
    views = Views(counts=d.queue.counts, runs=d.worker.running,
                  keeper_holding=lambda: keeper.client.holding if keeper.client is not None else 0,
                  next_slot=scheduler.earliest if scheduler is not None else lambda: None,
                  connections=lambda: server.active, requests=lambda: server.stats["requests"],
                  watching=lambda: gates.watching, outbox=lambda: d.queue.outbox_counts()["pending"],
                  renewing=lambda: d.looking,
                  deadline=lambda: d.deadman.next_at if d.deadman is not None else None)
    idle = IdleExit(views, lambda: d.settings.idle_exit_s, dormant_s=lambda: d.settings.dormant_after_s,
                    quiet_since=_quiet_since(d.handover))
    await idle.watch(close=server.stop_listening, reopen=lambda: server.start(d.paths.socket),
                     leave=lambda why: d.request_stop(why, keep_jobs=False), pause=server.pause,
                     dormant=d.go_dormant)


def _quiet_since(handover: Any) -> float | None:
    """A dormant process's quiet, counted only if its wake time woke it:
    the connection that woke one is a request, which starts the window again."""
    from sloth_daemon.daemon import dormant  # the standard library only

    if handover is None or handover.woke != dormant.BY_TIME:
        return None
    return handover.quiet_since

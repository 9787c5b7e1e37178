"""What the daemon records of itself and its machine for the timeline
(issue 31; docs/timeline.md): its time up, and each sleep its clock watch
saw, in the queue (contract.Meta.machine_up, machine_seen, machine_slept).

- its start: a new ``up`` row (the queue says a previous row of this host
  that still reads ``running`` ``crashed``: that daemon never stopped cleanly);
- while it runs: the row's end is stamped at a clock check at most every
  STAMP_EVERY_S, so a crash's downtime starts at the last stamp, at most
  that long (plus a clock check) before the daemon really died;
- a sleep: the clock watch's jump of kind ``slept`` (clock.JumpDetector:
  boot time ran on while awake time did not), ending when it was seen;
- its clean stop: the row's end and how it stopped (``stopped: why``).

Downtime is what lies between a host's up rows. A write that fails (the
queue busy, broken) is logged and dropped: the record is for people, it
never stops the daemon. Built by the composition root (daemon/main.py),
which tells it the clock watch's checks and jumps.
"""

from __future__ import annotations

import logging
from typing import Callable

from sloth_daemon.queue import Queue
from sloth_daemon.daemon.worker.clockwatch import ClockWatch
from sloth_daemon.errors import SlothError

log = logging.getLogger("sloth.daemon")
STAMP_EVERY_S = 60.0  # how stale a crashed daemon's end may be (plus one clock check)


class MachineLog:
    """State: this daemon's up row and when (awake clock) it last stamped
    it. Collaborators: the queue, the clock watch (the last jump), the
    awake clock."""

    def __init__(self, queue: Queue, host: str, watch: ClockWatch, awake: Callable[[], float], *,
                 row_id: int | None = None) -> None:
        """``row_id``: the up row of this daemon before it renewed itself (renewal.py), continued."""
        self.queue, self.host, self.watch, self.awake = queue, host, watch, awake
        self.row_id: int | None = row_id
        self.stamped_at = float("-inf")

    def start(self) -> None:
        """The daemon serves: its up row begins now (renewed: it goes on)."""
        if self.row_id is not None:
            self.stamped_at = float("-inf")  # stamped at the next clock check
            return
        try:
            self.row_id = self.queue.machine_up(self.host)
            self.stamped_at = self.awake()
        except SlothError as e:
            log.warning("timeline: the daemon's start was not recorded: %s", e.message)

    def check(self) -> None:
        """A clock check: stamp the up row if the last stamp is STAMP_EVERY_S old."""
        now = self.awake()
        if self.row_id is None or now - self.stamped_at < STAMP_EVERY_S:
            return
        self.stamped_at = now
        self._seen(None)

    def jump(self) -> None:
        """The clock watch saw a jump: a sleep is recorded (a step or a stall is not the machine's)."""
        jump = self.watch.last_jump
        if not jump or jump.get("kind") != "slept":
            return
        try:
            self.queue.machine_slept(self.host, float(jump["seconds"]), str(jump["describe"]))
        except SlothError as e:
            log.warning("timeline: a sleep was not recorded: %s", e.message)
        self._seen(None)  # awake again: the stamp moves past the sleep

    def stop(self, reason: str) -> None:
        """A clean stop: the up row ends now, saying why."""
        self._seen(f"stopped: {reason}" if reason else "stopped")

    def _seen(self, ended: str | None) -> None:
        if self.row_id is None:
            return
        try:
            self.queue.machine_seen(self.row_id, ended=ended)
        except SlothError as e:
            log.warning("timeline: the daemon's time up was not stamped: %s", e.message)

"""Lanes: how many jobs of each lane may run at once, and which are paused.

Concurrency comes from the settings; pauses are kept in the queue's meta
table, so they survive a restart (pueue #452: a pause that a restart quietly
undoes surprises people).
"""

from __future__ import annotations

from typing import Iterable

from .config import Settings
from .errors import IllegalTransition, SlothError
from .queue import Queue


class Lanes:
    def __init__(self, queue: Queue, settings: Settings) -> None:
        self.queue, self.settings = queue, settings
        self.paused_all = bool(queue.get_meta("paused_all", False))
        self.paused: set[str] = set(queue.get_meta("paused_lanes", []))

    def concurrency(self, lane: str) -> int:
        return self.settings.concurrency(lane)

    def is_paused(self, lane: str) -> bool:
        return self.paused_all or lane in self.paused

    def pause(self, lane: str | None) -> None:
        if lane is None:
            self.paused_all = True
            self.queue.set_meta("paused_all", True)
        else:
            self.paused.add(lane)
            self.queue.set_meta("paused_lanes", sorted(self.paused))

    def resume(self, lane: str | None) -> None:
        """Resume everything, or one lane. Resuming one lane while all are
        paused is refused: it would say "resumed" while nothing runs."""
        if lane is not None and self.paused_all:
            raise IllegalTransition(
                f"all lanes are paused, so lane {lane!r} cannot run on its own",
                hint="Resume all with `sloth resume`, then pause the lanes to hold back: `sloth pause LANE`.")
        if lane is None:
            self.paused_all = False
            self.paused.clear()
            self.queue.set_meta("paused_all", False)
        else:
            self.paused.discard(lane)
        self.queue.set_meta("paused_lanes", sorted(self.paused))

    def blocked(self, running: dict[str, int]) -> set[str]:
        """Lanes not to claim from: paused, or every slot in use
        (``running``: lane -> runs in it)."""
        return set(self.paused) | {ln for ln, n in running.items() if n >= self.concurrency(ln)}

    def status(self, running: dict[str, int], known: Iterable[str] | None = None) -> dict[str, dict[str, object]]:
        """Each lane's concurrency, running count and pause: the configured
        lanes, ``known`` ones (default: the queue's) and the running ones."""
        if known is None:
            try:
                known = self.queue.lanes()
            except SlothError:  # a broken database: status must still answer
                known = []
        names = {"default"} | set(self.settings.lanes) | set(known) | set(running)
        return {ln: {"concurrency": self.concurrency(ln), "running": running.get(ln, 0),
                     "paused": self.is_paused(ln)} for ln in sorted(names)}

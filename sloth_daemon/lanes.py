"""Lanes: how many jobs of each lane may run at once, and which are paused.

Concurrency comes from the settings; pauses are kept in the queue's meta
table, so they survive a restart (pueue #452: a pause that a restart quietly
undoes surprises people).
"""

from __future__ import annotations

from typing import Iterable

from .config import Settings
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

    def status(self, running: dict[str, int], known: Iterable[str]) -> dict[str, dict[str, object]]:
        names = {"default"} | set(self.settings.lanes) | set(known) | set(running)
        return {ln: {"concurrency": self.concurrency(ln), "running": running.get(ln, 0),
                     "paused": self.is_paused(ln)} for ln in sorted(names)}

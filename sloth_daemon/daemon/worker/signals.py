"""What the worker's parts tell the loop and the world: a job changed
(watchers hear: ``on_change``), something may be claimable now (``wake``).

Shared by the worker loop and its collaborators, so none of them needs the
loop itself to say so. ``on_change`` is given when the worker is built
(daemon/main.py: Control's watchers, named in a closure as Control is
made after its Worker).
"""

from __future__ import annotations

import asyncio
from typing import Callable

from sloth_daemon.models import Job


class Signals:
    """``look``: the next turn looks for work to claim (it costs two read
    queries, so a turn for a heartbeat or an fsync alone skips them);
    ``event``: set to end the loop's sleep; ``hurry``: set to end its pace
    too (a slot ran dry: pipeline.py); ``heard``: called on every wake (a
    cancel waiting for the keeper's word on a run may have it now)."""

    def __init__(self, on_change: Callable[[Job], None], heard: Callable[[], None]) -> None:
        self.on_change = on_change
        self.heard = heard
        self.look = True  # at start: something may be claimable
        self.event = asyncio.Event()
        self.hurry = asyncio.Event()

    def wake(self, *, hurry: bool = False) -> None:
        """Something changed (a job queued or ended, a lane, a pause): the
        next turn looks for work to claim, and comes at once (``hurry``:
        even while the turns are paced)."""
        self.look = True
        self.event.set()
        if hurry:
            self.hurry.set()
        self.heard()

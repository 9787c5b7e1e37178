"""A run's watchdogs (issue 33 item 5): ``--stall`` (no output this long
ends it) and ``--fail-on`` (an output line that matches ends it).

They run in the keeper, beside the output they watch (runner.JobProcess
reads it there, the tap hands it here), so they keep watching while the
daemon restarts or is gone, as the timeout does. What ends the run is the
keeper's own kill (kept_runs.KeptRuns.kill: SIGTERM to the tree, SIGKILL
after the grace), so a tree that ignores SIGTERM is ended all the same.

The pattern was checked at add (checks.fail_on_pattern: its worst case on
one line is bounded) and is matched per line, each line cut at
checks.FAIL_ON_LINE_BYTES; a carriage return ends a line too (progress
bars). As a second guard, matching that has cost more than MATCH_BUDGET_S
of the keeper's time in one run is switched off for that run, and its
history says so: no pattern may slow the keeper that all runs share.
"""

from __future__ import annotations

import asyncio
import re
import time
from typing import Any, Callable

from sloth_daemon.checks import FAIL_ON_LINE_BYTES
from sloth_daemon.keeper.wire import Refused, secs

MATCH_BUDGET_S = 2.0  # the keeper's time one run's --fail-on may cost, in all; past it, matching stops
SHOWN_LINE_CHARS = 200  # of the matching line, what its history shows


class Watch:
    """The watchdogs of one run. ``end(reason, by)`` ends the run (once);
    ``note(message)`` says something in its history."""

    def __init__(self, stall_s: float | None, fail_on: str | None, *, end: Callable[[str, str], None],
                 note: Callable[[str], None]) -> None:
        self.stall_s = stall_s
        self.pattern = re.compile(fail_on) if fail_on else None
        self.end, self.note = end, note
        self.partial = bytearray()  # the line being read (its first FAIL_ON_LINE_BYTES)
        self.long = False  # the line being read passed the cap: the rest of it is not matched
        self.spent_s = 0.0  # time matching has cost so far
        self.last_output = 0.0  # loop time of the last output
        self.timer: asyncio.TimerHandle | None = None
        self.done = False

    def start(self) -> None:
        if self.stall_s:
            loop = asyncio.get_running_loop()
            self.last_output = loop.time()
            self.timer = loop.call_later(self.stall_s, self._check_stall)

    def stop(self) -> None:
        """The run ended (or is being ended): nothing more is watched."""
        self.done = True
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def exited(self) -> None:
        """The root exited and its pipe was read to the end: the line it left
        unfinished is a line too (as grep reads a file); then nothing more is watched."""
        if not self.done and self.partial:
            self._match_line()
        self.stop()

    def pause(self) -> None:
        """Paused on request: a stopped tree prints nothing, and that is no stall."""
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def resume(self) -> None:
        if not self.done:
            self.start()

    # ---------------------------------------------------------------- output
    def output(self, data: bytes) -> None:
        if self.done:
            return
        if self.stall_s:
            self.last_output = asyncio.get_running_loop().time()  # the timer looks at it when due
        if self.pattern is not None:
            self._lines(data)

    def _lines(self, data: bytes) -> None:
        start = 0
        for m in _LINE_END.finditer(data):
            self._take(data[start:m.start()])
            if self._match_line():
                return
            start = m.end()
        self._take(data[start:])

    def _take(self, part: bytes) -> None:
        room = FAIL_ON_LINE_BYTES - len(self.partial)
        if len(part) > room:
            self.long = True
        self.partial += part[:max(room, 0)]

    def _match_line(self) -> bool:
        line, self.partial, self.long = bytes(self.partial), bytearray(), False
        if self.pattern is None or not line:
            return False
        text = line.decode("utf-8", "replace")
        t = time.perf_counter()
        hit = self.pattern.search(text)
        self.spent_s += time.perf_counter() - t
        if hit:
            shown = text if len(text) <= SHOWN_LINE_CHARS else text[:SHOWN_LINE_CHARS] + "..."
            self.stop()
            self.end(f"matched --fail-on {self.pattern.pattern!r}: {shown.strip()}", "match")
            return True
        if self.spent_s > MATCH_BUDGET_S:
            self.pattern = None
            self.note(f"--fail-on switched off for this run: matching its output cost {secs(self.spent_s)} "
                      "of the keeper's time (see docs/watchdogs.md)")
        return False

    # ----------------------------------------------------------------- stall
    def _check_stall(self) -> None:
        self.timer = None
        if self.done or not self.stall_s:
            return
        loop = asyncio.get_running_loop()
        quiet = loop.time() - self.last_output
        if quiet + 0.001 >= self.stall_s:
            self.stop()
            self.end(f"stalled: no output for {secs(self.stall_s)}", "stall")
        else:
            self.timer = loop.call_later(self.stall_s - quiet, self._check_stall)


_LINE_END = re.compile(rb"\r\n|\n|\r")


def parse_watch(a: dict[str, Any]) -> tuple[float | None, str | None]:
    """A spawn's ``watch`` ({"stall_s", "fail_on"}), checked as far as the keeper
    uses it; raises Refused."""
    w = a.get("watch")
    if w is None:
        return None, None
    if not isinstance(w, dict) or not set(w) <= {"stall_s", "fail_on"}:
        raise Refused("bad_request", "watch must be an object of stall_s, fail_on")
    stall = w.get("stall_s")
    if stall is not None and (isinstance(stall, bool) or not isinstance(stall, (int, float)) or not 0 < stall < 1e12):
        raise Refused("bad_request", "watch.stall_s must be a number of seconds above 0")
    pattern = w.get("fail_on")
    if pattern is not None:
        from sloth_daemon.checks import fail_on_pattern
        from sloth_daemon.errors import BadRequest

        try:
            fail_on_pattern(pattern)
        except BadRequest as e:
            raise Refused("bad_request", f"watch.fail_on: {e.message}") from None
    return (float(stall) if stall is not None else None), pattern

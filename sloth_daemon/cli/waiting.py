"""Waiting on jobs: `sloth wait` and `sloth add --wait`.

On a terminal, waiting on several jobs draws one live progress line (done,
failed, running, queued, rate, time left) on stderr and prints failures as
they happen, each with its log's last lines; piped, it prints one plain
line per job as it ends. No Typer here: the fast path (fast.py) runs
`add --wait` with it too.
"""

from __future__ import annotations

import sys
import time

from sloth_daemon import errors
from sloth_daemon.cli.base import connect, emit_json, log_paths
from sloth_daemon.cli.edge import echo

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import IO, Any, Optional

TAIL_LINES = 10


def wait_for(ids: list[int], *, stream: IO[str], as_json: bool = False,
             json_extra: Optional[dict[str, Any]] = None, before: Optional[str] = None) -> int:
    """Wait on the daemon for ``ids``; tell outcomes on ``stream`` (the
    progress line goes to stderr when it is a terminal). Returns the exit code."""
    if before:
        echo(before)
    view = _View(ids, stream, live=not as_json and len(ids) > 1 and sys.stderr.isatty(), quiet=as_json)
    final: list[dict[str, Any]] = []
    with connect(timeout_s=None) as c:
        for ev in c.stream("wait", ids=ids):
            if ev.get("kind") == "jobs":
                for j in ev["jobs"]:
                    view.update(j, initial=True)
            elif ev.get("kind") == "state":
                view.update(ev["job"])
            elif ev.get("kind") == "end":
                final = ev["result"]["jobs"]
    view.close()
    if as_json:
        emit_json({**(json_extra or {}), "jobs": final})
    return errors.EXIT_JOB_FAILED if any(j["state"] != "done" for j in final) else 0


class _View:
    """What a wait shows while it waits."""

    def __init__(self, ids: list[int], stream: IO[str], *, live: bool, quiet: bool) -> None:
        self.stream, self.live, self.quiet = stream, live, quiet
        self.states: dict[int, str] = dict.fromkeys(ids, "queued")
        self.told: set[int] = set()
        self.t0 = time.monotonic()
        self.ended_here = 0  # jobs that ended while we watched (for the rate)
        self._drawn = False

    def update(self, job: dict[str, Any], *, initial: bool = False) -> None:
        jid, st = job["id"], job["state"]
        if jid not in self.states:
            return
        self.states[jid] = st
        if st in ("done", "failed", "cancelled") and jid not in self.told:
            self.told.add(jid)
            self.ended_here += not initial
            self._tell(job)
        self._draw()

    def _tell(self, job: dict[str, Any]) -> None:
        if self.quiet or (self.live and job["state"] == "done"):
            return  # on a terminal the progress line counts the done ones
        from sloth_daemon.cli import render

        self._clear()
        lines = [render.outcome(job)]
        if job["state"] == "failed" and job.get("attempts"):
            tail = render.tail_lines(str(log_paths().job_log(job["id"], job["attempts"])), TAIL_LINES)
            lines += [f"  | {ln}" for ln in tail]
        print("\n".join(lines), file=self.stream, flush=True)

    def _draw(self) -> None:
        if not self.live:
            return
        sys.stderr.write("\r\x1b[K" + self.line())
        sys.stderr.flush()
        self._drawn = True

    def _clear(self) -> None:
        if self._drawn:
            sys.stderr.write("\r\x1b[K")
            sys.stderr.flush()
            self._drawn = False

    def line(self) -> str:
        from sloth_daemon.durations import format_duration

        n = {s: 0 for s in ("done", "failed", "cancelled", "running", "queued", "blocked")}
        for st in self.states.values():
            n[st] = n.get(st, 0) + 1
        ended = n["done"] + n["failed"] + n["cancelled"]
        parts = [f"{ended}/{len(self.states)} ended", f"{n['done']} done"]
        parts += [f"{n[s]} {s}" for s in ("failed", "cancelled", "running", "queued", "blocked") if n[s]]
        elapsed = time.monotonic() - self.t0
        if self.ended_here and elapsed > 0:
            rate = self.ended_here / elapsed
            parts.append(f"{rate * 60:.1f}/min" if rate < 1 else f"{rate:.1f}/s")
            left = len(self.states) - ended
            if left:
                parts.append(f"~{format_duration(left / rate)} left")
        return " · ".join(parts)

    def close(self) -> None:
        self._clear()

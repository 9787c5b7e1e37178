"""Runs held behind another: the keeper's side of pipelining (the
daemon's is pipeline.py). A base class of the run table (keeper/runs.py).

A spawn ``after`` a run that has not ended is held (state "pending": no
process, no log file, no timeout yet) and started the moment that run
ends, before the daemon hears of the end; then a ``started`` event says
so. One run at most waits behind each run (a pending one too: a chain).
A pending run is dropped unstarted, and reported ``exited`` with
``started: false``, if killed or fenced (its trust lapsed) meanwhile, or
forgotten at once by ``unspawn``; what waited behind it then waits for
what it waited for. A start that fails is reported as ``exited`` with the
``spawn_error``, and the next in the chain starts in its place.

A spawn whose ``after`` names a run this keeper refused for an unknown
environment ref is refused the same way: the daemon sends both again whole,
in order, and the second must not start before the first. One whose
``after`` names a run refused for another reason waits for what that run
would have waited for: it never existed here, and a spawn after a key this
keeper does not know starts at once, beside the run still going.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Callable

from sloth_daemon.clock import ClockReadings
from sloth_daemon.errors import SpawnError
from sloth_daemon.keeper.wire import ENV_REFS_KEPT, Journal, Refused, clocks_now, secs, text, trust_verdict

if TYPE_CHECKING:
    from sloth_daemon.keeper.runs import Launch, Run


class HeldRuns:
    runs: dict[str, "Run"]
    journal: Journal
    event: Callable[..., None]
    changed: Callable[[], None]
    refused: dict[str, tuple[str, str | None]]  # keys lately refused -> (code, the run they were to wait for)

    if TYPE_CHECKING:
        def _launch(self, run: Run, ln: Launch) -> None: ...

    def predecessor(self, a: dict[str, Any]) -> Run | None:
        """The run a spawn's ``after`` names if it still runs (else the new
        run starts at once). Raises Refused if it already has a successor."""
        if a.get("after") is None:
            return None
        after: str | None = text(a, "after")
        for _ in range(len(self.refused)):  # a refused run: what it would have waited for (a chain)
            if after is None or after in self.runs or after not in self.refused:
                break
            code, after = self.refused[after]
            if code == "unknown_env":  # it comes again whole: this one must wait for it
                raise Refused("unknown_env", "the run this one waits for was refused its environment; "
                                             "send both whole", retry=True)
        pred = self.runs.get(after) if after is not None else None
        if pred is None or pred.state == "exited":
            return None
        if pred.successor is not None:
            raise Refused("exists", f"run {pred.key!r} already has run {pred.successor!r} waiting behind it")
        return pred

    def note_refused(self, key: str, e: Refused, a: dict[str, Any]) -> None:
        after = a.get("after")
        self.refused[key] = (str(e.wire["code"]), after if isinstance(after, str) else None)
        while len(self.refused) > ENV_REFS_KEPT:
            self.refused.pop(next(iter(self.refused)))

    def unspawn(self, key: str) -> dict[str, Any]:
        """Forget a pending run before it starts; else change nothing."""
        run = self.runs.get(key)
        if run is None or run.state != "pending":
            return {"dropped": False, "state": run.state if run is not None else "unknown"}
        self._unlink(run)
        del self.runs[key]
        self.changed()
        return {"dropped": True}

    def start_next(self, run: Run) -> list[Run]:
        """Start the run that waited behind ``run`` (which ended); one that
        cannot start ends unstarted and the next takes its place. The runs
        that started or ended so."""
        moved, key = [], run.successor
        run.successor = None
        while key is not None and (nxt := self.runs.get(key)) is not None:
            nxt.after, key = None, nxt.successor
            moved.append(nxt)
            if self._start_held(nxt):
                break
        return moved

    def _start_held(self, run: Run) -> bool:
        """Start a run that waited, unless its trust has lapsed meanwhile
        (then it is dropped, never started). Whether it started."""
        lapsed = self.lapsed(run, clocks_now())
        if lapsed is not None:
            self.end_unstarted(run, lapsed, "fence", tell=False)
            return False
        try:
            self._launch(run, run.launch)  # type: ignore[arg-type]
        except SpawnError as e:
            self.end_unstarted(run, str(e), None, tell=False, spawn_error={"retry": e.retry, "resource": e.resource})
            return False
        return True

    def end_unstarted(self, run: Run, reason: str, by: str | None, *, tell: bool = True, **extra: Any) -> None:
        """A pending run ends without starting: held as exited (journalled) until acknowledged."""
        self._unlink(run)
        if run.trust_check is not None:
            run.trust_check.cancel()
        run.state, run.launch = "exited", None
        run.outcome = {"returncode": None, "ended_at": time.time(), "reason": reason, "killed_by": by,
                       "log_problem": None, "log_bytes": 0, "started": False, **extra}
        run.journaled = self.journal.append({"run": run.wire()})
        if tell:
            self.event("exited", run.key, outcome=run.outcome)
            self.changed()

    def _unlink(self, run: Run) -> None:
        """Take a pending run out of its chain: the one behind it now waits
        for the one it waited for."""
        pred = self.runs.get(run.after) if run.after is not None else None
        succ = self.runs.get(run.successor) if run.successor is not None else None
        if pred is not None and pred.successor == run.key:
            pred.successor = succ.key if succ is not None else None
        if succ is not None:
            succ.after = pred.key if pred is not None else None
        run.after = run.successor = None

    @staticmethod
    def lapsed(run: Run, now: ClockReadings) -> str | None:
        """Why a pending run's trust no longer lets it start (a sleep too:
        it has nothing to freeze), or None."""
        if run.trust is None or trust_verdict(run.trust, run.term_lead_s, now) == "ok":
            return None
        return f"fenced before it started: no lease renewal for {secs(now.total - run.trust.boot_at)}"  # type: ignore[operator]

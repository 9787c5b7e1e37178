"""Runs pending behind another: the keeper's side of pipelining (the
daemon's is daemon/worker/pipeline.py). A collaborator the run table
(keeper/kept_runs.py) owns: the chains are its state, the runs the table's.

A spawn ``after`` a run that has not ended is pending (no
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

import logging
import time
from typing import Any, Callable, Mapping

from sloth_daemon.clock import ClockReadings
from sloth_daemon.errors import SpawnError
from sloth_daemon.keeper.kept_run import Launch, KeptRun
from sloth_daemon.keeper.wire import ENV_REFS_KEPT, Journal, Refused, clocks_now, secs, text, trust_verdict

log = logging.getLogger("sloth.keeper")


class PendingRuns:
    """The chains of runs pending behind another, how to start each, and the
    spawns lately refused (what a spawn after one of them waits for).

    It reads the run table's ``runs`` and never changes which runs it holds;
    it starts a pending run with ``start`` (the table's: raises SpawnError) and
    journals one that ends unstarted (telling the daemon is the caller's).
    Every pending run is in ``waits_for`` and ``launches``; ``behind`` is
    ``waits_for`` turned round (one run at most waits behind each)."""

    def __init__(self, runs: Mapping[str, KeptRun], journal: Journal, start: Callable[[KeptRun, Launch], None]) -> None:
        self.runs, self.journal, self.start = runs, journal, start
        self.waits_for: dict[str, str] = {}  # pending key -> the key of the run it starts after
        self.behind: dict[str, str] = {}  # key -> the key of the run pending behind it
        self.launches: dict[str, Launch] = {}  # pending key -> how to start it
        self.refused: dict[str, tuple[str, str | None]] = {}  # keys lately refused -> (code, what they waited for)

    # ------------------------------------------------------------- waiting
    def wait_behind(self, run: KeptRun, a: dict[str, Any], launch: Launch) -> bool:
        """Leave ``run`` pending (its state) behind the run its spawn's ``after``
        names, if that one has not ended: whether it waits (else it starts
        at once). Raises Refused if that run already has a successor."""
        pred = self._predecessor(a)
        if pred is None:
            return False
        run.state = "pending"
        self.waits_for[run.key], self.behind[pred.key], self.launches[run.key] = pred.key, run.key, launch
        return True

    def _predecessor(self, a: dict[str, Any]) -> KeptRun | None:
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
        if (succ := self.behind.get(pred.key)) is not None:
            raise Refused("exists", f"run {pred.key!r} already has run {succ!r} waiting behind it")
        return pred

    def after(self, key: str) -> str | None:
        """The run a pending run waits for (None for any other)."""
        return self.waits_for.get(key)

    def forget_refused(self, key: str) -> None:
        self.refused.pop(key, None)

    def note_refused(self, key: str, e: Refused, a: dict[str, Any]) -> None:
        after = a.get("after")
        self.refused[key] = (str(e.wire["code"]), after if isinstance(after, str) else None)
        while len(self.refused) > ENV_REFS_KEPT:
            self.refused.pop(next(iter(self.refused)))

    # ------------------------------------------------------------ starting
    def start_next(self, run: KeptRun) -> list[KeptRun]:
        """Start the run that waited behind ``run`` (which ended); one that
        cannot start ends unstarted and the next takes its place. The runs
        that started or ended so (the caller tells the daemon)."""
        moved, key = [], self.behind.pop(run.key, None)
        while key is not None and (nxt := self.runs.get(key)) is not None:
            self.waits_for.pop(key, None)
            key = self.behind.get(key)
            moved.append(nxt)
            if self._start_pending(nxt):
                break
        return moved

    def _start_pending(self, run: KeptRun) -> bool:
        """Start a run that waited, unless its trust has lapsed meanwhile
        (then it is dropped, never started). Whether it started."""
        lapsed = self.lapsed(run, clocks_now())
        if lapsed is not None:
            self.end_unstarted(run, lapsed, "fence")
            return False
        try:
            self.start(run, self.launches.pop(run.key))
        except SpawnError as e:
            self.end_unstarted(run, str(e), None, spawn_error={"retry": e.retry, "resource": e.resource})
            return False
        except Exception as e:  # noqa: BLE001 - raised here it would leave the SIGCHLD hook that settles
            # the run in front, whose own exit would never be told (a hang): this run ends, said
            log.exception("run %s: cannot start it", run.key)
            self.end_unstarted(run, f"internal error in spawn: {e!r}", None,
                               spawn_error={"retry": False, "resource": False})
            return False
        return True

    # -------------------------------------------------------------- ending
    def end_unstarted(self, run: KeptRun, reason: str, by: str | None, **extra: Any) -> None:
        """A pending run ends without starting: kept as exited (journalled)
        until acknowledged. The caller tells the daemon (``exited``)."""
        self.withdraw(run)
        if run.trust_check is not None:
            run.trust_check.cancel()
        run.state = "exited"
        run.outcome = {"returncode": None, "ended_at": time.time(), "reason": reason, "killed_by": by,
                       "log_problem": None, "log_bytes": 0, "started": False, **extra}
        run.journaled = self.journal.append({"run": run.wire()})

    def withdraw(self, run: KeptRun) -> None:
        """Take a pending run out of its chain (the one behind it now waits
        for the one it waited for) and forget how to start it."""
        key = run.key
        self.launches.pop(key, None)
        pred, succ = self.waits_for.pop(key, None), self.behind.pop(key, None)
        if pred is not None and self.behind.get(pred) == key:
            if succ is not None:
                self.behind[pred] = succ
            else:
                del self.behind[pred]
        if succ is not None:
            if pred is not None:
                self.waits_for[succ] = pred
            else:
                self.waits_for.pop(succ, None)

    @staticmethod
    def lapsed(run: KeptRun, now: ClockReadings) -> str | None:
        """Why a pending run's trust no longer lets it start (a sleep too:
        it has nothing to freeze), or None."""
        if run.trust is None or trust_verdict(run.trust, run.term_lead_s, now) == "ok":
            return None
        return f"fenced before it started: no lease renewal for {secs(now.total - run.trust.boot_at)}"  # type: ignore[operator]

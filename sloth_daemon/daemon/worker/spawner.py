"""The seam between the worker loop and the job processes.

The worker decides *what* runs (claims, leases, results); a :class:`Spawner`
runs it: starts a job's process, captures its log, enforces its timeout and
the run's trust deadline, ends its tree on request and reports back through
a :class:`RunSink`. Every call returns at once; what happens later arrives
as sink callbacks on the event loop, so the worker's own steps stay
synchronous and can be driven in-process by tests with a fake spawner.

The daemon's spawner is the keeper (supervision.py): a separate small
process that owns the jobs, so they outlive the daemon. A spawner that
``pipelines`` can hold a run behind another (``SpawnRequest.after``) and
start it the moment that one ends, with no round trip to the worker; the
worker takes such a run back (``unspawn``) if it has not started soon.
"""

from __future__ import annotations

import signal
from dataclasses import dataclass
from pathlib import Path
from typing import Any, AsyncIterator, Protocol


@dataclass(frozen=True)
class SpawnRequest:
    key: str  # names the run: the claim's fencing token
    job_id: int
    attempt: int
    argv: list[str]
    cwd: str | None
    env: dict[str, str]  # the job's environment (one object shared by the jobs that share it) ...
    log_path: Path
    log_cap: int
    timeout_s: float | None
    kill_grace_s: float
    previous: dict[str, Any] | None = None  # an earlier attempt's process: ended before this starts
    trust_until: float | None = None  # boot clock: the run is ended by then unless trusted again
    term_lead_s: float = 1.0  # SIGTERM this long before trust_until, SIGKILL at it
    env_extra: dict[str, str] | None = None  # ... and this run's own variables on top (SLOTH_JOB_ID ...)
    after: str | None = None  # start only once the run of this key has ended (pipelines)
    keep_awake: bool = False  # hold a sleep inhibitor while it runs (keeper/keep_awake.py)
    limits: dict[str, Any] | None = None  # its resource limits and how (daemon/job_limits.py)
    watch: dict[str, Any] | None = None  # its --stall and --fail-on (keeper/watchdog.py)
    result_path: Path | None = None  # $SLOTH_RESULT: the keeper reads it once the run ends (keeper/results.py)

    def full_env(self) -> dict[str, str]:
        return {**self.env, **self.env_extra} if self.env_extra else self.env


@dataclass(frozen=True)
class Outcome:
    """How a run ended. ``returncode`` as Popen's (negative: killed by that
    signal), None when it never started; ``reason`` is set when it was ended
    on purpose (a kill request's reason, the timeout, a fence);
    ``killed_by`` says who ended it: "request", "timeout", "fence" (no lease
    renewal came in time), "keeper" (the keeper itself was stopped)."""

    returncode: int | None
    reason: str | None = None
    log_problem: str | None = None
    ended_at: float | None = None  # wall clock, when the process ended
    killed_by: str | None = None
    spawn_retry: bool | None = None  # it never started: whether trying again could help
    postpone_s: float | None = None  # it never started for want of resources: wait this long, not counted
    started: bool = True  # False: pending behind another run, it was dropped before it started
    note: str | None = None  # how its end was known, when that is not plain (seen late: keeper/kept_runs.py)
    cost: dict[str, Any] | None = None  # what it cost (keeper/cost.py), as the keeper measured it
    over: str | None = None  # "mem": it ended by its memory limit (the retry rules' "mem")
    result: str | None = None  # the JSON it handed on ($SLOTH_RESULT, keeper/results.py)
    result_problem: str | None = None  # why what it wrote there was not kept (its history says)

    @classmethod
    def from_wire(cls, d: dict[str, Any]) -> "Outcome":
        code = d.get("returncode")
        failed = d.get("spawn_error") if isinstance(d.get("spawn_error"), dict) else None
        return cls(code if isinstance(code, int) and not isinstance(code, bool) else None,
                   d.get("reason") or None, d.get("log_problem") or None,
                   d.get("ended_at") if isinstance(d.get("ended_at"), (int, float)) else None,
                   d.get("killed_by") or None, spawn_retry=None if failed is None else bool(failed.get("retry")),
                   started=d.get("started") is not False,
                   note=d.get("note") if isinstance(d.get("note"), str) and d.get("note") else None,
                   cost=d.get("cost") if isinstance(d.get("cost"), dict) else None,
                   over=_text(d, "over"), result=_text(d, "result"), result_problem=_text(d, "result_problem"))

    @property
    def not_the_jobs_doing(self) -> bool:
        """Ended by the lease machinery or the supervisor, not by the job or
        its timeout: such a run is given back, not counted as a failure."""
        return self.killed_by in ("fence", "keeper")

    def describe(self) -> tuple[bool, str]:
        """(succeeded, message) for the job's history."""
        code = self.returncode
        if self.reason:
            ok, msg = False, self.reason
        elif code == 0:
            ok, msg = True, "exit 0"
        elif code is not None and code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = f"signal {-code}"
            ok, msg = False, f"killed by {name}"
        else:
            ok, msg = False, f"exit {code}"
        extra = [x for x in (self.log_problem, self.note, self.result_problem) if x]
        return ok, "; ".join([msg, *extra])


def _text(d: dict[str, Any], name: str) -> str | None:
    v = d.get(name)
    return v if isinstance(v, str) and v else None


class RunSink(Protocol):
    """What a spawner tells the worker about one run (on the event loop)."""

    def started(self, pid: int, identity: dict[str, Any]) -> None: ...

    def spawn_failed(self, message: str, retry: bool, resource: bool = False) -> None:
        """``resource``: the daemon itself lacked descriptors, processes or
        memory (not the job's fault: the attempt must not count)."""

    def exited(self, outcome: Outcome) -> None: ...

    def frozen(self, why: str) -> None:
        """The machine slept past the run's trust deadline: its tree is
        stopped (SIGSTOP) until trusted again (trust) or ended (kill)."""

    def taken_back(self) -> None:
        """A withdrawal found the run still pending behind another and dropped
        it: it never started, and the spawner forgot it."""

    def noted(self, what: str, message: str) -> None:
        """What the run's history should say now (``what``: "keep-awake": its
        inhibitor could not be held); the run goes on."""

    def progressed(self, progress: dict[str, Any]) -> None:
        """How far the run says it is (keeper/progress.py: {"fraction",
        "source", "eta_s", "at"}), at most once a second."""


class Spawner(Protocol):
    def spawn(self, req: SpawnRequest, sink: RunSink) -> None: ...

    def unspawn(self, key: str) -> None:
        """Withdraw a run pending behind another if it has not started yet (the
        sink hears ``taken_back``); if it has, nothing changes."""

    def kill(self, key: str, reason: str, grace_s: float) -> None: ...

    def attach(self, key: str, sink: RunSink) -> None:
        """Route the news of a run it held before we connected (adoption.py) to ``sink``."""

    def trust(self, items: list[tuple[str, float]]) -> None:
        """Each (key, until): the run's lease was just renewed; ``until`` is
        on the boot clock (ClockReadings.total); a frozen run thaws."""

    def ack(self, keys: list[str]) -> None:
        """These runs' outcomes are recorded: the spawner may forget them."""

    def tap(self, key: str) -> AsyncIterator[bytes] | None: ...

    async def pause(self, keys: list[str], *, resume: bool = False) -> dict[str, Any]:
        """Stop (``resume``: continue) these runs' whole trees: {"runs":
        {key: {"paused"|"resumed": bool, ...}}, "unknown": [keys]}. Raises SlothError."""

"""What the keeper holds of one run, and what starting one takes: the value
types the run table (keeper/kept_runs.py) and the pending runs (keeper/pending.py)
both use, so neither imports the other for them."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, Callable

from sloth_daemon.keeper.keep_awake import Inhibitor
from sloth_daemon.keeper.progress import ProgressMeter
from sloth_daemon.keeper.runner import JobProcess
from sloth_daemon.keeper.watchdog import Watch
from sloth_daemon.keeper.wire import Trust


@dataclass(frozen=True)
class Launch:
    """What starting a run takes (kept while it is pending behind another)."""

    argv: list[str]
    env: dict[str, str]
    cwd: str | None
    log_path: str
    log_cap: int
    timeout_s: float | None
    keep_awake: bool = False
    limits: dict[str, Any] | None = None  # checks.limits_json's, with the daemon's "mem_via"
    stall_s: float | None = None  # --stall (keeper/watchdog.py)
    fail_on: str | None = None  # --fail-on
    result_path: str | None = None  # $SLOTH_RESULT: read once it ends (keeper/results.py)


@dataclass
class KeptRun:
    """One run the keeper holds. Which run a pending one waits for, and how
    to start it, are the pending runs' (keeper/pending.py), not the run's."""

    key: str
    job_id: int
    attempt: int
    token: str
    log_path: str
    started_at: float
    kill_grace_s: float = 10.0
    term_lead_s: float = 1.0
    proc: JobProcess | None = None  # None for an outcome adopted from the journal
    pid: int | None = None
    identity: dict[str, Any] | None = None
    state: str = "running"  # "pending" | "running" | "frozen" | "exited"
    trust: Trust | None = None
    outcome: dict[str, Any] | None = None
    killed_by: str | None = None
    begin: float = 0.0  # procident stamps: the lifetime orphans are attributed by
    end: float | None = None
    timeout: asyncio.TimerHandle | None = None
    trust_check: asyncio.TimerHandle | None = None  # one per run: renewals replace it
    taps: set[Callable[[bytes | None], None]] = field(default_factory=set)
    journaled: bool = False
    note: str | None = None  # for the history: how its end was known, when that is not plain
    paused: bool = False  # stopped on request (pause op) until a resume
    paused_at: float | None = None  # wall clock, since when
    timeout_s: float | None = None  # as the spawn asked (the timer counts running time only)
    timeout_left: float | None = None  # while paused: what the timer had left
    inhibitor: Inhibitor | None = None  # its sleep inhibitor, while it runs (keeper/keep_awake.py)
    limits: dict[str, Any] | None = None
    cgroup: str | None = None  # its cgroup v2 folder, under a scope's limits (oom kills are read there)
    meter: ProgressMeter | None = None  # how far it says it is (keeper/progress.py)
    progress_timer: asyncio.TimerHandle | None = None  # its next progress event, when one waits
    progress_sent: float = 0.0  # the loop's clock when its last progress event went
    launched_at: float | None = None  # wall clock, when its process started (a cost's wall time)
    watch: Watch | None = None  # its --stall and --fail-on, while it runs (keeper/watchdog.py)
    result_path: str | None = None  # $SLOTH_RESULT (keeper/results.py)

    def wire(self, after: str | None = None) -> dict[str, Any]:
        """As hello lists it and the journal keeps it; ``after``: the run a
        pending one waits for (keeper/pending.py knows it)."""
        return {"key": self.key, "job_id": self.job_id, "attempt": self.attempt, "token": self.token,
                "pid": self.pid, "identity": self.identity, "started_at": self.started_at,
                "state": self.state, "trust_until": self.trust.until if self.trust else None,
                "outcome": self.outcome, "log_path": self.log_path, "after": after,
                "paused": self.paused, "paused_at": self.paused_at,
                "progress": self.meter.latest if self.meter is not None else None}

    @classmethod
    def adopted(cls, w: dict[str, Any]) -> "KeptRun":
        return cls(w["key"], int(w.get("job_id") or 0), int(w.get("attempt") or 0), w.get("token", ""),
                   w.get("log_path", ""),
                   w.get("started_at", 0.0), pid=w.get("pid"), identity=w.get("identity"),
                   state="exited", outcome=w.get("outcome"), journaled=True)

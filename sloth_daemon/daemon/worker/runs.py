"""The table of the runs the worker holds (:class:`Attempts`; a run's own
stages are lifecycle.py's), and the small rules the worker, its adoption
of surviving runs and its settling of outcomes share: worker names, trust
deadlines, what a run's spawn asks for, its start written."""

from __future__ import annotations

import math
import os
import socket
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, ValuesView

from sloth_daemon.checks import member_environment
from sloth_daemon.clock import ClockReadings
from sloth_daemon.errors import JobNotFound, LeaseLost, SlothError
from sloth_daemon.daemon.resources import environment
from sloth_daemon.daemon.worker.lifecycle import Attempt, boot_of
from sloth_daemon.daemon.worker.spawner import SpawnRequest

if TYPE_CHECKING:
    from sloth_daemon.config import Settings
    from sloth_daemon.queue import Queue

WORKER_PREFIX = "sloth-daemon"
# A trust deadline ends this long before the lease it mirrors could expire:
# scheduling delays between the keeper and the database, and clock rates a
# little apart, must never let the job outlive its lease.
FENCE_MARGIN_MIN_S = 0.5
FENCE_MARGIN_SHARE = 0.05
RENEW_RETRY_S = 0.5  # after a renewal the database did not take (the keeper fences if that lasts)
# What the shortest lease (checks.MIN_LEASE_S) leaves between its renewal and
# its fence: a refused renewal retried once, and as long again for a busy loop.
RENEW_SPARE_S = 2 * RENEW_RETRY_S


def this_host() -> str:
    """This machine's name by default: its hostname (config's ``host`` may set another)."""
    return socket.gethostname()


def worker_name(instance: str, *, host: str | None = None, pid: int | None = None) -> str:
    """The name a daemon claims under: ``sloth-daemon:HOST:PID:INSTANCE``."""
    return f"{WORKER_PREFIX}:{host or socket.gethostname()}:{pid or os.getpid()}:{instance}"


def is_daemon_on_host(name: str | None, host: str | None = None) -> bool:
    """True if ``name`` was made by worker_name on this host (any daemon)."""
    return (name or "").startswith(f"{WORKER_PREFIX}:{host or socket.gethostname()}:")


def trust_until(sent: ClockReadings, lease_s: float) -> float:
    """Until when (on the boot clock) a run may go on after a renewal sent at
    ``sent``: the lease, measured from before the renewal left, less a
    margin, so the run is stopped before the lease the queue records could
    expire and be handed to anyone else."""
    return boot_of(sent) + lease_s - max(FENCE_MARGIN_MIN_S, FENCE_MARGIN_SHARE * lease_s)


def renew_in(run: Attempt, r: ClockReadings, *, wall_too: bool) -> float:
    """Seconds until the run's lease is renewed: a third into it by the boot
    clock, from when the last renewal was sent (``run.renew_at``), so a
    wall clock set wrong, here or on a database server, changes nothing.
    ``wall_too``: the queue keeps this machine's wall time (SQLite), so
    also by its ``lease_until`` (a wall clock stepped ahead renews at once)."""
    due = run.renew_at - boot_of(r)
    if wall_too:
        due = min(due, (run.job.lease_until or 0.0) - run.job.lease_s * 2 / 3 - r.wall)
    return due


def renewal_spare(lease_s: float, kill_grace_s: float = math.inf) -> float:
    """Seconds from a lease's renewal (a third into it) to its fence (the
    SIGTERM a lead before its trust deadline), by one clock."""
    fence = lease_s - max(FENCE_MARGIN_MIN_S, FENCE_MARGIN_SHARE * lease_s) - term_lead(lease_s, kill_grace_s)
    return fence - lease_s / 3


def ran_here(runner: dict[str, Any] | None, host: str) -> dict[str, Any] | None:
    """A previous attempt's process if it ran on ``host`` (it is ended before
    the next attempt starts); another machine's is that machine's keeper's."""
    worker = (runner or {}).get("worker")
    return runner if worker is None or is_daemon_on_host(worker, host) else None


def term_lead(lease_s: float, kill_grace_s: float) -> float:
    """How long before a trust deadline the run gets SIGTERM (SIGKILL at it):
    the kill grace, but never so long that a renewal on time would be late."""
    return min(kill_grace_s, lease_s / 6)


def spawn_request(run: Attempt, claimed: ClockReadings, settings: "Settings", *, env: dict[str, str],
                  log_path: Path, host: str, handed: dict[str, str] | None = None) -> SpawnRequest:
    """What the spawner is asked to start for ``run``, claimed at ``claimed``
    (``env``: the job's base environment; ``host``: this machine's name;
    ``handed``: handing.hand_on's variables, $SLOTH_RESULT among them)."""
    job = run.job
    extra = {"SLOTH_JOB_ID": str(job.id), "SLOTH_JOB_ATTEMPT": str(run.attempt), "SLOTH_JOB_TOKEN": run.token,
             "SLOTH_FENCE_TOKEN": run.token, **environment(job.tokens), **member_environment(job.member),
             **(handed or {})}
    rules = job.rules or {}
    watch = {k: rules[k] for k in ("stall_s", "fail_on") if rules.get(k) is not None}
    return SpawnRequest(
        key=run.token, job_id=job.id, attempt=run.attempt, argv=job.command, cwd=job.cwd, env=env, env_extra=extra,
        log_path=log_path, log_cap=settings.log_cap_bytes, timeout_s=job.timeout_s,
        kill_grace_s=settings.kill_grace_s, previous=ran_here(job.runner, host),
        trust_until=trust_until(claimed, job.lease_s), term_lead_s=term_lead(job.lease_s, settings.kill_grace_s),
        after=run.after.token if run.after is not None else None, keep_awake=job.keep_awake, limits=job.limits,
        watch=watch or None, result_path=Path(handed["SLOTH_RESULT"]) if handed and "SLOTH_RESULT" in handed else None)


def record_start(queue: "Queue", run: Attempt) -> None:
    """Write the run's process identity (its ``started`` event) if it is not
    written yet. Called before any other event of the run is written, so a
    history reads in the order things happened. Raises LeaseLost or
    JobNotFound (not ours any more), StorageError (the identity is kept for
    another try)."""
    if run.identity is None:
        return
    ident, run.identity = run.identity, None
    try:
        run.job = queue.set_runner(run.job.id, run.token, ident)
    except (LeaseLost, JobNotFound):
        raise
    except SlothError:
        run.identity = ident
        raise


class Attempts:
    """The runs the worker holds, by job id: one per job at most, from its
    claim (or adoption) until its outcome is durable (or it is given back).
    Shared by the worker loop and its collaborators (recording, adoption,
    pipelining, actions, withdrawals); the only place a run is added or
    dropped. Reads as a mapping (``get``, ``in``, ``[]``, ``values``)."""

    def __init__(self) -> None:
        self._by_job: dict[int, Attempt] = {}
        # The dict's own: read on every turn and for every news of a run.
        self.get: Callable[[int], Attempt | None] = self._by_job.get
        self.values: Callable[[], ValuesView[Attempt]] = self._by_job.values

    def add(self, run: Attempt) -> None:
        """Hold ``run``: it replaces any older run of its job (a job cancelled, then retried)."""
        self._by_job[run.job.id] = run

    def drop(self, run: Attempt) -> None:
        """Forget ``run`` if it is still the one held for its job (a
        cancelled-then-retried job may already have a newer run)."""
        if self._by_job.get(run.job.id) is run:
            del self._by_job[run.job.id]

    def __getitem__(self, job_id: int) -> Attempt:
        return self._by_job[job_id]

    def __contains__(self, job_id: object) -> bool:
        return job_id in self._by_job

    def __iter__(self) -> Iterator[int]:
        return iter(self._by_job)

    def __len__(self) -> int:
        return len(self._by_job)

    def slots_in_use(self) -> dict[str, int]:
        """lane -> runs whose process has not ended (an ended run whose
        outcome is not yet recorded frees its slot for the next job; a
        pending one has none yet)."""
        used: dict[str, int] = {}
        for r in self._by_job.values():
            if r.outcome is None and not r.pending:  # a job added --slots N counts N (daemon/worker/gates.py)
                used[r.job.lane] = used.get(r.job.lane, 0) + (r.job.gate or {}).get("slots", 1)
        return used

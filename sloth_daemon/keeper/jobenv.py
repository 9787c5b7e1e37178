"""The environment a job runs with (``job_env``), made by the daemon and
sent to the keeper with the spawn. Apart from runner.py so that the daemon
can have it without psutil (docs/idle.md).
"""

from __future__ import annotations

import os

# Variables that belong to the daemon's own process and must never reach a
# job (systemd would take a job's "READY=1" as ours; LD_PRELOAD is a test or
# debug hook of the daemon). The job's own captured environment is used as is.
DAEMON_ONLY_ENV = (
    "LD_PRELOAD", "DYLD_INSERT_LIBRARIES", "SLOTH_FAKECLOCK_FILE", "NOTIFY_SOCKET",
    "WATCHDOG_USEC", "WATCHDOG_PID", "LISTEN_FDS", "LISTEN_PID", "LISTEN_FDNAMES",
    "INVOCATION_ID", "JOURNAL_STREAM", "SLOTH_DEBUG", "SLOTH_DAEMON_INSTANCE",
    "FAKETIME", "FAKETIME_TIMESTAMP_FILE", "FAKETIME_NO_CACHE", "FAKETIME_DONT_FAKE_MONOTONIC",
)


def job_env(captured: dict[str, str] | None, extra: dict[str, str],
            daemon_env: dict[str, str] | None = None) -> dict[str, str]:
    """The environment a job runs with: what `sloth add` captured, or (for a
    job enqueued by a program without one) the daemon's minus its own hooks."""
    base = dict(captured) if captured is not None else dict(daemon_env if daemon_env is not None else os.environ)
    if captured is None:
        for k in DAEMON_ONLY_ENV:
            base.pop(k, None)
    for k in ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID", "LISTEN_FDS", "LISTEN_PID"):
        base.pop(k, None)
    base.update(extra)
    return base


class JobEnvs:
    """job_env's base (no per-run variables) for each environment the
    queue handed out, made once per environment object: jobs queued by one
    `sloth add` share one, so a thousand of them cost one copy, and the
    keeper is sent it once (keeper_client.py)."""

    CAP = 64

    def __init__(self) -> None:
        self._made: dict[int, tuple[dict[str, str] | None, dict[str, str]]] = {}

    def base(self, captured: dict[str, str] | None) -> dict[str, str]:
        hit = self._made.get(id(captured))
        if hit is not None and hit[0] is captured:  # the same object, not a reused id
            return hit[1]
        if len(self._made) >= self.CAP:
            self._made.clear()
        made = job_env(captured, {})
        self._made[id(captured)] = (captured, made)  # holding ``captured`` keeps its id unique
        return made

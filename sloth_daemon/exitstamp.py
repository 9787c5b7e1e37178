"""When did a run's process end? Its keeper asks when it reaps it late.

A keeper that was stopped (SIGSTOP) or stalled learns of an exit only when
it runs again, by which time the run's trust deadline may have passed; the
exit itself may have come long before. The pidfd's readiness and SIGCHLD
carry no time, but the kernel keeps, for a process that has exited and is
not yet reaped, when the scheduler last ran it (``se.exec_start`` in
/proc/PID/sched): a process runs its own exit, so that is at or after its
end, on the scheduler's clock. This thread's own ``se.exec_start`` (at or
before now, on the same clock) turns it into a bound on the boot clock.

The rule (keeper_runs.py): a late-reaped exit is the job's outcome only if
its bound falls before the trust deadline (or the deadline lapsed only
because the machine slept, as a frozen run's); else it is fenced, as if the
keeper had been on time. Where the file is missing (a kernel without
CONFIG_SCHED_DEBUG) there is no bound but the reap itself: fenced.
"""

from __future__ import annotations

import re

# Slack on the bound: the scheduler's clock is not slewed by NTP as the boot
# clock is (at most 500 ppm), and CPUs' clocks may differ by a tick.
SLACK_S = 0.05
RATE_SLACK = 0.001
_EXEC_START = re.compile(rb"^se\.exec_start\s+:\s+([0-9]+\.[0-9]+)$", re.M)


def ended_by(pid: int, boot_now: float) -> float | None:
    """An upper bound, on the boot clock read as ``boot_now`` just before,
    of when ``pid`` (exited, not yet reaped: a zombie) last ran; None if
    the kernel does not say."""
    last, me = _exec_start(f"/proc/{pid}/sched"), _exec_start("/proc/thread-self/sched")
    if last is None or me is None or last > me:
        return None
    ago = me - last  # at most the time since it last ran (``me`` is at or before now)
    return boot_now - ago + SLACK_S + RATE_SLACK * ago


def _exec_start(path: str) -> float | None:
    """``se.exec_start`` in seconds. Its name (the first line, at most 15
    bytes) cannot forge a whole line of it; exactly one must be there."""
    try:
        with open(path, "rb") as f:
            found = _EXEC_START.findall(f.read(8192))
    except OSError:
        return None
    return float(found[0]) / 1000.0 if len(found) == 1 else None

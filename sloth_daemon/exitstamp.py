"""When did a run's process end? Its keeper asks when it reaps it late.

A keeper that was stopped (SIGSTOP) or stalled learns of an exit only when
it runs again, by which time the run's trust deadline may have passed; the
exit itself may have come long before. The pidfd's readiness and SIGCHLD
carry no time, but the kernel keeps, for a process that has exited and is
not yet reaped, when the scheduler last ran it (``se.exec_start`` in
/proc/PID/sched) and on which CPU (/proc/PID/stat): a process runs its own
exit, so that is at or after its end. The clock is that CPU's task clock,
which may run behind real time (IRQ and steal time taken out) and apart
from other CPUs' by what each has taken out -- so this thread moves to that
CPU for a moment and reads its own ``se.exec_start`` there (at or before
now, on the same clock). The time between the two, if anything too short,
is taken from the boot clock: a bound at or after the end.

The rule (keeper_runs.py): a late-reaped exit is the job's outcome only if
its bound falls before the trust deadline (or the deadline lapsed only
because the machine slept, as a frozen run's); else it is fenced, as if the
keeper had been on time. Where the kernel does not say (no
CONFIG_SCHED_DEBUG, not Linux, the CPU out of reach) there is no bound but
the reap itself: fenced.
"""

from __future__ import annotations

import os
import re
from typing import Callable

# Slack on the bound: the task clock is not slewed by NTP as the boot clock
# is (at most 500 ppm); and the reads are not all at one instant.
SLACK_S = 0.05
RATE_SLACK = 0.001
_EXEC_START = re.compile(rb"^se\.exec_start\s+:\s+([0-9]+\.[0-9]+)$", re.M)


def ended_by(pid: int, boot: Callable[[], float]) -> float | None:
    """An upper bound, on the clock ``boot`` reads (the boot clock), of when
    ``pid`` (exited, not yet reaped: a zombie) last ran; None if the kernel
    does not say."""
    last, cpu = _exec_start(f"/proc/{pid}/sched"), _cpu(f"/proc/{pid}/stat")
    if last is None or cpu is None:
        return None
    me = _own_exec_start_on(cpu)
    now = boot()  # after ``me``: the bound errs late, never early
    if me is None or last > me:
        return None
    ago = me - last  # at most the time since it last ran
    return now - ago + SLACK_S + RATE_SLACK * ago


def _own_exec_start_on(cpu: int) -> float | None:
    """This thread's ``se.exec_start`` read on ``cpu`` (moved there and back)."""
    if not hasattr(os, "sched_setaffinity"):
        return None
    allowed = os.sched_getaffinity(0)
    try:
        os.sched_setaffinity(0, {cpu})  # returns once this thread runs there
        if _cpu("/proc/thread-self/stat") != cpu:
            return None
        return _exec_start("/proc/thread-self/sched")
    except OSError:  # not allowed there (a cpuset): no bound
        return None
    finally:
        try:
            os.sched_setaffinity(0, allowed)
        except OSError:
            pass


def _exec_start(path: str) -> float | None:
    """``se.exec_start`` in seconds. Its name (the first line, at most 15
    bytes) cannot forge a whole line of it; exactly one must be there."""
    found = _EXEC_START.findall(_read(path))
    return float(found[0]) / 1000.0 if len(found) == 1 else None


def _cpu(path: str) -> int | None:
    """The CPU it last ran on: field 39 of /proc/PID/stat (counted after the
    name's closing parenthesis: a name may hold spaces and parentheses)."""
    fields = _read(path).rpartition(b")")[2].split()
    try:
        return int(fields[36])
    except (IndexError, ValueError):
        return None


def _read(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read(8192)
    except OSError:
        return b""

"""When a process started, and what boot it belongs to: the stamps a
process identity is made of (procident.py).

Linux: a start stamp is the start time in clock ticks since boot from
/proc/PID/stat, exact; elsewhere psutil's create_time() in seconds.
"""

from __future__ import annotations

import os
import sys
import time

import psutil

_BOOT_ID: str | None = None


def boot_id() -> str:
    """This boot's id (cached: it cannot change while this process lives)."""
    global _BOOT_ID
    if _BOOT_ID is None:
        try:
            with open("/proc/sys/kernel/random/boot_id") as f:
                _BOOT_ID = f.read().strip()
        except OSError:
            # macOS and others: the boot time identifies the boot well enough.
            _BOOT_ID = f"boot@{psutil.boot_time():.0f}"
    return _BOOT_ID


def _linux_start_ticks(pid: int) -> int | None:
    try:  # raw reads: a Python file object costs more than the read (isatty, fstat, lseek)
        fd = os.open(f"/proc/{pid}/stat", os.O_RDONLY | os.O_CLOEXEC)
        try:
            data = os.read(fd, 4096)
        finally:
            os.close(fd)
    except OSError:
        return None
    # comm (field 2) may hold spaces and parens: split after the last ')'.
    rest = data[data.rfind(b")") + 2 :].split()
    try:
        return int(rest[19])  # field 22, starttime
    except (IndexError, ValueError):
        return None


def start_stamp(pid: int) -> float | None:
    if sys.platform.startswith("linux"):
        t = _linux_start_ticks(pid)
        return None if t is None else float(t)
    try:
        return psutil.Process(pid).create_time()
    except psutil.Error:
        return None


def stamp_now() -> float:
    """Now, in ``start_stamp``'s units, to note when a run began and ended.

    Linux: /proc/uptime (seconds since boot, suspend included, the base of
    /proc/PID/stat's start time) in clock ticks. Read from the kernel, not
    through clock_gettime, so an LD_PRELOAD clock shim cannot skew it
    against the start times it is compared with."""
    hundredths = _uptime_hundredths()
    return time.time() if hundredths is None else hundredths * _CLK_TCK / 100


_CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def uptime_ticks() -> int | None:
    """Linux: now as a start stamp would say it, exactly (an int), or None.

    /proc/uptime and a process's start time in /proc/PID/stat are the same
    boot clock (time namespace included) cut to 1/100 s: seconds and
    hundredths here, floor(ns / 10 ms) there. So a process forked between
    two readings that agree started in that very tick, and its start stamp
    is known without reading /proc/PID/stat (whose first read of a new
    process costs ~0.1 ms here: most of a short job's spawn)."""
    if _CLK_TCK != 100 or not _shortcut["on"]:
        return None
    return _uptime_hundredths()


def _uptime_hundredths() -> int | None:
    """Linux: /proc/uptime in hundredths of a second (as the kernel prints
    it), exactly; None elsewhere or if unreadable. From the kernel, not
    clock_gettime: a clock shim cannot skew it. Read through one descriptor
    kept open (a pread at 0 makes the kernel print it afresh): one syscall,
    not three, and a spawn reads it twice."""
    fd = _uptime_fd()
    if fd is None:
        return None
    try:  # "%lu.%02lu": the seconds and their hundredths, without the dot
        secs, _, hundredths = os.pread(fd, 64, 0).partition(b" ")[0].partition(b".")
        return int(secs + hundredths) if len(hundredths) == 2 else int(secs) * 100 + int(hundredths.ljust(2, b"0")[:2])
    except (OSError, ValueError):
        return None


_uptime: dict[str, int | None] = {"fd": -1}  # -1: not opened yet; None: cannot be (not Linux, no /proc)


def _uptime_fd() -> int | None:
    fd = _uptime["fd"]
    if fd == -1:
        try:
            fd = os.open("/proc/uptime", os.O_RDONLY | os.O_CLOEXEC) if sys.platform.startswith("linux") else None
        except OSError:
            fd = None
        _uptime["fd"] = fd
    return fd


# The shortcut is checked against /proc/PID/stat on a process's first spawns
# and then trusted; one mismatch turns it off for good (LXCFS, for one, gives
# a container an /proc/uptime of its own while start times stay the host's).
_shortcut = {"on": True, "checks_left": 3}


def spawn_stamp(pid: int, before: int | None, after: int | None) -> float | None:
    """The start stamp of ``pid``, forked between two ``uptime_ticks``
    readings: their tick when they agree (and the shortcut holds), else
    None (read /proc instead)."""
    if before is None or before != after or not _shortcut["on"]:
        return None
    if _shortcut["checks_left"] > 0:
        real = start_stamp(pid)
        if real is None:
            return None
        _shortcut["checks_left"] -= 1
        if real != float(before):
            _shortcut["on"] = False
            return real
    return float(before)

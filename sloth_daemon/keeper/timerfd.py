"""Linux: a CLOCK_REALTIME timerfd with TFD_TIMER_CANCEL_ON_SET.

It becomes readable (read fails with ECANCELED) whenever the wall clock is
set, and on resume from suspend (the kernel's timerfd_resume). The daemon
then checks the clocks at once instead of at the next periodic check, so
resume handling costs no idle wake-ups. Via ctypes: no dependency. On other
systems ``create()`` returns None and the periodic check does the work.
"""

from __future__ import annotations

import ctypes
import errno
import os
import sys
import time

CLOCK_REALTIME = 0
TFD_NONBLOCK = 0o4000
TFD_CLOEXEC = 0o2000000
TFD_TIMER_ABSTIME = 1
TFD_TIMER_CANCEL_ON_SET = 2


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class _Itimerspec(ctypes.Structure):
    _fields_ = [("it_interval", _Timespec), ("it_value", _Timespec)]


class ClockSetWatch:
    def __init__(self, libc: ctypes.CDLL, fd: int) -> None:
        self._libc = libc
        self.fd = fd
        self.arm()

    def arm(self) -> None:
        spec = _Itimerspec()
        # Far in the future: we want the cancel notification, never the expiry.
        spec.it_value.tv_sec = int(time.time()) + 10 * 365 * 86400
        rc = self._libc.timerfd_settime(
            self.fd, TFD_TIMER_ABSTIME | TFD_TIMER_CANCEL_ON_SET, ctypes.byref(spec), None
        )
        if rc != 0:
            raise OSError(ctypes.get_errno(), "timerfd_settime failed")

    def consume(self) -> bool:
        """Call when readable. Returns True if the clock was set (or we resumed)."""
        try:
            os.read(self.fd, 8)
        except OSError as e:
            if e.errno == errno.ECANCELED:
                self.arm()
                return True
            if e.errno == errno.EAGAIN:
                return False
            raise
        self.arm()  # it expired (ten years on): re-arm
        return False

    def close(self) -> None:
        os.close(self.fd)


def create() -> ClockSetWatch | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)  # the process's own symbols, libc's among them (no ldconfig run)
        fd = libc.timerfd_create(CLOCK_REALTIME, TFD_NONBLOCK | TFD_CLOEXEC)
        if fd < 0:
            return None
        return ClockSetWatch(libc, fd)
    except (OSError, AttributeError):
        return None

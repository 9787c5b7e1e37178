"""sd_notify for ``Type=notify`` under systemd, written by hand (no dependency).

The daemon calls :meth:`Notifier.ready` once its socket is listening (and
after a reload, which :meth:`Notifier.reloading` begins),
:meth:`Notifier.watchdog` every :attr:`Notifier.watchdog_interval_s` from its
event loop, and :meth:`Notifier.stopping` when it begins to shut down.
Outside systemd (no ``NOTIFY_SOCKET``) every method is a cheap no-op.

Sending never raises: a lost datagram must not take the daemon down. If the
watchdog pings stop arriving, systemd restarts us, which is the point.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from typing import Mapping

log = logging.getLogger(__name__)

class Notifier:
    """Sends ``KEY=value`` datagrams to the service manager's notify socket."""

    def __init__(self, address: str | None, watchdog_usec: int | None = None) -> None:
        # address: a filesystem path, or "\0name" for a Linux abstract socket.
        self.address = address
        self._watchdog_usec = watchdog_usec if address else None
        self._sock: socket.socket | None = None
        self._lock = threading.Lock()

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> "Notifier":
        """Read NOTIFY_SOCKET, WATCHDOG_USEC and WATCHDOG_PID. (Jobs never
        inherit them: runner.job_env drops them.)"""
        env = os.environ if env is None else env
        raw = env.get("NOTIFY_SOCKET") or ""
        address: str | None = None
        if raw.startswith("@") and len(raw) > 1:
            address = "\0" + raw[1:]
        elif raw.startswith("/"):
            address = raw
        elif raw:
            log.debug("ignoring unsupported NOTIFY_SOCKET %r", raw)
        return cls(address, _watchdog_usec(env))

    @property
    def enabled(self) -> bool:
        return self.address is not None

    @property
    def watchdog_interval_s(self) -> float | None:
        """How often to call :meth:`watchdog` (half of WatchdogSec), or None."""
        if not self._watchdog_usec:
            return None
        return self._watchdog_usec / 2 / 1_000_000

    def ready(self, status: str = "") -> bool:
        return self.send("READY=1", *([f"STATUS={_one_line(status)}"] if status else []))

    def reloading(self) -> bool:
        """RELOADING=1 (with the monotonic time systemd >= 253 asks for);
        :meth:`ready` ends the reload."""
        return self.send("RELOADING=1", f"MONOTONIC_USEC={time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000}")

    def watchdog(self) -> bool:
        if self._watchdog_usec is None:
            return False
        return self.send("WATCHDOG=1")

    def stopping(self, status: str = "") -> bool:
        return self.send("STOPPING=1", *([f"STATUS={_one_line(status)}"] if status else []))

    def send(self, *assignments: str) -> bool:
        """Send one datagram; True if it was handed to the kernel."""
        if self.address is None:
            return False
        payload = "\n".join(assignments).encode("utf-8", "replace")
        with self._lock:
            try:
                if self._sock is None:
                    self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
                self._sock.sendto(payload, self.address)
                return True
            except OSError as e:
                log.debug("sd_notify %r to %r failed: %s", payload, self.address, e)
                return False

    def close(self) -> None:
        with self._lock:
            if self._sock is not None:
                self._sock.close()
                self._sock = None


def _watchdog_usec(env: Mapping[str, str]) -> int | None:
    pid = env.get("WATCHDOG_PID")
    if pid:
        try:
            if int(pid) != os.getpid():
                return None  # meant for another process (e.g. our parent)
        except ValueError:
            return None
    try:
        usec = int(env.get("WATCHDOG_USEC") or 0)
    except ValueError:
        return None
    return usec if usec > 0 else None


def _one_line(text: str) -> str:
    # Assignments are newline-separated; a newline in a status would inject one.
    return " ".join(str(text).splitlines())

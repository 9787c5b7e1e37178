"""Start the daemon in the background (for `sloth add` and `sloth daemon start`)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from .client import Client
from .errors import DaemonNotRunning, SlothError
from .paths import Paths, ensure_private_dir


def start_background(paths: Paths, *, timeout_s: float = 10.0) -> int:
    """Spawn ``sloth daemon run`` detached from this terminal; return its pid
    once its socket answers. Raises SlothError with the daemon's last words."""
    ensure_private_dir(paths.log_dir)
    log = open(paths.daemon_log, "ab")
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "sloth_daemon", "daemon", "run"],
            stdin=subprocess.DEVNULL, stdout=log, stderr=log,
            start_new_session=True, close_fds=True, cwd="/",
        )
    finally:
        log.close()
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        code = proc.poll()
        if code is not None:
            if code == 0 or _answers(paths):
                # Lost a race with another starter: theirs is serving.
                return _pid_of_running(paths) or proc.pid
            raise SlothError(
                f"the daemon exited with code {code} while starting: {_tail(paths.daemon_log)}",
                hint=f"See {paths.daemon_log}, or run `sloth daemon run` to see it in the foreground.",
            )
        if _answers(paths):
            return proc.pid
        time.sleep(0.02)
    raise SlothError(
        f"the daemon did not answer within {timeout_s:g}s (pid {proc.pid})",
        hint=f"See {paths.daemon_log}.",
    )


def _answers(paths: Paths) -> bool:
    try:
        with Client(paths.socket, timeout_s=2) as c:
            c.call("ping")
        return True
    except (DaemonNotRunning, OSError):
        return False


def _pid_of_running(paths: Paths) -> int | None:
    try:
        with Client(paths.socket, timeout_s=2) as c:
            return int(c.call("status")["pid"])
    except (SlothError, OSError):
        return None


def _tail(p: os.PathLike[str], n: int = 2000) -> str:
    try:
        with open(p, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - n))
            lines = f.read().decode("utf-8", "replace").strip().splitlines()
        errs = [ln for ln in lines if " ERROR " in ln or "Error" in ln]
        return (errs or lines or ["(no output)"])[-1]
    except OSError:
        return "(no log)"


def wait_gone(pid: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            return False
        time.sleep(0.05)
    return False

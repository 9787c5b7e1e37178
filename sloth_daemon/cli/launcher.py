"""Start the daemon in the background (for `sloth add`, any command that
needs a daemon, and `sloth daemon start`); `sloth daemon run`, in the
foreground, is daemon.py's."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from sloth_daemon.cli.client import Client
from sloth_daemon.errors import DaemonNotAnswering, SlothError
from sloth_daemon.paths import Paths, check_socket_path, ensure_dir, open_append
from sloth_daemon.safefile import open_file


def start_background(paths: Paths, *, timeout_s: float = 10.0) -> int:
    """Start the daemon and return its pid once its socket answers.

    Never while another daemon holds the instance lock: that one is starting
    (recovering jobs before it listens) or stuck, and a second would only
    fail; wait for it to answer instead. If the login service is installed
    for this queue, ask the service manager to start it (so the daemon lives
    in its unit, with its restart policy and cgroup); otherwise spawn
    ``sloth daemon run`` detached from this terminal. Raises SlothError with
    the daemon's last words."""
    check_socket_path(paths.socket)  # say so now, not via the daemon's log
    holder = lock_holder(paths)
    if holder is not None:
        return _wait_for_holder(paths, holder, timeout_s)
    if _start_via_service(paths):
        pid = _wait_for_pid(paths, timeout_s)
        if pid:
            return pid
        # The unit did not come up: fall through and run one ourselves.
    return _wait_until_serving(paths, _spawn_detached(paths), timeout_s)


def lock_holder(paths: Paths) -> str | None:
    """The pid (as the lock file says it, or "unknown") of the daemon that
    holds the instance lock, or None if nobody holds it. Probes with a
    shared flock for an instant (the daemon retries its own for longer)."""
    import fcntl

    try:
        fd = open_file(paths.lock)
    except OSError:
        return None  # no lock file (no daemon ever ran here), or unreadable: the daemon will tell
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            text = (os.read(fd, 64).decode("ascii", "replace").split() or [""])[0]  # pid, then the socket
            return text if text.isdigit() else "unknown"
        except OSError:
            return None
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def _wait_for_holder(paths: Paths, holder: str, timeout_s: float) -> int:
    """Until the holder answers; if it exits first (an idle exit, a stop that
    had closed its socket), start the next daemon."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        pid = _pid_of_running(paths)
        if pid:
            return pid
        if lock_holder(paths) is None:
            return start_background(paths, timeout_s=max(deadline - time.monotonic(), 1.0))
        time.sleep(0.05)
    raise DaemonNotAnswering(
        f"a sloth daemon (pid {holder}) holds the lock on {paths.data_dir} but does not answer on "
        f"{paths.socket}; not starting a second one",
        hint=f"It may still be starting (ending a previous daemon's jobs) or be stuck: check it with "
             f"`ps -o pid,stat,etime,cmd -p {holder}` and its log {paths.daemon_log}; if it is stuck, "
             f"`kill {holder}` and try again.")


def _wait_for_pid(paths: Paths, timeout_s: float) -> int | None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        pid = _pid_of_running(paths)
        if pid:
            return pid
        time.sleep(0.05)
    return None


def _spawn_detached(paths: Paths) -> subprocess.Popen[bytes]:
    """``sloth daemon run`` in a new session, its output to the daemon log."""
    ensure_dir(paths.log_dir)
    log = open_append(paths.daemon_log)
    try:
        return subprocess.Popen(
            [sys.executable, "-m", "sloth_daemon", "daemon", "run"],
            stdin=subprocess.DEVNULL, stdout=log, stderr=log,
            start_new_session=True, close_fds=True, cwd="/",
        )
    finally:
        log.close()


def _wait_until_serving(paths: Paths, proc: subprocess.Popen[bytes], timeout_s: float) -> int:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        code = proc.poll()
        if code is not None:
            if code == 0 or _answers(paths):
                # Lost a race with another starter: theirs is serving.
                return _pid_of_running(paths) or proc.pid
            if (holder := lock_holder(paths)) is not None:  # theirs is still starting: wait for it
                return _wait_for_holder(paths, holder, max(deadline - time.monotonic(), 1.0))
            said, hint = _last_words(paths.daemon_log)
            raise SlothError(
                f"the daemon exited with code {code} while starting: {said}",
                hint=(hint + " " if hint else "")
                + f"See {paths.daemon_log}, or run `sloth daemon run` to see it in the foreground.",
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
    except (SlothError, OSError):  # not yet listening, busy, not answering yet: not serving
        return False


def _pid_of_running(paths: Paths) -> int | None:
    try:
        with Client(paths.socket, timeout_s=2) as c:
            return int(c.call("status")["pid"])
    except (SlothError, OSError):
        return None


def _last_words(p: os.PathLike[str], n: int = 4000) -> tuple[str, str]:
    """The daemon's last error line in its log, and the hint after it (if any)."""
    try:
        with os.fdopen(open_file(p), "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - n))
            lines = f.read().decode("utf-8", "replace").strip().splitlines()
    except OSError:
        return "(no log)", ""
    errs = [i for i, ln in enumerate(lines) if " ERROR " in ln or "Error" in ln or "error:" in ln]
    if not errs:
        return (lines or ["(no output)"])[-1], ""
    i = errs[-1]
    after = lines[i + 1] if i + 1 < len(lines) else ""
    return lines[i].removeprefix("sloth: error: "), after.removeprefix("hint: ") if after.startswith("hint: ") else ""


def wait_gone(pid: int, timeout_s: float) -> bool:
    """True once ``pid`` has exited (a zombie counts: only its parent has
    yet to reap it), waiting up to ``timeout_s``."""
    import psutil

    from sloth_daemon.keeper.procident import wait_gone as wait_procs_gone

    try:
        proc = psutil.Process(pid)
    except psutil.NoSuchProcess:
        return True
    return not wait_procs_gone([proc], timeout_s)


def _start_via_service(paths: Paths) -> bool:
    """``systemctl --user start sloth.service`` / ``launchctl kickstart`` if
    the installed unit serves this queue (only the default one: a unit never
    serves a SLOTH_HOME it was not installed for). True if the manager said yes."""
    if paths.home is not None:
        return False
    from sloth_daemon import service
    from sloth_daemon.service.common import read_text

    try:
        text = read_text(service.unit_path(plat := service.platform()))  # never waits on a FIFO there
    except SlothError:
        return False
    if text is None or "SLOTH_HOME" in text:
        return False
    if plat == "linux":
        argv = ["systemctl", "--user", "start", service.UNIT_NAME]
    else:
        argv = ["launchctl", "kickstart", service.launchd.target()]
    try:
        return subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False

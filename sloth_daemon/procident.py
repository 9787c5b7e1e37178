"""Process identity and process-tree killing.

A pid alone is not an identity (pids are reused, and after a reboot every
pid is meaningless). We record (boot id, pid, start time): on Linux the start
time in clock ticks from /proc/PID/stat, exact; elsewhere psutil's
create_time(), compared with a tolerance.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from typing import Any

import psutil

CREATE_TIME_TOLERANCE_S = 1.0


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
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
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


def identity(pid: int, **extra: Any) -> dict[str, Any]:
    return {
        "pid": pid,
        "start": start_stamp(pid),
        "boot_id": boot_id(),
        "exact": sys.platform.startswith("linux"),
        "started_at": time.time(),
        **extra,
    }


def is_same_process(ident: dict[str, Any] | None) -> bool:
    """True if the process ``ident`` describes is still running (not a zombie)."""
    if not ident or not isinstance(ident.get("pid"), int):
        return False
    if ident.get("boot_id") != boot_id():
        return False
    pid = ident["pid"]
    now = start_stamp(pid)
    if now is None or ident.get("start") is None:
        return False
    if ident.get("exact"):
        same = now == ident["start"]
    else:
        same = abs(now - ident["start"]) <= CREATE_TIME_TOLERANCE_S
    if not same:
        return False
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def descendants(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return []


def signal_tree(pid: int, sig: int, extra: list[psutil.Process] = ()) -> None:  # type: ignore[assignment]
    """Send ``sig`` to the process group led by ``pid`` (jobs run in their own
    session, so pgid == pid), to every descendant in a fresh snapshot (a
    grandchild that called setsid left the group), and to ``extra``."""
    procs = descendants(pid) + list(extra)
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass
    _signal(procs, [pid], sig)


def _signal(procs: list[psutil.Process], groups: list[int], sig: int) -> None:
    for g in groups:
        try:
            os.killpg(g, sig)
        except (ProcessLookupError, PermissionError):
            pass
    for p in procs:
        try:
            p.send_signal(sig)  # psutil refuses a reused pid
        except psutil.Error:
            pass


def tree_of(ident: dict[str, Any] | None) -> list[psutil.Process]:
    """The live process ``ident`` describes and its descendants, or []."""
    if not is_same_process(ident):
        return []
    try:
        root = psutil.Process(ident["pid"])  # type: ignore[index]
    except psutil.Error:
        return []
    return [root, *descendants(root.pid)]


def kill_identity_blocking(ident: dict[str, Any], grace_s: float) -> bool:
    """End a leftover process tree (not our child) described by ``ident``.

    SIGTERM to the tree, wait up to ``grace_s``, then SIGKILL. Returns True if
    something was running. Used before re-running a reclaimed job, so two
    copies never run at once.
    """
    procs = tree_of(ident)
    if not procs:
        return False
    end_all(procs, grace_s, groups=[procs[0].pid])
    return True


def _gone(p: psutil.Process) -> bool:
    """Exited, or a zombie: it runs no more code (its parent may be slow to
    reap it, e.g. an init that is not ours)."""
    try:
        return p.status() == psutil.STATUS_ZOMBIE
    except psutil.Error:
        return True


def wait_gone(procs: list[psutil.Process], timeout_s: float) -> list[psutil.Process]:
    """Wait up to ``timeout_s`` for the processes to exit; return those left."""
    deadline = time.monotonic() + timeout_s
    alive = [p for p in procs if not _gone(p)]
    while alive and time.monotonic() < deadline:
        time.sleep(0.02)
        alive = [p for p in alive if not _gone(p)]
    return alive


def end_all(procs: list[psutil.Process], grace_s: float, *, groups: list[int] = ()) -> None:  # type: ignore[assignment]
    """SIGTERM every process (and process group) at once, wait up to
    ``grace_s`` for all of them together, SIGKILL what is left. Parallel, so
    a restart with many leftovers costs one grace period, not one each."""
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
        _signal(procs, list(groups), sig)
        procs = wait_gone(procs, wait_s)
        if not procs:
            return


def find_by_env_values(name: str, values: set[str]) -> dict[str, list[psutil.Process]]:
    """One scan of our processes: value -> processes with ``name=value``.
    Every job gets SLOTH_JOB_TOKEN, so this finds a job's leftovers even if
    their identity was never recorded (the daemon died between spawn and
    writing it down)."""
    found: dict[str, list[psutil.Process]] = {}
    if not values:
        return found
    me = os.getuid()
    for p in psutil.process_iter(["uids"]):
        try:
            if p.info["uids"] is None or p.info["uids"].real != me or p.pid == os.getpid():
                continue
            v = p.environ().get(name)
            if v in values:
                found.setdefault(v, []).append(p)
        except psutil.Error:
            continue
    return found


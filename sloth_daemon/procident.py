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
from typing import Any, Callable, Iterable, Mapping

import psutil

CREATE_TIME_TOLERANCE_S = 1.0
TOKEN_ENV = "SLOTH_JOB_TOKEN"  # every job carries its claim's token
# A start stamp is in clock ticks on Linux (10 ms at the usual USER_HZ), in
# seconds elsewhere: how far a process's start may lie outside a run's
# lifetime (as we noted it) and still count as inside.
STAMP_SLACK = 2.0 if sys.platform.startswith("linux") else 0.02


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


def stamp_now() -> float:
    """Now, in ``start_stamp``'s units, to note when a run began and ended.

    Linux: /proc/uptime (seconds since boot, suspend included, the base of
    /proc/PID/stat's start time) in clock ticks. Read from the kernel, not
    through clock_gettime, so an LD_PRELOAD clock shim cannot skew it
    against the start times it is compared with."""
    if sys.platform.startswith("linux"):
        try:
            with open("/proc/uptime", "rb") as f:
                return float(f.read().split()[0]) * _CLK_TCK
        except (OSError, ValueError, IndexError):
            pass
    return time.time()


_CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


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



# ------------------------------------------------------------ one run's tree
def attribute_orphan(start: float, lifetimes: Mapping[str, tuple[float, float | None]],
                     slack: float = STAMP_SLACK) -> str | None:
    """The run an orphan with no readable token belongs to: the one run whose
    lifetime (begin, end or None while it runs) covers the orphan's start.
    None when no run or more than one does: guessing could kill a stranger."""
    covering = [key for key, (begin, end) in lifetimes.items()
                if begin - slack <= start and (end is None or start <= end + slack)]
    return covering[0] if len(covering) == 1 else None


class ProcessTree:
    """Every process one run started, found by every means at once (issue 14
    item 4), so that ending a run ends all of it:

    - its process group (jobs run in their own session, so pgid == root pid);
    - a remembered snapshot of descendants (``remember``: a grandchild whose
      parent exited has left the tree, but we saw it earlier);
    - the run's token in the environment (a double-forked escapee that
      called setsid: its environment still says whose it is);
    - orphans reparented to us (Linux subreaper) that carry no readable
      token, when ``claim_orphan`` says this run owns them;

    and the descendants of all of those. A pid alone is never trusted after
    the root is reaped: psutil refuses to signal a reused pid, and a group
    is signalled only while its leader is unreaped (the kernel keeps a live
    group's id from being reused, not an empty one's)."""

    def __init__(self, root_pid: int, token: str | None) -> None:
        self.root_pid = root_pid
        self.token = token
        self.root_stamp = start_stamp(root_pid)
        self.known: dict[int, psutil.Process] = {}
        self.root_reaped = False

    def remember(self, found: Iterable[psutil.Process] | None = None) -> None:
        """Add the root's descendants (``found``, or a fresh look) to the snapshot."""
        if self.root_reaped:
            return
        for p in descendants(self.root_pid) if found is None else found:
            self.known.setdefault(p.pid, p)

    def find(self, claim_orphan: Callable[[psutil.Process], bool] | None = None) -> list[psutil.Process]:
        """One scan of this uid's processes: every living member of the tree."""
        me, uid = os.getpid(), os.getuid()
        procs: dict[int, psutil.Process] = {}
        kids: dict[int, list[int]] = {}
        seeds: set[int] = set()
        for p in psutil.process_iter(["ppid", "uids"]):
            uids, ppid = p.info["uids"], p.info["ppid"]
            if p.pid == me or uids is None or uids.real != uid:
                continue
            procs[p.pid] = p
            kids.setdefault(ppid, []).append(p.pid)
            if self._claims(p, ppid == me, claim_orphan):
                seeds.add(p.pid)
        for pid, p in list(self.known.items()):
            if pid in procs and p == procs[pid]:  # psutil: same pid and start time
                seeds.add(pid)
        if not self.root_reaped and self.root_pid in procs:
            seeds.add(self.root_pid)
        members, todo = set(), list(seeds)
        while todo:  # the descendants of every member found
            pid = todo.pop()
            if pid not in members:
                members.add(pid)
                todo.extend(kids.get(pid, ()))
        for pid in members:
            self.known.setdefault(pid, procs[pid])
        return [procs[pid] for pid in members]

    def _claims(self, p: psutil.Process, orphan_of_ours: bool,
                claim_orphan: Callable[[psutil.Process], bool] | None) -> bool:
        try:
            if self._in_group(p.pid):
                return True
            token = p.environ().get(TOKEN_ENV)
        except (psutil.Error, OSError):
            token = None  # exited, a zombie, or not readable
        if token is not None:
            return token == self.token
        return orphan_of_ours and claim_orphan is not None and p.pid != self.root_pid and claim_orphan(p)

    def _in_group(self, pid: int) -> bool:
        if pid == self.root_pid:
            return False  # the root itself is added while unreaped, never by number after
        try:
            if os.getpgid(pid) != self.root_pid:
                return False
        except OSError:
            return False
        st = start_stamp(pid)  # a group of that number made after a pid wrap is not ours
        return st is not None and self.root_stamp is not None and st >= self.root_stamp

    def signal(self, procs: Iterable[psutil.Process], sig: int) -> None:
        if not self.root_reaped:
            _signal([], [self.root_pid], sig)
        _signal(list(procs), [], sig)


def remember_all(trees: Iterable[ProcessTree]) -> None:
    """``remember`` for many runs with one scan of the process table (not one
    per run: 32 running jobs would read /proc 32 times per check)."""
    trees = [t for t in trees if not t.root_reaped]
    if not trees:
        return
    kids: dict[int, list[psutil.Process]] = {}
    for p in psutil.process_iter(["ppid"]):
        kids.setdefault(p.info["ppid"], []).append(p)
    for t in trees:
        found, todo = [], list(kids.get(t.root_pid, ()))
        while todo:
            p = todo.pop()
            found.append(p)
            todo.extend(kids.get(p.pid, ()))
        t.remember(found)


def gone(p: psutil.Process) -> bool:
    return _gone(p)

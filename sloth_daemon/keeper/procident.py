"""Process identity and process-tree killing.

A pid alone is not an identity (pids are reused, and after a reboot every
pid is meaningless). We record (boot id, pid, start time): on Linux the start
time in clock ticks from /proc/PID/stat, exact; elsewhere psutil's
create_time(), compared with a tolerance (stamps.py reads them).
"""

from __future__ import annotations

import os
import signal
import sys
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping

import psutil

from sloth_daemon.keeper.stamps import _linux_start_ticks, boot_id, spawn_stamp, stamp_now, start_stamp, uptime_ticks  # noqa: F401 (its API too)

CREATE_TIME_TOLERANCE_S = 1.0
TOKEN_ENV = "SLOTH_JOB_TOKEN"  # every job carries its claim's token
# A start stamp is in clock ticks on Linux (10 ms at the usual USER_HZ), in
# seconds elsewhere: how far a process's start may lie outside a run's
# lifetime (as we noted it) and still count as inside.
STAMP_SLACK = 2.0 if sys.platform.startswith("linux") else 0.02


def identity(pid: int, *, start: float | None = None, **extra: Any) -> dict[str, Any]:
    """What names process ``pid`` for good (``start``: its start stamp, if
    already read)."""
    return {
        "pid": pid,
        "start": start if start is not None else start_stamp(pid),
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


@dataclass(frozen=True)
class ProcInfo:
    pid: int
    ppid: int
    pgid: int
    start: float | None  # start_stamp units
    token: str | None  # its SLOTH_JOB_TOKEN; None if it has none or it cannot be read


def scan(uid: int, *, with_token: bool = True) -> list[ProcInfo]:
    """One look at the processes of ``uid`` (but this one). Linux reads /proc
    directly: two small reads a process, some 30 times cheaper than psutil's
    per-process objects (a kill looks several times; a keeper with 32 runs
    to end at once would stall for seconds). Elsewhere psutil."""
    if sys.platform.startswith("linux") and os.path.isdir("/proc"):
        return _scan_proc(uid, with_token)
    return _scan_psutil(uid, with_token)


def _scan_proc(uid: int, with_token: bool) -> list[ProcInfo]:
    me, out = os.getpid(), []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == me:
            continue
        try:
            if os.stat(f"/proc/{name}").st_uid != uid:
                continue
            data = _read(f"/proc/{name}/stat")
            rest = data[data.rfind(b")") + 2:].split()  # comm may hold spaces and parens
            ppid, pgid, start = int(rest[1]), int(rest[2]), float(rest[19])
        except (OSError, IndexError, ValueError):
            continue  # gone meanwhile
        out.append(ProcInfo(int(name), ppid, pgid, start, _proc_token(name) if with_token else None))
    return out


_TOKEN_KEY = f"{TOKEN_ENV}=".encode()


def _read(path: str) -> bytes:
    """A whole small file through raw reads (a Python file object costs
    more than the read itself, times every process on the machine)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        chunks = [os.read(fd, 8192)]
        while chunks[-1]:
            chunks.append(os.read(fd, 65536))
    finally:
        os.close(fd)
    return b"".join(chunks)


def _proc_token(name: str) -> str | None:
    try:
        env = b"\0" + _read(f"/proc/{name}/environ")
    except OSError:
        return None
    i = env.find(b"\0" + _TOKEN_KEY)
    if i < 0:
        return None
    i += 1 + len(_TOKEN_KEY)
    end = env.find(b"\0", i)
    return env[i:end if end >= 0 else len(env)].decode("utf-8", "surrogateescape")


def _scan_psutil(uid: int, with_token: bool) -> list[ProcInfo]:
    me, out = os.getpid(), []
    for p in psutil.process_iter(["ppid", "uids"]):
        try:
            if p.pid == me or p.info["uids"] is None or p.info["uids"].real != uid:
                continue
            token = p.environ().get(TOKEN_ENV) if with_token else None
            out.append(ProcInfo(p.pid, p.info["ppid"], os.getpgid(p.pid), start_stamp(p.pid), token))
        except (psutil.Error, OSError):
            continue
    return out


def _closure(seeds: Iterable[int], kids: Mapping[int, list[int]]) -> set[int]:
    """``seeds`` and all their descendants."""
    found, todo = set(), list(seeds)
    while todo:
        pid = todo.pop()
        if pid not in found:
            found.add(pid)
            todo.extend(kids.get(pid, ()))
    return found


def _kids(infos: Iterable[ProcInfo]) -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for i in infos:
        kids.setdefault(i.ppid, []).append(i.pid)
    return kids


class ProcessTree:
    """Every process one run started, found by every means at once (issue 14
    item 4), so that ending a run ends all of it:

    - its process group (jobs run in their own session, so pgid == root pid);
    - a remembered snapshot of descendants (``remember``: a grandchild whose
      parent exited has left the tree, but we saw it earlier);
    - the run's token in the environment (a double-forked escapee that
      called setsid: its environment still says whose it is);
    - orphans reparented to us (Linux subreaper) that carry no readable
      token, when ``claim_orphan(pid, start)`` says this run owns them;

    and the descendants of all of those. A pid alone is never trusted: a
    remembered one counts only with the start it had, psutil refuses to
    signal a reused pid, and the group is signalled only while its leader
    is unreaped (the kernel keeps a live group's id from reuse, not an
    empty one's)."""

    def __init__(self, root_pid: int, token: str | None, *, root_stamp: float | None = None) -> None:
        """``root_stamp``: the root's start stamp, if known (else read now)."""
        self.root_pid = root_pid
        self.token = token
        self.root_stamp = root_stamp if root_stamp is not None else start_stamp(root_pid)
        self.known: dict[int, float | None] = {}  # pid -> its start: the snapshot
        self.root_reaped = False

    def remember(self, infos: list[ProcInfo] | None = None) -> None:
        """Add the root's descendants (in ``infos``, or a fresh scan) to the snapshot."""
        if self.root_reaped:
            return
        infos = scan(os.getuid(), with_token=False) if infos is None else infos
        start = {i.pid: i.start for i in infos}
        for pid in _closure([self.root_pid], _kids(infos)) - {self.root_pid}:
            self.known.setdefault(pid, start.get(pid))

    def find(self, claim_orphan: Callable[[int, float | None], bool] | None = None) -> list[psutil.Process]:
        """One scan of this uid's processes: every living member of the tree."""
        me = os.getpid()
        infos = {i.pid: i for i in scan(os.getuid())}
        seeds = {i.pid for i in infos.values() if self._claims(i, me, claim_orphan)}
        seeds |= {pid for pid, start in self.known.items() if pid in infos and infos[pid].start == start}
        if not self.root_reaped and self.root_pid in infos:
            seeds.add(self.root_pid)
        procs = []
        for pid in _closure(seeds, _kids(infos.values())):
            try:
                procs.append(psutil.Process(pid))
            except psutil.Error:
                continue  # exited since the scan
            self.known.setdefault(pid, infos[pid].start)
        return procs

    def _claims(self, i: ProcInfo, me: int, claim_orphan: Callable[[int, float | None], bool] | None) -> bool:
        if i.pgid == self.root_pid and i.pid != self.root_pid:
            # a group of that number made after a pid wrap is not ours
            return i.start is not None and self.root_stamp is not None and i.start >= self.root_stamp
        if i.token is not None:
            return i.token == self.token
        return i.ppid == me and i.pid != self.root_pid and claim_orphan is not None and claim_orphan(i.pid, i.start)

    def signal(self, procs: Iterable[psutil.Process], sig: int) -> None:
        if not self.root_reaped:
            _signal([], [self.root_pid], sig)
        _signal(list(procs), [], sig)


def remember_all(trees: Iterable[ProcessTree]) -> None:
    """``remember`` for many runs with one scan (not one per run: 32 running
    jobs would read /proc 32 times per check)."""
    trees = [t for t in trees if not t.root_reaped]
    if trees:
        infos = scan(os.getuid(), with_token=False)
        for t in trees:
            t.remember(infos)


def gone(p: psutil.Process) -> bool:
    return _gone(p)


def is_stopped(pid: int) -> bool:
    """Stopped by a signal (state T), or no longer running code (a zombie,
    gone): a process in this state forks no more. Linux reads
    /proc/PID/stat; elsewhere psutil."""
    if sys.platform.startswith("linux"):
        try:
            data = _read(f"/proc/{pid}/stat")
        except OSError:
            return True
        state = data[data.rfind(b")") + 2:data.rfind(b")") + 3]
        return state in (b"T", b"t", b"Z", b"X")
    try:
        return psutil.Process(pid).status() in (psutil.STATUS_STOPPED, psutil.STATUS_ZOMBIE)
    except psutil.Error:
        return True

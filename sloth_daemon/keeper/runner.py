"""Runs one job's process: own session, its output into its log (joblog),
its exit noticed, its whole tree frozen, thawed or ended. The
environment a job runs with is the daemon's to make (keeper/jobenv.py).

Knows nothing of the queue: the worker claims, the keeper runs it here, the
worker settles. Exit is noticed through a pidfd on Linux (no polling, no
extra thread) and through SIGCHLD elsewhere (childwatch), or by whoever
made it with ``watch_exit=False`` (the keeper: its subreaper's SIGCHLD hook
polls every job). How the process is made is keeper/spawning.py's.
"""

from __future__ import annotations

import asyncio
import errno
import os
import signal
import subprocess
import time
from typing import Any, Callable

import psutil

from sloth_daemon.keeper import procident, resource_limits, spawning
from sloth_daemon.keeper.childwatch import SigchldWatch
from sloth_daemon.errors import SpawnError
from sloth_daemon.keeper.joblog import LogWriter

# The daemon runs with a 077 umask (daemon/main.py: what it makes is private);
# jobs get a login shell's usual one, so what they make is as it would be
# from a terminal. A job that wants another sets it (`umask 077; ...`).
JOB_UMASK = 0o022


_PERMANENT_ERRNOS = {errno.ENOENT, errno.EACCES, errno.ENOEXEC, errno.ENOTDIR, errno.EISDIR}


PAUSE_ROUNDS = 20  # SIGSTOP, look again: a child forked while its parent was being stopped is found next round
PAUSE_SETTLE_S = 0.5  # per round, at most: until every process signalled is seen stopped
KILL_ROUNDS = 50  # SIGKILL, look again: a process forked just before the kill is found next round
POLL_GONE_S = 0.02


class JobProcess:
    """One running attempt. Callbacks run on the event loop thread.

    ``claim_orphan(pid, start)`` (a subreaper's): does an orphan of ours
    with no readable token belong to this run? See procident.ProcessTree."""

    def __init__(
        self,
        argv: list[str],
        *,
        cwd: str | None,
        env: dict[str, str],
        log: LogWriter,
        on_output: Callable[[bytes], None],
        on_exit: Callable[["JobProcess"], None],
        claim_orphan: Callable[[int, float | None], bool] | None = None,
        preexec: Callable[[], None] | None = None,
        watch_exit: bool = True,
    ) -> None:
        self.argv, self.cwd, self.env, self.log = argv, cwd, env, log
        self.preexec = preexec  # its limits, set in the child before exec (keeper/resource_limits.py)
        self.watch_exit = watch_exit  # False: the caller's SIGCHLD hook calls poll() (childwatch.reap_orphans)
        self.on_output, self.on_exit = on_output, on_exit
        self.claim_orphan = claim_orphan
        self._pid: int | None = None
        self.proc: subprocess.Popen[bytes] | None = None  # if it was made by one (keeper/spawning.py)
        self.tree: procident.ProcessTree | None = None
        self.returncode: int | None = None
        self.kill_reason: str | None = None  # why the tree was ended, once a signal reached the root alive
        self._kill_asked: str | None = None  # why it is to be ended (the first reason asked)
        self.frozen = False  # stopped by the keeper across a suspend (trust)
        self.paused = False  # stopped on request (`sloth pause --job`): only a resume continues it
        self.ending: asyncio.Task[None] | None = None  # the tree kill, once begun
        self._rfd: int | None = None
        self._pidfd: int | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.done = asyncio.Event()
        self.rusage: Any = None  # the root's, with what it waited for (os.wait4), once reaped
        self.cgroup: str | None = None  # its own cgroup v2 folder (a scope's): the cost is read there
        self.cgroup_usage: dict[str, Any] | None = None  # the last reading of it (resource_limits.cgroup_usage)

    @property
    def pid(self) -> int:
        assert self._pid is not None
        return self._pid

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Spawn; raises SpawnError with a message fit for the job's history."""
        self._loop = loop
        if self.cwd is not None and not os.path.isdir(self.cwd):
            # may be an unmounted disk that comes back: worth a retry
            raise SpawnError(f"working directory {self.cwd} does not exist", retry=True)
        try:
            rfd, wfd = os.pipe()
        except OSError as e:
            raise SpawnError(f"cannot make a pipe for the job's output: {e.strerror}", retry=True,
                             errno=e.errno) from e
        before = procident.uptime_ticks()
        try:
            self._pid, self.proc = spawning.spawn(self.argv, cwd=self.cwd, env=self.env, out=wfd, umask=JOB_UMASK,
                                                  preexec=self.preexec)
        except (OSError, subprocess.SubprocessError, ValueError) as e:  # ValueError: text exec cannot take
            os.close(rfd)
            retry = isinstance(e, subprocess.SubprocessError) or (isinstance(e, OSError)
                                                                  and e.errno not in _PERMANENT_ERRNOS)
            raise SpawnError(_spawn_message(self.argv, e), retry=retry,
                             errno=e.errno if isinstance(e, OSError) else None) from e
        finally:
            os.close(wfd)
        after = procident.uptime_ticks() if before is not None else None
        # Forked within one tick: its start stamp is that tick (stamps.py).
        known = procident.spawn_stamp(self._pid, before, after)
        self.tree = procident.ProcessTree(self._pid, self.env.get(procident.TOKEN_ENV), root_stamp=known)
        os.set_blocking(rfd, False)
        self._rfd = rfd
        loop.add_reader(rfd, self._read)
        if self.watch_exit:
            self._watch_exit(loop)

    def identity(self, **extra: Any) -> dict[str, Any]:
        start = self.tree.root_stamp if self.tree is not None else None  # read once, at spawn
        return procident.identity(self.pid, start=start, **extra)

    # --------------------------------------------------------------- output
    def _read(self) -> None:
        assert self._rfd is not None
        try:
            data = os.read(self._rfd, 1 << 16)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self._close_pipe()
            return
        self.log.write(data)
        self.on_output(data)

    def _drain(self) -> None:
        while self._rfd is not None:
            try:
                data = os.read(self._rfd, 1 << 16)
            except BlockingIOError:
                break
            except OSError:
                break
            if not data:
                break
            self.log.write(data)
            self.on_output(data)
        self._close_pipe()

    def _close_pipe(self) -> None:
        if self._rfd is not None and self._loop is not None:
            self._loop.remove_reader(self._rfd)
            os.close(self._rfd)
            self._rfd = None

    # ----------------------------------------------------------------- exit
    def _watch_exit(self, loop: asyncio.AbstractEventLoop) -> None:
        if hasattr(os, "pidfd_open"):
            try:
                self._pidfd = os.pidfd_open(self.pid)
            except OSError:  # e.g. out of descriptors: SIGCHLD still tells us
                self._pidfd = None
        if self._pidfd is not None:
            loop.add_reader(self._pidfd, self.poll)
        else:
            SigchldWatch.add(loop, self)

    def poll(self) -> bool:
        """Reap if exited. Returns True once the process has ended."""
        if self.returncode is not None:
            return True
        code = self._reap()
        if code is None:
            return False
        self.returncode = code
        if self.tree is not None:
            self.tree.root_reaped = True
        if self._pidfd is not None and self._loop is not None:
            self._loop.remove_reader(self._pidfd)
            os.close(self._pidfd)
            self._pidfd = None
        SigchldWatch.discard(self)
        try:
            self._drain()
        finally:  # whatever happens to the output, the exit must be settled
            self.done.set()
            self.on_exit(self)
        return True

    def _reap(self) -> int | None:
        """The exit code if it has exited (reaped here with wait4, for its
        rusage; its cgroup read first, while the exit keeps it), else None."""
        try:
            if self.cgroup is not None and os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT):
                self.cgroup_usage = resource_limits.cgroup_usage(self.cgroup) or self.cgroup_usage
            pid, status, self.rusage = os.wait4(self.pid, os.WNOHANG)
        except ChildProcessError:  # reaped already (by a Popen, if one made it): as it says
            return self.proc.poll() if self.proc is not None else 0
        if pid == 0:
            return None
        code = os.waitstatus_to_exitcode(status)
        if self.proc is not None:
            self.proc.returncode = code
        return code

    def alive(self) -> bool:
        """Running and not a zombie (a zombie is about to be reaped: not alive)."""
        if self.returncode is not None or self._pid is None:
            return False
        try:
            return psutil.Process(self.pid).status() != psutil.STATUS_ZOMBIE
        except psutil.Error:
            return False

    # ----------------------------------------------------------------- tree
    def refresh_tree(self) -> None:
        """Remember every descendant seen, so a grandchild whose parent has
        exited (and so left the tree) can still be found and ended."""
        if self.tree is not None and self.returncode is None:
            self.tree.remember()

    def signal_tree(self, sig: int) -> list[psutil.Process]:
        """Send ``sig`` to every process of the run (procident.ProcessTree).
        A SIGTERM or SIGKILL that finds the root still alive makes the kill
        asked for its outcome (``kill_reason``); one that comes after the
        root ended by itself does not: it ended as it ended (a scan of the
        tree takes a while, and a short job may exit meanwhile)."""
        if self.tree is None:
            return []
        procs = self.tree.find(self.claim_orphan)
        ending = sig in (signal.SIGTERM, signal.SIGKILL) and self._kill_asked is not None
        if ending and self.kill_reason is None and self._root_alive():
            self.kill_reason = self._kill_asked
        self.tree.signal(procs, sig)
        return procs

    def _root_alive(self) -> bool:
        """The root has not exited (a zombie not yet reaped has: it runs no
        more code). Does not reap it: its exit is ours to notice as ever."""
        if self.returncode is not None or self._pid is None:
            return False
        try:
            return os.waitid(os.P_PID, self._pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None
        except ChildProcessError:  # reaped meanwhile
            return False

    def freeze(self) -> None:
        """SIGSTOP the whole tree. Twice: a child forked while we looked is
        stopped the second time (a stopped process forks no more)."""
        self.frozen = True
        for _ in range(2):
            self.signal_tree(signal.SIGSTOP)

    def thaw(self) -> None:
        """Continue after a freeze, unless it is paused on request too."""
        self.frozen = False
        if not self.paused:
            self.signal_tree(signal.SIGCONT)

    def pause(self) -> int:
        """SIGSTOP the whole tree until a look at it finds nothing new: a
        process that forks while being stopped has its child stopped by the
        next round (each round waits until every process signalled is in
        state T: a stopped process forks no more). Returns how many
        processes were stopped."""
        self.paused = True
        stopped: set[int] = set()
        for _ in range(PAUSE_ROUNDS):
            procs = self.signal_tree(signal.SIGSTOP)
            pids = {p.pid for p in procs}
            _wait_stopped(pids, PAUSE_SETTLE_S)
            if pids <= stopped:
                break
            stopped |= pids
        return len(stopped)

    def resume(self) -> None:
        """SIGCONT the whole tree (unless a suspend's freeze still holds it)."""
        self.paused = False
        if not self.frozen:
            self.signal_tree(signal.SIGCONT)

    def end_tree_soon(self, grace_s: float, reason: str) -> "asyncio.Task[None]":
        """Begin ``end_tree`` now (``ending`` is set before this returns)."""
        if self._kill_asked is None:
            self._kill_asked = reason
        if self.ending is None:
            self.ending = asyncio.get_running_loop().create_task(self._end_tree(grace_s))
        return self.ending

    def end_leftovers_soon(self, grace_s: float) -> "asyncio.Task[None] | None":
        """The root process ended with a failure: end whatever of its tree
        still runs (a setsid or double-forked escapee found by the run's
        token), so a retry never runs beside it. The root's own exit stays
        the outcome (no kill reason). None if it left nothing running."""
        if self.ending is not None or self.tree is None:
            return self.ending
        left = [p for p in self.tree.find(self.claim_orphan) if not procident.gone(p)]
        if not left:
            return None
        self.log.note(f"the job's process ended; ending the {len(left)} process(es) it left running")
        self.ending = asyncio.get_running_loop().create_task(self._end_tree(grace_s))
        return self.ending

    async def end_tree(self, grace_s: float, reason: str) -> None:
        """SIGTERM the whole tree, wait up to ``grace_s`` for all of it, then
        SIGKILL what is left, looking again until nothing of it lives.
        Returns once the tree is dead and the root reaped. Idempotent: a
        second call waits for the first kill (and keeps the first reason)."""
        await asyncio.shield(self.end_tree_soon(grace_s, reason))

    async def _end_tree(self, grace_s: float) -> None:
        def thaw() -> None:
            if self.frozen or self.paused:  # a stopped process acts on SIGTERM only once continued
                self.frozen = self.paused = False
                self.signal_tree(signal.SIGCONT)
        await end_tree(self.signal_tree, grace_s, after_term=thaw)
        await self.done.wait()

    def outcome(self) -> tuple[bool, str]:
        """(succeeded, message) for the job's history."""
        code = self.returncode
        if self.kill_reason:
            return False, self.kill_reason
        if code == 0:
            return True, "exit 0"
        if code is not None and code < 0:
            return False, f"killed by {signal_name(-code)}"
        return False, f"exit {code}"


def _wait_stopped(pids: set[int], timeout_s: float) -> None:
    """Until every one of ``pids`` is stopped (or gone), ``timeout_s`` at
    most: SIGSTOP is delivered when the process next runs (one in
    uninterruptible sleep waits for its disk)."""
    deadline = time.monotonic() + timeout_s
    left = set(pids)
    while left:
        left = {p for p in left if not procident.is_stopped(p)}
        if not left or time.monotonic() > deadline:
            return
        time.sleep(0.001)


def signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


async def end_tree(signal_tree: Callable[[int], list[psutil.Process]], grace_s: float,
                   after_term: Callable[[], None] = lambda: None) -> None:
    """End a process tree: SIGTERM all of it, wait up to ``grace_s`` for all
    of it, then SIGKILL what is left, looking again (``signal_tree`` finds
    afresh, procident.ProcessTree) until nothing of it lives. A job's runs
    through here, and so does every hook and notification (tell.py)."""
    procs = signal_tree(signal.SIGTERM)
    after_term()
    await _wait_gone(procs, grace_s)
    for _ in range(KILL_ROUNDS):
        procs = [p for p in signal_tree(signal.SIGKILL) if not procident.gone(p)]
        if not procs:
            break
        await _wait_gone(procs, 1.0)


async def _wait_gone(procs: list[psutil.Process], timeout_s: float) -> None:
    """Wait up to ``timeout_s`` (awake time) for every one of ``procs`` to exit
    or be a zombie. Polls: there is no exit notification for a process that
    is not our child."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    # Not our children (escapees, orphans): no exit notification exists, so poll.
    while any(not procident.gone(p) for p in procs) and loop.time() < deadline:  # noqa: ASYNC110
        await asyncio.sleep(POLL_GONE_S)


def _spawn_message(argv: list[str], e: BaseException) -> str:
    if isinstance(e, OSError) and e.errno == errno.ENOENT:
        return f"command not found: {argv[0]}"
    if isinstance(e, OSError) and e.errno == errno.EACCES:
        return f"permission denied running {argv[0]}"
    if isinstance(e, UnicodeError):  # a lone surrogate (valid JSON): said without it
        name = argv[0].encode("utf-8", "backslashreplace").decode("utf-8")
        return f"cannot start {name}: its command, arguments or environment hold text that cannot be encoded"
    return f"cannot start {argv[0]}: {getattr(e, 'strerror', None) or e}"

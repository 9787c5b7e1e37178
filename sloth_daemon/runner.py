"""Runs one job's process: own session, captured and capped log, tree kill.

Knows nothing of the queue: the worker claims, this runs, the worker settles.
Exit is noticed through a pidfd on Linux (no polling, no extra thread) and
through SIGCHLD elsewhere.
"""

from __future__ import annotations

import asyncio
import errno
import os
import ctypes
import signal
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable, Mapping

import psutil

from . import procident
from .errors import SpawnError

# Variables that belong to the daemon's own process and must never reach a
# job (systemd would take a job's "READY=1" as ours; LD_PRELOAD is a test or
# debug hook of the daemon). The job's own captured environment is used as is.
DAEMON_ONLY_ENV = (
    "LD_PRELOAD", "DYLD_INSERT_LIBRARIES", "SLOTH_FAKECLOCK_FILE", "NOTIFY_SOCKET",
    "WATCHDOG_USEC", "WATCHDOG_PID", "LISTEN_FDS", "LISTEN_PID", "LISTEN_FDNAMES",
    "INVOCATION_ID", "JOURNAL_STREAM", "SLOTH_DEBUG", "SLOTH_DAEMON_INSTANCE",
    "FAKETIME", "FAKETIME_TIMESTAMP_FILE", "FAKETIME_NO_CACHE", "FAKETIME_DONT_FAKE_MONOTONIC",
)


# The daemon runs with a 077 umask (daemon.py: what it makes is private);
# jobs get a login shell's usual one, so what they make is as it would be
# from a terminal. A job that wants another sets it (`umask 077; ...`).
JOB_UMASK = 0o022


def job_env(captured: dict[str, str] | None, extra: dict[str, str],
            daemon_env: dict[str, str] | None = None) -> dict[str, str]:
    """The environment a job runs with: what `sloth add` captured, or (for a
    job enqueued by a program without one) the daemon's minus its own hooks."""
    base = dict(captured) if captured is not None else dict(daemon_env if daemon_env is not None else os.environ)
    if captured is None:
        for k in DAEMON_ONLY_ENV:
            base.pop(k, None)
    for k in ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID", "LISTEN_FDS", "LISTEN_PID"):
        base.pop(k, None)
    base.update(extra)
    return base


_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_DIRECTORY = getattr(os, "O_DIRECTORY", 0)


class LogWriter:
    """Writes one attempt's output, capped: past ``cap`` bytes it keeps the
    first half and the last half and says in between how much was cut.

    The file is created with the first byte written, so an attempt that
    prints nothing leaves no file. That is fewer empty files for the many
    quiet jobs, and it is cheaper than it looks: on ext4 every new file's
    metadata rides along with the queue's next fsync, which made creating
    it about a fifth of a trivial job's whole cost (tests/bench/bench_daemon.py).

    Only a file this writer creates is written: never one that exists (it
    is not ours: a stale file, or a symlink planted to make us write
    elsewhere), never through a symlink, never making folders (the caller
    made and checked the one it names).

    The head goes to disk as it arrives; the tail is held in memory and
    written at ``finish`` (so after a crash the log holds the head only).
    Never raises: a file that cannot be created or written (full disk, a
    folder in the way) counts the bytes lost, and ``problem`` says so for
    the job's history, since the log itself cannot."""

    def __init__(self, path: Path, cap: int) -> None:
        self.path = path
        self.fd: int | None = None  # the file we created, once the first byte comes
        self.closed = False  # finished: nothing more is written
        self.head_cap = cap // 2
        self.tail_cap = cap - self.head_cap
        self.head = 0
        self.tail = bytearray()
        self.cut = 0
        self.total = 0
        self.lost = 0  # bytes that could not be written (disk full ...)
        self.error: str | None = None
        self.problem: str | None = None  # what was lost and why, once finished

    def write(self, data: bytes) -> None:
        self.total += len(data)
        room = self.head_cap - self.head
        if room > 0:
            part, data = data[:room], data[room:]
            self._put(part)
            self.head += len(part)
        if data:
            self.tail += data
            over = len(self.tail) - self.tail_cap
            if over > 0:
                del self.tail[:over]
                self.cut += over

    def snapshot(self) -> bytes:
        """Everything written so far, as the finished log will show it. Read
        through the descriptor we created (pread), never by name: a symlink
        swapped in at the path must not be streamed to a follower."""
        if self.closed:
            return self._pread(self._size())
        data = self._pread(self.head) if self.head else b""
        if self.cut:
            data += f"\n[sloth] ... {self.cut} bytes cut here so far ...\n".encode()
        return data + bytes(self.tail)

    def _size(self) -> int:
        try:
            return os.fstat(self.fd).st_size if self.fd is not None else 0
        except OSError:
            return 0

    def _pread(self, n: int) -> bytes:
        out = bytearray()
        try:
            while self.fd is not None and len(out) < n:
                chunk = os.pread(self.fd, n - len(out), len(out))
                if not chunk:
                    break
                out += chunk
        except OSError:
            pass
        return bytes(out)

    def _open(self) -> None:
        try:
            dfd = os.open(self.path.parent, os.O_RDONLY | _DIRECTORY | _NOFOLLOW)
        except OSError as e:
            self.error = f"cannot create {self.path}: {e.strerror or e}"
            return
        try:
            self.fd = os.open(self.path.name, os.O_RDWR | os.O_CREAT | os.O_EXCL | _NOFOLLOW,
                              0o600, dir_fd=dfd)
        except FileExistsError:
            self.error = self._exists(dfd)
        except OSError as e:
            self.error = f"cannot create {self.path}: {e.strerror or e}"
        finally:
            os.close(dfd)

    def _exists(self, dfd: int) -> str:
        try:
            if stat.S_ISDIR(os.lstat(self.path.name, dir_fd=dfd).st_mode):
                return f"cannot create {self.path}: {os.strerror(errno.EISDIR)}"
        except OSError:
            pass
        return f"{self.path} exists; not appending to a file sloth did not create"

    def _put(self, data: bytes) -> None:
        """Write all of ``data``, never raise: a full disk must not stop a
        kill or a settle. What could not be written is counted."""
        if not data:
            return
        if self.closed:
            return  # after finish nothing is written, nor a file made
        if self.error is None and self.fd is None:
            self._open()
        if self.error is not None or self.fd is None:
            self.lost += len(data)
            return
        view = memoryview(data)
        try:
            while view:
                n = os.write(self.fd, view)  # may write only part
                if not n:
                    raise OSError(errno.EIO, "the write made no progress")
                view = view[n:]
        except OSError as e:
            self.error = str(e.strerror or e)
            self.lost += len(view)

    def note(self, text: str) -> None:
        self.write(f"\n[sloth] {text}\n".encode())

    def finish(self) -> None:
        """Write the tail (and what was cut or lost); nothing is written after.
        The file stays open for ``snapshot`` until ``close``."""
        if self.closed:
            return
        if self.cut:
            self._put(
                f"\n[sloth] ... {self.cut} bytes cut here: the log keeps the first "
                f"{self.head_cap} and the last {self.tail_cap} bytes of {self.total} ...\n".encode()
            )
        self._put(bytes(self.tail))
        self.tail.clear()
        if self.error is not None:
            self.problem = f"{self.lost} bytes of output lost: {self.error}"
            if self.fd is not None:  # one more try, in case there is room again
                self.error = None
                self._put(f"\n[sloth] {self.problem}\n".encode())
        self.closed = True

    def close(self) -> None:
        self.finish()
        if self.fd is not None:
            try:
                os.close(self.fd)
            except OSError:
                pass
            self.fd = None


def make_log_dir(path: Path) -> None:
    """Create a folder for attempt logs (0700) if it is missing: LogWriter
    makes no folders. When it exists this is one failing mkdir, no metadata
    write, so calling it before each job costs next to nothing. Never
    raises: a folder that cannot be made is the LogWriter's problem to report."""
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError:
        pass


_PERMANENT_ERRNOS = {errno.ENOENT, errno.EACCES, errno.ENOEXEC, errno.ENOTDIR, errno.EISDIR}


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
    ) -> None:
        self.argv, self.cwd, self.env, self.log = argv, cwd, env, log
        self.on_output, self.on_exit = on_output, on_exit
        self.claim_orphan = claim_orphan
        self.proc: subprocess.Popen[bytes] | None = None
        self.tree: procident.ProcessTree | None = None
        self.returncode: int | None = None
        self.kill_reason: str | None = None
        self.frozen = False
        self.ending: asyncio.Task[None] | None = None  # the tree kill, once begun
        self._rfd: int | None = None
        self._pidfd: int | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.done = asyncio.Event()

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

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
        try:
            self.proc = subprocess.Popen(
                self.argv, cwd=self.cwd, env=self.env, stdin=subprocess.DEVNULL,
                stdout=wfd, stderr=wfd, start_new_session=True, close_fds=True, umask=JOB_UMASK,
            )
        except (OSError, subprocess.SubprocessError) as e:
            os.close(rfd)
            retry = not isinstance(e, OSError) or e.errno not in _PERMANENT_ERRNOS
            raise SpawnError(_spawn_message(self.argv, e), retry=retry,
                             errno=e.errno if isinstance(e, OSError) else None) from e
        finally:
            os.close(wfd)
        self.tree = procident.ProcessTree(self.proc.pid, self.env.get(procident.TOKEN_ENV))
        os.set_blocking(rfd, False)
        self._rfd = rfd
        loop.add_reader(rfd, self._read)
        self._watch_exit(loop)

    def identity(self, **extra: Any) -> dict[str, Any]:
        return procident.identity(self.pid, **extra)

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
            _SigchldWatch.add(loop, self)

    def poll(self) -> bool:
        """Reap if exited. Returns True once the process has ended."""
        if self.returncode is not None:
            return True
        assert self.proc is not None
        code = self.proc.poll()
        if code is None:
            return False
        self.returncode = code
        if self.tree is not None:
            self.tree.root_reaped = True
        if self._pidfd is not None and self._loop is not None:
            self._loop.remove_reader(self._pidfd)
            os.close(self._pidfd)
            self._pidfd = None
        _SigchldWatch.discard(self)
        try:
            self._drain()
        finally:  # whatever happens to the output, the exit must be settled
            self.done.set()
            self.on_exit(self)
        return True

    def alive(self) -> bool:
        """Running and not a zombie (a zombie is about to be reaped: not alive)."""
        if self.returncode is not None or self.proc is None:
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
        """Send ``sig`` to every process of the run (procident.ProcessTree)."""
        if self.tree is None:
            return []
        procs = self.tree.find(self.claim_orphan)
        self.tree.signal(procs, sig)
        return procs

    def freeze(self) -> None:
        """SIGSTOP the whole tree. Twice: a child forked while we looked is
        stopped the second time (a stopped process forks no more)."""
        self.frozen = True
        for _ in range(2):
            self.signal_tree(signal.SIGSTOP)

    def thaw(self) -> None:
        self.frozen = False
        self.signal_tree(signal.SIGCONT)

    def end_tree_soon(self, grace_s: float, reason: str) -> "asyncio.Task[None]":
        """Begin ``end_tree`` now (``ending`` is set before this returns)."""
        if self.kill_reason is None:
            self.kill_reason = reason
        if self.ending is None:
            self.ending = asyncio.get_running_loop().create_task(self._end_tree(grace_s))
        return self.ending

    async def end_tree(self, grace_s: float, reason: str) -> None:
        """SIGTERM the whole tree, wait up to ``grace_s`` for all of it, then
        SIGKILL what is left, looking again until nothing of it lives.
        Returns once the tree is dead and the root reaped. Idempotent: a
        second call waits for the first kill (and keeps the first reason)."""
        await asyncio.shield(self.end_tree_soon(grace_s, reason))

    async def _end_tree(self, grace_s: float) -> None:
        procs = self.signal_tree(signal.SIGTERM)
        if self.frozen:  # a stopped process acts on SIGTERM only once continued
            self.thaw()
        await _wait_gone(procs, grace_s)
        for _ in range(KILL_ROUNDS):
            procs = [p for p in self.signal_tree(signal.SIGKILL) if not procident.gone(p)]
            if not procs:
                break
            await _wait_gone(procs, 1.0)
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


def signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


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
    return f"cannot start {argv[0]}: {getattr(e, 'strerror', None) or e}"


# --------------------------------------------------------------- SIGCHLD
class _SigchldWatch:
    """The one SIGCHLD handler of this process (asyncio keeps one per
    signal): exit notification for jobs without a pidfd (macOS; or
    pidfd_open failed, e.g. out of descriptors), and the hooks of a
    subreaper that must reap the orphans it inherits."""

    procs: set[JobProcess] = set()
    hooks: list[Callable[[], None]] = []
    loop: asyncio.AbstractEventLoop | None = None

    @classmethod
    def install(cls, loop: asyncio.AbstractEventLoop) -> None:
        if cls.loop is not loop and sys.platform != "win32":
            loop.add_signal_handler(signal.SIGCHLD, cls._on_sigchld)
            cls.loop = loop

    @classmethod
    def add(cls, loop: asyncio.AbstractEventLoop, jp: JobProcess) -> None:
        cls.procs.add(jp)
        cls.install(loop)
        loop.call_soon(jp.poll)  # it may already have exited

    @classmethod
    def discard(cls, jp: JobProcess) -> None:
        cls.procs.discard(jp)

    @classmethod
    def _on_sigchld(cls) -> None:
        for jp in list(cls.procs):
            jp.poll()
        for hook in list(cls.hooks):
            hook()


def on_sigchld(loop: asyncio.AbstractEventLoop, hook: Callable[[], None]) -> None:
    """Call ``hook`` (on the loop) whenever a child of ours changes state."""
    _SigchldWatch.hooks.append(hook)
    _SigchldWatch.install(loop)


PR_SET_CHILD_SUBREAPER = 36


def become_subreaper() -> bool:
    """Linux: orphans below us reparent to us instead of to init, so a job's
    double-forked process stays findable (and must be reaped by us:
    ``reap_orphans``). False where there is no such thing (macOS)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return bool(libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0)
    except (OSError, AttributeError):
        return False


def reap_orphans(roots: Mapping[int, JobProcess]) -> list[int]:
    """Reap every exited child of ours that is not a job root (an orphan we
    inherited as subreaper); returns their pids. Peeks first (WNOWAIT) so a
    job root's exit status is never stolen: its own JobProcess reaps it."""
    reaped: list[int] = []
    while True:
        try:
            info = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            break  # no children at all
        if info is None:
            break  # none has exited
        jp = roots.get(info.si_pid)
        if jp is not None:
            if not jp.poll():
                break  # cannot be (it is waitable); never spin on it
            continue
        try:
            os.waitpid(info.si_pid, os.WNOHANG)
            reaped.append(info.si_pid)
        except ChildProcessError:
            pass
    return reaped

"""Runs one job's process: own session, captured and capped log, tree kill.

Knows nothing of the queue: the worker claims, this runs, the worker settles.
Exit is noticed through a pidfd on Linux (no polling, no extra thread) and
through SIGCHLD elsewhere.
"""

from __future__ import annotations

import asyncio
import errno
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

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


class LogWriter:
    """Writes one attempt's output, capped: past ``cap`` bytes it keeps the
    first half and the last half and says in between how much was cut.

    The file is created with the first byte written, so an attempt that
    prints nothing leaves no file. That is fewer empty files for the many
    quiet jobs, and it is cheaper than it looks: on ext4 every new file's
    metadata rides along with the queue's next fsync, which made creating
    it about a fifth of a trivial job's whole cost (tests/bench/bench_daemon.py).

    The head goes to disk as it arrives; the tail is held in memory and
    written when the attempt ends (so after a daemon crash the log holds the
    head only). Never raises: a file that cannot be created or written (full
    disk, a folder in the way) counts the bytes lost, and ``problem`` says so
    for the job's history, since the log itself cannot."""

    def __init__(self, path: Path, cap: int) -> None:
        self.path = path
        self.f: Any = None  # a raw binary file once the first byte comes
        self.closed = False
        self.base = 0  # where our output starts in the file (appended to)
        self.head_cap = cap // 2
        self.tail_cap = cap - self.head_cap
        self.head = 0
        self.tail = bytearray()
        self.cut = 0
        self.total = 0
        self.lost = 0  # bytes that could not be written (disk full ...)
        self.error: str | None = None
        self.problem: str | None = None  # what was lost and why, once closed

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
        """Everything written so far, as the finished log will show it."""
        data = b""
        if self.head and self.f is not None:  # never another run's bytes from a file we could not open
            try:
                with open(self.path, "rb") as f:
                    f.seek(self.base)
                    data = f.read(self.head)
            except OSError:
                pass
        if self.cut:
            data += f"\n[sloth] ... {self.cut} bytes cut here so far ...\n".encode()
        return data + bytes(self.tail)

    def _open(self) -> None:
        try:
            try:
                self.f = open(self.path, "ab", buffering=0)
            except FileNotFoundError:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self.f = open(self.path, "ab", buffering=0)
            self.base = self.f.tell()
        except OSError as e:
            self.error = f"cannot create {self.path}: {e.strerror or e}"

    def _put(self, data: bytes) -> None:
        """Write all of ``data``, never raise: a full disk must not stop a
        kill or a settle. What could not be written is counted."""
        if not data:
            return
        if self.closed:
            return  # after close nothing is written, nor a file made
        if self.error is None and self.f is None:
            self._open()
        if self.error is not None:
            self.lost += len(data)
            return
        view = memoryview(data)
        try:
            while view:
                n = self.f.write(view)  # a raw file may write only part
                if not n:
                    raise OSError(errno.EIO, "the write made no progress")
                view = view[n:]
        except (OSError, ValueError) as e:
            self.error = str(getattr(e, "strerror", None) or e)
            self.lost += len(view)

    def note(self, text: str) -> None:
        self.write(f"\n[sloth] {text}\n".encode())

    def close(self) -> None:
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
            self.error = None  # one more try, in case there is room again
            self._put(f"\n[sloth] {self.problem}\n".encode())
        self.closed = True
        if self.f is not None:
            try:
                self.f.close()
            except OSError:
                pass


_PERMANENT_ERRNOS = {errno.ENOENT, errno.EACCES, errno.ENOEXEC, errno.ENOTDIR, errno.EISDIR}


class JobProcess:
    """One running attempt. Callbacks run on the event loop thread."""

    def __init__(
        self,
        argv: list[str],
        *,
        cwd: str | None,
        env: dict[str, str],
        log: LogWriter,
        on_output: Callable[[bytes], None],
        on_exit: Callable[["JobProcess"], None],
    ) -> None:
        self.argv, self.cwd, self.env, self.log = argv, cwd, env, log
        self.on_output, self.on_exit = on_output, on_exit
        self.proc: subprocess.Popen[bytes] | None = None
        self.returncode: int | None = None
        self.kill_reason: str | None = None
        self.known_tree: dict[int, psutil.Process] = {}
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
        except OSError as e:
            os.close(rfd)
            raise SpawnError(_spawn_message(self.argv, e),
                             retry=e.errno not in _PERMANENT_ERRNOS, errno=e.errno) from e
        finally:
            os.close(wfd)
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
            except OSError:
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

    def refresh_tree(self) -> None:
        """Remember every descendant seen, so a grandchild whose parent has
        exited (and so left the tree) can still be found and ended."""
        if self.returncode is None:
            for p in procident.descendants(self.pid):
                self.known_tree.setdefault(p.pid, p)

    def signal_tree(self, sig: int) -> None:
        if self.proc is None:
            return
        self.refresh_tree()
        procident.signal_tree(self.pid, sig, list(self.known_tree.values()))

    async def end_tree(self, grace_s: float, reason: str) -> None:
        """SIGTERM the whole tree, wait ``grace_s``, then SIGKILL what is left."""
        if self.kill_reason is None:
            self.kill_reason = reason
        self.signal_tree(signal.SIGTERM)
        try:
            await asyncio.wait_for(self.done.wait(), grace_s)
        except asyncio.TimeoutError:
            pass
        self.signal_tree(signal.SIGKILL)
        # Also the stragglers that outlived the root (setsid grandchildren).
        for p in list(self.known_tree.values()):
            try:
                p.send_signal(signal.SIGKILL)
            except psutil.Error:
                pass
        await self.done.wait()

    def outcome(self) -> tuple[bool, str]:
        """(succeeded, message) for the job's history."""
        code = self.returncode
        if self.kill_reason:
            return False, self.kill_reason
        if code == 0:
            return True, "exit 0"
        if code is not None and code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = f"signal {-code}"
            return False, f"killed by {name}"
        return False, f"exit {code}"


def _spawn_message(argv: list[str], e: OSError) -> str:
    if e.errno == errno.ENOENT:
        return f"command not found: {argv[0]}"
    if e.errno == errno.EACCES:
        return f"permission denied running {argv[0]}"
    return f"cannot start {argv[0]}: {e.strerror or e}"


class _SigchldWatch:
    """Fallback exit notification where pidfd does not exist (macOS)."""

    procs: set[JobProcess] = set()
    installed = False

    @classmethod
    def add(cls, loop: asyncio.AbstractEventLoop, jp: JobProcess) -> None:
        cls.procs.add(jp)
        if not cls.installed and sys.platform != "win32":
            loop.add_signal_handler(signal.SIGCHLD, cls._on_sigchld)
            cls.installed = True
        loop.call_soon(jp.poll)  # it may already have exited

    @classmethod
    def discard(cls, jp: JobProcess) -> None:
        cls.procs.discard(jp)

    @classmethod
    def _on_sigchld(cls) -> None:
        for jp in list(cls.procs):
            jp.poll()

"""How a job's process is made (runner.JobProcess starts it, here): in a
session of its own, stdin /dev/null, stdout and stderr one pipe, the job's
environment, working directory and umask, SIGPIPE and SIGXFSZ (which Python
ignores) back to their defaults, no descriptor of the keeper's but those.

Two ways, one result. Where nothing has to run in the child before its exec
(no ``preexec``: a run's limits need one) and this process has made every
descriptor of its own close-on-exec (``seal_descriptors``, at the keeper's
start), it is one ``os.posix_spawn``: glibc's clone(CLONE_VFORK) with no
Python between the fork and the exec, no error pipe (the exec's errno comes
back through the shared memory), the environment packed in C, PATH searched
in C. Otherwise ``subprocess.Popen``, whose ``close_fds`` closes whatever
the process left inheritable. The keeper is suspended while its child
execs either way (vfork), so the spawn is on the path from one job's end to
the next one's start: the fast way takes a third less of the keeper's CPU
per `true` (docs/benchmarks.md, "Round 4, session 5: the keeper's path").

posix_spawn has no working directory, umask or PATH of the child's own, so
the keeper lends it its own for the call: chdir there and back, umask and
back, and PATH (posix_spawnp searches the caller's) set to the job's and
back. The keeper is one thread: nothing else runs meanwhile.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from typing import Callable

_DEFAULTS = tuple(s for s in (getattr(signal, "SIGPIPE", None), getattr(signal, "SIGXFSZ", None)) if s is not None)
_state: dict[str, int | bool | None] = {"sealed": False, "devnull": None, "home": None}


def seal_descriptors() -> None:
    """Make every descriptor of this process but 0, 1 and 2 close-on-exec,
    once, at the start (whatever its starter left open): from then on every
    descriptor is made so by Python (PEP 446), and a job can be spawned
    without closing any. Its working directory now is the one each spawn
    comes back to (the keeper never changes it after). Linux only
    (elsewhere jobs are spawned by Popen)."""
    if not sys.platform.startswith("linux") or not hasattr(os, "posix_spawnp"):
        return
    try:
        fds = [int(n) for n in os.listdir("/proc/self/fd")]
        home = os.open(".", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return
    for fd in fds:
        if fd > 2:
            try:
                os.set_inheritable(fd, False)
            except OSError:
                pass  # the listing's own, closed by now
    _state["home"], _state["sealed"] = home, True


def spawn(argv: list[str], *, cwd: str | None, env: dict[str, str], out: int, umask: int,
          preexec: Callable[[], None] | None) -> tuple[int, subprocess.Popen[bytes] | None]:
    """Start ``argv`` (its pid, and the Popen if it was made by one). Raises
    OSError or subprocess.SubprocessError as Popen does: the exec's errno
    (ENOENT: no such command), or the working directory's (its filename)."""
    # An empty command name: posix_spawn raises ValueError where Popen's
    # exec fails as it should (an OSError: the run's spawn failure).
    if _state["sealed"] and preexec is None and argv[0]:
        try:
            return _posix_spawn(argv, cwd, env, out, umask), None
        except NotImplementedError:  # a libc without POSIX_SPAWN_SETSID: Popen from now on
            _state["sealed"] = False
    proc = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                            start_new_session=True, close_fds=True, umask=umask, preexec_fn=preexec)
    return proc.pid, proc


def _posix_spawn(argv: list[str], cwd: str | None, env: dict[str, str], out: int, umask: int) -> int:
    null = _devnull()
    actions = [(os.POSIX_SPAWN_DUP2, null, 0), (os.POSIX_SPAWN_DUP2, out, 1), (os.POSIX_SPAWN_DUP2, out, 2)]
    search = "/" not in argv[0]
    mask = os.umask(umask)
    path = os.environ.get("PATH") if search else None
    try:
        if cwd is not None:
            os.chdir(cwd)
        if search:
            _put_path(env.get("PATH"))
        return (os.posix_spawnp if search else os.posix_spawn)(
            argv[0], argv, env, file_actions=actions, setsid=True, setsigdef=_DEFAULTS)
    finally:
        if search:
            _put_path(path)
        os.umask(mask)
        if cwd is not None:
            os.fchdir(_state["home"])  # type: ignore[arg-type]


def _put_path(value: str | None) -> None:
    """The C environment's PATH (what posix_spawnp searches), without
    touching os.environ's copy: it is put back as it was right after."""
    if value is None:
        os.unsetenv("PATH")
    else:
        os.putenv("PATH", value)


def _devnull() -> int:
    """A job's stdin: one /dev/null kept open (close-on-exec) for every spawn."""
    fd = _state["devnull"]
    if not isinstance(fd, int):
        fd = _state["devnull"] = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
    return fd

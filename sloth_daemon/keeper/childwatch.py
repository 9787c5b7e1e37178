"""This process as a parent of jobs: the one SIGCHLD handler, and on Linux
a subreaper that reaps the orphans it inherits.

Knows nothing of what a job is: a child is anything with ``poll()`` that
reaps it (runner.JobProcess).
"""

from __future__ import annotations

import asyncio
import ctypes
import os
import signal
import sys
from typing import Callable, Mapping, Protocol


class Child(Protocol):
    def poll(self) -> bool:
        """Reap if exited; True once it has ended."""


class SigchldWatch:
    """The one SIGCHLD handler of this process (asyncio keeps one per
    signal): exit notification for jobs without a pidfd (macOS; or
    pidfd_open failed, e.g. out of descriptors), and the hooks of a
    subreaper that must reap the orphans it inherits."""

    procs: set[Child] = set()
    hooks: list[Callable[[], None]] = []
    loop: asyncio.AbstractEventLoop | None = None

    @classmethod
    def install(cls, loop: asyncio.AbstractEventLoop) -> None:
        if cls.loop is not loop and sys.platform != "win32":
            loop.add_signal_handler(signal.SIGCHLD, cls._on_sigchld)
            cls.loop = loop

    @classmethod
    def add(cls, loop: asyncio.AbstractEventLoop, child: Child) -> None:
        cls.procs.add(child)
        cls.install(loop)
        loop.call_soon(child.poll)  # it may already have exited

    @classmethod
    def discard(cls, child: Child) -> None:
        cls.procs.discard(child)

    @classmethod
    def _on_sigchld(cls) -> None:
        for child in list(cls.procs):
            child.poll()
        for hook in list(cls.hooks):
            hook()


def on_sigchld(loop: asyncio.AbstractEventLoop, hook: Callable[[], None]) -> None:
    """Call ``hook`` (on the loop) whenever a child of ours changes state."""
    SigchldWatch.hooks.append(hook)
    SigchldWatch.install(loop)


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


def reap_orphans(roots: Mapping[int, Child]) -> list[int]:
    """Reap every exited child of ours that is not a job root (an orphan we
    inherited as subreaper); returns their pids. Peeks first (WNOWAIT) so a
    job root's exit status is never stolen: its own ``poll`` reaps it."""
    reaped: list[int] = []
    while True:
        try:
            info = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            break  # no children at all
        if info is None:
            break  # none has exited
        root = roots.get(info.si_pid)
        if root is not None:
            if not root.poll():
                break  # cannot be (it is waitable); never spin on it
            continue
        try:
            os.waitpid(info.si_pid, os.WNOHANG)
            reaped.append(info.si_pid)
        except ChildProcessError:
            pass
    return reaped

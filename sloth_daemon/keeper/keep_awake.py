"""A run's sleep inhibitor (``--keep-awake``), held by the keeper for the
run's whole life, and what can hold one here (``keep_awake_here``: `sloth
add` refuses --keep-awake where nothing can, `sloth doctor` says which).

Keep-awake: Linux runs ``systemd-inhibit --what=sleep:idle --who=sloth
--why="job N" --mode=block cat``, whose ``cat`` reads a pipe only the keeper
writes to: the inhibitor lives exactly as long as that pipe is open, so it
is released when the run ends (the keeper closes it and ends the holder),
and when the keeper itself dies, however (the kernel closes the pipe; cat
sees end of file, systemd-inhibit exits, logind drops the lock): it cannot
outlive the run's keeper. macOS runs ``caffeinate -i -w PID`` (it ends by
itself when the job's process does). A holder that cannot start, or exits
while the run lives (no logind here, a refusal), is reported (``lost``)
and the job runs on.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
from typing import Callable

from sloth_daemon.keeper.childwatch import SigchldWatch

INHIBIT_TOOL = "systemd-inhibit"


def inhibit_argv(job_id: int, pid: int, system: str = sys.platform) -> list[str] | None:
    """The holder's command for a run of ``job_id`` whose root is ``pid``;
    None where this platform has none."""
    if system.startswith("linux"):
        return [INHIBIT_TOOL, "--what=sleep:idle", "--who=sloth", f"--why=job {job_id}", "--mode=block", "cat"]
    if system == "darwin":
        return ["caffeinate", "-i", "-w", str(pid)]
    return None


def keep_awake_here() -> tuple[str | None, str | None]:
    """What keeps this machine awake for a job: (the tool, None), or (None,
    why nothing can). On Linux `systemd-inhibit --list` asks logind over the
    system bus, as holding a lock will (no bus, no logind: nothing can);
    a policy that refuses the lock itself is only learnt by taking it."""
    argv = inhibit_argv(0, 0)
    if argv is None:
        return None, f"nothing inhibits sleep on {sys.platform}"
    tool = shutil.which(argv[0])
    if tool is None:
        return None, f"{argv[0]} is not installed here"
    if argv[0] != INHIBIT_TOOL:
        return argv[0], None
    try:
        cp = subprocess.run([tool, "--list", "--no-pager"], capture_output=True, text=True, timeout=5,
                            stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError) as e:
        return None, f"{INHIBIT_TOOL} --list failed: {e}"
    if cp.returncode != 0:
        said = (cp.stderr or cp.stdout).strip().splitlines()
        return None, (f"{INHIBIT_TOOL} cannot reach logind (exit {cp.returncode}"
                      + (f": {said[-1]}" if said else "") + ")")
    return INHIBIT_TOOL, None


class Inhibitor:
    """One run's sleep inhibitor: its holder process (a child of the
    keeper, in a process group of its own) and, on Linux, the pipe that
    keeps it alive. ``lost(message)`` is called if it cannot be held or
    stops holding while the run lives, ``holds(message)`` once it is seen
    holding; ``verdict()`` at the run's end says what the history has not
    yet heard (so every run says one thing of it, however short); then
    ``release()`` ends it."""

    def __init__(self, argv: list[str], lost: Callable[[str], None]) -> None:
        self.argv, self._lost = argv, lost
        self.proc: subprocess.Popen[bytes] | None = None
        self._wfd: int | None = None
        self._released = False
        self.said = False  # the run's history has heard of it (held, or why not)

    def lost(self, message: str) -> None:
        self.said = True
        self._lost(message)

    def holding(self) -> bool:
        """Seen holding: systemd-inhibit runs its command (a child) only once
        logind granted the lock; caffeinate holds while it lives."""
        if self.proc is None or self.proc.poll() is not None:
            return False
        if self.argv[0] != INHIBIT_TOOL:
            return True
        try:
            with open(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children") as f:
                return bool(f.read().split())
        except OSError:  # a kernel without CONFIG_PROC_CHILDREN: ask psutil (a scan of /proc)
            import psutil

            try:
                return bool(psutil.Process(self.proc.pid).children())
            except psutil.Error:
                return False

    def verdict(self) -> str | None:
        """At the run's end, before release: what its history has not heard
        yet of the inhibitor (None: it has)."""
        if self.said or self.poll():  # poll: one that failed says so itself
            return None
        self.said = True
        if self.holding():
            return f"kept awake by {self.argv[0]} (pid {self.pid}) while it ran"
        return f"not kept awake: the job ended before {self.argv[0]} held the lock"

    def confirmed(self) -> str | None:
        """While the run lives: "kept awake ..." the first time it is seen holding."""
        if self.said or not self.holding():
            return None
        self.said = True
        return f"kept awake by {self.argv[0]} (pid {self.pid})"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        tool = shutil.which(self.argv[0])
        if tool is None:
            self.lost(f"keep-awake unavailable: {self.argv[0]} is not installed here")
            return
        rfd, wfd = os.pipe()
        try:
            self.proc = subprocess.Popen(  # noqa: ASYNC220 - a fork and exec, once per run that asks
                [tool, *self.argv[1:]], stdin=rfd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                start_new_session=True, close_fds=True)
        except OSError as e:
            os.close(wfd)
            self.lost(f"keep-awake unavailable: cannot run {self.argv[0]}: {e.strerror or e}")
            return
        finally:
            os.close(rfd)
        os.set_inheritable(wfd, False)
        self._wfd = wfd
        SigchldWatch.add(loop, self)

    def poll(self) -> bool:
        """Reap the holder if it has exited; one that exits before its
        release could not hold, or was ended by someone: say so."""
        if self.proc is None:
            return True
        if self.proc.poll() is None:
            return False
        SigchldWatch.discard(self)
        if not self._released:
            err = b""
            if self.proc.stderr is not None:
                try:
                    os.set_blocking(self.proc.stderr.fileno(), False)
                    err = self.proc.stderr.read(2000) or b""
                except OSError:
                    pass
            why = err.decode("utf-8", "replace").strip().splitlines()
            self.lost(f"keep-awake unavailable: {self.argv[0]} exited {self.proc.returncode}"
                      + (f": {why[-1]}" if why else ""))
        self._close()
        return True

    def release(self) -> None:
        """Drop the inhibitor now: close the holder's pipe and end its group."""
        if self._released:
            return
        self._released = True
        if self._wfd is not None:
            os.close(self._wfd)
            self._wfd = None
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
            except (ProcessLookupError, PermissionError):
                pass

    def _close(self) -> None:
        if self._wfd is not None:
            os.close(self._wfd)
            self._wfd = None
        if self.proc is not None and self.proc.stderr is not None:
            self.proc.stderr.close()

"""Being told when jobs end: desktop notifications and the ``on_finish`` hook.

Both are child processes of the daemon, started without waiting for them
(asyncio subprocesses) and bounded every way: at most ``MAX_RUNNING`` at
once, at most ``MAX_PENDING`` waiting (past that a notice is dropped and
counted: a 50,000-job chain cancelled at once must not queue 50,000 hooks
without end), and at most ``OUTPUT_CAP`` bytes of its output kept (for the
daemon log). When one ends, times out, or the daemon stops, its whole tree
is ended the way a job's is (runner.end_tree over a procident.ProcessTree:
its group, every descendant seen, and every process that carries its
token, SLOTH_JOB_TOKEN=tell-..., so a child that called setsid or
double-forked goes too).
:meth:`Teller.job_changed` only schedules: nothing here blocks the worker.

Notifications go through ``notify-send`` (Linux) or ``osascript`` (macOS),
whichever is on PATH; by default for failures only (``notify`` setting:
failed, done, drained). The hook gets the job as JSON on stdin and
SLOTH_JOB_ID, SLOTH_JOB_STATE, SLOTH_JOB_EXIT_CODE, SLOTH_JOB_LOG in its
environment, for every job that ends (done, failed or cancelled).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from sloth_daemon.daemon.which import which as path_which
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from sloth_daemon.config import Settings
from sloth_daemon.models import Job, JobState
from sloth_daemon.keeper.jobenv import job_env

if TYPE_CHECKING:
    import psutil

    from sloth_daemon.daemon.telling.sender import Sender

    from sloth_daemon.keeper import procident

log = logging.getLogger("sloth.tell")
MAX_RUNNING = 4
MAX_PENDING = 256
OUTPUT_CAP = 8192
NOTIFY_TIMEOUT_S = 10.0
HOME = os.path.expanduser("~")  # where hooks start: a stable folder of the user's


# The AppleScript that shows a notification: a constant. The title and the
# body (a job's command: anyone's text) reach it as the run handler's
# arguments, data that no quote or backslash in them can turn into code.
APPLESCRIPT = ("on run argv", "display notification (item 2 of argv) with title (item 1 of argv)", "end run")


def notify_argv(title: str, body: str, *, urgent: bool, which: Callable[[str], str | None] = path_which,
                platform: str = sys.platform) -> list[str] | None:
    """The command that shows a desktop notification here, or None if none
    can. Text that is not ours comes after every option, past an explicit
    end of options (``--``), so a command like ``-u critical`` or ``--help``
    is shown, never obeyed."""
    title, body = title.replace("\0", ""), body.replace("\0", "")  # an argument cannot hold a NUL
    if platform == "darwin" and which("osascript"):
        # After the scripts its arguments are the handler's, not options:
        # osascript stops reading options at the first (our title).
        return ["osascript", *(a for line in APPLESCRIPT for a in ("-e", line)), title, body]
    exe = which("notify-send")
    if exe:
        return [exe, "-a", "sloth", "-u", "critical" if urgent else "normal", "--", title, body]
    return None


class Teller:
    """Desktop notifications and the on_finish hook (here), and ``sender``:
    the outbox's pings, webhooks and mail (daemon/telling/sender.py), woken
    by every change of a job (its messages were written with it)."""

    def __init__(self, settings: Settings, *, log_path: Callable[[int, int], Path],
                 lane_busy: Callable[[str], bool], which: Callable[[str], str | None] = path_which,
                 sender: Sender | None = None, renewed: bool = False) -> None:
        self.settings, self.log_path, self.lane_busy, self.which = settings, log_path, lane_busy, which
        self.sender = sender
        self.stats = {"notified": 0, "hooks": 0, "failed": 0, "timed_out": 0, "dropped": 0}
        self._tasks: set[asyncio.Task[None]] = set()
        self._slots = asyncio.Semaphore(MAX_RUNNING)
        self._told: dict[int, float] = {}  # job id -> finished_at already told (a change can repeat)
        self._ended: dict[str, int] = {}  # lane -> jobs ended since it was last empty
        # "no notify-send": said once, not at every job; a renewed daemon (same
        # settings, same PATH: renewal.py) is one daemon to its log, said already
        self._said_no_tool = renewed
        # Why notifications fail, while they do: said in the log once per cause, and by `sloth doctor`.
        self.notify_trouble: dict[str, Any] | None = None
        self._check_tool()
        _ready_for_hooks(settings)

    def apply(self, settings: Settings) -> None:
        """New settings (a config reload)."""
        self.settings = settings
        if self.sender is not None:
            self.sender.settings = settings
        self._check_tool()
        _ready_for_hooks(settings)

    def _check_tool(self) -> None:
        """Say in the log, once, that notifications are asked for but cannot
        be shown here (a failure must not pass silently)."""
        if not self.settings.notify or self._said_no_tool:
            return
        if notify_argv("", "", urgent=False, which=self.which) is None:
            self._said_no_tool = True
            log.warning("notify = %s, but neither notify-send nor osascript is on PATH (%s): no desktop "
                        "notification will show; install notify-send (libnotify-bin) or set notify = [] "
                        "(`sloth doctor` checks it)", list(self.settings.notify), os.environ.get("PATH", ""))

    # --------------------------------------------------------------- news
    def job_changed(self, job: Job) -> None:
        """A job changed state (from Control.job_changed): tell of its end once."""
        if self.sender is not None and job.tell:
            self.sender.wake()  # its transition wrote its messages: deliver them
        if not job.state.finished:
            return
        if self._told.get(job.id) == job.finished_at:
            return
        if len(self._told) > 4096:
            self._told.clear()
        self._told[job.id] = job.finished_at or 0.0
        self._notify_job(job)
        if self.settings.on_finish:
            self._hook(job)
        if "drained" in self.settings.notify:
            self._maybe_drained(job.lane)

    def _maybe_drained(self, lane: str) -> None:
        """Tell when a lane empties after a batch (two jobs or more: after a
        single job, its own notice says as much)."""
        n = self._ended[lane] = self._ended.get(lane, 0) + 1
        if self.lane_busy(lane):
            return
        del self._ended[lane]
        if n >= 2:
            self._notify(f"sloth: lane {lane} drained", f"{n} jobs ended; none is left queued or running in {lane}",
                         urgent=False)

    def _notify_job(self, job: Job) -> None:
        st = job.state
        if st is JobState.FAILED and "failed" in self.settings.notify:
            self._notify(f"sloth: job {job.id} failed", f"{job.message}\n{_command(job)}", urgent=True)
        elif st is JobState.DONE and "done" in self.settings.notify:
            self._notify(f"sloth: job {job.id} done", _command(job), urgent=False)

    def _notify(self, title: str, body: str, *, urgent: bool) -> None:
        argv = notify_argv(title, body, urgent=urgent, which=self.which)
        if argv is None:
            self._check_tool()  # said once (at start, or now if PATH lost it since)
            log.debug("no notify-send or osascript on PATH: %s", title)
            return
        self.stats["notified"] += 1
        self._start(argv, b"", dict(os.environ), NOTIFY_TIMEOUT_S, "notification", self._notified)

    def _notified(self, why: str | None) -> None:
        """A notification ended (``why``: how it failed). A failure is said
        once per cause: the next job's notice fails the same way (no session
        bus for the daemon: every one would), so it is counted, not logged
        again; `sloth doctor` shows it (status ``notify``)."""
        was = self.notify_trouble
        if why is None:
            if was is not None:
                log.info("desktop notifications work again (%d failed: %s)", was["failed"], was["cause"])
            self.notify_trouble = None
            return
        if was is not None and was["cause"] == why:
            was["failed"] += 1
            was["last_at"] = time.time()
            return
        self.notify_trouble = {"cause": why, "failed": 1, "since": time.time(), "last_at": time.time()}
        log.warning("desktop notifications fail: %s (said once while it lasts; `sloth doctor` shows it)", why)

    def status(self) -> dict[str, Any]:
        """What the status op says of notifications: asked for which ends, and any trouble."""
        return {"events": list(self.settings.notify), "trouble": self.notify_trouble}

    def notify(self, title: str, body: str) -> None:
        """A desktop notification of the daemon's own (a schedule's missed window), if ``notify`` wants failures."""
        if "failed" in self.settings.notify:
            self._notify(title, body, urgent=True)

    def _hook(self, job: Job) -> None:
        logf = str(self.log_path(job.id, job.attempts)) if job.attempts else ""
        data = json.dumps({**job.to_dict(), "log": logf or None}).encode()
        env = job_env(dict(os.environ), {
            "SLOTH_JOB_ID": str(job.id), "SLOTH_JOB_STATE": job.state.value, "SLOTH_JOB_LOG": logf,
            "SLOTH_JOB_EXIT_CODE": "" if job.exit_code is None else str(job.exit_code)})
        self.stats["hooks"] += 1
        what = f"on_finish for job {job.id}"

        def ended(why: str | None) -> None:  # a hook is the user's, per job: each failure is said
            if why is not None:
                log.warning("%s %s", what, why)
        self._start(["/bin/sh", "-c", "--", self.settings.on_finish], data, env, self.settings.hook_timeout_s,
                    what, ended)

    # ------------------------------------------------------------ processes
    def _start(self, argv: list[str], data: bytes, env: dict[str, str], timeout_s: float, what: str,
               ended: Callable[[str | None], Any]) -> None:
        """Run ``argv`` (bounded: see the module docstring); ``ended(why)``
        once it is over (``why``: how it failed, None if it did not)."""
        if len(self._tasks) >= MAX_PENDING:
            n = self.stats["dropped"] = self.stats["dropped"] + 1
            if n & (n - 1) == 0:  # 1st, 2nd, 4th, 8th ...: a flood must not flood the log too
                log.warning("%s dropped: %d notices already waiting (%d dropped so far)", what, MAX_PENDING, n)
            return
        task = asyncio.get_running_loop().create_task(self._run(argv, data, env, timeout_s, ended))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run(self, argv: list[str], data: bytes, env: dict[str, str], timeout_s: float,
                   ended: Callable[[str | None], Any]) -> None:
        from sloth_daemon.keeper import procident  # here: psutil only once a hook runs (docs/idle.md)

        async with self._slots:
            token = f"tell-{os.urandom(8).hex()}"  # what finds its escapees, as a job's token finds a job's
            proc = await self._spawn(argv, {**env, procident.TOKEN_ENV: token}, ended)
            if proc is None:
                return
            tree = procident.ProcessTree(proc.pid, token)
            try:
                out = await asyncio.wait_for(_talk(proc, data), timeout_s)
            except asyncio.TimeoutError:
                self.stats["timed_out"] += 1
                ended(f"still running after {timeout_s:g}s: killed")
                return
            finally:  # ended, timed out or the daemon stops: whatever of it still runs goes
                await _end(proc, tree)
            if proc.returncode:
                self.stats["failed"] += 1
                ended(f"exited {proc.returncode}: {out.decode('utf-8', 'replace').strip()}")
            else:
                ended(None)

    async def _spawn(self, argv: list[str], env: dict[str, str],
                     ended: Callable[[str | None], Any]) -> asyncio.subprocess.Process | None:
        """The command in its own session (so its whole group can be killed), or None if it cannot start."""
        try:
            return await asyncio.create_subprocess_exec(
                *argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT, env=env, cwd=HOME, start_new_session=True)
        except OSError as e:
            self.stats["failed"] += 1
            ended(f"could not start: {e.strerror or e}")
            return None

    async def close(self, grace_s: float = 2.0) -> None:
        """The daemon is stopping: give what runs ``grace_s``, then kill it."""
        if self._tasks:
            _, late = await asyncio.wait(set(self._tasks), timeout=grace_s)
            for t in late:
                t.cancel()
            if late:
                await asyncio.wait(late, timeout=grace_s)


async def _talk(proc: asyncio.subprocess.Process, data: bytes) -> bytes:
    """Feed stdin (the job JSON), keep the first OUTPUT_CAP bytes of output, wait for the end."""
    assert proc.stdin is not None and proc.stdout is not None
    try:
        proc.stdin.write(data)
        await proc.stdin.drain()
    except (BrokenPipeError, ConnectionResetError):
        pass  # a hook need not read its stdin
    proc.stdin.close()
    kept = b""
    while chunk := await proc.stdout.read(65536):
        if len(kept) < OUTPUT_CAP:
            kept += chunk[:OUTPUT_CAP - len(kept)]
    await proc.wait()
    return kept


def _ready_for_hooks(settings: Settings) -> None:
    """With on_finish set a hook runs at every job's end: what finds and ends
    its tree (keeper/runner, procident, psutil) is loaded now, not beside the
    first hook; without it, only when a notification runs (docs/idle.md)."""
    if settings.on_finish:
        import sloth_daemon.keeper.runner  # noqa: F401


async def _end(proc: asyncio.subprocess.Process, tree: procident.ProcessTree) -> None:
    """End all of a hook's or notification's tree at once (no grace: it
    had its time), then reap it. Whether one that exited left anything is
    looked for off the loop (a scan of this uid's processes, ~5 ms)."""
    from sloth_daemon.keeper.runner import end_tree  # here: psutil only once a hook runs (docs/idle.md)

    def signal_tree(sig: int) -> list[psutil.Process]:
        tree.root_reaped = proc.returncode is not None  # a reaped root's group id may be reused
        procs = tree.find()
        tree.signal(procs, sig)
        return procs
    if proc.returncode is not None:
        tree.root_reaped = True
        if not await asyncio.to_thread(tree.find):
            return  # it left nothing running: the usual end
    await end_tree(signal_tree, 0.0)
    await proc.wait()


def _command(job: Job) -> str:
    text = job.command[2] if job.shell and len(job.command) == 3 else " ".join(job.command)
    text = f"[{job.label}] {text}" if job.label else text
    return text if len(text) <= 200 else text[:199] + "…"

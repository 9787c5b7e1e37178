"""The keeper's run table: every run it holds, and what happens to a run
without a request -- its output handed to followers, its exit settled and
journalled, its timeout, its trust deadline (fenced, or frozen across a
suspend), its tree remembered, orphans attributed to it.

The ops (keeper/server.py) change it; it tells the keeper what the daemon
must hear (``event``) and when what it holds has changed (``changed``).
Runs pending behind another (spawn ``after``) are its collaborator's,
``pending`` (keeper/pending.py); a run itself is keeper/kept_run.py's.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any, Callable

import psutil

from sloth_daemon.checks import format_size
from sloth_daemon.keeper import keep_awake, procident, progress, resource_limits
from sloth_daemon.keeper.cost import run_cost
from sloth_daemon.keeper.childwatch import Child
from sloth_daemon.keeper.keep_awake import Inhibitor
from sloth_daemon.errors import SpawnError
from sloth_daemon.keeper.joblog import LogWriter
from sloth_daemon.keeper.pending import PendingRuns
from sloth_daemon.keeper.kept_run import Launch, KeptRun
from sloth_daemon.keeper.wire import (
    EnvCache, Journal, Refused, Trust, clocks_now, number, read_journal, secs, spawn_command, text, trust_verdict,
    whole,
)
from sloth_daemon.keeper.runner import JobProcess
from sloth_daemon.keeper.results import read_result
from sloth_daemon.keeper.watchdog import Watch, parse_watch

log = logging.getLogger("sloth.keeper")

# A check this far past its time: the keeper did not run meanwhile (SIGSTOP,
# a swap storm), so the daemon's renewals may wait unread in its socket.
STALL_S = 0.5
AWAKE_LOOKS_S = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0)  # after a holder starts: when to look whether it holds


class KeptRuns:
    """The runs, by key. ``event(kind, key, **fields)`` pushes an event to
    the daemon (if one is attached); ``changed()`` is called after every
    change to what is held (the keeper journals, and decides whether to exit).
    Runs pending behind another are ``pending``'s (keeper/pending.py): it reads
    ``runs``, only the table adds and removes them."""

    def __init__(self, journal: Path, *, check_s: float, event: Callable[..., None],
                 changed: Callable[[], None]) -> None:
        self.runs: dict[str, KeptRun] = {}
        # root pid -> its process (a job's, or a sleep inhibitor's): reap_orphans leaves them be
        self.roots: dict[int, Child] = {}
        # Set by the keeper once its SIGCHLD hook (a subreaper's reap_orphans)
        # polls every root on each child's exit: a job then needs no exit
        # watch of its own (a pidfd: four syscalls and two selector changes a job).
        self.roots_reaped = False
        self.forgotten: list[tuple[float, float]] = []  # acked runs' lifetimes, for orphan attribution
        self.journal = Journal(journal)
        self.check_s = check_s
        self.event, self.changed = event, changed
        self._tick: asyncio.TimerHandle | None = None
        self._file_poll: asyncio.TimerHandle | None = None  # the runs' progress files looked at (keeper/progress.py)
        self._ambiguous: set[int] = set()
        self._read_first: asyncio.TimerHandle | None = None  # a stall was seen: fencing waits for input read
        self._reaping_late: float | None = None  # reap_exited's: how late the check that reaps is
        self.envs = EnvCache()  # environments the daemon sent once (wire.EnvCache)
        self.pending = PendingRuns(self.runs, self.journal, self._launch)  # the chains, the refusals

    def adopt_journal(self) -> None:
        """Outcomes a keeper before us journalled and no daemon acknowledged."""
        for w in read_journal_safely(self.journal.path):
            self.runs.setdefault(w["key"], KeptRun.adopted(w))

    # ----------------------------------------------------------- requests
    def spawn(self, a: dict[str, Any]) -> KeptRun:
        """Start the run the spawn op's args ``a`` ask for, or leave it pending behind
        the running run ``after`` names (state "pending"). Raises Refused
        (bad args, a key already held, spawn_failed); then nothing is held
        (and the refusal is remembered for a spawn after it: keeper/pending.py)."""
        key, token = text(a, "key"), text(a, "token")
        if key in self.runs:
            raise Refused("exists", f"a run with key {key!r} is already held")
        self.pending.forget_refused(key)
        try:
            run = self._hold_or_start(key, token, a)
        except Refused as e:
            self.pending.note_refused(key, e, a)
            raise
        self.runs[key] = run
        if (trust_until := number(a, "trust_until")) is not None:
            self.set_trust(run, trust_until)
        self.tick_soon()
        return run

    def _hold_or_start(self, key: str, token: str, a: dict[str, Any]) -> KeptRun:
        argv, env, cwd, log_path = spawn_command(a, self.envs)
        run = KeptRun(key, whole(a, "job_id"), whole(a, "attempt"), token, log_path, time.time(),
                  number(a, "kill_grace_s", 10.0), number(a, "term_lead_s", 1.0))  # type: ignore[arg-type]
        progress_file = os.path.splitext(log_path)[0] + ".progress"  # the job may write how far it is there
        # the token: the token scan finds escapees by it
        env = {**env, procident.TOKEN_ENV: token, progress.PROGRESS_FILE_ENV: progress_file}
        run.meter = progress.ProgressMeter(progress_file)
        stall_s, fail_on = parse_watch(a)
        launch = Launch(argv, env, cwd, log_path, whole(a, "log_cap"), number(a, "timeout_s"),
                        *awake_and_limits(a), stall_s=stall_s, fail_on=fail_on, result_path=result_path(a))
        if self.pending.wait_behind(run, a, launch):
            return run
        try:
            self._launch(run, launch)
        except SpawnError as e:
            raise Refused("spawn_failed", str(e), retry=e.retry, resource=e.resource) from None
        return run

    def _launch(self, run: KeptRun, ln: Launch) -> None:
        """Start ``run``'s process: its log file, its timeout and its life
        (for orphans) begin now. Raises SpawnError (noted in its log)."""
        lw = LogWriter(ln.log_path, ln.log_cap)
        limits = ln.limits or {}
        argv = resource_limits.scope_argv(limits, ln.argv, run.job_id) if limits.get("mem_via") == "scope" else ln.argv
        jp = JobProcess(argv, cwd=ln.cwd, env=ln.env, log=lw, on_output=lambda d: self.output(run, d),
                        on_exit=lambda _jp: self.root_exited(run), claim_orphan=self.claimer(run.key),
                        preexec=resource_limits.preexec(limits) if limits else None,
                        watch_exit=not self.roots_reaped)
        try:
            jp.start(asyncio.get_running_loop())
        except SpawnError as e:
            lw.note(str(e))
            lw.close()
            raise
        run.proc, run.pid, run.identity, run.state = jp, jp.pid, jp.identity(), "running"
        run.launched_at = time.time()
        self._poll_files_soon()
        run.begin = jp.tree.root_stamp or procident.stamp_now()  # type: ignore[union-attr]
        self.roots[jp.pid] = jp
        run.timeout_s, run.limits = ln.timeout_s, ln.limits
        if ln.timeout_s:
            self._arm_timeout(run, ln.timeout_s)
        if limits:
            lw.note("limits: " + resource_limits.describe(limits))
            if limits.get("mem_via") == "scope":
                run.cgroup = jp.cgroup = resource_limits.cgroup_of(jp.pid)
        if ln.keep_awake:
            self._keep_awake(run, jp.pid)
        run.result_path = ln.result_path
        if ln.stall_s or ln.fail_on:
            run.watch = Watch(ln.stall_s, ln.fail_on, end=lambda why, by: self._watch_ended(run, why, by),
                              note=lambda message: self.note(run, "watch", message))
            run.watch.start()

    def _keep_awake(self, run: KeptRun, pid: int) -> None:
        """Hold a sleep inhibitor for the run's life (keeper/keep_awake.py); one
        that cannot be held is told to the daemon (its history says so)."""
        argv = keep_awake.inhibit_argv(run.job_id, pid)
        if argv is None:
            self.note(run, "keep-awake", f"keep-awake unavailable: nothing inhibits sleep on {sys.platform}")
            return
        inh = run.inhibitor = Inhibitor(argv, lambda why: self.note(run, "keep-awake", why))
        inh.start(asyncio.get_running_loop())
        if inh.pid is not None:
            self.roots[inh.pid] = inh  # ours to reap (reap_orphans leaves it be), never a job's orphan
            log.info("run %s: keep-awake holder pid %d", run.key, inh.pid)
            self._confirm_awake(run, inh, 0)

    def _confirm_awake(self, run: KeptRun, inh: Inhibitor, looks: int) -> None:
        """Say in the history when the inhibitor is seen holding (a few looks
        in its first seconds; a run that ends first says so at its end)."""
        if run.inhibitor is not inh or inh.said:
            return
        said = inh.confirmed()
        if said is not None:
            self.note(run, "keep-awake", said)
        elif looks < len(AWAKE_LOOKS_S):
            asyncio.get_running_loop().call_later(AWAKE_LOOKS_S[looks], self._confirm_awake, run, inh, looks + 1)

    def note(self, run: KeptRun, kind: str, message: str) -> None:
        """What the run's history should say now (the daemon records it); its log says it too."""
        log.info("run %s: %s", run.key, message)
        if run.proc is not None:
            run.proc.log.note(message)
        self.event("note", run.key, what=kind, message=message)

    def _release(self, run: KeptRun) -> None:
        inh, run.inhibitor = run.inhibitor, None
        if inh is not None:
            said = inh.verdict()  # before `exited`: the history has one line of it, however short the run
            if said is not None:
                self.note(run, "keep-awake", said)
            inh.release()
            if inh.pid is not None:
                loop = asyncio.get_running_loop()
                loop.call_later(1.0, self._forget_holder, inh)

    def _forget_holder(self, inh: Inhibitor) -> None:
        if inh.poll() or inh.pid is None:
            self.roots.pop(inh.pid or 0, None)
        else:  # ended by SIGTERM a moment ago: look again
            asyncio.get_running_loop().call_later(1.0, self._forget_holder, inh)

    def _arm_timeout(self, run: KeptRun, left_s: float) -> None:
        assert run.timeout_s is not None
        run.timeout = asyncio.get_running_loop().call_later(
            left_s, self.kill, run, f"timed out after {secs(run.timeout_s)}", run.kill_grace_s, "timeout")

    # ------------------------------------------------------------ pausing
    def pause(self, run: KeptRun) -> dict[str, Any]:
        """Stop a running run's whole tree until ``resume`` (runner.JobProcess.pause);
        its timeout stops counting meanwhile. Idempotent. Raises Refused for
        a run pending behind another (it has no process yet)."""
        if run.state == "pending":
            raise Refused("not_started", f"run {run.key} has not started yet: there is nothing to pause")
        if run.state == "exited" or run.proc is None or run.proc.ending is not None:
            return {"paused": False, "state": run.state if run.proc is None or run.proc.ending is None else "ending"}
        if run.paused:
            return {"paused": True, "already": True, "paused_at": run.paused_at}
        stopped = run.proc.pause()
        run.paused, run.paused_at = True, time.time()
        if run.watch is not None:
            run.watch.pause()
        if run.timeout is not None:
            run.timeout_left = max(0.0, run.timeout.when() - asyncio.get_running_loop().time())
            run.timeout.cancel()
            run.timeout = None
        run.proc.log.note(f"paused: {stopped} process(es) stopped")
        log.info("run %s (pid %s): paused, %d process(es) stopped", run.key, run.pid, stopped)
        return {"paused": True, "processes": stopped, "paused_at": run.paused_at}

    def resume(self, run: KeptRun) -> dict[str, Any]:
        """Continue a paused run; its timeout counts on from where it stopped."""
        if run.state == "exited" or run.proc is None or not run.paused:
            return {"resumed": False, "state": run.state}
        resumed_at = time.time()  # before the signal: the job may end at once (the history reads in order)
        run.proc.resume()
        span = resumed_at - (run.paused_at or resumed_at)
        run.paused, run.paused_at = False, None
        if run.timeout_left is not None and run.proc.ending is None:
            self._arm_timeout(run, run.timeout_left)
        if run.watch is not None and run.proc.ending is None:
            run.watch.resume()
        run.timeout_left = None
        run.proc.log.note(f"resumed after {secs(span)} paused")
        log.info("run %s (pid %s): resumed after %s", run.key, run.pid, secs(span))
        return {"resumed": True, "paused_s": span, "resumed_at": resumed_at}

    def ack(self, keys: list[str]) -> None:
        """Forget runs whose outcomes the daemon has recorded. Raises Refused,
        acknowledging none, if any of them has not exited."""
        if live := [k for k in keys if k in self.runs and self.runs[k].state != "exited"]:
            raise Refused("bad_request", f"run(s) {', '.join(live)} have not exited; nothing was acknowledged")
        acked = [self.runs.pop(k) for k in keys if k in self.runs]
        for run in acked:
            if run.proc is not None:
                run.proc.log.close()
                self.forgotten.append((run.begin, run.end or procident.stamp_now()))
        if acked:
            self.journal.append({"ack": [r.key for r in acked]})
            self.journal.reset([r.wire() for r in self.runs.values() if r.state == "exited"])

    def unspawn(self, key: str) -> dict[str, Any]:
        """Forget a pending run before it starts; else change nothing."""
        run = self.runs.get(key)
        if run is None or run.state != "pending":
            return {"dropped": False, "state": run.state if run is not None else "unknown"}
        self.pending.withdraw(run)
        del self.runs[key]
        self.changed()
        return {"dropped": True}

    def drop_unstarted(self, run: KeptRun, reason: str, by: str) -> None:
        """A pending run killed or fenced: it ends unstarted, and the daemon hears so."""
        self.pending.end_unstarted(run, reason, by)
        self.event("exited", run.key, outcome=run.outcome)
        self.changed()

    def listed(self) -> list[dict[str, Any]]:
        """Every run held, as hello lists them."""
        return [r.wire(self.pending.after(r.key)) for r in self.runs.values()]

    # ----------------------------------------------------------- run events
    def output(self, run: KeptRun, data: bytes) -> None:
        for feed in list(run.taps):
            feed(data)
        if run.watch is not None:  # first: what ends a run never waits on what only reports on it
            run.watch.output(data)
        if run.meter is not None and run.meter.feed(data):
            self._progress_soon(run)

    # ------------------------------------------------------------ progress
    def _progress_soon(self, run: KeptRun) -> None:
        """Tell the daemon the run's latest progress, at most once each
        progress.SEND_EVERY_S: a job that prints a line per item wakes the
        daemon once a second, not once a line."""
        if run.progress_timer is not None:
            return
        loop = asyncio.get_running_loop()
        wait = max(0.0, run.progress_sent + progress.SEND_EVERY_S - loop.time())
        run.progress_timer = loop.call_later(wait, self._send_progress, run)

    def _send_progress(self, run: KeptRun) -> None:
        run.progress_timer = None
        run.progress_sent = asyncio.get_running_loop().time()
        value = run.meter.take() if run.meter is not None else None
        if value is not None and run.state in ("running", "frozen"):
            self.event("progress", run.key, progress=value)

    def _poll_files_soon(self) -> None:
        if self._file_poll is None:
            self._file_poll = asyncio.get_running_loop().call_later(progress.FILE_POLL_S, self._poll_files)

    def _poll_files(self) -> None:
        """Look at each running run's progress file (a stat each; read when it changed)."""
        self._file_poll = None
        live = [r for r in self.runs.values() if r.state == "running" and r.meter is not None]
        for run in live:
            if run.meter.poll_file():  # type: ignore[union-attr]
                self._progress_soon(run)
        if live:
            self._poll_files_soon()

    def root_exited(self, run: KeptRun) -> None:
        ended_at = time.time()
        self.note_late_end(run)
        self._release(run)  # the moment it ends, however it ends
        self.roots.pop(run.pid or 0, None)
        run.end = procident.stamp_now()
        if run.watch is not None:
            run.watch.exited()  # its last unfinished line is matched too (and may fail the run: _watch_ended)
        for timer in (run.timeout, run.trust_check):
            if timer is not None:
                timer.cancel()
        ending = run.proc.ending if run.proc else None
        if ending is None and run.proc is not None and (run.proc.returncode != 0 or run.proc.kill_reason):
            # A failed attempt may be retried: nothing of it may run beside
            # the retry. (A job that succeeded may leave a server running.)
            ending = run.proc.end_leftovers_soon(run.kill_grace_s)
        if ending is not None and not ending.done():  # `exited` only once the whole tree is dead
            ending.add_done_callback(lambda _t: self.settle(run, ended_at))
        else:
            self.settle(run, ended_at)

    def settle(self, run: KeptRun, ended_at: float) -> None:
        jp = run.proc
        assert jp is not None
        run.state = "exited"
        # First: it is what waits, and nothing below is of the next run's
        # (the daemon hears of both together). Only now, once a failed run's
        # leftovers are ended too (root_exited): a pending run never starts
        # beside them.
        moved = self.pending.start_next(run)
        over = self._over_limit(run, jp)
        result, result_problem = read_result(run.result_path) if run.result_path is not None else (None, None)
        jp.log.finish()
        self._forget_progress(run)
        cost = run_cost(jp.rusage, jp.cgroup_usage, ended_at - (run.launched_at or ended_at),
                        over or jp.outcome()[1])
        run.outcome = {"returncode": jp.returncode, "ended_at": ended_at, "reason": jp.kill_reason,
                       "killed_by": run.killed_by if jp.kill_reason else None,  # a kill too late ended nothing
                       "log_problem": jp.log.problem, "log_bytes": jp.log.total, "cost": cost,
                       **({"note": "; ".join(filter(None, (run.note, over)))} if run.note or over else {}),
                       **({"over": "mem"} if over and not jp.kill_reason else {}),  # the retry rules' "mem"
                       **({"result": result} if result is not None else {}),
                       **({"result_problem": result_problem} if result_problem else {})}
        run.journaled = self.journal.append({"run": run.wire()})
        self.event("exited", run.key, outcome=run.outcome)
        for nxt in moved:
            if nxt.state == "exited":
                self.event("exited", nxt.key, outcome=nxt.outcome)
            else:
                self.event("started", nxt.key, pid=nxt.pid, identity=nxt.identity)
        for feed in list(run.taps):
            feed(None)
        self.changed()

    def _forget_progress(self, run: KeptRun) -> None:
        """The run ended: no progress event is sent after its end, and its
        progress file (ours to name, in the log folder) goes."""
        if run.progress_timer is not None:
            run.progress_timer.cancel()
            run.progress_timer = None
        if run.meter is not None and run.meter.file is not None:
            try:
                os.unlink(run.meter.file)
            except OSError:
                pass

    def _over_limit(self, run: KeptRun, jp: JobProcess) -> str | None:
        """"exceeded --mem 2G" if the run ended by its memory limit (resource_limits.exceeded_memory)."""
        limits = run.limits
        if not limits or not limits.get("mem") or jp.returncode == 0:
            return None
        tail = jp.log.snapshot()[-8192:]
        if resource_limits.exceeded_memory(limits, jp.returncode, tail, resource_limits.oom_kills(run.cgroup)):
            return f"exceeded --mem {format_size(int(limits['mem']))}"
        return None

    def kill(self, run: KeptRun, reason: str, grace_s: float, by: str) -> None:
        """Begin ending a run's whole tree (idempotent; the first reason
        stays); a pending run is dropped unstarted at once. One that has
        exited is reaped first: its end is what happened (a keeper stopped
        past a timeout or a deadline learns of both at once)."""
        if run.state == "pending":
            self.drop_unstarted(run, reason, by)
            return
        jp = run.proc
        if run.state == "exited" or jp is None or jp.ending is not None or jp.poll():
            return
        run.killed_by = by
        run.state = "running"  # if frozen: end_tree continues it, to act on SIGTERM
        run.paused = False  # and if paused: it is continued after its SIGTERM
        log.info("run %s (pid %s): %s; ending its process tree", run.key, run.pid, reason)
        jp.log.note(f"{reason}: ending the process tree")
        jp.end_tree_soon(grace_s, reason).add_done_callback(_log_failure)

    def _watch_ended(self, run: KeptRun, reason: str, by: str) -> None:
        """A watchdog ends the run, and its reason is the run's outcome
        however the root ends now: a job that prints "loss: nan" and exits at
        once has exited by the time its line is read (or as the keeper reads
        its pipe to the end), and a kill that finds it gone asks nothing
        (signal_tree); it fails all the same, and its leftovers are ended as
        a failed run's are (root_exited). An end begun before it stays."""
        jp = run.proc
        if jp is not None and jp.ending is None and jp.kill_reason is None:
            jp.kill_reason, run.killed_by = reason, by
            if jp.returncode is not None:  # exited: kill() has nothing to do, say it here
                jp.log.note(reason)
        self.kill(run, reason, run.kill_grace_s, by)

    def note_late_end(self, run: KeptRun) -> None:
        """An exit seen late (the keeper was stopped or stalled: reaped by a
        check that ran late, or past its run's SIGTERM point with no fence
        begun) is its run's outcome all the same, whenever it happened: a
        process that has ended overlaps nothing, and whether its outcome may
        still be recorded is the queue's to say (the daemon's complete() is
        refused if the lease moved meanwhile). The history says so."""
        t, now = run.trust, clocks_now()
        if run.killed_by is not None:
            return
        overdue = 0.0
        if t is not None and trust_verdict(t, run.term_lead_s, now) != "freeze":  # a sleep is no stall
            overdue = (now.total or 0.0) - (t.until - run.term_lead_s)
        late = max(self._reaping_late or 0.0, overdue)
        if late > STALL_S:
            past = t is not None and (now.total or 0.0) >= t.until
            run.note = (f"it ended while the keeper was stopped or stalled (seen {secs(late)} late"
                        + (", after its trust deadline)" if past else ")"))

    def claimer(self, key: str) -> Callable[[int, float | None], bool]:
        """Does an orphan of ours with no readable token belong to run ``key``?
        Only if exactly one run's lifetime covers its start; else leave it."""
        def claim(pid: int, start: float | None) -> bool:
            if pid in self.roots or start is None:
                return False
            lives = {r.key: (r.begin, r.end) for r in self.runs.values() if r.proc is not None}
            lives.update({f"~{i}": life for i, life in enumerate(self.forgotten)})
            owner = procident.attribute_orphan(start, lives)
            if owner is None and pid not in self._ambiguous:
                self._ambiguous.add(pid)
                log.info("orphan pid %d (%s) carries no token and no one run surely started it; left alone",
                         pid, _name(pid))
            if owner == key:
                log.info("orphan pid %d (%s) found only as our child: counted as run %s's", pid, _name(pid), key)
            return owner == key
        return claim

    # -------------------------------------------------------------- fencing
    def set_trust(self, run: KeptRun, until: float) -> None:
        if run.state == "exited" or (run.proc.ending is not None if run.proc else run.state != "pending"):
            return
        now = clocks_now()
        run.trust = Trust(until, now.total, now.awake)  # type: ignore[arg-type]
        if run.trust_check is not None:
            run.trust_check.cancel()
        loop = asyncio.get_running_loop()
        due = loop.time() + max(0.0, until - run.term_lead_s - now.total)  # type: ignore[operator]
        run.trust_check = loop.call_at(due, self.check_due, due)
        if run.state == "frozen" and run.proc is not None:
            log.info("run %s: trusted again; thawing its process tree", run.key)
            run.proc.thaw()
            run.state = "running"
            if run.watch is not None and not run.paused:
                run.watch.resume()

    def check_due(self, due: float) -> None:
        """A timer's check, due at ``due`` on the loop's clock (monotonic:
        it runs while this process is stopped, not while the machine sleeps)."""
        self.check_trust(asyncio.get_running_loop().time() - due)

    def check_trust(self, late_s: float = 0.0, *, read: bool = False) -> None:
        """Act on lapsed trust deadlines, after reaping what has exited (an
        exit is an outcome, whenever it happened: note_late_end). A check
        ``late_s`` past its time by more than STALL_S (the keeper was stopped
        or stalled) acts only after what the daemon sent meanwhile (renewals
        waiting in the socket) has been read: once, one timer and one more
        pass of the loop later (``read``: that check, which never waits)."""
        self.reap_exited(late_s)
        if not read and self._read_first is not None:
            return  # a check after reading is due: it decides
        if not read and late_s > STALL_S:
            # Input that waits is read by the first pass (its callbacks before
            # due timers); what it wakes runs in the next: call_soon's.
            loop = asyncio.get_running_loop()
            self._read_first = loop.call_later(0.0, loop.call_soon, self._after_reading)
            log.info("the keeper ran %s late (stopped or stalled): reading what waits before any fence", secs(late_s))
            return
        now = clocks_now()
        for run in list(self.runs.values()):
            if run.state == "pending" and (lapsed := self.pending.lapsed(run, now)) is not None:
                self.drop_unstarted(run, lapsed, "fence")  # pending: it is never started
            if run.state != "running" or run.trust is None or run.proc is None or run.proc.ending is not None:
                continue
            verdict = trust_verdict(run.trust, run.term_lead_s, now)
            quiet = now.total - run.trust.boot_at  # type: ignore[operator]
            if verdict == "freeze":
                slept = quiet - (now.awake - run.trust.awake_at)
                why = (f"the machine slept {secs(slept)} and the lease's renewal lapsed meanwhile; "
                       "frozen until the daemon renews or kills it")
                log.info("run %s: %s", run.key, why)
                run.proc.freeze()
                run.state = "frozen"
                if run.watch is not None:  # a frozen tree prints nothing: no stall of its own
                    run.watch.pause()
                self.event("frozen", run.key, why=why)
            elif verdict != "ok":
                self.kill(run, f"fenced: no lease renewal for {secs(quiet)}",
                          max(0.0, run.trust.until - now.total), "fence")  # type: ignore[operator]

    def _after_reading(self) -> None:
        self._read_first = None
        self.check_trust(read=True)

    def reap_exited(self, late_s: float) -> None:
        """Reap every run's process that has exited (a keeper stopped past a
        deadline learns of an exit and of the deadline at once: the exit
        comes first); ``late_s`` past STALL_S, each says it was seen late."""
        self._reaping_late = late_s if late_s > STALL_S else None
        try:
            for run in list(self.runs.values()):
                if run.state == "running" and run.proc is not None:
                    run.proc.poll()
        finally:
            self._reaping_late = None

    def tick_soon(self) -> None:
        if self._tick is None:
            self._tick = asyncio.get_running_loop().call_later(self.check_s, self.tick)

    def tick(self) -> None:
        """While runs live: remember their trees (a grandchild whose parent
        exits leaves the tree) and check trust (the timers use awake time;
        after a resume only this and the timerfd see the boot clock's jump)."""
        late = asyncio.get_running_loop().time() - self._tick.when() if self._tick is not None else 0.0
        self._tick = None
        live = [r for r in self.runs.values() if r.state == "running" and r.proc and r.proc.tree]
        procident.remember_all(r.proc.tree for r in live)  # type: ignore[union-attr,misc]
        for jp in (r.proc for r in live if r.proc is not None and r.proc.cgroup is not None):
            # the scope may be gone by the time its root is reaped: its last reading stands then
            jp.cgroup_usage = resource_limits.cgroup_usage(jp.cgroup) or jp.cgroup_usage  # type: ignore[arg-type]
        self.check_trust(late)
        if any(r.state != "exited" for r in self.runs.values()):
            self.tick_soon()
        starts = [r.begin for r in self.runs.values() if r.state not in ("exited", "pending")]
        first = min(starts, default=None)
        self.forgotten = [f for f in self.forgotten if first is not None and f[1] >= first]

    # ---------------------------------------------------------------- saved
    def holds_only_saved(self) -> bool:
        """Nothing runs and every outcome is in the journal (the next keeper
        offers it again), so exiting loses nothing."""
        # newest first: a run still going is near the end (this is asked on every change)
        return all(r.state == "exited" and r.journaled for r in reversed(self.runs.values()))

    def journal_unsaved(self) -> None:
        """Journal the outcomes that could not be before (a full disk may
        have room now). Only looked for once an append has failed."""
        if not self.journal.failed:
            return
        self.journal.failed = False
        for run in self.runs.values():
            if run.state == "exited" and not run.journaled:
                run.journaled = self.journal.append({"run": run.wire()})


def _log_failure(task: "asyncio.Task[None]") -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("ending a process tree failed: %r", task.exception())


def _name(pid: int) -> str:
    try:
        return psutil.Process(pid).name()
    except psutil.Error:
        return "?"


def read_journal_safely(path: Path) -> list[dict[str, Any]]:
    try:
        return read_journal(path)
    except OSError as e:
        log.error("cannot read the journal %s: %s", path, e.strerror or e)
        return []


def result_path(a: dict[str, Any]) -> str | None:
    """A spawn's result_path (absolute), or None."""
    if a.get("result_path") is None:
        return None
    path = text(a, "result_path")
    if not os.path.isabs(path):
        raise Refused("bad_request", "result_path must be absolute")
    return path


def awake_and_limits(a: dict[str, Any]) -> tuple[bool, dict[str, Any] | None]:
    """A spawn's keep_awake and limits (checked as far as the keeper uses them)."""
    keep, limits = a.get("keep_awake", False), a.get("limits")
    if not isinstance(keep, bool):
        raise Refused("bad_request", "keep_awake must be true or false")
    if limits is None:
        return keep, None
    if not isinstance(limits, dict) or not set(limits) <= resource_limits.LIMIT_KEYS:
        raise Refused("bad_request", f"limits must be an object of {', '.join(sorted(resource_limits.LIMIT_KEYS))}")
    try:
        resource_limits.check(limits)
    except ValueError as e:
        raise Refused("bad_request", f"limits: {e}") from None
    return keep, limits

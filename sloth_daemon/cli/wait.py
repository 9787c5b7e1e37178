"""Waiting on jobs: `sloth wait` (its options: commands.py) and `sloth add --wait`.

Every outcome is told as it happens, on ``stream``, one line a job (a
failure with its log's last lines). On a terminal (stderr is one), a live
line on stderr says what is going on meanwhile -- for one job its state
and for how long, for several the counts, the rate and the time left --
redrawn each second; at the end a summary ("3 done, 1 failed in 12s");
Ctrl-C ends the wait on a clean line (exit 130; the jobs carry on). Piped,
only the outcome lines. No Typer here: the fast path (fast.py) runs `wait`
and `add --wait` with it.

The daemon coalesces what a waiter hears (daemon/streams.py, ``batched``):
one frame of many jobs at a time, so waiting on thousands costs it little.
"""

from __future__ import annotations

import sys
import time

from sloth_daemon import errors
from sloth_daemon.cli.connection import connect, log_paths
from sloth_daemon.cli.output import echo, emit_json
from sloth_daemon.cli.values import parse_id

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import IO, Any, Optional

TAIL_LINES = 10
TICK_S = 1.0  # the live line's redraw (its elapsed time) when nothing happens
REREAD_S = 2.0  # one gated job waited on: how often its reason for waiting is read again
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as a shell reports a Ctrl-C
_ENDED = ("done", "failed", "cancelled")
# What of each job the outcome lines, the live line and the summary read
# (_View): asked for as the wait's ``fields`` unless --json prints jobs whole.
SHOWN_FIELDS = ["attempts", "max_attempts", "tries", "message", "not_before", "created_at", "gate", "wait_reason",
                "paused", "progress", "batch", "exit_code"]
_ERASE = "\r\x1b[K"


def wait_for(ids: list[int], *, stream: IO[str], as_json: bool = False,
             json_extra: Optional[dict[str, Any]] = None, before: Optional[str] = None, quiet: bool = False,
             client: Any = None) -> int:
    """Wait on the daemon for ``ids``; tell outcomes on ``stream`` (the live
    line and the summary go to stderr when it is a terminal; ``quiet``: no
    outcome lines, the caller sums up). Returns the exit code: 0 all done,
    5 any not, 130 interrupted. ``client``: an open connection to wait on
    (add's, submit.Kept), closed after; else a new one."""
    if before:
        echo(before)
    view = _View(ids, stream, live=not as_json and sys.stderr.isatty(), quiet=as_json or quiet)
    # what a daemon from before each option refuses (one not restarted since an upgrade)
    asks: list[dict[str, Any]] = [{"batched": True, "fields": SHOWN_FIELDS}, {"batched": True}, {}]
    if as_json:  # the jobs printed whole
        asks = asks[1:]
    try:
        final: list[dict[str, Any]] = []
        for i, ask in enumerate(asks):
            try:
                final = _follow(ids, view, ask, client=client if i == 0 else None)
                break
            except (errors.ProtocolError, errors.BadRequest) as e:
                if i == len(asks) - 1 or not _refused(e, ask):
                    raise
    except KeyboardInterrupt:
        view.interrupted()
        return EXIT_INTERRUPTED
    finally:
        view.stop()
    view.close(final)
    if as_json:
        emit_json({**(json_extra or {}), "jobs": final})
    return errors.EXIT_JOB_FAILED if any(j["state"] != "done" for j in final) else 0


def _refused(e: errors.SlothError, ask: dict[str, Any]) -> bool:
    """Did the daemon refuse what ``ask`` adds: one from before an option
    names it (a ProtocolError), one from before a field asked for names
    that field (a BadRequest: it knows ``fields``, not every job field)."""
    if isinstance(e, errors.ProtocolError):
        return any(k in e.message for k in ask)
    return "fields" in ask and e.message.startswith("fields: no job field")


def _follow(ids: list[int], view: _View, ask: dict[str, Any], *, client: Any = None) -> list[dict[str, Any]]:
    """The daemon's ``wait`` (with the options ``ask``) shown on ``view``
    (on ``client``, else a new connection); the jobs as they ended."""
    with client or connect() as c:  # bounded until the first frame; then as long as the jobs take
        for ev in c.stream("wait", ids=ids, **ask):
            kind = ev.get("kind")
            if kind == "jobs":
                c.set_timeout(None)
                view.update(ev["jobs"], initial=True)
            elif kind == "states":
                view.update(ev["jobs"])
            elif kind == "state":
                view.update([ev["job"]])
            elif kind == "end":
                return list(ev["result"]["jobs"])
    return []  # not reached: the stream ends with "end" or raises


class _View:
    """What a wait shows while it waits. State: each job's latest state,
    which outcomes were told, when the wait began; on a terminal the live
    line (redrawn by a ticker thread: ``_lock`` keeps its writes and ours
    apart)."""

    def __init__(self, ids: list[int], stream: IO[str], *, live: bool, quiet: bool) -> None:
        self.stream, self.live, self.quiet = stream, live, quiet
        self.jobs: dict[int, dict[str, Any]] = {}
        self.ids = list(dict.fromkeys(ids))
        self.told: set[int] = set()
        self.t0 = time.monotonic()
        self.ended_here = 0  # jobs that ended while we watched (for the rate)
        self.running_since: Optional[float] = None  # one job: when it was seen to start (wall)
        self._drawn = False
        self._reread_at = 0.0  # when the one job was last read again for why it waits (monotonic)
        self._lock: Any = None
        self._stop: Any = None
        self._ticker: Any = None  # the live line's thread (its native_id: tests read its signal mask)

    # -------------------------------------------------------------- news
    def update(self, jobs: list[dict[str, Any]], *, initial: bool = False) -> None:
        lines = []
        for job in jobs:
            jid = job["id"]
            before = self.jobs.get(jid)
            self.jobs[jid] = job
            if job["state"] in _ENDED and jid not in self.told:
                self.told.add(jid)
                self.ended_here += not initial
                lines += self._outcome(job)
            elif job["state"] == "running" and (before is None or before["state"] != "running"):
                self._started(job, initial)
            elif job["state"] == "held" and initial and not self.live and not self.quiet:
                # piped, nothing else would be said until someone releases it
                echo(f"sloth: job {jid} is held: it starts only after `sloth release {jid}`", err=True)
        with self._locked():
            if lines:
                self._clear()
                self.stream.write(_shown("\n".join(lines), self.stream) + "\n")
                self.stream.flush()
            self._draw()
        if initial and self.live and self._stop is None:
            self._start_ticker()

    def _outcome(self, job: dict[str, Any]) -> list[str]:
        if self.quiet:
            return []
        from sloth_daemon.cli import render

        lines = [render.outcome(job)]
        if job["state"] == "failed" and job.get("attempts"):
            tail = render.tail_lines(str(log_paths().job_log(job["id"], job["attempts"])), TAIL_LINES)
            lines += [f"  | {ln}" for ln in tail]
        return lines

    def _started(self, job: dict[str, Any], initial: bool) -> None:
        """When the one job waited on began running: now, if seen starting;
        if it ran before the wait, when its history says it was claimed."""
        if not self.live or len(self.ids) != 1:
            return
        self.running_since = time.time()
        if initial:
            self.running_since = _claimed_at(job) or self.running_since

    # -------------------------------------------------------- live line
    def _start_ticker(self) -> None:
        import threading

        self._stop = threading.Event()

        def tick() -> None:
            while not self._stop.wait(TICK_S):
                self._reread()
                with self._locked():
                    if not self._stop.is_set():  # else the summary may be written already
                        self._draw()

        # The thread never takes a Ctrl-C: the kernel gives a process's
        # signal to any thread that does not block it, and one taken here
        # left the main thread in its recv with no one to wake it (the wait
        # on held jobs went on after ^C in CI). Blocked while the thread
        # starts, so it begins with them blocked; the main thread unblocks.
        import signal

        held = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}
        old = signal.pthread_sigmask(signal.SIG_BLOCK, held)
        try:
            self._ticker = threading.Thread(target=tick, name="sloth-wait-line", daemon=True)
            self._ticker.start()
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, old)

    def _reread(self) -> None:
        """Why the one job waited on waits is written by the daemon without a
        frame (the gates' reasons change no state): a queued job with a gate,
        due, is read again every REREAD_S, so its live line says why."""
        job = self.jobs.get(self.ids[0]) if len(self.ids) == 1 else None
        if job is None or job["state"] != "queued" or not job.get("gate") or job["not_before"] > time.time() \
                or time.monotonic() - self._reread_at < REREAD_S:
            return
        self._reread_at = time.monotonic()
        from sloth_daemon.cli.connection import call

        try:
            fresh = call("show", id=job["id"])["job"]
        except errors.SlothError:
            return
        with self._locked():
            if self.jobs.get(job["id"], {}).get("state") == "queued" == fresh["state"]:  # no frame came meanwhile
                self.jobs[job["id"]] = {**self.jobs[job["id"]], "wait_reason": fresh.get("wait_reason")}

    def _locked(self) -> Any:
        """The live line's lock (no thread, no lock, when there is no live line)."""
        if self._lock is None:
            if not self.live:
                return _NO_LOCK
            import threading

            self._lock = threading.Lock()
        return self._lock

    def _draw(self) -> None:
        if not self.live:
            return
        line = self.line()
        try:
            import os

            cols = os.get_terminal_size(sys.stderr.fileno()).columns
        except OSError:
            cols = 0
        if cols > 10:  # 0: the terminal does not say
            line = line[:cols - 1]  # never wraps: a wrapped line could not be erased
        sys.stderr.write(_ERASE + _shown(line, sys.stderr))
        sys.stderr.flush()
        self._drawn = True

    def _clear(self) -> None:
        if self._drawn:
            sys.stderr.write(_ERASE)
            sys.stderr.flush()
            self._drawn = False

    def line(self) -> str:
        """The live line: one job's state and for how long, or the counts of many."""
        from sloth_daemon.durations import format_duration

        elapsed = time.monotonic() - self.t0
        if len(self.ids) == 1:
            job = self.jobs.get(self.ids[0])
            if job is None:
                return f"waiting for job {self.ids[0]} · {format_duration(elapsed)}"
            st = job["state"]
            if st == "running" and job.get("paused"):  # its tree is stopped (sloth pause --job)
                return f"job {job['id']} paused" + (f" · {job['message']}" if job.get("message") else "")
            if st == "running" and self.running_since is not None:
                from sloth_daemon.cli.progress_view import progress_text

                far = progress_text(job.get("progress"))
                return (f"job {job['id']} running for {format_duration(max(0.0, time.time() - self.running_since))}"
                        + (f" · {far}" if far else ""))
            if st == "queued":
                return _queued_line(job)
            since = f" for {format_duration(max(0.0, time.time() - job['created_at']))}" \
                if st in ("blocked", "held") and job.get("created_at") else ""
            if st == "held":  # it starts only when released: say how, or the wait looks stuck
                since += f" (until `sloth release {job['id']}`)"
            return f"job {job['id']} {st}{since}" + (f" · {job['message']}" if job.get("message") else "")
        n = self.counts()
        ended = n["done"] + n["failed"] + n["cancelled"]
        parts = [f"{ended}/{len(self.ids)} ended", f"{n['done']} done"]
        parts += [f"{n[s]} {s}" for s in ("failed", "cancelled", "running", "queued", "blocked", "held") if n[s]]
        if self.ended_here and elapsed > 0:
            rate = self.ended_here / elapsed
            parts.append(f"{rate * 60:.1f}/min" if rate < 1 else f"{rate:.1f}/s")
            left = len(self.ids) - ended
            if left:
                parts.append(f"~{format_duration(left / rate)} left")
        return " · ".join(parts + [format_duration(elapsed)])

    def counts(self) -> dict[str, int]:
        n = dict.fromkeys(("done", "failed", "cancelled", "running", "queued", "blocked", "held"), 0)
        for jid in self.ids:
            st = self.jobs.get(jid, {}).get("state", "queued")
            n[st] = n.get(st, 0) + 1
        return n

    # ------------------------------------------------------------ ending
    def stop(self) -> None:
        if self._stop is not None:
            self._stop.set()

    def close(self, final: list[dict[str, Any]]) -> None:
        """The live line gives way to the summary: ``waited 12s for 4 jobs: 3/4 done, 1 failed``."""
        if not self.live:
            return
        from sloth_daemon.durations import format_duration

        from sloth_daemon.cli.progress_view import batch_summary

        said = batch_summary(list({j["id"]: j for j in final}.values()))  # "2/3 done, 1 failed"
        waited = format_duration(time.monotonic() - self.t0)
        with self._locked():
            self._clear()
            sys.stderr.write((f"waited {waited} for job {self.ids[0]}" if len(self.ids) == 1 else
                              f"waited {waited} for {len(self.ids)} jobs: {said}") + "\n")
            sys.stderr.flush()

    def interrupted(self) -> None:
        """Ctrl-C: the line (and the terminal's ^C on it) erased, what was
        seen said on a line of its own. The jobs carry on."""
        self.stop()
        if not self.live:
            return
        from sloth_daemon.durations import format_duration

        n = self.counts()
        seen = ", ".join(f"{n[s]} {s}" for s in (*_ENDED, "running", "queued", "blocked", "held") if n[s])
        after = format_duration(time.monotonic() - self.t0)
        if len(self.ids) == 1:
            state = self.jobs.get(self.ids[0], {}).get("state", "queued")
            said = f"stopped waiting for job {self.ids[0]} after {after}: it is {state}" + \
                ("" if state in _ENDED else " and carries on")
        else:
            said = f"stopped waiting for {len(self.ids)} jobs after {after}: {seen}; they carry on"
        with self._locked():
            sys.stderr.write(f"{_ERASE}{said}\n")
            sys.stderr.flush()
            self._drawn = False


class _NoLock:
    def __enter__(self) -> None:
        pass

    def __exit__(self, *exc: object) -> None:
        pass


_NO_LOCK = _NoLock()


def _queued_line(job: dict[str, Any]) -> str:
    """One queued job's live line: when it is tried again after a try that
    failed, when it may start, or how long it has waited and why."""
    from sloth_daemon.durations import format_duration
    from sloth_daemon.text import showable

    now, jid = time.time(), job["id"]
    why = f" · {showable(job['wait_reason'])}" if job.get("wait_reason") and job["not_before"] <= now else ""
    if job["attempts"] and job.get("message"):  # back in the queue after a run: a failed try, an interruption
        tried = f"try {job.get('tries', job['attempts']) + 1}/{job['max_attempts']}; " \
            f"the last: {showable(job['message'])}"
        if job["not_before"] > now:
            return f"job {jid} will be tried again in {format_duration(job['not_before'] - now)} ({tried})"
        return f"job {jid} due to be tried again ({tried}){why}"
    if job["not_before"] > now:
        return f"job {jid} queued; it may start in {format_duration(job['not_before'] - now)}"
    return f"job {jid} queued for {format_duration(max(0.0, now - job['created_at']))}{why}"


def _claimed_at(job: dict[str, Any]) -> Optional[float]:
    """When the job's current attempt was claimed, from its history (one
    request: only on a terminal, for one job running before the wait)."""
    from sloth_daemon.cli.connection import call

    try:
        events = call("show", id=job["id"])["events"]
    except errors.SlothError:
        return None
    at = [e["at"] for e in events if e["kind"] in ("claimed", "reclaimed") and e["attempt"] == job["attempts"]]
    return at[-1] if at else None


def _shown(text: str, stream: Any) -> str:
    """``text`` as output.echo would write it to ``stream`` (text.for_terminal):
    a job's message or a lane in a live line cannot drive the terminal."""
    from sloth_daemon.cli.render import use_colour
    from sloth_daemon.text import for_terminal

    return for_terminal(text, colours=use_colour(stream))


def wait(job_ids: Optional[list[str]], as_json: bool, batch: Optional[str] = None) -> int:
    """`sloth wait [ID...]`: the exit code is the outcome (0 all done, 5 not,
    130 on Ctrl-C). No id: the latest job (as `tsp -w`), said on stderr.
    --batch: its jobs, and one line at the end (many_jobs.batch_line).
    Runs on the fast path (no Typer)."""
    if batch is not None:
        return _wait_batch(batch, job_ids, as_json)
    if job_ids:
        ids = [parse_id(j) for j in job_ids]
    else:
        from sloth_daemon.cli.latest import latest_job_id

        ids = [latest_job_id()]
        echo(f"waiting for job {ids[0]} (the latest)", err=True)
    return wait_for(ids, stream=sys.stdout, as_json=as_json)


def _wait_batch(ref: str, job_ids: Optional[list[str]], as_json: bool) -> int:
    """`sloth wait --batch REF`: its jobs waited on without a line each (a
    batch may have thousands), then one summary line on stdout, as the
    batch stands (a retry meanwhile counts): exit 0 if all are done, else 5."""
    from sloth_daemon.cli.many_jobs import batch_line, find_batch

    if job_ids:
        raise errors.BadRequest("give job ids or --batch to wait on, not both")
    ids = find_batch(ref)["ids"]
    code = wait_for(ids, stream=sys.stdout, quiet=True) if ids else 0
    if code == EXIT_INTERRUPTED:
        return code
    found = find_batch(ref)
    if as_json:
        emit_json(found)
    else:
        echo(batch_line(found["batch"]))
    return errors.EXIT_JOB_FAILED if found["batch"]["counts"].get("done", 0) != found["batch"]["total"] else 0

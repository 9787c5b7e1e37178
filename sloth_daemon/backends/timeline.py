"""The timeline's data (issue 31; docs/timeline.md), read from any queue's
reads -- the daemon's Queue for the ``timeline`` op, or the CLI's
read-only view when no daemon runs -- so both give the same answer:

- each job with activity in the window: its runs (from its history: a
  claim to the first event that ends that attempt), its waits (queued
  until a claim: at its add, after a retry's failure), its recent history;
- the machine's events: each host's daemon time up and its sleeps
  (contract.Meta.machine_up ...), and the downtime between up rows,
  labelled with how the daemon before it ended.

No SQL here: what the engines already answer (jobs, running, events,
machine_events, window_jobs: the jobs unfinished at the window's start,
a page of STEP, newest first, each with its history). Capped at MAX_JOBS,
the newest; ``capped`` says the window holds older ones too.
"""

from __future__ import annotations

import itertools
import math
from typing import Any, Generator, Protocol, Sequence

from sloth_daemon.clock import Clock
from sloth_daemon.errors import BadRequest
from sloth_daemon.models import Event, Job

MAX_JOBS = 2000  # jobs read for one timeline (the newest of the selection)
MAX_SINCE_S = 90 * 86400.0  # the longest window asked for
EVENTS_KEPT = 30  # the latest history lines of each job, for the page's detail pane
STEP = 100  # jobs read between two pauses of the daemon's answer (answering)
# The event that ends an attempt's run, and what the timeline calls that end.
ENDS = {"done": "done", "failed": "failed", "timeout": "failed", "lease_expired": "failed",
        "cancelled": "cancelled", "killed": "cancelled", "interrupted": "interrupted", "fenced": "interrupted",
        "abandoned": "interrupted", "postponed": "interrupted", "condition_lost": "interrupted",
        "ended": "ended"}
STARTS = ("claimed", "reclaimed")


class TimelineReads(Protocol):
    """What gathering reads: a Queue or its read-only view (face.QueueReads)."""

    def window_jobs(self, since: float, *, lane: str | None = None, before_id: int | None = None,
                    limit: int = 100) -> list[tuple[Job, list[Event]]]: ...

    def machine_events(self, since: float, host: str | None = None) -> list[dict[str, Any]]: ...

    def costs(self, job_ids: Sequence[int]) -> dict[int, list[dict[str, Any]]]: ...


def window(args: dict[str, Any], now: float) -> tuple[float, str | None]:
    """The op's arguments checked: ``since_s`` (seconds back from now, default
    24 h, at most MAX_SINCE_S) and ``lane``. Raises BadRequest."""
    since_s = args.get("since_s", 86400.0)
    if isinstance(since_s, bool) or not isinstance(since_s, (int, float)) or not math.isfinite(since_s) \
            or not 0 < since_s <= MAX_SINCE_S:
        raise BadRequest(f"since_s must be seconds between 0 and {MAX_SINCE_S:.0f} (90 days), got {since_s!r}")
    lane = args.get("lane")
    if lane is not None and (not isinstance(lane, str) or not lane):
        raise BadRequest("lane must be a lane's name")
    return now - float(since_s), lane


def answer(q: TimelineReads, args: dict[str, Any], clock: Clock, down_hosts: Sequence[str] = ()) -> dict[str, Any]:
    """The ``timeline`` op's answer at once (the read without a daemon)."""
    return finish(answering(q, args, clock, down_hosts))


def finish(steps: Generator[None, None, dict[str, Any]]) -> dict[str, Any]:
    """Run ``steps`` (answering, gathering) to their end, without a pause: their answer."""
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return dict(done.value)


def answering(q: TimelineReads, args: dict[str, Any], clock: Clock,
              down_hosts: Sequence[str] = ()) -> Generator[None, None, dict[str, Any]]:
    """The ``timeline`` op's answer, a step at a time: its arguments
    checked (window), then gathered until the queue's now, pausing after
    every page of STEP jobs (the daemon serves others meanwhile: 2,000 jobs
    take a few hundred ms to read). Returns (StopIteration's value) the answer."""
    now = clock.now()
    since, lane = window(args, now)
    return (yield from gathering(q, since=since, now=now, lane=lane, down_hosts=down_hosts))


def gather(q: TimelineReads, *, since: float, now: float, lane: str | None = None,
           down_hosts: Sequence[str] = ()) -> dict[str, Any]:
    """The timeline of ``[since, now]`` at once (see gathering)."""
    return finish(gathering(q, since=since, now=now, lane=lane, down_hosts=down_hosts))


def gathering(q: TimelineReads, *, since: float, now: float, lane: str | None = None,
              down_hosts: Sequence[str] = ()) -> Generator[None, None, dict[str, Any]]:
    """The timeline of ``[since, now]``: {since, until, lane, jobs, machine,
    downtime, capped}, a pause (yield) after every STEP jobs; ``down_hosts``: see downtime()."""
    jobs: list[dict[str, Any]] = []  # newest first, as read
    before = None
    while len(jobs) < MAX_JOBS:
        page = q.window_jobs(since, lane=lane, before_id=before, limit=STEP)
        costs = q.costs([job.id for job, _ in page])  # what each run cost (docs/progress.md), one read a page
        jobs += [_drawn(job, events, now, costs.get(job.id, ())) for job, events in page if job.created_at <= now]
        if len(page) < STEP:
            break
        before = page[-1][0].id
        yield
    capped = len(jobs) >= MAX_JOBS
    machine = q.machine_events(since)
    return {"since": since, "until": now, "lane": lane, "jobs": jobs[:MAX_JOBS][::-1],
            "machine": machine, "downtime": downtime(machine, since, now, down_hosts), "capped": capped}


def _drawn(job: Job, events: Sequence[Event], now: float, costs: Sequence[dict[str, Any]] = ()) -> dict[str, Any]:
    """A job as the timeline sends it: its fields (not its environment), runs
    (each with its attempt's ``cost`` when the keeper measured it), waits, latest history."""
    d = job.to_dict()
    d["runs"] = runs_of(job, events, now)
    by_attempt = {c["attempt"]: c["cost"] for c in costs}
    for run in d["runs"]:
        run["cost"] = by_attempt.get(run["attempt"])
    d["waits"] = waits_of(job, d["runs"], now)
    d["events"] = [{"at": e.at, "kind": e.kind, "attempt": e.attempt, "message": e.message, "job_id": e.job_id}
                   for e in events[-EVENTS_KEPT:]]  # not asdict: a third of the time went there
    d.pop("env", None)  # a job's environment is not the picture's business (and may hold secrets)
    return d


def runs_of(job: Job, events: Sequence[Event], now: float) -> list[dict[str, Any]]:
    """One run per claim: {attempt, start, end, outcome, message, open}; a
    run with no end yet is ``open`` (running: until ``now``)."""
    runs: list[dict[str, Any]] = []
    for i, e in enumerate(events):
        if e.kind not in STARTS:
            continue
        run = {"attempt": e.attempt, "start": e.at, "end": None, "outcome": "running", "message": "",
               "open": False}
        for later in events[i + 1:]:
            if later.attempt != e.attempt:
                if later.kind in STARTS:
                    break
                continue
            if later.kind in ENDS:
                run["end"], run["message"] = later.at, later.message
                run["outcome"] = ENDS[later.kind] if later.kind != "ended" else _ended(job, e.attempt)
                break
            if later.kind in STARTS:
                break
        if run["end"] is None:
            current = job.state.value == "running" and job.attempts == e.attempt
            run["open"] = current
            run["end"] = now if current else _last_at(events, e.attempt, e.at)
            run["outcome"] = "running" if current else "interrupted"
        runs.append(run)
    return runs


def waits_of(job: Job, runs: Sequence[dict[str, Any]], now: float) -> list[dict[str, Any]]:
    """When the job waited to run: from its add to its first claim, from a
    run's end to the next claim, and, still waiting, until ``now``."""
    waits, since, why = [], job.created_at, "queued"
    for run in runs:
        if run["start"] > since:
            waits.append({"start": since, "end": run["start"], "why": why})
        since, why = run["end"], "retry" if run["outcome"] == "failed" else "queued again"
    state = job.state.value
    if state in ("queued", "blocked", "held") and now > since:
        waits.append({"start": since, "end": now, "why": job.wait_reason or state, "open": True})
    return waits


def downtime(machine: Sequence[dict[str, Any]], since: float, now: float,
             down_hosts: Sequence[str] = ()) -> list[dict[str, Any]]:
    """Each host's gaps between its daemon's up rows, labelled by how the
    daemon before ended (``why``: stopped (reason) | crashed); after a host's
    last row, a gap until ``now`` (``open``) if that daemon stopped, or if
    the host is one of ``down_hosts`` (known to run no daemon now: its
    last row still says running, so it died unseen)."""
    out = []
    by_host: dict[str, list[dict[str, Any]]] = {}
    for row in machine:
        if row["kind"] == "up":
            by_host.setdefault(row["host"], []).append(row)
    for host, ups in by_host.items():
        ups.sort(key=lambda r: r["start_at"])
        for before, after in itertools.pairwise(ups):
            if after["start_at"] > before["end_at"]:
                out.append(_gap(host, before, before["end_at"], after["start_at"], since))
        last = ups[-1]
        if (last["detail"] != "running" or host in down_hosts) and now > last["end_at"]:
            out.append({**_gap(host, last, last["end_at"], now, since), "open": True})
    return sorted(out, key=lambda g: g["start"])


def _gap(host: str, before: dict[str, Any], start: float, end: float, since: float) -> dict[str, Any]:
    how = str(before["detail"])
    if how in ("crashed", "running"):  # running: it died and no daemon has started since to say so
        why = "crashed" if how == "crashed" else "not running (last seen then)"
    else:
        why = "stopped" + (f" ({how[len('stopped: '):]})" if how.startswith("stopped: ") else "")
    return {"host": host, "start": max(start, since), "end": end, "why": why}


def _ended(job: Job, attempt: int) -> str:
    """An ``ended`` note (the process ended; the outcome recorded apart): the job's end if it was its last run."""
    if job.attempts == attempt and job.state.value in ("done", "failed", "cancelled"):
        return str(job.state.value)
    return "interrupted"


def _last_at(events: Sequence[Event], attempt: int, start: float) -> float:
    return max([e.at for e in events if e.attempt == attempt] + [start])

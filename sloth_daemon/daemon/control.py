"""What the daemon adds to a request before the object that does the work
sees it: placement and validation of jobs (add, stage, edit), the watchers
of job changes, the composed answers of status, config, lanes, listing and
show, and what the runs held here say live (follow, running_count).

It forwards nothing: a handler (handlers.py, job_ops.py, lane_ops.py,
edit_ops.py, streams.py) asks the queue, the worker's Actions or the
scheduler itself, and asks this only for what it adds. Driven in-process
on a real queue with a fake spawner in the unit tests.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from typing import Any, AsyncIterator, Callable, Iterable, Mapping, Sequence

from sloth_daemon.checks import GATE_FIELDS, gate_json, merge_tell
from sloth_daemon.config import Settings, file_differs, load as load_config
from sloth_daemon.errors import BadRequest, ConfigError, FieldError, SlothError
from sloth_daemon.models import Job, JobState
from sloth_daemon.paths import Paths
from sloth_daemon.backends import attempt_rules
from sloth_daemon.backends.contract import Handle, Scan
from sloth_daemon.queue import Queue
from sloth_daemon.daemon import job_limits
from sloth_daemon.daemon.resources import needs_of
from sloth_daemon.daemon.worker.handing import shown_results
from sloth_daemon.daemon.worker.spawner import Spawner
from sloth_daemon.spec import Defaults, EnvCache, JobSpec
from sloth_daemon.daemon.worker.loop import Worker

log = logging.getLogger("sloth.daemon")

Watcher = Callable[[Job], None]


def _no_reload() -> dict[str, Any]:
    raise SlothError("this daemon cannot reload its settings", hint="Restart it.")


class Control:
    """Its collaborators: the queue, the worker (its host, status, wake-up)
    and the worker's ``lanes``, ``gates`` and ``running`` runs, the spawner
    (a live run's output), the paths and the settings in force
    (main.Daemon.reload replaces them); ``request_stop`` and
    ``request_reload``, the daemon's own (main.py). Its state: the watchers."""

    def __init__(self, queue: Queue, worker: Worker, spawner: Spawner, paths: Paths, settings: Settings,
                 *, request_stop: Callable[..., None], instance: str,
                 request_reload: Callable[[], dict[str, Any]] = _no_reload, shared: Any = None,
                 scheduler: Any = None, teller: Any = None, sender: Any = None, metrics: Any = None,
                 started_at: float | None = None) -> None:
        self.queue, self.worker, self.spawner = queue, worker, spawner
        self.logs = queue.logs  # the database's copies of attempt logs (a shared queue's), or None
        self.lanes, self.gates, self.running = worker.lanes, worker.gates, worker.running  # the worker's, named
        self.actions = worker.actions  # ends the run an --on-dup replace replaces
        self.wake = worker.signals.wake  # the next turn looks for work (a job was queued)
        self.paths, self.settings = paths, settings
        self.request_stop, self.request_reload = request_stop, request_reload
        self.instance = instance
        self.started_at = time.time() if started_at is None else started_at  # given: renewed (renewal.py)
        self._watchers: set[Watcher] = set()
        self._tasks: set[asyncio.Task[None]] = set()  # runs being ended for --on-dup replace
        self.shared = shared  # shared.Shared on a queue shared by several machines
        self.scheduler = scheduler  # schedules.scheduler.Scheduler
        self.teller = teller  # tell.Teller (notifications, on_finish)
        self.sender = sender  # telling/sender.Sender (the outbox: pings, webhooks, mail)
        self.metrics = metrics  # metrics_file.DaemonMetrics (the metrics op)

    # ------------------------------------------------------------ changes
    def job_changed(self, job: Job) -> None:
        """Called by the worker for every transition it makes."""
        for fn in list(self._watchers):
            fn(job)

    def watch(self, fn: Watcher) -> Callable[[], None]:
        """Call ``fn(job)`` on every change from now on; returns the undo."""
        self._watchers.add(fn)
        return lambda: self._watchers.discard(fn)

    # -------------------------------------------------------------- reads
    def get_many(self, ids: Sequence[int]) -> list[Job]:
        """The jobs of these ids that exist, in one read on a shared queue."""
        if self.shared is not None:
            return self.queue.get_many(ids)
        return [self.queue.get(i) for i in ids]

    def listing(self, **kw: Any) -> dict[str, Any]:
        """A page of the listing as sent, each queued job saying why it waits,
        and what is paused (``paused``: `sloth ls` says so under its table
        without asking ``lanes`` on a second connection)."""
        out = self.queue.listing(now=time.time(), **kw).to_dict()
        self.explain(out["jobs"])
        return {**out, "paused": self.paused()}

    def paused(self) -> dict[str, Any]:
        """``{"all": bool, "lanes": [...]}``: the whole queue paused, the lanes paused (as ``lanes`` says)."""
        return {"all": self.lanes.paused_all, "lanes": sorted(self.lanes.paused)}

    def scan(self, **kw: Any) -> Callable[[], Scan]:
        """What opens the listing ``listing(**kw)`` would give, to read a
        chunk at a time (backends.sqlite.scan / backends.postgres.scan), on a read-only
        view of the queue of its own: nothing of it holds the daemon's own
        connection, and closing the scan closes the view. The opener
        blocks: call it off the loop. Raises QueueBroken at once (here, on
        the loop) if the queue changed under the daemon: a view opened by
        its path or URL would read another queue than the daemon's."""
        from sloth_daemon.backends import open_read_only

        self.queue.check()
        target = self.queue.target
        now = time.time()

        def opened() -> Scan:
            reader = open_read_only(target)
            try:
                return reader.scan(now=now, owns_reader=True, **kw)
            except BaseException:
                reader.close()
                raise

        return opened

    def detail(self, job_id: int) -> dict[str, Any]:
        """One job for `show`: itself, its history, what it waits for and what waits for it."""
        job = self.queue.get(job_id).to_dict()
        self.explain([job])
        job["runs"] = self.queue.costs([job_id]).get(job_id, [])  # what each attempt cost
        return {"job": job, "events": [e.to_dict() for e in self.queue.events(job_id)],
                "prereqs": self.queue.prereqs(job_id), "dependents": self.queue.dependents(job_id),
                "results": shown_results(self.queue, job)}  # what its last attempts handed on

    def status(self) -> dict[str, Any]:
        """Answers even when the database is broken or gone (then ``counts``
        is None and ``queue.problem`` says why), so `sloth daemon status` and
        `stop` work whatever happened to the file."""
        queue: dict[str, Any] = {"id": self.queue.identity, "problem": None}
        try:
            self.queue.check()
            counts: dict[str, int] | None = self.queue.counts()
        except SlothError as e:
            queue["problem"], counts = e.message, None
        return {
            "pid": os.getpid(), "started_at": self.started_at, "uptime_s": time.time() - self.started_at,
            "instance": self.instance, "paths": self.paths.as_dict(), "counts": counts, "queue": queue,
            "keeper": keeper() if callable(keeper := getattr(self.spawner, "status", None)) else {"pid": None},
            "config_file": str(self.settings.file) if self.settings.file else None,
            **self.worker.status(), **(self.shared.status() if self.shared is not None else {}),
            **({"schedules": self.scheduler.status()} if self.scheduler is not None else {}),
            **({"notify": self.teller.status()} if self.teller is not None else {}),
            **({"outbox": self.sender.status()} if self.sender is not None else {}),
        }

    def lane_status(self) -> dict[str, Any]:
        return self.lanes.status(self.running.slots_in_use(), self.queue.lane_counts())

    def config(self) -> dict[str, Any]:
        """The settings in force (which may differ from the file until a reload)."""
        d = self.settings.as_dict()
        d["lanes_in_force"] = {ln: {"concurrency": v["concurrency"], "source": v["source"]}
                               for ln, v in self.lane_status().items()}
        res = self.gates.resources  # the file's, and what was found on the machine (gpu: nvidia-smi -L)
        d["resources_in_force"] = {**d["resources"], **{n: {"tokens": list(t), "source": res.source[n]}
                                                        for n, t in res.tokens.items() if res.source[n] != "config"}}
        d["paths"] = self.paths.as_dict()
        try:  # what the file says now: `sloth config` then reads no TOML itself
            d["file_differs"] = file_differs(d, load_config(self.paths.config_file))
        except ConfigError as e:  # the settings in force stand; `sloth config` makes the file's error its own
            d["file_differs"], d["file_error"] = True, e.to_dict()
        return d

    # ------------------------------------------------------------ actions
    def add(self, specs: Iterable[Mapping[str, Any] | JobSpec], *,
            batch: str | None = None, handle: Handle | None = None) -> tuple[list[int], list[str]]:
        """Queue the jobs, all or none (recorded under ``batch`` if given);
        returns the ids and the lanes this add made (not known before)."""
        specs = [self._limited(s) if isinstance(s, JobSpec) else self._limited_spec(self._placed(s)) for s in specs]
        if self.settings.lane_tell:
            specs = [self._told(s) for s in specs]
        known = set(self.lanes.known())
        lanes = {_lane_of(s) for s in specs}
        ids = self.queue.enqueue_many(specs, batch=batch, handle=handle)
        self._end_replaced(specs, ids)
        self.wake()
        return ids, sorted(lanes - known)

    def _end_replaced(self, specs: Sequence[Mapping[str, Any] | JobSpec], ids: list[int]) -> None:
        """`--on-dup replace` of a running job: the new job waits behind it
        (rules.key_plan) and the run is ended here, as a schedule's --overlap
        replace ends its last (Actions.replace: recorded cancelled once its
        process is gone), so the new one starts only then."""
        for spec, jid in zip(specs, ids, strict=True):
            key, on_dup = ((spec.key, spec.on_dup) if isinstance(spec, JobSpec)
                           else (spec.get("key"), spec.get("on_dup")))
            if key is None or on_dup != "replace":
                continue
            for other in self.queue.get_many(self.queue.get(jid).after_any):
                if other.key == key and other.state is JobState.RUNNING:
                    task = asyncio.get_running_loop().create_task(
                        self._replace(other.id, f"replaced by job {jid} (--on-dup replace)"))
                    self._tasks.add(task)
                    task.add_done_callback(self._tasks.discard)

    async def _replace(self, job_id: int, why: str) -> None:
        try:
            await self.actions.replace(job_id, why)
        except SlothError as e:  # it ended meanwhile, or is ending already
            log.info("--on-dup replace: job %d not ended: %s", job_id, e.message)

    def lanes_waiting(self, jobs: Iterable[tuple[str, str | None]]) -> dict[str, str]:
        """Of the lanes of these jobs (lane, place: None for the default),
        those whose jobs wait whatever they ask, and why (paused, a `when`
        that does not hold): said when jobs are added there. Only for jobs
        only this machine may run: its pauses and lanes are its own."""
        here = self.default_place if self.shared is not None else None
        lanes = {ln for ln, place in jobs if self.shared is None or (here if place is None else place) == here}
        return {ln: why for ln in sorted(lanes) if (why := self.lanes.why(ln)) is not None}

    def explain(self, jobs: list[dict[str, Any]]) -> None:
        """Why each queued job waits, where its lane says (Lanes.explain);
        on a shared queue only of the jobs placed on this machine (another
        machine may run the rest, whatever this one's pauses). And what runs
        cost and how far running ones are (attempt_rules.with_run_facts)."""
        self.lanes.explain(jobs if self.shared is None else [j for j in jobs if j.get("place") == self.worker.host])
        attempt_rules.with_run_facts(jobs, self.queue.costs, self.queue.run_times, time.time())

    def validate(self, jobs: Sequence[Mapping[str, Any]], *, first: int | None = 1,
                 fired: bool = False) -> list[JobSpec]:
        """Each job checked as the queue would (so a batch is refused before any
        of it is queued); an error names the job's place in its batch (``first``:
        the first one's; None: a schedule's job, in no batch).
        ``fired``: a schedule's occurrence (checked when the schedule was
        made: what this machine cannot hold now is the run's to say)."""
        defaults = Defaults(self.settings.max_attempts, self.settings.lease_s, self.default_place)
        cache: EnvCache = {}
        out = []
        for i, job in enumerate(jobs, first or 1):
            try:
                spec = self._placed_here(JobSpec.parse(job, defaults, cache))
                if not fired:
                    self._awake_here(spec.keep_awake, spec.lane, spec.place)
                out.append(self._told_spec(self._limited(spec)))
            except FieldError as e:
                if first is None:
                    raise
                raise FieldError(e.field, f"{e.problem} (job {i} of the batch)", e.hint) from None
        return out

    # ----------------------------------------------------------- placement
    @property
    def default_place(self) -> str:
        """Where a job runs unless told: on a shared queue the machine that
        queued it (its cwd and environment are this machine's); else anywhere."""
        return self.worker.host if self.shared is not None else ""

    def _placed(self, spec: Mapping[str, Any]) -> Mapping[str, Any]:
        """A job object (the add op) with this daemon's default place, checked."""
        if "place" not in spec and self.shared is not None:
            spec = {**spec, "place": self.default_place}
        if self.shared is None and spec.get("place") not in (None, "", "*", *self._here()):
            raise self._nowhere(str(spec.get("place")))
        self._gate_here(None if GATE_FIELDS.isdisjoint(spec) else gate_json(spec), str(spec.get("lane") or "default"),
                        spec.get("cwd"), str(spec.get("place") or ""))
        self._awake_here(spec.get("keep_awake") is True, str(spec.get("lane") or "default"),
                         str(spec.get("place") or ""))
        return spec

    def _awake_here(self, own: bool, lane: str, place: str) -> None:
        """Keep-awake that nothing here can hold, for a job that may run here: refused (job_limits.py)."""
        if self.shared is None or place in ("", "*", *self._here()):
            job_limits.check_keep_awake(own, lane, self.settings)

    def _placed_here(self, spec: JobSpec) -> JobSpec:
        if self.shared is None and spec.place and spec.place not in self._here():
            raise self._nowhere(spec.place)
        self._gate_here(spec.gate_json, spec.lane, spec.cwd, spec.place)
        return spec

    def lane_fits(self, job: Job, lane: str) -> None:
        """An edit moving ``job`` to ``lane``: refused (BadRequest) as add
        refuses it where its gate (slots, needs, conditions) could never be
        met there; and where either lane has its own limits or keep-awake
        ([lanes.NAME]: given to a job when it is added, not when moved)."""
        if job.state not in (JobState.QUEUED, JobState.BLOCKED, JobState.HELD):
            return  # the edit's own refusal says why (running, finished)
        holds = self.settings.lane_holds
        if job.lane != lane and holds.get(job.lane, {}) != holds.get(lane, {}):
            which = job.lane if holds.get(job.lane) else lane
            raise BadRequest(f"lane {which!r} has its own limits or keep-awake ([lanes.{which}] in config), "
                             f"given to a job when it is added: job {job.id} cannot move from {job.lane!r} to {lane!r}",
                             hint=f"Cancel it and add it again with --lane {lane}.")
        if job.gate:
            self._gate_here(json.dumps(job.gate), lane, job.cwd, job.place or "")

    def settings_fit(self, job: Job, changes: Mapping[str, Any]) -> tuple[dict[str, Any], Job]:
        """An edit of a waiting job's settings (--timeout, --when, --mem, ...),
        checked as add checks a new job here: its place, its gate where it
        may run, its limits and keep-awake on this machine. Returns the
        changes (limits as this machine applies them, job_limits.applied_here) and
        the job with its new gate (for lane_fits)."""
        from dataclasses import replace

        from sloth_daemon.backends.edits import settings_spec

        if job.state not in (JobState.QUEUED, JobState.BLOCKED, JobState.HELD):
            return dict(changes), job  # the edit's own refusal says why (running, finished)
        lane = changes.get("lane")
        spec = self._limited(self._placed_here(settings_spec(job, changes, lane if isinstance(lane, str) else None)))
        out = dict(changes)
        if "limits" in changes or "keep_awake" in changes:
            out["limits"] = json.loads(spec.limits_json) if spec.limits_json else None
            out["keep_awake"] = spec.keep_awake
        return out, replace(job, gate=json.loads(spec.gate_json) if spec.gate_json else None)

    def _gate_here(self, gate: str | None, lane: str, cwd: str | None, place: str) -> None:
        """Conditions (its own or its lane's), needs and slots this machine
        could never meet: refused (on a shared queue, only for a job that
        runs here: each machine's resources are its own; one placed by a tag
        this machine has may run on another machine of that tag)."""
        if self.shared is not None and place != self.worker.host:
            if gate is not None:  # judged by what the machines it may run on published
                self.shared.check_needs(needs_of(json.loads(gate)), place)
            return
        if lane in self.settings.lane_when:
            self.gates.check_lane(lane)
        if gate is not None:
            self.gates.check_spec(gate, lane, cwd)

    def _limited(self, spec: JobSpec) -> JobSpec:
        """Its lane's and its own keep-awake and limits, checked here (daemon/job_limits.py)."""
        if not (spec.limits_json or spec.keep_awake or self.settings.lane_holds):
            return spec
        return job_limits.applied_here(spec, self.settings)

    def _told(self, spec: Mapping[str, Any] | JobSpec) -> Mapping[str, Any] | JobSpec:
        """Its lane's channels ([lanes.NAME] ping, webhook, mail_to) besides its own (docs/telling.md)."""
        if _lane_of(spec) not in self.settings.lane_tell or isinstance(spec, JobSpec):
            return spec if not isinstance(spec, JobSpec) else self._told_spec(spec)
        return self._told_spec(JobSpec.parse(spec, Defaults(self.settings.max_attempts, self.settings.lease_s,
                                                            self.default_place)))

    def _told_spec(self, spec: JobSpec) -> JobSpec:
        tells = self.settings.lane_tell
        lane_tell = tells.get(spec.lane)
        return spec if lane_tell is None else spec._replace(tell_json=merge_tell(spec.tell_json, lane_tell))

    def _limited_spec(self, spec: Mapping[str, Any]) -> Mapping[str, Any] | JobSpec:
        if not job_limits.asks_any(spec, self.settings):
            return spec
        defaults = Defaults(self.settings.max_attempts, self.settings.lease_s, self.default_place)
        return self._limited(JobSpec.parse(spec, defaults))

    def _here(self) -> tuple[str, ...]:
        return (self.worker.host, *self.settings.tags)

    def _nowhere(self, place: str) -> BadRequest:
        return BadRequest(f"--on {place}: this queue is this machine's alone ({self.worker.host}); every job runs here",
                          hint="To run jobs on other machines, share one PostgreSQL queue between them (README,"
                               " \"Several machines\"); here leave --on out.")

    # --------------------------------------------------------------- logs
    def stored_log(self, job_id: int, attempt: int, offset: int) -> Any:
        """On a shared queue, the copy of an attempt's log in the database
        (backends.postgres.logs.LogPart, from ``offset``); None on one machine's queue."""
        if self.shared is None or self.logs is None:
            return None
        return self.logs.stored_log(job_id, attempt, offset)

    def running_count(self) -> int:
        """Jobs with a live process here (no database needed); one held to
        start after another (pipeline.py) has none yet."""
        return sum(1 for r in self.running.values() if r.outcome is None and not r.pending)

    def has_process(self, job_id: int) -> bool:
        """True while an attempt of the job has a live process of ours."""
        run = self.running.get(job_id)
        return run is not None and run.live

    def attempt_live(self, job_id: int, attempt: int) -> bool:
        """True while that attempt of the job has a live process of ours."""
        run = self.running.get(job_id)
        return run is not None and run.live and run.attempt == attempt

    def follow(self, job_id: int, attempt: int) -> AsyncIterator[bytes] | None:
        """The live output of that attempt (what it printed so far, then
        more as it comes, until it ends), or None if it is not running here."""
        run = self.running.get(job_id)
        if run is None or run.attempt != attempt or not run.live:
            return None
        return self.spawner.tap(run.token)


def _lane_of(spec: Mapping[str, Any] | JobSpec) -> str:
    if isinstance(spec, JobSpec):
        return spec.lane
    return str(spec.get("lane") or "default")

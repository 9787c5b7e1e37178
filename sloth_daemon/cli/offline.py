"""The daemon's answers to the reading ops, computed from the queue
read-only, for when no daemon answers: ``list``, ``show``, ``logs``,
``lanes``, ``status``, ``latest``, ``config``, ``schedule_ls``, ``schedule_show``, ``timeline``,
``batch_show`` and ``prune`` with ``dry_run`` give the same shapes as over the
socket, so every command prints them the same way.

Nothing here writes: the file is opened read-only, never created or
migrated (a missing queue is an empty one); a shared queue (a URL:
config's queue_url or SLOTH_QUEUE_URL) is read in read-only transactions,
and an attempt that ran on another machine is read from its stored copy.
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any, Callable

from sloth_daemon import config as cfg
from sloth_daemon.errors import BadRequest, BatchNotFound, JobNotFound, ScheduleNotFound, SlothError, StorageError
from sloth_daemon.daemon.worker.handing import one_result, shown_results
from sloth_daemon.daemon.worker.lanes import ReadLanes, explain, lane_table, paused_why
from sloth_daemon.models import STATE_NAMES, Listing
from sloth_daemon.paths import Paths

if TYPE_CHECKING:
    from sloth_daemon.backends.face import ReadOnlyQueue


class _NoQueue:
    """Stands for a queue file that does not exist yet: no jobs, no lanes."""

    def get_meta(self, key: str, default: Any = None) -> Any:
        return default

    def lane_rows(self) -> dict[str, Any]:
        return {}

    def lane_counts(self) -> dict[str, dict[str, int]]:
        return {}

    def counts(self) -> dict[str, int]:
        return dict.fromkeys(STATE_NAMES, 0)

    def costs(self, job_ids: Any) -> dict[int, list[dict[str, Any]]]:
        return {}

    def run_times(self, column: str, value: str, *, prefix: bool = False) -> list[float]:
        return []

    def listing(self, **kw: Any) -> Listing:
        return Listing([], 0, self.counts(), kw.get("offset", 0))

    def scan(self, **kw: Any) -> "_NoScan":
        return _NoScan(self.counts(), kw.get("offset", 0))

    def get(self, job_id: int) -> Any:
        raise JobNotFound(job_id)

    def active_batches(self) -> list[Any]:
        return []

    def outbox_counts(self) -> dict[str, int]:
        return {"pending": 0, "failed": 0, "sent": 0}

    def batch_find(self, ref: str) -> Any:
        raise BatchNotFound(ref)

    def close(self) -> None:
        pass

    def machine_events(self, since: float, host: Any = None) -> list[Any]:
        return []

    @property
    def schedules(self) -> "_NoSchedules":
        return _NoSchedules()


class _NoSchedules:
    """The schedules of a queue that does not exist yet: none."""

    def all(self) -> list[Any]:
        return []

    def get(self, name: str) -> Any:
        raise ScheduleNotFound(name)


class _NoScan:
    """The scan of a queue that does not exist yet: nothing to read."""

    def __init__(self, counts: dict[str, int], offset: int) -> None:
        self.head = {"counts": counts, "total": 0, "offset": offset, "lanes": {}}

    def next(self) -> list[Any]:
        return []

    def tail(self) -> dict[str, Any]:
        return {"left_out": 0}

    def close(self) -> None:
        pass


def answer(paths: Paths, op: str, **args: Any) -> Any:
    """What the daemon would answer to ``op`` (a reading op). Raises
    SlothError as the daemon would (not found, bad attempt ...)."""
    if op == "config":
        return _config_answer(paths)
    fn = _OPS.get(op)
    if fn is None:
        raise SlothError(f"`{op}` needs the daemon", hint="Start it with `sloth daemon start`.")
    q = _open(paths)
    try:
        return fn(q, paths, args)
    finally:
        q.close()


def target(paths: Paths) -> Any:
    """The queue's path, or its URL (a str)."""
    return cfg.queue_target(cfg.load(paths.config_file), paths.db)


def where(paths: Paths) -> str:
    """What the note on stderr calls the queue read."""
    t = target(paths)
    if not isinstance(t, str):
        return "the queue file"
    from sloth_daemon.backends.postgres.errors import describe

    return f"the shared queue at {describe(t)}"


def _open(paths: Paths, *, quick: bool = False) -> Any:
    from sloth_daemon.backends import open_read_only

    try:
        return open_read_only(target(paths), quick=quick)
    except FileNotFoundError:
        return _NoQueue()


def _list(q: Any, paths: Paths, a: dict[str, Any]) -> Any:
    out = q.listing(**_selection(a), limit=a.get("limit"), now=time.time()).to_dict()
    explainer(q)(out["jobs"])
    return out


def explainer(q: Any) -> Callable[[list[dict[str, Any]]], None]:
    """Lanes.explain as the file says it: its pauses (whether a lane's
    `when` holds is the daemon's to judge, and none runs); what runs cost
    and how far running ones are (attempt_rules.with_run_facts; a file of
    an older schema, not migrated yet, says nothing of them)."""
    from sloth_daemon.backends.attempt_rules import with_run_facts

    paused_all, paused = bool(q.get_meta("paused_all", False)), set(q.get_meta("paused_lanes", []))

    def explained(jobs: list[dict[str, Any]]) -> None:
        if paused_all or paused:
            explain(jobs, lambda lane: paused_why(lane, paused_all, paused))
        try:
            with_run_facts(jobs, q.costs, q.run_times, time.time())
        except StorageError:
            pass
    return explained


def scan(paths: Paths, a: dict[str, Any]) -> tuple[Any, Callable[[list[dict[str, Any]]], None]]:
    """The listing of ``list`` with these arguments, to read a chunk at a
    time (backends.sqlite.scan / backends.postgres.scan; closing it closes
    the queue), and what says why its queued jobs wait (explainer)."""
    q = _open(paths)
    try:
        return q.scan(owns_reader=True, now=time.time(), **_selection(a), limit=a.get("limit")), explainer(q)
    except BaseException:
        q.close()
        raise


def _selection(a: dict[str, Any]) -> dict[str, Any]:
    return {"states": a.get("states"), "lane": a.get("lane"), "offset": a.get("offset", 0),
            "finished_limit": a.get("finished_limit"), **({"host": a["host"]} if a.get("host") else {})}


def _detail(q: Any, job_id: int) -> dict[str, Any]:
    job = q.get(job_id).to_dict()
    explainer(q)([job])
    try:
        job["runs"] = q.costs([job_id]).get(job_id, [])  # what each attempt cost
    except StorageError:  # a file of an older schema
        job["runs"] = []
    return {"job": job, "events": [e.to_dict() for e in q.events(job_id)],
            "prereqs": q.prereqs(job_id), "dependents": q.dependents(job_id),
            "results": shown_results(q, job)}


def _show(q: Any, paths: Paths, a: dict[str, Any]) -> Any:
    if "id" in a:
        return _detail(q, a["id"])
    for i in a["ids"]:
        q.get(i)
    return {"jobs": [{**(d := _detail(q, i))["job"], "events": d["events"], "prereqs": d["prereqs"],
                      "dependents": d["dependents"], "results": d["results"]} for i in a["ids"]]}


def _logs(q: ReadOnlyQueue, paths: Paths, a: dict[str, Any]) -> Any:
    job = q.get(a["id"])
    n = a.get("attempt") or job.attempts
    if n == 0:
        from sloth_daemon.backends.rules import never_ran

        raise never_ran(job)
    if not 1 <= n <= job.attempts:
        raise BadRequest(f"job {job.id} has attempts 1..{job.attempts}, not {n!r}")
    from sloth_daemon.backends.sqlite.identity import queue_paths

    shared = q.identity  # a shared queue's identity is in its database (None on SQLite's view)
    path = (paths.for_queue(shared) if shared else queue_paths(paths)).job_log(job.id, n)
    out = {"id": job.id, "attempt": n, "attempts": job.attempts, "path": str(path)}
    if shared and q.logs is not None and not path.exists():  # it ran on another machine: the copy it stored
        out["data"] = q.logs.stored_log(job.id, n, 0, 1 << 30).data.decode("utf-8", "surrogateescape")
    return out


def _latest(q: Any, paths: Paths, a: dict[str, Any]) -> Any:
    """As the daemon's: on a shared queue, of the jobs queued from this machine (its name, as the daemon's)."""
    if isinstance(q, _NoQueue):  # no file, no jobs
        return {"id": None}
    origin = None
    if isinstance(target(paths), str):
        origin = cfg.machine_name(cfg.load(paths.config_file))
    return {"id": q.latest(origin=origin, ran=a.get("ran") is True)}


def _lanes(q: Any, paths: Paths, a: dict[str, Any]) -> Any:
    lanes = ReadLanes(q, cfg.load(paths.config_file))
    counts = q.lane_counts()
    running = {ln: c.get("running", 0) for ln, c in counts.items()}
    return {"lanes": lane_table(lanes, lanes.known(), running, counts), "paused_all": lanes.paused_all,
            "known": lanes.known()}


def _status(q: Any, paths: Paths, a: dict[str, Any]) -> Any:
    """As the daemon's: its active batches, and the outbox's messages not delivered (no sender runs here)."""
    try:
        batches, box = q.active_batches(), q.outbox_counts()
    except StorageError:  # a file of an older schema, not migrated yet: it has neither
        batches, box = [], {}
    return {"daemon": None, "counts": q.counts(), "paths": paths.as_dict(), **_lanes(q, paths, a),
            "batches": batches, **({"outbox": box} if box.get("pending") or box.get("failed") else {})}


def _batch_show(q: Any, paths: Paths, a: dict[str, Any]) -> Any:
    """As the daemon's batch_show (checked as it checks)."""
    from sloth_daemon.daemon.request_args import batch_ref_arg, states_arg

    found = q.batch_find(batch_ref_arg(a.get("batch")))
    return {"batch": found, "ids": q.batch_members(found["id"], states_arg(a.get("states")))}


def _prune(q: Any, paths: Paths, a: dict[str, Any]) -> Any:
    """`prune --dry-run`: how many finished jobs a prune would delete, counted
    by reading (checked as the daemon checks). A prune itself needs the daemon."""
    if a.get("dry_run") is not True:
        raise SlothError("`prune` needs the daemon", hint="Start it with `sloth daemon start`.")
    from sloth_daemon.backends.rules import wanted_states
    from sloth_daemon.models import FINISHED_STATES

    older = a.get("older_than_s")
    if isinstance(older, bool) or not isinstance(older, (int, float)) or not 0 <= older < 1e15:
        raise BadRequest("older_than_s must be a non-negative number of seconds")
    states = wanted_states(a.get("states"), FINISHED_STATES, "prune") or list(FINISHED_STATES)
    before, n = time.time() - older, 0
    jobs = q.scan(now=time.time(), states=states, lane=a.get("lane"), offset=0, finished_limit=None, limit=None)
    try:
        while chunk := jobs.next():
            n += sum(1 for j in chunk if j.finished_at is not None and j.finished_at < before)
    finally:
        jobs.close()
    return {"would_prune": n}


def _config_answer(paths: Paths) -> Any:
    """The settings, always (a config file that does not load is the error);
    the lanes as `sloth lane set` left them if the queue answers at once. A
    queue that cannot be read (its server down or unreachable, a schema not
    migrated yet) gives the config's lanes, and why under ``queue``: the
    command that checks a queue_url must show what it checks."""
    d = cfg.load(paths.config_file).as_dict()
    d["paths"], d["file_differs"] = paths.as_dict(), False  # no daemon: the file is what is in force
    try:
        q = _open(paths, quick=True)
        try:
            d["lanes_in_force"] = {ln: {"concurrency": v["concurrency"], "source": v["source"]}
                                   for ln, v in _lanes(q, paths, {})["lanes"].items()}
        finally:
            q.close()
    except StorageError as e:
        d["queue"] = {"where": where(paths), "error": e.to_dict()}
    return json.loads(json.dumps(d))  # as the daemon's answer arrives: lists, not the settings' tuples


def _schedule_ls(q: Any, paths: Paths, a: dict[str, Any]) -> Any:
    from sloth_daemon.daemon.schedules.ops import listed

    return listed(q.schedules)


def _schedule_show(q: Any, paths: Paths, a: dict[str, Any]) -> Any:
    from sloth_daemon.daemon.schedules.ops import shown

    return shown(q.schedules, a)


def _timeline(q: Any, paths: Paths, a: dict[str, Any]) -> Any:
    """No daemon runs here: one whose row still says running died unseen (a shared queue's other hosts may run)."""
    import socket

    from sloth_daemon.backends import timeline
    from sloth_daemon.clock import SystemClock

    here = [socket.gethostname()] if not isinstance(target(paths), str) else []
    return timeline.answer(q, a, SystemClock(), down_hosts=here)


_OPS: dict[str, Callable[[Any, Paths, dict[str, Any]], Any]] = {
    "list": _list, "show": _show, "logs": _logs, "lanes": _lanes, "status": _status, "prune": _prune,
    "result": lambda q, paths, a: one_result(q, a["id"], a.get("attempt")),
    "latest": _latest, "schedule_ls": _schedule_ls, "schedule_show": _schedule_show, "timeline": _timeline,
    "batch_show": _batch_show,
}

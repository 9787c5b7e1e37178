"""The socket's schedule ops (cli/schedule.py on the client), each argument
checked (the frame is untrusted) and asked of the scheduler that does the
work; Handlers (daemon/handlers.py) adds them to its op table. And how a
schedule is shown (``view``, the same for `ls`,
`show` and every change)."""

from __future__ import annotations

import json
import time
from typing import Any, Callable, Mapping

from sloth_daemon.backends.schedule_rules import RUNS_SHOWN
from sloth_daemon.daemon.schedules import policy, recipe as recipes, slots
from sloth_daemon.daemon.schedules.recipe import Recipe
from sloth_daemon.daemon.schedules.scheduler import Scheduler
from sloth_daemon.errors import BadRequest, FieldError, IllegalTransition

Op = Callable[[dict[str, Any]], Any]


class ScheduleOps:
    """The schedule_* ops over the daemon's ``scheduler`` (None: this
    daemon runs no schedules, and each op says so)."""

    def __init__(self, scheduler: Scheduler | None) -> None:
        self.scheduler = scheduler

    def table(self, patiently: Callable[[Op], Op]) -> dict[str, Op]:
        """The ops by name, each writing one patiently (see Handlers._patiently)."""
        return {"schedule_add": patiently(self.op_add), "schedule_ls": self.op_ls, "schedule_show": self.op_show,
                "schedule_pause": patiently(self.op_pause), "schedule_resume": patiently(self.op_resume),
                "schedule_rm": patiently(self.op_rm), "schedule_run": patiently(self.op_run),
                "schedule_edit": patiently(self.op_edit)}

    @property
    def s(self) -> Scheduler:
        if self.scheduler is None:
            raise BadRequest("this daemon runs no schedules")
        return self.scheduler

    def op_add(self, a: dict[str, Any]) -> dict[str, Any]:
        return {"schedule": view(self.s.add(recipes.name(a.get("name")), _fields(a)))}

    def op_edit(self, a: dict[str, Any]) -> dict[str, Any]:
        return {"schedule": view(self.s.edit(recipes.name(a.get("name")), _fields(a)))}

    def op_ls(self, a: dict[str, Any]) -> dict[str, Any]:
        return listed(self.s.store)

    def op_show(self, a: dict[str, Any]) -> dict[str, Any]:
        return shown(self.s.store, a)

    def op_pause(self, a: dict[str, Any]) -> dict[str, Any]:
        return {"schedule": view(self.s.pause(recipes.name(a.get("name"))))}

    def op_resume(self, a: dict[str, Any]) -> dict[str, Any]:
        return {"schedule": view(self.s.resume(recipes.name(a.get("name"))))}

    def op_rm(self, a: dict[str, Any]) -> dict[str, Any]:
        name = recipes.name(a.get("name"))
        self.s.remove(name)
        return {"removed": name}

    def op_run(self, a: dict[str, Any]) -> dict[str, Any]:
        name = recipes.name(a.get("name"))
        out = self.s.run_now(name)
        if out.get("job_id") is None:  # never a silent nothing
            raise IllegalTransition(f"schedule {name!r}: no job was queued ({out.get('note') or 'its run was taken'})")
        return {"id": out.get("job_id"), "deduped": bool(out.get("deduped")), "schedule": name}


def listed(store: Any, now: float | None = None) -> dict[str, Any]:
    """The answer to schedule_ls, from ``store`` (the daemon's, or the queue
    read without one: cli/offline.py); ``now``: the wall time (a test's)."""
    return {"schedules": [_judged(view(r), r, store, now) for r in store.all()]}


def _judged(v: dict[str, Any], rec: Mapping[str, Any], store: Any, now: float | None = None) -> dict[str, Any]:
    """``v`` with its dead-man switch: ``expect_within_s``, ``overdue``
    (the deadline passed with no success, or None)."""
    from sloth_daemon.daemon.telling.deadman import window

    r = rec["recipe"]
    v["expect_within_s"] = r.get("expect_within_s")
    at = time.time() if now is None else now
    passed = window(rec, store.last_success(rec["name"]), at) if r.get("expect_within_s") else None
    v["overdue"] = None if passed is None or rec["paused"] else passed[1]
    return v


def shown(store: Any, a: Mapping[str, Any]) -> dict[str, Any]:
    """The answer to schedule_show (as ``listed``)."""
    name = recipes.name(a.get("name"))
    limit = a.get("limit", RUNS_SHOWN)
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 100_000:
        raise FieldError("limit", f"must be an integer from 1 to 100000, got {limit!r}")
    rec = store.get(name)
    return {"schedule": _judged(view(rec), rec, store), "runs": store.runs(name, limit)}


def _fields(a: Mapping[str, Any]) -> Mapping[str, Any]:
    fields = a.get("recipe")
    if not isinstance(fields, Mapping):
        raise FieldError("recipe", f"must be an object, got {type(fields).__name__}")
    return fields


def view(rec: Mapping[str, Any]) -> dict[str, Any]:
    """A schedule as `ls`, `show` and the changes answer it."""
    r = Recipe.from_dict(rec["recipe"])
    job = r.job
    offset = policy.jitter_s(rec["name"], r.machine, r.jitter_s)
    return {
        "name": rec["name"], "spec": slots.describe(r), "every_s": r.every_s, "cron": r.cron, "tz": r.tz,
        "missed": r.missed, "overlap": r.overlap, "jitter_s": r.jitter_s, "jitter_offset_s": offset,
        "paused": rec["paused"], "next_slot": rec["next_slot"],
        # when its job will be queued to start: the slot plus the jitter (None while paused)
        "next_run": None if rec["paused"] else rec["next_slot"] + int(offset),
        "last_slot": rec["last_slot"], "last_run": rec["last_slot"],
        "last_job": rec["last_job"], "last_state": rec.get("last_state"), "last_exit": rec.get("last_exit"),
        "missed_slots": rec["missed"], "dropped": rec["dropped"], "command": job.get("command"),
        "lane": job.get("lane", "default"), "place": job.get("place", ""), "created_at": rec["created_at"],
        "job_options": {k: job[k] for k in JOB_OPTIONS if job.get(k) not in (None, False, {}, [])},
        "tell": _channels(job),
    }


# What each occurrence waits for and holds (add's gate and keeper fields), and its watchdogs and
# retry rules, said by `schedule show`.
JOB_OPTIONS = ("when", "on_lost", "needs", "slots", "keep_awake", "limits", "rules")


def _channels(job: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Who each occurrence tells (and the dead-man switch), as `show` says a
    job's: {"kind", "url" masked or "to", "on"}."""
    from sloth_daemon.checks import tell_json
    from sloth_daemon.models import mask_channel

    stored = tell_json(job)
    return [mask_channel(ch) for ch in json.loads(stored)] if stored else []

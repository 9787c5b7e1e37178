"""The schedule_* ops in-process, composed as main.build composes them
(Control, Worker, the Scheduler and its ports) on a real queue and manual
clocks: what they answer, and bad input refused with nothing changed."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from sloth_daemon.clock import ManualClocks
from sloth_daemon.config import Settings
from sloth_daemon.daemon.control import Control
from sloth_daemon.daemon.handlers import Handlers
from sloth_daemon.daemon.main import compose_scheduler
from sloth_daemon.daemon.worker.loop import Worker
from sloth_daemon.errors import BadRequest, IllegalTransition, ScheduleNotFound, SlothError
from sloth_daemon.paths import resolve
from sloth_daemon.queue import Queue
from tests.unit.daemon.test_worker import FakeSpawner

JOB = {"command": ["true"], "cwd": "/tmp"}


def op(h: Handlers, name: str, args: dict[str, Any]) -> Any:
    out = h.ops[name](args)
    return asyncio.run(out) if asyncio.iscoroutine(out) else out


@pytest.fixture
def rig(tmp_path: Path):
    clocks = ManualClocks()
    paths = resolve({"SLOTH_HOME": str(tmp_path)})
    q = Queue(paths.db, clocks)
    sp = FakeSpawner()
    w = Worker(q, Settings(), sp, clocks=clocks, log_path=paths.job_log, instance="t")
    scheduler = compose_scheduler(q, w, clocks, None, job=lambda d: c.validate([d], fired=True)[0],
                                  place=lambda d: dict(c._placed(d)))
    c = Control(q, w, sp, paths, Settings(), request_stop=lambda *a, **k: None, instance="t", scheduler=scheduler)
    c.scheduler.load()
    yield Handlers(c, {"connections": 0}), q, c.scheduler
    q.close()


def nothing_changed(q) -> bool:
    return q.schedules.all() == [] and sum(q.counts().values()) == 0


def test_add_ls_show_run_pause_resume_edit_rm(rig):
    h, q, s = rig
    made = op(h, "schedule_add", {"name": "b", "recipe": {"cron": "0 3 * * *", "tz": "Europe/Berlin", "job": JOB}})
    assert made["schedule"]["spec"] == "At 03:00 every day (Europe/Berlin)" and made["schedule"]["next_run"]
    assert [x["name"] for x in h.ops["schedule_ls"]({})["schedules"]] == ["b"]
    ran = op(h, "schedule_run", {"name": "b"})
    assert ran["id"] and not ran["deduped"] and op(h, "schedule_run", {"name": "b"})["deduped"]
    shown = h.ops["schedule_show"]({"name": "b"})
    assert shown["runs"][0]["job_id"] == ran["id"]
    assert op(h, "schedule_pause", {"name": "b"})["schedule"]["next_run"] is None
    assert op(h, "schedule_resume", {"name": "b"})["schedule"]["next_run"]
    assert op(h, "schedule_edit", {"name": "b", "recipe": {"every_s": 600}})["schedule"]["spec"] == "every 10m"
    assert op(h, "schedule_rm", {"name": "b"}) == {"removed": "b"}
    assert h.ops["schedule_ls"]({})["schedules"] == []


@pytest.mark.parametrize("name, args, err", [
    ("schedule_add", {"name": 5, "recipe": {"every_s": 60, "job": JOB}}, BadRequest),
    ("schedule_add", {"name": "x" * 10_000, "recipe": {"every_s": 60, "job": JOB}}, BadRequest),
    ("schedule_add", {"name": "../etc", "recipe": {"every_s": 60, "job": JOB}}, BadRequest),
    ("schedule_add", {"name": "b", "recipe": [1, 2]}, BadRequest),
    ("schedule_add", {"name": "b", "recipe": {"every_s": -1, "job": JOB}}, BadRequest),
    ("schedule_add", {"name": "b", "recipe": {"every_s": 1e300, "job": JOB}}, BadRequest),
    ("schedule_add", {"name": "b", "recipe": {"every_s": True, "job": JOB}}, BadRequest),
    ("schedule_add", {"name": "b", "recipe": {"cron": "x" * 100_000, "job": JOB}}, BadRequest),
    ("schedule_add", {"name": "b", "recipe": {"cron": "* * * * * *", "job": JOB}}, BadRequest),
    ("schedule_add", {"name": "b", "recipe": {"cron": 7, "job": JOB}}, BadRequest),
    ("schedule_add", {"name": "b", "recipe": {"every_s": 60, "jitter_s": "lots", "job": JOB}}, BadRequest),
    ("schedule_add", {"name": "b", "recipe": {"every_s": 60, "overlap": "pile", "job": JOB}}, BadRequest),
    ("schedule_add", {"name": "b", "recipe": {"every_s": 60, "job": {"command": []}}}, BadRequest),
    ("schedule_add", {"name": "b", "recipe": {"every_s": 60, "job": {**JOB, "lane": 3}}}, BadRequest),
    ("schedule_add", {"name": "b", "recipe": {"every_s": 60, "job": {**JOB, "after": [1]}}}, BadRequest),
    ("schedule_show", {"name": "nope"}, ScheduleNotFound),
    ("schedule_show", {"name": "b", "limit": "all"}, BadRequest),
    ("schedule_pause", {"name": "nope"}, ScheduleNotFound),
    ("schedule_resume", {"name": "nope"}, ScheduleNotFound),
    ("schedule_rm", {"name": "nope"}, ScheduleNotFound),
    ("schedule_run", {"name": "nope"}, ScheduleNotFound),
    ("schedule_edit", {"name": "nope", "recipe": {"every_s": 60}}, ScheduleNotFound),
])
def test_bad_input_is_refused_clearly_and_changes_nothing(rig, name, args, err):
    h, q, _ = rig
    with pytest.raises(err) as e:
        op(h, name, args)
    assert e.value.message and nothing_changed(q)


def test_a_bad_edit_or_a_taken_name_changes_nothing(rig):
    h, q, _ = rig
    op(h, "schedule_add", {"name": "b", "recipe": {"every_s": 60, "job": JOB}})
    before = q.schedules.get("b")
    for args, err in [({"name": "b", "recipe": {"every_s": 60, "job": JOB}}, IllegalTransition)]:
        with pytest.raises(err):
            op(h, "schedule_add", args)
    for recipe in [{"cron": "bogus"}, {"tz": "Nowhere/Land", "cron": "@daily"}, {"missed": 3}, {"job": {"lane": ""}}]:
        with pytest.raises(SlothError):
            op(h, "schedule_edit", {"name": "b", "recipe": recipe})
    assert q.schedules.get("b") == before

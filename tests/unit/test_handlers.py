"""The socket's per-op handlers, in-process: a real queue and worker behind a
real Control, a fake spawner, no socket and no subprocess."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from sloth_daemon.clock import ManualClocks
from sloth_daemon.config import Settings
from sloth_daemon.control import Control
from sloth_daemon.errors import BadRequest, IllegalTransition, JobNotFound, SlothError
from sloth_daemon.handlers import Handlers
from sloth_daemon.paths import resolve
from sloth_daemon.queue import Queue
from sloth_daemon.worker import Worker
from tests.unit.test_worker import FakeSpawner


@pytest.fixture
def rig(tmp_path: Path):
    clocks = ManualClocks()
    paths = resolve({"SLOTH_HOME": str(tmp_path)})
    settings = Settings()
    q = Queue(paths.db, clocks)
    sp = FakeSpawner()
    w = Worker(q, settings, sp, clocks=clocks, log_path=paths.job_log, instance="t")
    stops: list[tuple[str, bool]] = []
    c = Control(q, w, sp, paths, settings, request_stop=lambda why, keep_jobs: stops.append((why, keep_jobs)),
                instance="t")
    w.on_change = c.job_changed
    h = Handlers(c, {"connections": 0})
    yield h, w, q, sp, stops
    q.close()


def test_add_list_show_cancel_retry(rig):
    h, w, q, sp, _ = rig
    ids = h.ops["add"]({"jobs": [{"command": ["a"]}, {"command": ["b"], "lane": "x"}],
                        "common": {"priority": 2}})["ids"]
    assert [j["id"] for j in h.ops["list"]({})["jobs"]] == ids
    assert [j["id"] for j in h.ops["list"]({"lane": "x"})["jobs"]] == ids[1:]
    shown = h.ops["show"]({"id": ids[0]})
    assert shown["job"]["priority"] == 2 and shown["events"] == []
    assert h.ops["cancel"]({"id": ids[0]})["job"]["state"] == "cancelled"
    assert h.ops["retry"]({"id": ids[0]})["job"]["state"] == "queued"
    with pytest.raises(IllegalTransition):
        h.ops["retry"]({"id": ids[0]})


@pytest.mark.parametrize("op, args, err", [
    ("add", {"jobs": []}, BadRequest),
    ("add", {"jobs": [{"command": "ls"}]}, BadRequest),
    ("add", {"jobs": [{"command": ["x"], "shell": "yes"}]}, BadRequest),
    ("add", {"jobs": [{"command": ["x"], "lease_s": 10**400}]}, BadRequest),
    ("add", {"jobs": [1]}, BadRequest),
    ("show", {"id": "1"}, BadRequest),
    ("show", {"id": 7}, JobNotFound),
    ("list", {"states": ["bogus"]}, BadRequest),
    ("list", {"limit": 0}, BadRequest),
    ("pause", {"lane": ""}, BadRequest),
    ("prune", {"older_than_s": float("nan")}, BadRequest),
])
def test_bad_arguments_are_refused_and_change_nothing(rig, op, args, err):
    h, w, q, *_ = rig
    before = q.counts()
    with pytest.raises(err):
        h.ops[op](args)
    assert q.counts() == before


def test_status_merges_control_and_server_figures(rig):
    h, *_ = rig
    st = h.ops["status"]({})
    assert st["server"] == {"connections": 0} and st["counts"]["queued"] == 0 and "lanes" in st


def test_shutdown_asks_the_daemon_to_stop(rig):
    h, *_, stops = rig

    async def go() -> None:
        assert h.ops["shutdown"]({})["stopping"] is True
        assert h.ops["shutdown"]({"keep_jobs": True})["keep_jobs"] is True
        with pytest.raises(BadRequest):
            h.ops["shutdown"]({"keep_jobs": "yes"})
        await asyncio.sleep(0)

    asyncio.run(go())
    assert stops == [("shutdown requested over the socket", False), ("restart requested over the socket", True)]


def test_wait_streams_states_until_every_job_ends_and_close_ends_it(rig):
    h, w, q, sp, _ = rig
    a, b = h.ops["add"]({"jobs": [{"command": ["a"]}, {"command": ["b"]}]})["ids"]
    seen: list[dict[str, Any]] = []

    async def emit(ev: dict[str, Any]) -> None:
        seen.append(ev)

    async def go() -> dict[str, Any]:
        task = asyncio.ensure_future(h.streams["wait"]({"ids": [a]}, emit))
        await asyncio.sleep(0)
        w.turn()
        sp.start(a)
        sp.exit(a, 0)
        w.turn()
        return await asyncio.wait_for(task, 5)

    res = asyncio.run(go())
    assert [j["state"] for j in res["jobs"]] == ["done"]
    assert seen[-1]["job"]["state"] == "done"

    async def closed() -> None:
        task = asyncio.ensure_future(h.streams["wait"]({"ids": [b]}, emit))
        await asyncio.sleep(0)
        h.close()
        with pytest.raises(SlothError, match="stopping"):
            await asyncio.wait_for(task, 5)

    asyncio.run(closed())


def test_logs_points_at_the_attempts_file(rig, tmp_path):
    h, w, q, sp, _ = rig
    (a,) = h.ops["add"]({"jobs": [{"command": ["a"]}]})["ids"]
    with pytest.raises(SlothError, match="not started"):
        h.ops["logs"]({"id": a})
    w.turn()
    res = h.ops["logs"]({"id": a})
    assert (res["attempt"], res["path"]) == (1, str(tmp_path / "logs" / "jobs" / f"{a}.1.log"))
    with pytest.raises(BadRequest):
        h.ops["logs"]({"id": a, "attempt": 2})

"""The socket's per-op handlers, in-process: a real queue and worker behind a
real Control, a fake spawner, no socket and no subprocess."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from sloth_daemon.clock import ManualClocks
from sloth_daemon.config import Settings
from sloth_daemon.daemon.control import Control
from sloth_daemon.errors import BadRequest, IllegalTransition, JobNotFound, SlothError
from sloth_daemon.daemon.handlers import Handlers
from sloth_daemon.paths import resolve
from sloth_daemon.queue import Queue
from sloth_daemon.daemon.worker.loop import Worker
from tests.unit.daemon.test_worker import FakeSpawner


def op(h: Handlers, name: str, args: dict[str, Any]) -> Any:
    """Call an op as the server does: a writing op is a coroutine (it may
    wait for a foreign lock on the database without blocking the loop)."""
    out = h.ops[name](args)
    if asyncio.iscoroutine(out):
        out = asyncio.run(out)
    return out


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
    w.signals.on_change = c.job_changed
    h = Handlers(c, {"connections": 0})
    yield h, w, q, sp, stops
    q.close()


def test_add_list_show_cancel_retry(rig):
    h, w, q, sp, _ = rig
    ids = op(h, "add", {"jobs": [{"command": ["a"]}, {"command": ["b"], "lane": "x"}],
                        "common": {"priority": 2}})["ids"]
    assert [j["id"] for j in h.ops["list"]({})["jobs"]] == ids
    assert [j["id"] for j in h.ops["list"]({"lane": "x"})["jobs"]] == ids[1:]
    shown = h.ops["show"]({"id": ids[0]})
    assert shown["job"]["priority"] == 2 and shown["events"] == []
    assert op(h, "cancel", {"id": ids[0]})["job"]["state"] == "cancelled"
    assert op(h, "retry", {"id": ids[0]})["job"]["state"] == "queued"
    with pytest.raises(IllegalTransition):
        op(h, "retry", {"id": ids[0]})


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
        globals()["op"](h, op, args)
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
    a, b = op(h, "add", {"jobs": [{"command": ["a"]}, {"command": ["b"]}]})["ids"]
    seen: list[dict[str, Any]] = []

    async def emit(ev: dict[str, Any]) -> None:
        seen.append(ev)

    async def go() -> dict[str, Any]:
        task = asyncio.ensure_future(h.stream_ops["wait"]({"ids": [a]}, emit))
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
        task = asyncio.ensure_future(h.stream_ops["wait"]({"ids": [b]}, emit))
        await asyncio.sleep(0)
        h.close()
        with pytest.raises(SlothError, match="stopping"):
            await asyncio.wait_for(task, 5)

    asyncio.run(closed())


def test_logs_points_at_the_attempts_file(rig, tmp_path):
    h, w, q, sp, _ = rig
    (a,) = op(h, "add", {"jobs": [{"command": ["a"]}]})["ids"]
    with pytest.raises(SlothError, match="not started"):
        h.ops["logs"]({"id": a})
    w.turn()
    res = h.ops["logs"]({"id": a})
    assert (res["attempt"], res["path"]) == (1, str(tmp_path / "logs" / "jobs" / f"{a}.1.log"))
    with pytest.raises(BadRequest):
        h.ops["logs"]({"id": a, "attempt": 2})


def test_a_write_waits_for_a_foreign_lock_without_blocking_the_loop(tmp_path):
    """A foreign process holds the write lock; the daemon's queue waits only
    briefly itself, so the op retries on the event loop, which keeps serving
    (a read answers meanwhile), and succeeds once the lock is gone."""
    import sqlite3

    paths = resolve({"SLOTH_HOME": str(tmp_path)})
    clocks, settings = ManualClocks(), Settings()
    q = Queue(paths.db, clocks, lock_wait_s=0.05)
    sp = FakeSpawner()
    w = Worker(q, settings, sp, clocks=clocks, log_path=paths.job_log, instance="t")
    h = Handlers(Control(q, w, sp, paths, settings, request_stop=lambda *a, **k: None, instance="t"), {})
    other = sqlite3.connect(paths.db, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")

    async def go() -> tuple[Any, Any]:
        add = asyncio.ensure_future(h.ops["add"]({"jobs": [{"command": ["x"]}]}))
        await asyncio.sleep(0.3)
        assert not add.done()  # waiting for the lock...
        listed = h.ops["list"]({})  # ...while the loop still answers reads
        other.execute("ROLLBACK")
        return await asyncio.wait_for(add, 10), listed

    try:
        added, listed = asyncio.run(go())
        assert listed["jobs"] == [] and added["ids"] == [1]
    finally:
        other.close()
        q.close()


# ------------------------------------------------------------ issue 9
def test_list_is_an_envelope_that_says_what_it_left_out(rig):
    h, w, q, sp, _ = rig
    ids = op(h, "add", {"jobs": [{"command": [str(i)]} for i in range(5)]})["ids"]
    w.turn()  # one runs (concurrency 1)
    res = op(h, "list", {"limit": 2})
    assert [j["id"] for j in res["jobs"]] == ids[:2] and res["jobs"][0]["state"] == "running"
    assert (res["total"], res["left_out"], res["counts"]["queued"]) == (5, 3, 4)
    assert op(h, "list", {"states": ["claimed"]})["jobs"][0]["id"] == ids[0]  # the old name still filters
    with pytest.raises(BadRequest, match="unknown state 'bogus'"):
        op(h, "list", {"states": ["bogus"]})


def test_add_says_which_lanes_it_made_and_show_takes_many_ids(rig):
    h, *_ = rig
    res = op(h, "add", {"jobs": [{"command": ["a"], "lane": "new"}, {"command": ["b"], "after_previous": "after"}]})
    assert res["new_lanes"] == ["new"] and op(h, "add", {"jobs": [{"command": ["c"], "lane": "new"}]})["new_lanes"] == []
    a, b = res["ids"]
    shown = op(h, "show", {"ids": [a, b]})["jobs"]
    assert [(j["id"], j["state"]) for j in shown] == [(a, "queued"), (b, "blocked")]
    assert shown[1]["prereqs"] == [{"id": a, "need": "done", "state": "queued"}] and shown[0]["dependents"] == [b]
    with pytest.raises(JobNotFound):
        op(h, "show", {"ids": [a, 999]})


def test_cancel_retry_restart_by_ids_and_selection(rig):
    h, w, q, sp, _ = rig
    ids = op(h, "add", {"jobs": [{"command": ["a"], "lane": "x"}, {"command": ["b"], "lane": "x"},
                                 {"command": ["c"]}]})["ids"]
    res = op(h, "cancel", {"lane": "x"})
    assert [j["id"] for j in res["jobs"]] == ids[:2] and res["skipped"] == []
    res = op(h, "cancel", {"ids": ids})
    assert [s["id"] for s in res["skipped"]] == ids[:2] and [j["id"] for j in res["jobs"]] == ids[2:]
    assert [j["id"] for j in op(h, "retry", {"states": ["cancelled"], "lane": "x"})["jobs"]] == ids[:2]
    res = op(h, "restart", {"ids": [ids[2]]})
    assert res["restarted"] == [[ids[2], res["jobs"][0]["id"]]]
    for bad in ({}, {"ids": [1], "lane": "x"}, {"lane": "nope"}, {"states": ["done"]}):
        with pytest.raises(SlothError):
            op(h, "cancel", bad)


def test_lanes_ops_refuse_a_lane_that_does_not_exist(rig):
    from sloth_daemon.errors import LaneNotFound

    h, w, q, *_ = rig
    for name, args in (("pause", {"lane": "downlods"}), ("resume", {"lane": "downlods"}),
                       ("lane_set", {"lane": "downlods", "concurrency": 2}), ("lane_rm", {"lane": "downlods"})):
        with pytest.raises(LaneNotFound) as e:
            op(h, name, args)
        assert "default" in e.value.hint
    res = op(h, "lane_set", {"lane": "gpu", "concurrency": 2, "create": True})
    assert (res["concurrency"], res["was"]["concurrency"]) == (2, 1)
    assert op(h, "lanes", {})["lanes"]["gpu"]["source"] == "sloth lane set"
    with pytest.raises(BadRequest):
        op(h, "lane_set", {"lane": "gpu", "concurrency": -1})
    assert op(h, "lane_rm", {"lane": "gpu"}) == {"removed": "gpu"}


def test_prune_dry_run_and_reload_without_a_daemon_says_so(rig):
    h, w, q, *_ = rig
    (a,) = op(h, "add", {"jobs": [{"command": ["a"]}]})["ids"]
    op(h, "cancel", {"id": a})
    assert op(h, "prune", {"older_than_s": 0, "states": ["cancelled"], "dry_run": True}) == {"would_prune": 0}
    with pytest.raises(SlothError, match="cannot reload"):
        op(h, "reload", {})


def test_follow_through_retries_marks_each_attempt_and_ends_with_the_job(rig, tmp_path):
    h, w, q, sp, _ = rig
    (a,) = op(h, "add", {"jobs": [{"command": ["flaky"], "max_attempts": 2}]})["ids"]
    seen: list[dict[str, Any]] = []

    async def emit(ev: dict[str, Any]) -> None:
        seen.append(ev)

    async def go() -> dict[str, Any]:
        task = asyncio.ensure_future(h.stream_ops["follow"]({"id": a, "all_attempts": True}, emit))
        for attempt, code in ((1, 3), (2, 0)):
            await asyncio.sleep(0)
            w.clocks.advance(5)  # past the retry backoff
            w.turn()
            h.paths.job_log(a, attempt).parent.mkdir(parents=True, exist_ok=True)
            h.paths.job_log(a, attempt).write_text(f"run {attempt}\n")
            sp.start(a)
            await asyncio.sleep(0)
            sp.exit(a, code)
            w.turn()
        return await asyncio.wait_for(task, 5)

    res = asyncio.run(go())
    assert res["job"]["state"] == "done"
    assert [(e["kind"], e.get("data") or e.get("attempt")) for e in seen] == [
        ("log", "run 1\n"), ("attempt", 2), ("log", "run 2\n")]
    assert seen[1]["previous"].startswith("failed: exit 3; retry rule: ") and "; retry 2/2" in seen[1]["previous"]


def test_wait_sends_every_jobs_state_first(rig):
    h, w, q, sp, _ = rig
    a, b = op(h, "add", {"jobs": [{"command": ["a"]}, {"command": ["b"]}]})["ids"]
    op(h, "cancel", {"id": b})
    seen: list[dict[str, Any]] = []

    async def emit(ev: dict[str, Any]) -> None:
        seen.append(ev)

    async def go() -> dict[str, Any]:
        task = asyncio.ensure_future(h.stream_ops["wait"]({"ids": [a, b]}, emit))
        await asyncio.sleep(0)
        await h.ops["cancel"]({"id": a})
        return await asyncio.wait_for(task, 5)

    asyncio.run(go())
    assert seen[0]["kind"] == "jobs" and [j["state"] for j in seen[0]["jobs"]] == ["queued", "cancelled"]


def test_follow_from_after_a_failed_attempt_replays_it_first(rig):
    h, w, q, sp, _ = rig
    (a,) = op(h, "add", {"jobs": [{"command": ["flaky"], "max_attempts": 3}]})["ids"]
    w.turn()
    log1 = h.paths.job_log(a, 1)
    log1.parent.mkdir(parents=True, exist_ok=True)
    log1.write_text("first try\n")
    sp.start(a)
    sp.exit(a, 1)
    w.turn()
    w.clocks.advance(5)
    w.turn()
    sp.start(a)  # attempt 2 runs when the follower comes
    seen: list[dict[str, Any]] = []

    async def emit(ev: dict[str, Any]) -> None:
        seen.append(ev)

    async def go() -> dict[str, Any]:
        task = asyncio.ensure_future(h.stream_ops["follow"]({"id": a, "all_attempts": True}, emit))
        await asyncio.sleep(0)
        sp.exit(a, 0)
        w.turn()
        return await asyncio.wait_for(task, 5)

    assert asyncio.run(go())["job"]["state"] == "done"
    assert [(e["kind"], e.get("data") or e.get("attempt")) for e in seen] == [("log", "first try\n"), ("attempt", 2)]


@pytest.mark.parametrize("batched", [True, False])
def test_a_wait_coalesces_what_it_sends_and_reads_no_job_per_change(rig, batched):
    """Issue 22: a waiter costs the daemon next to nothing. Within a window
    every job's changes (claimed, started, done) become its latest state
    only, sent together (``batched``: in one frame); the change that ends
    the last job is not held back for the window; no job is read again."""
    h, w, q, sp, _ = rig
    h.streaming.wait_window_s = 60.0  # longer than the test: only the end may release the frame
    ids = op(h, "add", {"jobs": [{"command": [x]} for x in "abc"]})["ids"]
    reads: list[list[int]] = []
    get, get_many = q.get, q.get_many
    h.streaming.queue = SimpleNamespace(get=lambda i: reads.append([i]) or get(i),  # the wait reads no more
                                        get_many=lambda ids: reads.append(list(ids)) or get_many(ids))
    seen: list[dict[str, Any]] = []

    async def emit(ev: dict[str, Any]) -> None:
        seen.append(ev)

    async def go() -> dict[str, Any]:
        task = asyncio.ensure_future(h.stream_ops["wait"]({"ids": ids, "batched": batched}, emit))
        await asyncio.sleep(0)
        for jid in ids:
            w.turn()
            await asyncio.sleep(0.01)  # the waiter hears the claim, and holds it for the window
            sp.start(jid)
            sp.exit(jid, 0)
        w.turn()
        return await asyncio.wait_for(task, 5)

    res = asyncio.run(go())
    assert [j["state"] for j in res["jobs"]] == ["done"] * 3
    assert seen[0]["kind"] == "jobs"
    if batched:
        assert [ev["kind"] for ev in seen[1:]] == ["states"]
        told = seen[1]["jobs"]
    else:
        assert [ev["kind"] for ev in seen[1:]] == ["state"] * 3
        told = [ev["job"] for ev in seen[1:]]
    assert sorted((j["id"], j["state"]) for j in told) == [(i, "done") for i in ids]
    assert reads == [ids]  # the first look only, one read of them all, then what the worker said


def test_a_wait_on_an_id_that_is_no_job_names_it_and_sends_nothing(rig):
    """The wait reads its jobs in one read (get_many); an id among them that
    is no job is still refused by name, before anything is sent."""
    h, w, q, sp, _ = rig
    (a,) = op(h, "add", {"jobs": [{"command": ["a"]}]})["ids"]
    seen: list[dict[str, Any]] = []

    async def emit(ev: dict[str, Any]) -> None:
        seen.append(ev)

    with pytest.raises(JobNotFound) as e:
        asyncio.run(h.stream_ops["wait"]({"ids": [a, a + 99, a]}, emit))
    assert str(a + 99) in e.value.message and seen == []


def test_a_wait_refuses_a_batched_that_is_not_a_flag(rig):
    h, w, q, sp, _ = rig
    (a,) = op(h, "add", {"jobs": [{"command": ["a"]}]})["ids"]

    async def emit(ev: dict[str, Any]) -> None:
        raise AssertionError("nothing is sent for a bad request")

    with pytest.raises(BadRequest, match="batched"):
        asyncio.run(h.stream_ops["wait"]({"ids": [a], "batched": "yes"}, emit))


def test_a_wait_with_fields_sends_only_those_of_each_job_and_id_and_state_always(rig):
    """`sloth wait` asks for what it shows (cli/wait.py SHOWN_FIELDS): a
    wait on a sweep's thousands then encodes a tenth of the bytes, twice (the
    events and the response). Every frame of it has those fields only."""
    h, w, q, sp, _ = rig
    h.streaming.wait_window_s = 60.0
    ids = op(h, "add", {"jobs": [{"command": [x], "env": {"SECRET": "s"}, "max_attempts": 1} for x in "ab"]})["ids"]
    seen: list[dict[str, Any]] = []

    async def emit(ev: dict[str, Any]) -> None:
        seen.append(ev)

    async def go() -> dict[str, Any]:
        task = asyncio.ensure_future(h.stream_ops["wait"](
            {"ids": ids, "batched": True, "fields": ["message", "attempts", "message"]}, emit))
        await asyncio.sleep(0)
        for jid in ids:
            w.turn()
            sp.start(jid)
            sp.exit(jid, 3 if jid == ids[0] else 0)
        w.turn()
        return await asyncio.wait_for(task, 5)

    res = asyncio.run(go())
    frames = [*seen[0]["jobs"], *(j for ev in seen[1:] for j in ev["jobs"]), *res["jobs"]]
    assert {tuple(sorted(j)) for j in frames} == {("attempts", "id", "message", "state")}
    assert [(j["id"], j["state"], j["attempts"]) for j in res["jobs"]] == [(ids[0], "failed", 1), (ids[1], "done", 1)]
    assert res["jobs"][0]["message"]  # the failed try says why


@pytest.mark.parametrize("fields", ["message", [], ["env"], ["command", "nope"], [1], ["id"] * 200, {"a": 1}])
def test_a_wait_refuses_fields_that_are_not_a_list_of_job_fields_and_sends_nothing(rig, fields):
    h, w, q, sp, _ = rig
    (a,) = op(h, "add", {"jobs": [{"command": ["a"]}]})["ids"]

    async def emit(ev: dict[str, Any]) -> None:
        raise AssertionError("nothing is sent for a bad request")

    with pytest.raises(BadRequest, match="field"):
        asyncio.run(h.stream_ops["wait"]({"ids": [a], "fields": fields}, emit))


def test_latest_is_the_newest_job_or_none(rig):
    h, w, q, sp, _ = rig
    assert h.ops["latest"]({}) == {"id": None}
    ids = op(h, "add", {"jobs": [{"command": ["a"]}, {"command": ["b"]}]})["ids"]
    assert h.ops["latest"]({}) == {"id": ids[-1]}


def test_a_wait_sends_jobs_in_the_shape_of_every_other_answer(rig):
    from sloth_daemon.daemon.streams import wire

    h, w, q, sp, _ = rig
    (a,) = op(h, "add", {"jobs": [{"command": ["a", "b"], "env": {"X": "1"}, "after_any": []}]})["ids"]
    w.turn()
    job = q.get(a)
    assert wire(job) == job.to_dict() and "env" not in wire(job)

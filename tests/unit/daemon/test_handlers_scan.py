"""The ``scan`` op in-process (handlers.py, listing_stream.py) over a real
queue of each backend: the listing of ``list`` streamed a chunk per event;
bad arguments refused before anything is read; a daemon that stops, or a
reader that goes away, ends the stream and closes its scan."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from sloth_daemon.backends.rules import CHUNK
from sloth_daemon.clock import ManualClocks
from sloth_daemon.config import Settings
from sloth_daemon.daemon.control import Control
from sloth_daemon.errors import BadRequest, SlothError
from sloth_daemon.daemon.handlers import Handlers
from sloth_daemon.paths import resolve
from sloth_daemon.daemon.worker.loop import Worker
from tests.unit.daemon.test_worker import FakeSpawner


@pytest.fixture
def handlers(q, tmp_path):
    paths, settings, sp = resolve({"SLOTH_HOME": str(tmp_path)}), Settings(), FakeSpawner()
    w = Worker(q, settings, sp, clocks=ManualClocks(), log_path=paths.job_log, instance="t")
    c = Control(q, w, sp, paths, settings, request_stop=lambda *a: None, instance="t")
    return Handlers(c, {"connections": 0})


def scan(h: Handlers, args: dict[str, Any], emit=None) -> tuple[list[dict[str, Any]], Any]:
    events: list[dict[str, Any]] = []

    async def keep(ev: dict[str, Any]) -> None:
        events.append(ev)

    result = asyncio.run(h.stream_ops["scan"](args, emit or keep))
    return events, result


def scan_threads() -> int:
    return sum(t.name.startswith("sloth-scan") for t in threading.enumerate())


def test_scan_streams_the_listing_of_list_a_chunk_per_event(q, handlers):
    n = CHUNK * 2 + 7
    q.enqueue_many([{"command": ["j", str(i)], "priority": i % 3} for i in range(n)])
    events, result = scan(handlers, {})
    assert [e["kind"] for e in events] == ["head", "jobs", "jobs", "jobs"]
    assert [len(e["jobs"]) for e in events[1:]] == [CHUNK, CHUNK, 7]
    whole = handlers.ops["list"]({})
    head = events[0]
    assert {k: head[k] for k in ("counts", "total", "offset", "lanes")} == \
        {k: whole[k] for k in ("counts", "total", "offset", "lanes")}
    assert [j for e in events[1:] for j in e["jobs"]] == whole["jobs"] and result == {"left_out": 0}
    events, result = scan(handlers, {"limit": 3, "offset": 2, "states": ["queued"]})
    assert [j["id"] for j in events[1]["jobs"]] == [j["id"] for j in whole["jobs"][2:5]]
    assert result == {"left_out": n - 5}


@pytest.mark.parametrize("args", [{"limit": 0}, {"limit": "all"}, {"offset": -1}, {"states": ["nope"]},
                                  {"lane": ""}, {"finished_limit": True}, {"host": 3}])
def test_scan_refuses_bad_arguments_before_reading_anything(handlers, args):
    with pytest.raises(BadRequest):
        scan(handlers, args)
    assert scan_threads() == 0


def test_a_daemon_that_stops_ends_the_stream_with_an_error_not_a_short_listing(q, handlers):
    q.enqueue_many([{"command": ["j"]} for _ in range(CHUNK * 3)])
    sent: list[dict[str, Any]] = []

    async def emit(ev: dict[str, Any]) -> None:
        sent.append(ev)
        if len(sent) == 2:
            handlers.close()  # the daemon is stopping

    with pytest.raises(SlothError, match="stopping"):
        scan(handlers, {}, emit)
    assert len(sent) == 2


def test_a_reader_that_goes_away_ends_the_scan_and_its_thread(q, handlers):
    q.enqueue_many([{"command": ["j"]} for _ in range(CHUNK * 3)])

    async def emit(ev: dict[str, Any]) -> None:
        if ev["kind"] == "jobs":
            raise ConnectionError("client went away")  # as the server's emit says it

    with pytest.raises(ConnectionError):
        scan(handlers, {}, emit)
    for t in threading.enumerate():
        if t.name.startswith("sloth-scan"):
            t.join(5)
    assert scan_threads() == 0


@pytest.mark.backends("sqlite")
def test_a_queue_file_replaced_under_the_daemon_is_refused_not_listed(q, handlers, tmp_path):
    """The scan reads through a view opened by the file's path: were the file
    replaced, that would be another queue than the daemon's. It says so."""
    import shutil

    from sloth_daemon.errors import QueueBroken

    q.enqueue(["mine"])
    shutil.copy(q.target, tmp_path / "other.db")
    (tmp_path / "other.db").replace(q.target)
    with pytest.raises(QueueBroken, match="replaced"):
        scan(handlers, {})
    assert scan_threads() == 0


def test_jobs_with_large_commands_are_sent_in_smaller_events_never_over_the_frame_limit(q, handlers):
    from sloth_daemon import protocol
    from sloth_daemon.daemon.listing_stream import EVENT_BYTES

    big = "é" * 20_000  # each job's text well over a typical one's
    q.enqueue_many([{"command": ["echo", big, str(i)]} for i in range(CHUNK)])
    events, result = scan(handlers, {})
    sizes = [len(protocol.encode(protocol.event(1, e), protocol.MAX_RESPONSE)) for e in events[1:]]
    assert len(sizes) > 3 and max(sizes) <= EVENT_BYTES < protocol.MAX_RESPONSE
    assert [j["command"][2] for e in events[1:] for j in e["jobs"]] == [str(i) for i in range(CHUNK)]
    assert result == {"left_out": 0}

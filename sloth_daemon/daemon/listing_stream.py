"""The daemon's side of a streamed listing (the ``scan`` op): a listing of
any size sent as it is read, with the memory of one chunk.

The scan (backends.sqlite.scan / backends.postgres.scan, on a read-only view of the
queue of its own) runs in a thread of its own, one call at a time, so its
reads never hold the event loop: the daemon serves everyone else while a
million jobs go out. A chunk is read only once the one before has been
written to the socket and drained (the server's emit waits for the
reader), so a reader that stops reading costs the daemon one chunk, not
the listing. A reader that goes away ends the scan at once (emit raises).
"""

from __future__ import annotations

import asyncio
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Awaitable, Callable

from sloth_daemon.errors import SlothError

if TYPE_CHECKING:
    from sloth_daemon.backends.contract import Scan

Emit = Callable[[dict[str, Any]], Awaitable[None]]
EVENT_BYTES = 8 << 20  # at most this much of jobs per event (the frame limit is protocol.MAX_RESPONSE)
_TEXT = ("cwd", "message", "label", "key", "lane", "worker", "token", "place")


async def stream_scan(open_scan: Callable[[], Scan], emit: Emit, stopping: Callable[[], bool],
                      explain: Callable[[list[dict[str, Any]]], None] = lambda jobs: None,
                      head: dict[str, Any] | None = None) -> dict[str, Any]:
    """Events: ``{"kind": "head", counts, total, offset, lanes}`` (and ``head``'s fields: what is paused), then
    ``{"kind": "jobs", "jobs": [...]}`` per chunk; the result: ``left_out``
    (see contract.Scan.tail). ``stopping``: the daemon is closing (the stream
    ends with an error saying so, never as if the listing were whole);
    ``explain``: says in each chunk's queued jobs why they wait (Lanes.explain)."""
    pool = ThreadPoolExecutor(1, thread_name_prefix="sloth-scan")
    loop = asyncio.get_running_loop()
    opened = pool.submit(open_scan)
    try:
        scan = await asyncio.wrap_future(opened)
        await emit({"kind": "head", **scan.head, **(head or {})})
        while parts := await loop.run_in_executor(pool, _chunk, scan):
            for jobs in parts:
                if stopping():
                    raise SlothError("the daemon is stopping; the listing was not sent whole",
                                     hint="List again after it restarts.")
                explain(jobs)
                await emit({"kind": "jobs", "jobs": jobs})
        return dict(scan.tail())
    finally:
        pool.submit(_close, opened)  # after a read still under way, in the scan's own thread
        pool.shutdown(wait=False)


def _chunk(scan: Scan) -> list[list[dict[str, Any]]]:
    """The scan's next chunk as job objects, in parts of at most
    EVENT_BYTES each as sent (a job's text can be large: a command of up
    to a MiB), so no event outgrows the frame limit ([]: the end)."""
    parts: list[list[dict[str, Any]]] = [[]]
    room = EVENT_BYTES
    for job in scan.next():
        d = job.to_dict()
        size = _size(d)
        if parts[-1] and size > room:
            parts.append([])
            room = EVENT_BYTES
        parts[-1].append(d)
        room -= size
    return parts if parts[0] else []


def _size(job: dict[str, Any]) -> int:
    """At least the bytes of ``job`` as sent: its text fields as if every
    character were escaped (6 bytes), the rest generously."""
    text = sum(map(len, job["command"])) + sum(len(job[k] or "") for k in _TEXT)
    ids = len(job["after"]) + len(job["after_any"])
    return 6 * text + 21 * ids + 4096


def _close(opened: Future[Scan]) -> None:
    if not opened.cancelled() and opened.exception() is None:
        opened.result().close()

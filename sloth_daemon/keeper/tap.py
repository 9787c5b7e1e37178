"""Following a run's output live (the tap op): what its log holds so far,
then live chunks, then the end.

A slow follower never holds up the keeper: each follower has its own
bounded feed; past it, live bytes are skipped and counted, and the follower
is told how many, where they were cut, once it catches up (issue 14 item 9).
"""

from __future__ import annotations

import asyncio
import collections
from typing import Any

from sloth_daemon.keeper.kept_run import KeptRun
from sloth_daemon.keeper.wire import VERSION, encode

LOG_CHUNK = 256 * 1024  # bytes of log per tap event
TAP_BACKLOG_BYTES = 4 << 20  # live output held for one slow follower: past it, skipped and counted


class TapFeed:
    """Live output for one follower, bounded: past ``cap`` bytes held, new
    bytes are skipped and counted, and the follower is told how many where
    they were cut once there is room again. The end (None) always gets in."""

    def __init__(self, cap: int, job_id: int) -> None:
        self.cap, self.held, self.skipped, self.job_id = cap, 0, 0, job_id
        self.q: collections.deque[bytes | None] = collections.deque()
        self.ready = asyncio.Event()

    def put(self, data: bytes | None) -> None:
        if data is not None and self.held + len(data) > self.cap:
            self.skipped += len(data)
            return
        if self.skipped:
            self._push(f"\n[sloth] ... {self.skipped} bytes of live output skipped here: this "
                       f"follower fell behind (`sloth logs {self.job_id}` has them once the job ends) ...\n".encode())
            self.skipped = 0
        self._push(data)

    def _push(self, item: bytes | None) -> None:
        self.q.append(item)
        self.held += len(item or b"")
        self.ready.set()

    async def get(self) -> bytes | None:
        while not self.q:
            self.ready.clear()
            await self.ready.wait()
        item = self.q.popleft()
        self.held -= len(item or b"")
        return item


async def follow(writer: asyncio.StreamWriter, req_id: Any, run: KeptRun) -> bool:
    """Stream ``run``'s log to a follower: what it holds so far, then live
    output, then the end. Waits on this follower's writes only, never the
    keeper's. False if the follower went away."""
    feed = TapFeed(TAP_BACKLOG_BYTES, run.job_id)
    past = run.proc.log.snapshot() if run.proc is not None else b""
    if run.state != "exited":
        run.taps.add(feed.put)  # no await since the snapshot: every byte is sent once
    else:
        feed.put(None)
    try:
        for i in range(0, len(past), LOG_CHUNK):
            await send_log(writer, req_id, past[i:i + LOG_CHUNK])
        while (data := await feed.get()) is not None:
            await send_log(writer, req_id, data)
    except (ConnectionError, OSError):
        return False
    finally:
        run.taps.discard(feed.put)
    return True


async def send_log(writer: asyncio.StreamWriter, req_id: Any, data: bytes) -> None:
    # surrogateescape: bytes that are not UTF-8 travel and come back exact
    event = {"kind": "log", "data": data.decode("utf-8", "surrogateescape")}
    writer.write(encode({"v": VERSION, "id": req_id, "event": event}))
    await writer.drain()

"""`sloth metrics` reads the queue on a thread, one reading at a time. The
requests that wait for their turn must wait on the loop: each used to hold
a thread of the default pool while it waited, so a burst of them took all
of its threads, and a GPU or process lookup queued behind the whole burst."""

from __future__ import annotations

import asyncio
import threading
from types import SimpleNamespace

from sloth_daemon.daemon.metrics_file import DaemonMetrics
from tests.support.queues import is_pg


def test_a_burst_of_metrics_requests_leaves_the_pool_to_others(q, queue_target):
    if is_pg(q):
        return  # the reading is the same; one engine shows the pool
    q.enqueue(["true"])
    clock = SimpleNamespace(jumps={}, slept_s=0.0)  # what own() reads of the daemon's ClockWatch
    keeper = SimpleNamespace(connects=1, losses=0)  # and of its KeeperSpawner
    source = DaemonMetrics(queue_target, clock, keeper)  # type: ignore[arg-type]
    order: list[str] = []

    async def burst() -> list[str]:
        async def one() -> str:
            text = await source.text("prometheus")
            order.append("metrics")
            return text

        tasks = [asyncio.create_task(one()) for _ in range(20)]
        await asyncio.sleep(0)  # every request has asked for its reading
        await asyncio.to_thread(order.append, "lookup")  # another user of the pool
        return await asyncio.gather(*tasks)

    texts = asyncio.run(burst())
    assert all("sloth_queue_jobs" in t for t in texts) and len(set(texts)) == 1
    assert order.index("lookup") <= 2, order  # not behind the 20 readings


class Counted(DaemonMetrics):
    """The daemon's metrics, each reading counted; the first, once read,
    held at ``gate`` until the test lets it go (others pile up behind it)."""

    def __init__(self, *a, **kw) -> None:
        super().__init__(*a, **kw)
        self.readings = 0
        self.gate = threading.Event()

    def _text(self, own, fmt):
        text = super()._text(own, fmt)
        self.readings += 1
        if self.readings == 1:
            self.gate.wait(10)
        return text


def test_a_burst_shares_readings_and_each_request_sees_what_came_before_it(q, queue_target):
    """Each request waiting its turn made a reading of its own: a burst of
    K cost K passes over the history one after another (60 requests on
    20,000 jobs: 10.7 s for the last, 3.6 s of the daemon's CPU; on a long
    history a burst ran into the client's 30 s timeout). The requests that
    ask while a reading runs share the next one, begun after they asked: a
    burst of any size costs two."""
    if is_pg(q):
        return  # the sharing is the daemon's, the same on both engines
    q.enqueue(["true"])
    clock = SimpleNamespace(jumps={}, slept_s=0.0)
    keeper = SimpleNamespace(connects=1, losses=0)
    source = Counted(queue_target, clock, keeper)  # type: ignore[arg-type]

    def queued(text: str) -> int:
        return sum(int(float(ln.split()[-1])) for ln in text.splitlines() if ln.startswith("sloth_queue_jobs{"))

    async def burst() -> list[str]:
        first = asyncio.create_task(source.text("prometheus"))
        while source.readings == 0:  # the first reading is read (and waits at the gate)
            await asyncio.sleep(0.01)
        q.enqueue(["true"])  # a change after it began: the requests below must see it
        rest = [asyncio.create_task(source.text("prometheus")) for _ in range(30)]
        await asyncio.sleep(0.05)
        source.gate.set()
        return await asyncio.gather(first, *rest)

    texts = asyncio.run(burst())
    assert queued(texts[0]) == 1 and {queued(t) for t in texts[1:]} == {2}
    assert source.readings == 2, f"{source.readings} readings for a burst of 31"

"""`sloth metrics` reads the queue on a thread, one reading at a time. The
requests that wait for their turn must wait on the loop: each used to hold
a thread of the default pool while it waited, so a burst of them took all
of its threads, and a GPU or process lookup queued behind the whole burst."""

from __future__ import annotations

import asyncio
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

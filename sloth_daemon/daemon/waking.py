"""Waiting for an ``asyncio.Event`` with a bound, without losing a cancel.

Before Python 3.12, ``asyncio.wait_for(event.wait(), timeout)`` returns the
wake and drops a cancel that comes in the same turn of the loop: a task
stopped just as it was woken ran on past its stop (the sender onto a queue
the stop had closed; a wait stream past its client). ``woken`` waits with
``asyncio.wait``, which leaves a cancel to the task that awaits it."""

from __future__ import annotations

import asyncio


async def woken(event: asyncio.Event, timeout_s: float | None) -> bool:
    """Until ``event`` is set (True) or ``timeout_s`` has passed (False);
    a cancel of the caller is always raised."""
    if event.is_set():
        return True
    waiter = asyncio.ensure_future(event.wait())
    try:
        await asyncio.wait([waiter], timeout=timeout_s)
    finally:
        waiter.cancel()
    return event.is_set()

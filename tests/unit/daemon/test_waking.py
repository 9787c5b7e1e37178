"""daemon/waking.py: a wait for an event, bounded, that never loses a cancel."""

from __future__ import annotations

import asyncio

import pytest

from sloth_daemon.daemon.waking import woken


def test_set_and_timed_out_are_told_apart():
    async def go() -> tuple[bool, bool, bool]:
        e = asyncio.Event()
        timed_out = await woken(e, 0.01)
        asyncio.get_running_loop().call_later(0.01, e.set)
        set_later = await woken(e, 5)
        return timed_out, set_later, await woken(e, 0)  # set already: at once

    assert asyncio.run(go()) == (False, True, True)


def test_a_cancel_in_the_same_turn_as_the_wake_is_raised_not_dropped():
    """wait_for before Python 3.12 returned the wake and dropped the cancel:
    the task went on as if nobody had stopped it."""
    async def go() -> str:
        e = asyncio.Event()
        went_on = asyncio.Event()

        async def waiter() -> None:
            await woken(e, 60)
            went_on.set()
            await asyncio.sleep(60)

        task = asyncio.create_task(waiter())
        await asyncio.sleep(0)  # it waits
        e.set()  # woken ...
        task.cancel()  # ... and stopped, in the same turn
        try:
            await asyncio.wait_for(task, 5)
        except asyncio.CancelledError:
            return "went on" if went_on.is_set() else "cancelled"
        return "ended"

    assert asyncio.run(go()) == "cancelled"


@pytest.mark.parametrize("timeout_s", [None, 0.5])
def test_no_waiter_is_left_behind(timeout_s):
    async def go() -> int:
        e = asyncio.Event()
        asyncio.get_running_loop().call_later(0.01, e.set)
        await woken(e, timeout_s)
        await asyncio.sleep(0)
        return len([t for t in asyncio.all_tasks() if t is not asyncio.current_task()])

    assert asyncio.run(go()) == 0

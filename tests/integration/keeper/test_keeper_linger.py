"""The keeper let go once it holds nothing (issue 34 item 1,
daemon/supervision.py), driven in process against real keepers: a spawn
made at the very instant the daemon decides to let its keeper go is never
sent to the leaving keeper; it waits until that one is gone and runs on the
next, and one withdrawn while it waits never starts anywhere."""

from __future__ import annotations

import asyncio

from sloth_daemon.daemon.supervision import KeeperSpawner
from tests.integration.keeper.test_keeper import until
from tests.integration.keeper.test_keeper_pipeline import PipeSink, request
from tests.support.harness import alive
from tests.support.keeper_rig import KeeperRig


def test_a_spawn_at_the_instant_the_keeper_is_let_go_runs_on_the_next_keeper_once(rig: KeeperRig):
    sinks: dict[str, PipeSink] = {}

    class SpawnsAsItLetsGo(KeeperSpawner):
        def _let_go(self) -> None:
            super()._let_go()
            if self.client is None and not sinks:  # decided: the same turn of the loop spawns
                for key in ("a", "b"):
                    sinks[key] = PipeSink()
                    self.spawn(request(rig, key), sinks[key])
                self.kill("b", "withdrawn while it waited", 1.0)

    async def main() -> None:
        ks = SpawnsAsItLetsGo(rig.paths, name="test", check_s=0.2, linger_s=0.05)
        rests: list[bool] = []
        ks.on_rest = lambda: rests.append(True)
        await ks.connect()
        first = ks.pid
        assert first is not None
        while "a" not in sinks:
            await asyncio.sleep(0.01)
        await until(sinks["a"].ended)
        assert [c[0] for c in sinks["a"].calls] == ["started", "exited"], sinks["a"].calls
        assert [c[0] for c in sinks["b"].calls] == ["exited"] and sinks["b"].calls[0][1].started is False
        second = ks.pid
        assert second is not None and second != first and not alive(first)
        assert not rests  # spawns came while it went: not at rest
        ks.ack(["a"])  # recorded: the second keeper holds nothing now and goes too
        while not rests:
            await asyncio.sleep(0.01)
        assert ks.client is None and not alive(second) and ks.status()["idle"]

    asyncio.run(main())
    assert rig.log_of("b") == b""  # never started
    assert rig.keeper_pids() == []

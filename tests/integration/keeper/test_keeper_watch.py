"""The keeper's side of issue 33 (keeper/watchdog.py, keeper/results.py)
over its real socket with real jobs: a watch in the spawn ends the run, a
result file read into the outcome; and a daemon facing a keeper from before
the "watch" feature never sends it what it would refuse."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from sloth_daemon.daemon.supervision import KeeperSpawner
from sloth_daemon.daemon.worker.spawner import SpawnRequest
from tests.integration.keeper.test_keeper import until
from tests.integration.keeper.test_keeper_pipeline import PipeSink as Sink
from tests.support.keeper_rig import KeeperRig

OLD_KEEPER = """
import sys
import sloth_daemon.keeper.wire as w
w.FEATURES = tuple(f for f in w.FEATURES if f != "watch")  # as a keeper from before issue 33
w.OPS["spawn"] = (w.OPS["spawn"][0], w.OPS["spawn"][1] - {"watch", "result_path"})
from sloth_daemon.keeper.main import main
sys.exit(main(sys.argv[1:]))
"""


def request(rig: KeeperRig, key: str, *argv: str, **kw: object) -> SpawnRequest:
    j = rig.job(key, *argv)
    return SpawnRequest(key=key, job_id=1, attempt=1, argv=j["argv"], cwd=j["cwd"], env=j["env"],
                        log_path=Path(j["log_path"]), log_cap=j["log_cap"], timeout_s=None, kill_grace_s=0.5,
                        **kw)  # type: ignore[arg-type]


def spawned(rig: KeeperRig, *reqs: SpawnRequest) -> list[Sink]:
    """Each request spawned through a KeeperSpawner, once all have ended: their sinks."""
    sinks = [Sink() for _ in reqs]

    async def main() -> None:
        ks = KeeperSpawner(rig.paths, name="test", check_s=0.2)
        await ks.connect()
        for req, sink in zip(reqs, sinks, strict=True):
            ks.spawn(req, sink)
        for sink in sinks:
            await until(sink.ended)
        await ks.close(bye=True)

    asyncio.run(main())
    return sinks


def test_a_watch_ends_the_run_and_a_result_rides_in_the_outcome(rig):
    rig.start()
    out = rig.root / "r.json"
    stalled, matched, handed = spawned(
        rig,
        request(rig, "s", "sh", "-c", "echo one; sleep 30", watch={"stall_s": 0.3}),
        request(rig, "m", "sh", "-c", "echo fine; echo 'loss: nan'; sleep 30", watch={"fail_on": "loss: nan"}),
        request(rig, "r", "sh", "-c", f"echo '{{\"a\": [1, 2]}}' > {out}", result_path=out))
    (_, s), (_, m), (_, r) = stalled.calls[-1], matched.calls[-1], handed.calls[-1]
    assert (s.killed_by, s.reason) == ("stall", "stalled: no output for 0.3s")
    assert (m.killed_by, m.reason) == ("match", "matched --fail-on 'loss: nan': loss: nan")
    assert r.returncode == 0 and r.result == '{"a":[1,2]}' and not out.exists()


def test_a_daemon_never_sends_a_watch_or_a_result_path_to_an_older_keeper(rig):
    argv = rig.argv()
    rig.argv = lambda **kw: [sys.executable, "-c", OLD_KEEPER, *argv[3:]]  # type: ignore[method-assign]
    rig.start()
    out = rig.root / "r.json"
    watched, plain = spawned(rig, request(rig, "w", "true", watch={"stall_s": 5.0}),
                             request(rig, "p", "sh", "-c", f"echo 1 > {out}", result_path=out))
    assert watched.calls[0][0] == "spawn_failed" and "cannot watch --stall or --fail-on" in watched.calls[0][1]
    assert watched.calls[0][2] is True  # retried: the next keeper may have it
    assert plain.calls[-1][0] == "exited" and plain.calls[-1][1].returncode == 0  # started all the same
    assert plain.calls[-1][1].result is None

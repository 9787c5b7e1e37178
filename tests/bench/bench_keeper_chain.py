"""The keeper alone: the floor under sloth's per-job time.

    python tests/bench/bench_keeper_chain.py [--jobs 1000] [--runs 3]

A real keeper (tests/support/keeper_rig.py) runs N `true` jobs, each held
behind the one before (spawn ``after``), the chain kept DEPTH deep as the
daemon keeps it (one more sent as each ends): it never waits for a daemon,
whose work here is nothing but sending the next and acknowledging the ends
(in batches).
So this is what one slot of trivial jobs would cost if the daemon were
free: the keeper's own cycle (reap, start the next, journal, tell), beside
the bare subprocess loop on the same machine. Prints each run and the
medians; compare with bench_daemon.py's 1-slot figure to see the daemon's
share.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import psutil

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from sloth_daemon.daemon.keeper_client import KeeperClient  # noqa: E402
from sloth_daemon.daemon.worker.pipeline import DEPTH  # noqa: E402
from tests.bench._common import bench_bare, cpu_s  # noqa: E402
from tests.support.keeper_rig import make_rig, remove_rig  # noqa: E402

ACK_EVERY = 50


class _Sink:
    def __init__(self, ended: Any) -> None:
        self.ended = ended

    def started(self, pid: int, identity: dict[str, Any]) -> None:
        pass

    def spawn_failed(self, message: str, retry: bool, resource: bool = False) -> None:
        raise SystemExit(f"spawn failed: {message}")

    def exited(self, outcome: dict[str, Any]) -> None:
        self.ended()

    def frozen(self, why: str) -> None:
        pass


def one_run(n: int) -> dict[str, float]:
    rig = make_rig()
    try:
        return asyncio.run(_chain(rig, n))
    finally:
        remove_rig(rig)


async def _chain(rig: Any, n: int) -> dict[str, float]:
    c = await KeeperClient.connect(rig.paths, name="bench", check_s=5.0)
    keeper = psutil.Process(c.info["pid"])
    done = asyncio.Event()
    ended, unacked = 0, []
    env = rig.job("x", "true")["env"]
    sent = [0]

    def send_next() -> None:
        i = sent[0]
        if i < n:
            req = rig.job(f"r{i}", "true") | {"env": env}
            if i:
                req["after"] = f"r{i - 1}"
            c.spawn(req, _Sink(lambda k=f"r{i}": ended_one(k)))
            sent[0] += 1

    def ended_one(key: str) -> None:
        nonlocal ended
        ended += 1
        unacked.append(key)
        send_next()  # as the daemon keeps the chain DEPTH deep
        if len(unacked) == ACK_EVERY or ended == n:
            c.ack(unacked[:])
            unacked.clear()
        if ended == n:
            done.set()

    cpu0, t0 = cpu_s(keeper), time.perf_counter()
    for _ in range(DEPTH + 1):
        send_next()
    await done.wait()
    wall, cpu = time.perf_counter() - t0, cpu_s(keeper) - cpu0
    await c.bye()
    await c.close()
    return {"wall_s": wall, "keeper_ms_per_job": cpu / n * 1000}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=1000)
    ap.add_argument("--runs", type=int, default=3)
    a = ap.parse_args()
    runs, bare = [], []
    for i in range(a.runs):  # interleaved: drift on a shared machine hits both alike
        runs.append(one_run(a.jobs))
        bare.append(bench_bare(a.jobs))
        print(f"run {i + 1}: keeper alone {runs[-1]['wall_s']:.2f} s"
              f" (keeper CPU {runs[-1]['keeper_ms_per_job']:.2f} ms/job), bare loop {bare[-1]:.2f} s")
    k = statistics.median(r["wall_s"] for r in runs)
    b = statistics.median(bare)
    print(f"\n{a.jobs:,} `true` jobs, medians of {a.runs}: keeper alone {k:.2f} s"
          f" ({min(r['wall_s'] for r in runs):.2f}-{max(r['wall_s'] for r in runs):.2f}),"
          f" bare {b:.2f} s, ratio {k / b:.2f}x;"
          f" keeper CPU {statistics.median(r['keeper_ms_per_job'] for r in runs):.2f} ms/job")


if __name__ == "__main__":
    main()

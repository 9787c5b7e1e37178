"""The keeper's footprint and spawn latency, through the daemon's client.

    python -m tests.bench.bench_keeper [--spawns 200] [--sleepers 32]

Prints the keeper's RSS idle and with N sleeping jobs, and the client-side
round trip of `true` spawns, one at a time: spawn() -> sink.started()
(the keeper forked it and answered) and spawn() -> sink.exited() (its exit
was noticed, its log closed, its outcome journalled and sent).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from typing import Any

import psutil

from sloth_daemon.daemon.keeper_client import KeeperClient
from tests.bench._common import pct
from tests.support.keeper_rig import make_rig, remove_rig


class TimedSink:
    def __init__(self) -> None:
        self.t0 = time.perf_counter()
        self.started_s = self.exited_s = 0.0
        self.done = asyncio.Event()
        self.outcome: dict[str, Any] = {}

    def started(self, pid: int, identity: dict[str, Any]) -> None:
        self.started_s = time.perf_counter() - self.t0

    def spawn_failed(self, message: str, retry: bool) -> None:
        raise SystemExit(f"spawn failed: {message}")

    def exited(self, outcome: dict[str, Any]) -> None:
        self.exited_s = time.perf_counter() - self.t0
        self.outcome = outcome
        self.done.set()

    def frozen(self, why: str) -> None:
        pass


def rss_mib(pid: int) -> float:
    return psutil.Process(pid).memory_info().rss / 2**20


async def main(spawns: int, sleepers: int) -> None:
    rig = make_rig()
    try:
        c = await KeeperClient.connect(rig.paths, name="bench", check_s=5.0)
        keeper = c.info["pid"]
        await asyncio.sleep(0.5)
        print(f"keeper pid {keeper}: RSS idle {rss_mib(keeper):.1f} MiB")

        started, exited = [], []
        for i in range(spawns + 10):  # the first 10 warm up
            sink = TimedSink()
            c.spawn(rig.job(f"t{i}", "true"), sink)
            await sink.done.wait()
            assert sink.outcome["returncode"] == 0
            c.ack([f"t{i}"])
            if i >= 10:
                started.append(sink.started_s * 1000)
                exited.append(sink.exited_s * 1000)
        for name, xs in (("spawn -> started", started), ("spawn -> exited ", exited)):
            print(f"{name}: median {statistics.median(xs):.2f} ms, p90 {pct(xs, 0.9):.2f} ms, "
                  f"max {max(xs):.2f} ms over {len(xs)} `true` spawns")
        print(f"keeper RSS after {spawns} spawns: {rss_mib(keeper):.1f} MiB")

        sinks = []
        for i in range(sleepers):
            sinks.append(TimedSink())
            c.spawn(rig.job(f"s{i}", "sleep", "600"), sinks[-1])
        while sum(1 for s in sinks if s.started_s) < sleepers:
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.5)
        kids = psutil.Process(keeper).children()
        print(f"keeper RSS with {len(kids)} sleeping jobs: {rss_mib(keeper):.1f} MiB; "
              f"descriptors: {psutil.Process(keeper).num_fds()}")
        t0 = time.perf_counter()
        for i in range(sleepers):
            c.kill(f"s{i}", "bench over", 5.0)
        for s in sinks:
            await s.done.wait()
        print(f"ending {sleepers} runs (SIGTERM, whole-tree scan, reap): {(time.perf_counter() - t0) * 1000:.0f} ms")
        c.ack([f"s{i}" for i in range(sleepers)])
        await c.bye()
        await c.close()
    finally:
        remove_rig(rig)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--spawns", type=int, default=200)
    ap.add_argument("--sleepers", type=int, default=32)
    a = ap.parse_args()
    asyncio.run(main(a.spawns, a.sleepers))

"""How long `pause` and `resume` of a running job's tree take in the keeper
(issue 24 item 3), on a real keeper over its socket.

    python -m tests.bench.bench_pause [--sizes 1,10,100] [--rounds 5]

For each tree size N (a shell and N sleeping children), the round trip of
the keeper's pause op (SIGSTOP rounds until a look finds nothing new and
every process is in state T) and of its resume op, in ms: median and max
over the rounds.
"""

from __future__ import annotations

import argparse
import statistics
import time

import psutil

from tests.support.keeper_rig import make_rig, remove_rig, wait_for


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="1,10,100")
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    rig = make_rig()
    try:
        rig.start()
        w = rig.wire()
        for n in map(int, a.sizes.split(",")):
            key = f"t{n}"
            pid = w.call("spawn", **rig.job(key, "sh", "-c", f"for i in $(seq {n}); do sleep 600 & done; wait"))["pid"]
            wait_for(lambda: len(psutil.Process(pid).children()) >= n, what="the tree")  # noqa: B023
            pause, resume = [], []
            for _ in range(a.rounds):
                t0 = time.perf_counter()
                assert w.call("pause", keys=[key])["runs"][key]["processes"] == n + 1
                pause.append((time.perf_counter() - t0) * 1000)
                t0 = time.perf_counter()
                w.call("resume", keys=[key])
                resume.append((time.perf_counter() - t0) * 1000)
            print(f"tree of {n + 1:4d}: pause median {statistics.median(pause):6.1f} ms (max {max(pause):6.1f}),"
                  f" resume median {statistics.median(resume):5.1f} ms (max {max(resume):5.1f})")
            w.call("kill", key=key, reason="bench", grace_s=0)
    finally:
        remove_rig(rig)


if __name__ == "__main__":
    main()

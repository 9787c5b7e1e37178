#!/usr/bin/env python
"""What holding jobs costs a claim (issue 22): none, if held jobs are in no
claim index as promised. Not collected by pytest.

    python tests/bench/bench_edits.py            # 100k held beside 1 queued
    python tests/bench/bench_edits.py --held 1000000

On two temporary SQLite files, measured in turns: the claim of one queued
job (claim, then unclaim, repeated) with no other jobs, and with ``--held``
jobs held in the same lane at a higher priority (the worst place for them: a claim that
looked at held rows would walk them all). Also the time of one `bump` and
one `edit` in that queue. Medians of --repeat rounds of --n claims each.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run from a checkout

from sloth_daemon.queue import Queue  # noqa: E402


def claim_us(q: Queue, n: int) -> float:
    """Microseconds per claim of the one queued job (each given back at once)."""
    t0 = time.perf_counter()
    for _ in range(n):
        j = q.claim("w", reclaim=False)
        assert j is not None
        q.unclaim(j.id, j.token, durable=False)
    return (time.perf_counter() - t0) / n * 1e6


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--held", type=int, default=100_000)
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        plain, held = Queue(Path(d) / "plain.db"), Queue(Path(d) / "held.db")
        plain.enqueue(["true"])
        target = held.enqueue(["true"])
        for start in range(0, args.held, 50_000):
            held.enqueue_many([{"command": ["x"], "priority": 9, "hold": True}
                               for _ in range(min(50_000, args.held - start))])
        rounds: dict[str, list[float]] = {"plain": [], "held": []}
        for _ in range(args.repeat):  # interleaved: a busy machine slows both alike
            rounds["plain"].append(claim_us(plain, args.n))
            rounds["held"].append(claim_us(held, args.n))
        before, after = statistics.median(rounds["plain"]), statistics.median(rounds["held"])
        t0 = time.perf_counter()
        held.bump([target])
        bump_ms = (time.perf_counter() - t0) * 1e3
        t0 = time.perf_counter()
        held.edit(target, {"priority": 0, "label": "x"})
        edit_ms = (time.perf_counter() - t0) * 1e3
        plain.close()
        held.close()
    print(f"claim+unclaim, 1 queued job:            {before:7.1f} us")
    print(f"claim+unclaim, beside {args.held:,} held (prio 9): {after:7.1f} us  ({after / before:.2f}x)")
    print(f"bump (lane top over {args.held:,} held):    {bump_ms:7.2f} ms (one durable commit)")
    print(f"edit (priority, label):                 {edit_ms:7.2f} ms (one durable commit)")


if __name__ == "__main__":
    main()

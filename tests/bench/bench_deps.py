#!/usr/bin/env python
"""Benchmark: what jobs waiting on others (``--after``) cost. Not collected by pytest.

    python tests/bench/bench_deps.py                  # 100k blocked jobs
    python tests/bench/bench_deps.py --blocked 1000000
    python tests/bench/bench_deps.py --quick          # 10k blocked

A blocked job must cost a claim nothing: it sits in its own state, in no
claim index, until the transition that ends its last prerequisite queues it.
Measured on a real queue file (WAL, synchronous=FULL), each the median of
--repeat repeats:

* claim latency (p50, p95) and claim+complete pairs/s with 1,000 due jobs,
  without and with N blocked jobs (the blocked ones in the same lane as the
  due ones, at a higher priority: the adversarial case for an index), and
  next_due_at() latency, which the daemon runs before every claim;
* what a job's end costs when something waits for it: complete of a job
  with one dependent (a --chain), against one with none;
* the fan-out: completing the one job N blocked jobs wait for queues them
  all, in one transaction;
* adding blocked jobs (enqueue_many with ``after``), jobs/s.
"""

from __future__ import annotations

import argparse
import platform
import shutil
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run from a checkout

from sloth_daemon.queue import Queue  # noqa: E402
from tests.bench.bench_queue import copy_db, med, p95, remove_db  # noqa: E402

READY = 1_000
BATCH = 50_000
FAR = 10 * 365 * 86400.0


def build(path: Path, blocked: int) -> tuple[int, float]:
    """READY due jobs (priorities 0-2) plus ``blocked`` jobs that wait for one
    job held out of reach (delayed ten years). Returns (the held job's id,
    blocked jobs added per second)."""
    remove_db(path)
    with Queue(path) as q:
        now = q.clock.now()
        held = q.enqueue(["held"], lane="held", not_before=now + FAR)
        q.enqueue_many([{"command": ["echo", str(i)], "priority": i % 3} for i in range(READY)])
        t0 = time.perf_counter()
        for start in range(0, blocked, BATCH):
            n = min(BATCH, blocked - start)
            q.enqueue_many([{"command": ["echo", "b", str(start + i)], "priority": 9, "after": [held]}
                            for i in range(n)])
        rate = blocked / (time.perf_counter() - t0) if blocked else 0.0
        counts = q.counts()
    assert counts["blocked"] == blocked and counts["queued"] == READY + 1, counts
    return held, rate


def vm_steps(q: Queue, n: int) -> float:
    """SQLite VM instructions per claim (progress handler every 10): a cost
    the load on a shared machine cannot blur."""
    steps = [0]

    def tick() -> int:
        steps[0] += 1
        return 0

    q.engine.store.conn.set_progress_handler(tick, 10)
    try:
        for _ in range(n):
            job = q.claim("bench")
            assert job is not None
            q.engine.store.conn.set_progress_handler(None, 0)
            q.complete(job.id, job.token)
            q.engine.store.conn.set_progress_handler(tick, 10)
    finally:
        q.engine.store.conn.set_progress_handler(None, 0)
    return steps[0] * 10 / n


def bench_claims(path: Path, repeat: int, pairs: int) -> dict[str, float]:
    lat, nxt, tput = [], [], []
    with Queue(path) as q:
        for _ in range(20):  # warm the caches
            j = q.claim("bench")
            q.complete(j.id, j.token)
        steps = vm_steps(q, 50)
        for _ in range(repeat):
            one, due = [], []
            t0 = time.perf_counter()
            for _ in range(pairs):
                t = time.perf_counter()
                q.next_due_at()
                t1 = time.perf_counter()
                job = q.claim("bench")
                t2 = time.perf_counter()
                assert job is not None and job.lane == "default", job
                q.complete(job.id, job.token)
                due.append(t1 - t)
                one.append(t2 - t1)
            tput.append(pairs / (time.perf_counter() - t0))
            lat.append((med(one), p95(one)))
            nxt.append(med(due))
            q.enqueue_many([{"command": ["echo", "refill"], "priority": 1} for _ in range(pairs)])
    return {"p50": med([x[0] for x in lat]), "p95": med([x[1] for x in lat]), "next_due": med(nxt),
            "pairs": med(tput), "steps": steps}


def bench_chain_complete(work: Path, repeat: int, n: int) -> dict[str, float]:
    """complete() of a job with one dependent (a chain link) vs with none."""
    out: dict[str, list[float]] = {"plain": [], "chain": []}
    for _ in range(repeat):
        for kind in ("plain", "chain"):
            path = work / f"chain-{kind}.db"
            remove_db(path)
            with Queue(path) as q:
                specs = [{"command": ["echo", str(i)]} for i in range(n)]
                if kind == "chain":
                    specs = [specs[0]] + [{**s, "after_previous": "after"} for s in specs[1:]]
                q.enqueue_many(specs)
                times = []
                for _ in range(n):
                    job = q.claim("bench")
                    assert job is not None
                    t = time.perf_counter()
                    q.complete(job.id, job.token)
                    times.append(time.perf_counter() - t)
                assert q.counts()["done"] == n
            out[kind].append(med(times))
            remove_db(path)
    return {k: med(v) for k, v in out.items()}


def bench_fan_out(path: Path, held: int) -> float:
    """Seconds to complete the job every blocked job waits for (queues them all)."""
    with Queue(path) as q:
        con = q.engine.store.conn
        con.execute("UPDATE jobs SET not_before = 0 WHERE id = ?", (held,))  # bring it within reach
        job = q.claim("bench", lanes=["held"])
        assert job is not None and job.id == held
        t0 = time.perf_counter()
        q.complete(held, job.token)
        took = time.perf_counter() - t0
        counts = q.counts()
    assert counts["blocked"] == 0, counts
    return took


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--blocked", type=int, default=100_000, help="blocked jobs (default 100,000)")
    ap.add_argument("--quick", action="store_true", help="10,000 blocked, fewer repeats")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--pairs", type=int, default=200, help="claim+complete pairs per repeat")
    ap.add_argument("--dir", help="work folder (default: a new temp folder, removed at the end)")
    args = ap.parse_args(argv)
    blocked = 10_000 if args.quick else args.blocked
    repeat = 3 if args.quick else args.repeat
    work = Path(tempfile.mkdtemp(prefix="sloth-bench-deps-", dir=args.dir))
    print(f"sloth dependency benchmark: Python {platform.python_version()}, SQLite {sqlite3.sqlite_version};"
          f" {READY:,} due jobs; medians of {repeat} repeats of {args.pairs} pairs; work dir {work}")
    try:
        base, big = work / "none.db", work / "blocked.db"
        build(base, 0)
        held, add_rate = build(big, blocked)
        copy_db(big, work / "fan.db")
        res = {"none": bench_claims(base, repeat, args.pairs), "blocked": bench_claims(big, repeat, args.pairs)}
        chain = bench_chain_complete(work, repeat, 500)
        fan = bench_fan_out(work / "fan.db", held)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    ms = 1e3
    print()
    print(f"{'':>22} | {'claim p50':>9} {'p95':>8} | {'VM steps':>8} | {'next_due':>8} | {'claim+complete':>14}")
    for name, label in (("none", "0 blocked"), ("blocked", f"{blocked:,} blocked")):
        r = res[name]
        print(f"{label:>22} | {r['p50'] * ms:7.3f}ms {r['p95'] * ms:6.3f}ms | {r['steps']:8,.0f} |"
              f" {r['next_due'] * ms:6.3f}ms | {r['pairs']:10,.0f} /s")
    flat = res["blocked"]["p50"] / res["none"]["p50"]
    print(f"claim p50 with/without blocked jobs: {flat:.2f}x (target <= 1.5x: blocked jobs cost a claim nothing);"
          f" SQLite VM steps per claim {res['blocked']['steps'] / res['none']['steps']:.2f}x")
    print()
    print(f"complete() of a job: {chain['plain'] * ms:.3f} ms with no dependent,"
          f" {chain['chain'] * ms:.3f} ms with one (a --chain link queued in the same transaction)")
    print(f"fan-out: completing the job {blocked:,} jobs wait for queued them all in {fan:.2f} s"
          f" ({blocked / fan:,.0f} jobs/s), one transaction")
    print(f"adding blocked jobs (enqueue_many with after): {add_rate:,.0f} jobs/s")
    return 0 if flat <= 1.5 else 1


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python
"""Benchmark: claim+complete through the library, three processes on one
SQLite queue file, durable (issue 34 item 2, target >= 1,500/s). Not
collected by pytest.

    python tests/bench/bench_pairs.py                 # 3 rounds, 3,000 jobs each
    python tests/bench/bench_pairs.py --rounds 5 --jobs 3000 --procs 3
    python tests/bench/bench_pairs.py --dir /path/on/the/real/disk

Each worker is its own interpreter with its own ``open_queue`` on the same
file, started before the clock starts, looping until the queue is empty:

* ``calls``: ``claim()`` then ``complete()``, one transaction each, as a
  library user writes it: the claim commits without an fsync (as every
  claim), the outcome with one (``synchronous=FULL``: the fsync is made
  inside the commit, holding the write lock);
* ``unit``: as the daemon writes a turn (recording.py): one ``unit()``
  that completes the job it holds and claims the next, committed, then the
  WAL fsynced (``Store.sync``: the group commit's) before the outcome
  counts as written. Every outcome is durable before the next claim is
  made, so a worker's outcomes are durable when it reports them.

Beside them, in the same run and folder: the disk's one-commit rate in
SQLite (WAL, ``synchronous=FULL``, one one-row INSERT per transaction, one
process) and the bare fdatasync rate (512 B + fdatasync). Rounds alternate
the modes; ranges over the rounds are printed.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sqlite3
import sys
import tempfile
import textwrap
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run from a checkout

from sloth_daemon.queue import open_queue  # noqa: E402
from tests.bench._common import fsync_rate, log, race_workers  # noqa: E402

TARGET = 1500.0

WORKER = textwrap.dedent(
    """
    import os, sys, time
    target, ready, go, out, mode = sys.argv[1:6]
    from sloth_daemon.queue import open_queue
    q = open_queue(target)
    open(ready, "w").close()
    while not os.path.exists(go):
        time.sleep(0.0005)
    n = 0
    if mode == "calls":
        while (job := q.claim("bench", lease_s=600)) is not None:
            q.complete(job.id, job.token)
            n += 1
    else:
        held = None
        while True:
            with q.unit():
                if held is not None:
                    q.complete(held.id, held.token)
                    n += 1
                held = q.claim("bench", lease_s=600)
            # unit() ends with the WAL's fsync (Store.sync) when it wrote a durable outcome
            if held is None:
                break
    end = time.time()
    q.close()
    with open(out, "w") as f:
        f.write(f"{n} {end}")
    """
)


def fill(target: str, n: int) -> None:
    with open_queue(target) as q:
        q.enqueue_many([{"command": ["true", str(i)]} for i in range(n)])


def run_mode(work: Path, mode: str, procs: int, jobs: int) -> float:
    """claim+complete per second of ``procs`` workers draining ``jobs``."""
    run = Path(tempfile.mkdtemp(dir=work, prefix=f"{mode}-"))
    target = str(run / "q.db")
    fill(target, jobs)
    done, took = race_workers(WORKER, run, procs, target, mode)
    with open_queue(target) as q:
        states = q.conn.execute("SELECT state, count(*) FROM jobs GROUP BY state").fetchall() if hasattr(q, "conn") else None
    shutil.rmtree(run, ignore_errors=True)
    if done != jobs:
        raise RuntimeError(f"workers completed {done} jobs, expected {jobs} ({states})")
    return jobs / took


def sqlite_commit_rate(work: Path, n: int = 1000) -> float:
    """One-row INSERT commits per second, WAL, synchronous=FULL: the ceiling
    of a durable write to SQLite on this disk from one process."""
    path = work / "raw.db"
    con = sqlite3.connect(path, isolation_level=None)
    try:
        con.execute("PRAGMA journal_mode = WAL")
        con.execute("PRAGMA synchronous = FULL")
        con.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT)")
        for _ in range(20):
            con.execute("INSERT INTO t (v) VALUES ('warm')")
        t0 = time.perf_counter()
        for _ in range(n):
            con.execute("BEGIN IMMEDIATE")
            con.execute("INSERT INTO t (v) VALUES ('x')")
            con.execute("COMMIT")
        return n / (time.perf_counter() - t0)
    finally:
        con.close()
        for suffix in ("", "-wal", "-shm"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)


def rng(xs: list[float]) -> str:
    return f"{min(xs):,.0f}-{max(xs):,.0f}" if xs else "-"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--jobs", type=int, default=3000, help="jobs drained per measure")
    ap.add_argument("--procs", type=int, default=3)
    ap.add_argument("--modes", default="unit,calls", help="comma list of: unit, calls")
    ap.add_argument("--dir", type=Path, help="folder on the disk to measure (default: a temporary one)")
    a = ap.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="slpairs-", dir=a.dir))
    modes = a.modes.split(",")
    figs: dict[str, list[float]] = {m: [] for m in [*modes, "sqlite", "fsync"]}
    try:
        for i in range(a.rounds):
            figs["sqlite"].append(sqlite_commit_rate(work))
            figs["fsync"].append(fsync_rate(work))
            for m in modes:
                figs[m].append(run_mode(work, m, a.procs, a.jobs))
            log(f"round {i + 1}/{a.rounds}: " + ", ".join(f"{k} {v[-1]:,.0f}/s" for k, v in figs.items()))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"claim+complete, {a.procs} processes on one SQLite queue, durable; {a.jobs:,} jobs;"
          f" ranges of {a.rounds} rounds; load {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    raw = figs["sqlite"]
    for m in modes:
        what = {"unit": "one unit per turn (complete + next claim), WAL fsynced after",
                "calls": "claim(), complete() each its own transaction"}[m]
        ratio = [x / y for x, y in zip(figs[m], raw)]
        print(f"  {m:5} {rng(figs[m]):>13} /s  ({min(ratio):.2f}-{max(ratio):.2f}x the raw commit rate)"
              f"  target >= {TARGET:,.0f}/s  [{what}]")
    print(f"  raw SQLite one-row commits (WAL, FULL, 1 process): {rng(raw)} /s")
    print(f"  bare 512 B write + fdatasync:                      {rng(figs['fsync'])} /s")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python
"""Benchmark of the lease queue core (sloth_daemon.queue). Not collected by pytest.

    python tests/bench/bench_queue.py             # 1k, 100k, 1M queued jobs (a few minutes)
    python tests/bench/bench_queue.py --quick     # 1k, 10k, 100k
    python tests/bench/bench_queue.py --dir /path/on/the/real/disk

Everything runs on a temporary SQLite file with the real Queue as db.py opens
it (WAL, synchronous=FULL; claims and lease renewals may commit without an
fsync when the queue says so, see db.transaction). Measured, each repeated
--repeat times and reported as the median of the repeats:

* claim latency (median, p95) and claim+complete throughput at each size;
* the same claim done by raw SQLite: one ``UPDATE jobs SET state='running' ...
  WHERE id = (SELECT id ... ORDER BY ... LIMIT 1)`` in BEGIN IMMEDIATE/COMMIT
  (synchronous=FULL, and with our durability mix), giving our overhead as a ratio;
* enqueue throughput: single (one enqueue per transaction) and batched
  (enqueue_many of 10k), with raw executemany of the same rows for reference;
* the trap: 99% of the jobs delayed an hour at a higher priority. Our claim
  against a naive single-index claim (``CREATE INDEX naive ON
  jobs(state, priority, not_before)``).

Mind where --dir points: on tmpfs an fsync costs nothing and the numbers
flatter us. The default is a fresh folder under the system temp dir.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run from a checkout

from sloth_daemon.backends.sqlite import db  # noqa: E402
from sloth_daemon.backends.sqlite.enqueue import SQL_INSERT  # noqa: E402
from sloth_daemon.queue import Queue  # noqa: E402

HOUR = 3600.0
BUILD_BATCH = 100_000
TARGETS = {
    "latency_flat": 1.5,  # claim latency at the largest size / smallest size
    "pairs_per_s": 1500.0,  # claim+complete per second at the largest size
    "overhead": 1.5,  # ours / raw SQLite
    "batched_enqueue": 100_000.0,  # jobs/s with enqueue_many of 10k
}


# ------------------------------------------------------------------ helpers
def p95(xs: list[float]) -> float:
    return statistics.quantiles(xs, n=20, method="inclusive")[-1] if len(xs) > 1 else xs[0]


def med(xs: list[float]) -> float:
    return statistics.median(xs)


def remove_db(path: Path) -> None:
    for suffix in ("", "-wal", "-shm", "-journal"):
        try:
            os.remove(f"{path}{suffix}")
        except FileNotFoundError:
            pass


def copy_db(src: Path, dst: Path) -> None:
    """Copy a closed database (its WAL is checkpointed and gone on close)."""
    remove_db(dst)
    shutil.copyfile(src, dst)


def raw_connect(path: Path, synchronous: str = "FULL") -> sqlite3.Connection:
    con = sqlite3.connect(path, isolation_level=None)
    con.execute(f"PRAGMA busy_timeout = {db.BUSY_TIMEOUT_MS}")
    assert con.execute("PRAGMA journal_mode = WAL").fetchone()[0] == "wal"
    con.execute(f"PRAGMA synchronous = {synchronous}")
    return con


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def specs_for(start: int, n: int, *, trap: bool = False, now: float = 0.0) -> list[dict]:
    if not trap:
        return [{"command": ["echo", str(i)], "priority": i % 3} for i in range(start, start + n)]
    # 99% delayed an hour at priority 5; every 100th job due now at priority 0
    return [
        {"command": ["echo", str(i)]} if i % 100 == 0
        else {"command": ["echo", str(i)], "priority": 5, "not_before": now + HOUR}
        for i in range(start, start + n)
    ]


def build(path: Path, n: int, *, trap: bool = False) -> float:
    """n queued jobs written by the real enqueue_many in batches; returns jobs/s."""
    remove_db(path)
    t0 = time.perf_counter()
    with Queue(path) as q:
        now = q.clock.now()
        for start in range(0, n, BUILD_BATCH):
            q.enqueue_many(specs_for(start, min(BUILD_BATCH, n - start), trap=trap, now=now))
        counts = q.counts()
    rate = n / (time.perf_counter() - t0)
    assert counts["queued"] == n and sum(counts.values()) == n, counts
    if trap:
        con = sqlite3.connect(path)
        due = con.execute("SELECT count(*) FROM jobs WHERE not_before < ?", (now + HOUR / 2,)).fetchone()[0]
        con.close()
        assert due == (n + 99) // 100, due
    return rate


def size_label(n: int) -> str:
    return f"{n // 1_000_000}M" if n >= 1_000_000 and n % 1_000_000 == 0 else f"{n // 1000}k"


# --------------------------------------------------------- claim+complete
def time_pairs(claim, complete, repeat: int, pairs: int, refill) -> dict:
    """``repeat`` rounds of ``pairs`` timed claim+complete; ``refill()`` runs
    between rounds, outside the timing, to keep the queue at its size."""
    tputs, meds, p95s, comps = [], [], [], []
    for _ in range(repeat):
        lat, comp = [], []
        t0 = time.perf_counter()
        for _ in range(pairs):
            t = time.perf_counter()
            held = claim()
            t1 = time.perf_counter()
            complete(held)
            lat.append(t1 - t)
            comp.append(time.perf_counter() - t1)
        tputs.append(pairs / (time.perf_counter() - t0))
        meds.append(med(lat))
        p95s.append(p95(lat))
        comps.append(med(comp))
        refill()
    return {"p50": med(meds), "p95": med(p95s), "pairs": med(tputs), "complete": med(comps)}


def bench_ours(path: Path, repeat: int, pairs: int, *, refill: bool = True) -> dict:
    """Claim latency and claim+complete throughput of the real Queue."""
    with Queue(path) as q:
        for _ in range(20):  # warm the page cache and the statement cache
            job = q.claim("bench")
            q.complete(job.id, job.token)

        def claim():
            job = q.claim("bench")
            assert job is not None, "ran out of due jobs"
            return job

        return time_pairs(claim, lambda job: q.complete(job.id, job.token), repeat, pairs,
                          lambda: refill and q.enqueue_many(specs_for(0, pairs)))


RAW_CLAIM = (
    "UPDATE jobs SET state = 'running', attempts = attempts + 1, token = ?, worker = ?,"
    " lease_until = ?, updated_at = ? WHERE id = (SELECT id FROM jobs INDEXED BY raw_claim"
    " WHERE state = 'queued'"
    " AND lane = 'default' AND not_before <= ? ORDER BY priority DESC, not_before, id LIMIT 1)"
    " RETURNING id"
)
RAW_COMPLETE = (
    "UPDATE jobs SET state = 'done', token = NULL, lease_until = NULL, finished_at = ?,"
    " updated_at = ? WHERE id = ? AND token = ?"
)


def prepare_raw(path: Path) -> None:
    """The raw claim's ORDER BY (priority DESC, not_before, id) needs an index in
    that order to be one seek; it replaces jobs_ready, so both sides maintain
    as many indexes."""
    con = raw_connect(path)
    con.execute("DROP INDEX jobs_ready")
    con.execute("CREATE INDEX raw_claim ON jobs(lane, priority DESC, not_before, id)"
                " WHERE state = 'queued'")
    plan = " / ".join(r[3] for r in con.execute("EXPLAIN QUERY PLAN " + RAW_CLAIM, ("t", "w", 0, 0, 0)))
    assert "raw_claim" in plan and "TEMP B-TREE" not in plan, plan
    con.close()


def bench_raw(path: Path, repeat: int, pairs: int, *, claim_sync: str) -> dict:
    """The same claim+complete as a raw single UPDATE per transaction."""
    con = raw_connect(path, "FULL")
    seq = 0

    def claim() -> tuple[int, str]:
        nonlocal seq
        seq += 1
        token = f"{seq:016x}"
        now = time.time()
        if claim_sync != "FULL":
            con.execute(f"PRAGMA synchronous = {claim_sync}")
        con.execute("BEGIN IMMEDIATE")
        row = con.execute(RAW_CLAIM, (token, "raw", now + 60, now, now)).fetchone()
        con.execute("COMMIT")
        if claim_sync != "FULL":
            con.execute("PRAGMA synchronous = FULL")
        assert row is not None, "ran out of due jobs"
        return row[0], token

    def complete(held: tuple[int, str]) -> None:
        jid, token = held
        now = time.time()
        con.execute("BEGIN IMMEDIATE")
        con.execute(RAW_COMPLETE, (now, now, jid, token))
        con.execute("COMMIT")

    for _ in range(20):
        complete(claim())

    def put_back() -> None:  # the done jobs queued again, so the queue keeps its size
        con.execute("UPDATE jobs SET state = 'queued', token = NULL, lease_until = NULL,"
                    " finished_at = NULL WHERE state = 'done'")

    try:
        return time_pairs(claim, complete, repeat, pairs, put_back)
    finally:
        con.close()


# ----------------------------------------------------------------- enqueue
def bench_enqueue(work: Path, repeat: int, single_n: int, batch_n: int) -> dict:
    singles, batches, raws = [], [], []
    path = work / "enqueue.db"
    for _ in range(repeat):
        remove_db(path)
        with Queue(path) as q:
            t0 = time.perf_counter()
            for i in range(single_n):
                q.enqueue(["echo", str(i)], priority=i % 3)
            singles.append(single_n / (time.perf_counter() - t0))
        remove_db(path)
        specs = specs_for(0, batch_n)
        with Queue(path) as q:
            t0 = time.perf_counter()
            ids = q.enqueue_many(specs)
            batches.append(batch_n / (time.perf_counter() - t0))
            assert len(ids) == batch_n and q.counts()["queued"] == batch_n
        # raw: the same INSERT of the same rows, one executemany, one FULL commit
        remove_db(path)
        with Queue(path) as q:  # the schema
            now = q.clock.now()
            rows = [(f'["echo", "{i}"]', "default", i % 3, q.max_attempts, q.lease_s, None, now,
                     None, None, None, None, 0, now, now, None, None, "", 0, None) for i in range(batch_n)]
            assert len(rows[0]) == SQL_INSERT.count("?"), "the raw rows must match the insert (new columns?)"
        con = raw_connect(path)
        t0 = time.perf_counter()
        con.execute("BEGIN IMMEDIATE")
        con.executemany(SQL_INSERT, rows)
        con.execute("COMMIT")
        raws.append(batch_n / (time.perf_counter() - t0))
        con.close()
    remove_db(path)
    return {"single": med(singles), "batched": med(batches), "raw_batched": med(raws)}


# -------------------------------------------------------------------- trap
NAIVE_SELECT = (
    "SELECT id FROM jobs WHERE state = 'queued' AND not_before <= ?"
    " ORDER BY priority DESC, not_before LIMIT 1"
)
NAIVE_CLAIM = (
    "UPDATE jobs SET state = 'running', attempts = attempts + 1, token = ?, worker = ?,"
    " lease_until = ?, updated_at = ? WHERE id = (" + NAIVE_SELECT.replace("?", "?5") + ")"
    " RETURNING id"
)


def bench_trap_ours(path: Path, repeat: int, pairs: int) -> dict:
    return bench_ours(path, repeat, pairs, refill=False)


def bench_trap_naive(path: Path, repeat: int, claims: int) -> dict:
    """A claim as a naive single-index queue would do it, same rows."""
    con = raw_connect(path)
    for ix in ("jobs_ready", "jobs_due", "jobs_by_state"):
        con.execute(f"DROP INDEX {ix}")
    con.execute("CREATE INDEX naive ON jobs(state, priority, not_before)")
    plan = " / ".join(r[3] for r in con.execute("EXPLAIN QUERY PLAN " + NAIVE_SELECT, (0,)))
    meds, p95s = [], []
    seq = 0
    for _ in range(repeat):
        lat = []
        for _ in range(claims):
            seq += 1
            now = time.time()
            t = time.perf_counter()
            con.execute("BEGIN IMMEDIATE")
            row = con.execute(NAIVE_CLAIM, (f"{seq:016x}", "naive", now + 60, now, now)).fetchone()
            con.execute("COMMIT")
            lat.append(time.perf_counter() - t)
            assert row is not None
        meds.append(med(lat))
        p95s.append(p95(lat))
    con.close()
    return {"p50": med(meds), "p95": med(p95s), "plan": plan}


# -------------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="sizes 1k/10k/100k (a fast check)")
    ap.add_argument("--repeat", type=int, default=5, help="repeats per measurement (default 5)")
    ap.add_argument("--pairs", type=int, default=200, help="claim+complete pairs per repeat")
    ap.add_argument("--sizes", help="comma-separated queue sizes, e.g. 1000,1000000 (overrides --quick)")
    ap.add_argument("--dir", help="work folder (default: a new temp folder, removed at the end)")
    ap.add_argument("--keep", action="store_true", help="keep the work folder")
    args = ap.parse_args(argv)

    sizes = [1_000, 10_000, 100_000] if args.quick else [1_000, 100_000, 1_000_000]
    if args.sizes:
        sizes = sorted(int(x) for x in args.sizes.split(","))
    work = Path(tempfile.mkdtemp(prefix="sloth-bench-", dir=args.dir))
    t_start = time.perf_counter()
    print(f"sloth queue benchmark: Python {platform.python_version()}, SQLite {sqlite3.sqlite_version},"
          f" {platform.system()} {platform.machine()}, {os.cpu_count()} CPUs")
    print(f"work dir {work}; repeat {args.repeat}; {args.pairs} claim+complete pairs per repeat;"
          " medians of the repeats", flush=True)
    try:
        results = {}
        for n in sizes:
            label = size_label(n)
            path = work / f"q{label}.db"
            log(f"[{label}] building {n:,} queued jobs ...")
            rate = build(path, n)
            log(f"[{label}] built at {rate:,.0f} jobs/s; raw copy ...")
            copy_db(path, work / "raw.db")
            prepare_raw(work / "raw.db")
            log(f"[{label}] ours ...")
            ours = bench_ours(path, args.repeat, args.pairs)
            log(f"[{label}] raw ...")
            raw_full = bench_raw(work / "raw.db", args.repeat, args.pairs, claim_sync="FULL")
            raw_mix = bench_raw(work / "raw.db", args.repeat, args.pairs, claim_sync="NORMAL")
            results[n] = (ours, raw_full, raw_mix, rate)
            remove_db(work / "raw.db")
            remove_db(path)

        log("enqueue ...")
        enq = bench_enqueue(work, args.repeat, single_n=300, batch_n=10_000)

        big = sizes[-1]
        label = size_label(big)
        tpath = work / f"trap{label}.db"
        log(f"[trap {label}] building ...")
        build(tpath, big, trap=True)
        copy_db(tpath, work / "naive.db")
        log(f"[trap {label}] ours ...")
        trap_ours = bench_trap_ours(tpath, args.repeat, min(args.pairs, big // 100 // (args.repeat + 1)))
        log(f"[trap {label}] naive ...")
        trap_naive = bench_trap_naive(work / "naive.db", args.repeat, 5 if big >= 1_000_000 else 20)
    finally:
        if args.keep:
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)

    ms = 1e3
    print()
    print("claim (queue of N due jobs, priorities 0-2, one lane)")
    hdr = (f"{'N':>5} | {'claim p50':>9} {'p95':>7} {'complete':>8} {'pairs/s':>7} |"
           f" {'raw FULL: claim':>15} {'complete':>8} {'pairs/s':>7} | {'raw mix: claim':>14} {'pairs/s':>7} |"
           f" {'ours/raw FULL':>13} {'ours/raw mix':>12}")
    print(hdr)
    print("-" * len(hdr))
    for n, (ours, rf, rm, _) in results.items():
        print(f"{size_label(n):>5} | {ours['p50'] * ms:7.3f}ms {ours['p95'] * ms:5.3f}ms"
              f" {ours['complete'] * ms:6.3f}ms {ours['pairs']:7,.0f} |"
              f" {rf['p50'] * ms:13.3f}ms {rf['complete'] * ms:6.3f}ms {rf['pairs']:7,.0f} |"
              f" {rm['p50'] * ms:12.3f}ms {rm['pairs']:7,.0f} |"
              f" {rf['pairs'] / ours['pairs']:12.2f}x {rm['pairs'] / ours['pairs']:11.2f}x")
    print("  (ours/raw = claim+complete time ours / raw; raw FULL fsyncs both commits,"
          " raw mix fsyncs only the complete, as the queue does)")
    print()
    print("enqueue")
    print(f"  single (one enqueue per transaction): {enq['single']:10,.0f} jobs/s")
    print(f"  batched (enqueue_many of 10k):        {enq['batched']:10,.0f} jobs/s")
    print(f"  raw executemany of the same 10k rows: {enq['raw_batched']:10,.0f} jobs/s"
          f"  (ours/raw time {enq['raw_batched'] / enq['batched']:.2f}x)")
    for n, (*_, rate) in results.items():
        print(f"  build of {size_label(n)} (enqueue_many, 100k per call): {rate:10,.0f} jobs/s")
    print()
    print(f"trap: {size_label(big)} jobs, 99% delayed 1h at priority 5, 1% due at priority 0")
    print(f"  ours  claim p50 {trap_ours['p50'] * ms:9.3f} ms   p95 {trap_ours['p95'] * ms:9.3f} ms")
    print(f"  naive claim p50 {trap_naive['p50'] * ms:9.3f} ms   p95 {trap_naive['p95'] * ms:9.3f} ms"
          f"   ({trap_naive['p50'] / trap_ours['p50']:,.0f}x slower)")
    print(f"  naive plan: {trap_naive['plan']}")

    first, last = results[sizes[0]][0], results[big][0]
    flat = last["p50"] / first["p50"]
    overhead = results[big][1]["pairs"] / last["pairs"]
    overhead_mix = results[big][2]["pairs"] / last["pairs"]
    checks = [
        (f"claim latency {size_label(big)}/{size_label(sizes[0])} (p50)", flat,
         f"<= {TARGETS['latency_flat']}", flat <= TARGETS["latency_flat"]),
        (f"claim+complete at {size_label(big)}", last["pairs"],
         f">= {TARGETS['pairs_per_s']:,.0f}/s", last["pairs"] >= TARGETS["pairs_per_s"]),
        (f"overhead vs raw FULL at {size_label(big)} (time ratio)", overhead,
         f"<= {TARGETS['overhead']}", overhead <= TARGETS["overhead"]),
        ("batched enqueue", enq["batched"], f">= {TARGETS['batched_enqueue']:,.0f}/s",
         enq["batched"] >= TARGETS["batched_enqueue"]),
        (f"trap claim vs {size_label(sizes[0])} claim (p50)", trap_ours["p50"] / first["p50"],
         f"<= {TARGETS['latency_flat']}", trap_ours["p50"] / first["p50"] <= TARGETS["latency_flat"]),
    ]
    print()
    print("targets")
    for name, value, target, ok in checks:
        shown = f"{value:,.0f}" if value >= 100 else f"{value:.2f}"
        print(f"  {'ok  ' if ok else 'MISS'} {name:<48} {shown:>10}   target {target}")
    print(f"  info overhead vs raw mix at {size_label(big):<30} {overhead_mix:>10.2f}   (no target:"
          " the raw claim writes no event row; ours writes one per transition)")
    print(f"\ntotal {time.perf_counter() - t_start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())

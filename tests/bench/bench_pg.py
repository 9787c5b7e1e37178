#!/usr/bin/env python
"""Benchmark: the PostgreSQL queue beside the SQLite one, same machine, same
run. Not collected by pytest.

    python tests/bench/bench_pg.py                # 5 repeats (a minute or two)
    python tests/bench/bench_pg.py --repeat 3 --pairs 1000
    python tests/bench/bench_pg.py --dir /path/on/the/real/disk

A throwaway PostgreSQL cluster (tests/support/pg.py, fsync on, default
settings otherwise) and the SQLite file live in one fresh folder on the real
disk (not tmpfs: there an fsync is free and both queues look faster than
they are). Measured, each the median of --repeat runs:

* claim+complete per second, with 1 and with 3 worker processes on one
  queue: each worker is its own interpreter with its own connection,
  started before the clock starts, claiming and completing until the queue
  is empty (PostgreSQL: the server's clock, SKIP LOCKED claims, every commit
  flushed; SQLite: WAL, claims without fsync, results fsynced);
* batched enqueue per second: enqueue_many of 10,000 jobs in one call;
* the machine's fsync rate in that folder (write 512 bytes + fdatasync),
  and PostgreSQL's rate of one-row INSERT commits: the ceilings of any
  commit that must reach the disk (a claim+complete is two commits);
* dependencies: enqueue_many of 10,000 jobs that each wait for one
  unfinished job (``after``), and of a 10,000-job chain (``after_previous``,
  `add --stdin --chain`), jobs/s; cancelling the chain's head, which
  cancels all of it in one transaction, seconds;
* claim with lanes: claim+complete per second by one worker that excludes
  a lane holding a backlog of 50,000 due jobs at a higher priority (a full
  or paused lane, as the daemon claims), and that names one lane.

PostgreSQL is reached over its Unix socket, as a daemon on the database
machine would; over a network add one round trip per claim and per
complete.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import sys
import tempfile
import textwrap
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run from a checkout

from sloth_daemon.queue import open_queue  # noqa: E402
from tests.bench._common import fsync_rate, log, race_workers  # noqa: E402
from tests.support.pg import PgCluster  # noqa: E402

BATCH = 10_000

WORKER = textwrap.dedent(
    """
    import os, sys, time
    target, ready, go, out = sys.argv[1:5]
    from sloth_daemon.queue import open_queue
    q = open_queue(target)          # the real clock: SQLite's SystemClock, the server's
    open(ready, "w").close()
    while not os.path.exists(go):
        time.sleep(0.0005)
    n = 0
    while (job := q.claim("bench", lease_s=600)) is not None:
        q.complete(job.id, job.token)
        n += 1
    end = time.time()
    q.close()
    with open(out, "w") as f:
        f.write(f"{n} {end}")
    """
)


def pg_commit_rate(cluster: PgCluster, n: int = 500) -> float:
    """Commits per second of a one-row INSERT on this server: the ceiling of
    any PostgreSQL write here (a claim+complete is two commits)."""
    with cluster.admin() as c:
        c.execute("CREATE TABLE IF NOT EXISTS commit_probe (id serial PRIMARY KEY)")
        t0 = time.perf_counter()
        for _ in range(n):
            c.execute("INSERT INTO commit_probe DEFAULT VALUES")
        rate = n / (time.perf_counter() - t0)
        c.execute("DROP TABLE commit_probe")
    return rate


def settle_wal(cluster: PgCluster, warm: bool = False) -> None:
    """Steady state for the WAL. A new cluster has no WAL segments to recycle,
    so each 16 MB segment it fills is first created and zero-filled, stalling
    commits for milliseconds (measured: claim+complete 4 ms instead of 0.8).
    A server that has run for a while renames old segments instead. ``warm``
    writes ~100 MB of WAL once; the CHECKPOINT (also before every timed run,
    outside the timing) hands the used segments back for reuse."""
    with cluster.admin() as c:
        if warm:
            c.execute("CREATE TABLE wal_warmup AS SELECT g, repeat('x', 150) AS pad"
                      " FROM generate_series(1, 500000) g")
            c.execute("DROP TABLE wal_warmup")
        c.execute("CHECKPOINT")


def fill(target: str, n: int) -> None:
    with open_queue(target) as q:
        for start in range(0, n, BATCH):
            q.enqueue_many([{"command": ["true", str(i)], "priority": i % 3}
                            for i in range(start, min(n, start + BATCH))])


def pairs_per_s(target: str, workers: int, pairs: int, work: Path, settle=lambda: None) -> float:
    """Fill the queue with ``pairs`` jobs, let ``workers`` processes drain it;
    jobs per second from the go signal to the last worker's end."""
    fill(target, pairs)
    settle()
    run = Path(tempfile.mkdtemp(dir=work, prefix="run-"))
    done, took = race_workers(WORKER, run, workers, target)
    shutil.rmtree(run, ignore_errors=True)
    if done != pairs:
        raise RuntimeError(f"workers claimed {done} jobs, expected {pairs}")
    return pairs / took


def batched_enqueue_per_s(target: str) -> float:
    specs = [{"command": ["true", str(i)], "priority": i % 3} for i in range(BATCH)]
    with open_queue(target) as q:
        t0 = time.perf_counter()
        ids = q.enqueue_many(specs)
        rate = BATCH / (time.perf_counter() - t0)
    assert len(ids) == BATCH
    return rate


def deps_figures(target: str, n: int = BATCH) -> dict[str, float]:
    """enqueue_many of ``n`` jobs after one unfinished job, of an ``n``-job
    chain, and the cancel of the chain's head (jobs/s, jobs/s, seconds)."""
    out = {}
    with open_queue(target) as q:
        held = q.enqueue(["held"], not_before=q.clock.now() + 86400)
        t0 = time.perf_counter()
        q.enqueue_many([{"command": ["true", str(i)], "after": [held]} for i in range(n)])
        out["deps after"] = n / (time.perf_counter() - t0)
        head = q.enqueue(["head"], not_before=q.clock.now() + 86400)
        chain = [{"command": ["true", "0"], "after": [head]}]
        chain += [{"command": ["true", str(i)], "after_previous": "after"} for i in range(1, n)]
        t0 = time.perf_counter()
        q.enqueue_many(chain)
        out["deps chain"] = n / (time.perf_counter() - t0)
        t0 = time.perf_counter()
        q.cancel(head)
        out["deps cancel chain"] = time.perf_counter() - t0
    return out


def lanes_figures(target: str, backlog: int = 50_000, pairs: int = 1_000) -> dict[str, float]:
    """claim+complete per second with a lane of ``backlog`` due jobs excluded,
    and with one lane named."""
    out = {}
    with open_queue(target) as q:
        for start in range(0, backlog, BATCH):
            q.enqueue_many([{"command": ["true"], "lane": "busy", "priority": 5}
                            for _ in range(min(BATCH, backlog - start))])
        q.enqueue_many([{"command": ["true"], "lane": lane} for lane in "ab" for _ in range(pairs)])
        for key, kw in (("lanes excluded", {"exclude_lanes": {"busy"}}), ("lanes named", {"lanes": ["b"]})):
            t0 = time.perf_counter()
            for _ in range(pairs):
                job = q.claim("bench", lease_s=600, **kw)
                q.complete(job.id, job.token)
            out[key] = pairs / (time.perf_counter() - t0)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=5, help="runs per figure; the median is shown")
    ap.add_argument("--pairs", type=int, default=2000, help="jobs claimed+completed per run")
    ap.add_argument("--dir", help="parent folder (default: the system temp dir, on disk here)")
    args = ap.parse_args(argv)

    work = Path(tempfile.mkdtemp(prefix="sloth-bench-pg-", dir=args.dir))
    os.chmod(work, 0o755)  # the server's user must reach its folder inside
    log(f"starting PostgreSQL in {work} ...")
    cluster = PgCluster(str(work))
    results: dict[str, list[float]] = {}
    n_db = 0

    def target(backend: str) -> str:
        nonlocal n_db
        n_db += 1
        if backend == "sqlite":
            return str(work / f"q{n_db}.db")
        return cluster.create_database(f"bench{n_db}")

    try:
        with cluster.admin() as c:
            version = c.execute("SHOW server_version").fetchone()[0]
            fsync = c.execute("SHOW fsync").fetchone()[0]
            sync = c.execute("SHOW synchronous_commit").fetchone()[0]
        fs = statistics.median(fsync_rate(work) for _ in range(3))
        log("warming the WAL ...")
        settle_wal(cluster, warm=True)
        commits = statistics.median(pg_commit_rate(cluster) for _ in range(3))
        for r in range(args.repeat):
            for backend in ("postgres", "sqlite"):
                for workers in (1, 3):
                    log(f"run {r + 1}/{args.repeat}: {backend}, {workers} worker(s) ...")
                    results.setdefault(f"{backend} pairs x{workers}", []).append(
                        pairs_per_s(target(backend), workers, args.pairs, work,
                                    lambda: settle_wal(cluster)))
                settle_wal(cluster)
                results.setdefault(f"{backend} enqueue", []).append(batched_enqueue_per_s(target(backend)))
                for figures in (deps_figures(target(backend)), lanes_figures(target(backend))):
                    for key, value in figures.items():
                        results.setdefault(f"{backend} {key}", []).append(value)
    finally:
        cluster.destroy()
        shutil.rmtree(work, ignore_errors=True)

    med = {k: statistics.median(v) for k, v in results.items()}
    print(f"sloth queue: PostgreSQL {version} vs SQLite, Python {platform.python_version()},"
          f" {platform.system()} {platform.machine()}, {os.cpu_count()} CPUs")
    print(f"PostgreSQL fsync={fsync} synchronous_commit={sync}, Unix socket; folder {work}")
    print(f"medians of {args.repeat} runs; {args.pairs} jobs per claim+complete run,"
          f" {BATCH:,} per enqueue_many")
    print(f"fsync rate of the folder's disk: {fs:,.0f} fdatasync/s;"
          f" PostgreSQL one-row INSERT commits: {commits:,.0f}/s")
    print()
    print(f"{'':<38}{'PostgreSQL':>12}{'SQLite':>12}")
    for label, key in (("claim+complete/s, 1 worker", "pairs x1"),
                       ("claim+complete/s, 3 workers", "pairs x3"),
                       ("batched enqueue jobs/s", "enqueue"),
                       ("enqueue after one job, jobs/s", "deps after"),
                       ("enqueue a chain, jobs/s", "deps chain"),
                       ("claim+complete/s, 50k lane excluded", "lanes excluded"),
                       ("claim+complete/s, one lane named", "lanes named")):
        print(f"{label:<38}{med['postgres ' + key]:>12,.0f}{med['sqlite ' + key]:>12,.0f}")
    label = f"cancel a {BATCH:,}-job chain, s"
    print(f"{label:<38}{med['postgres deps cancel chain']:>12.2f}{med['sqlite deps cancel chain']:>12.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python
"""Benchmark: real daemons on one PostgreSQL queue, beside one daemon on its
SQLite file, same machine, same run. Not collected by pytest.

    python tests/bench/bench_machines.py              # 3 repeats (a few minutes)
    python tests/bench/bench_machines.py --repeat 5 --jobs 1000 --samples 40

What a user gets end to end (tests/bench/bench_pg.py measures the queue
alone, without daemons or processes):

* jobs/s: ``--jobs`` jobs of `true` queued in one request, from the moment
  the request returns until the last is done, with 1 and with 3 daemons on
  one PostgreSQL database (queued --anywhere; 4 slots each), and with one
  daemon on its SQLite file (4 slots). Each job is a real process the
  keeper forks, so this is the ceiling of short jobs, not of the queue;
* enqueue-to-start latency: one job at a time, from just before the request
  that queues it to the first thing the job does (it prints the time): on
  the SQLite daemon; on PostgreSQL queued on the machine that runs it (its
  own daemon is woken directly); queued on another machine for this one
  (``--on``), woken by LISTEN/NOTIFY; the same with ``listen = false``
  (PgBouncer in transaction mode), found by the poll (poll_s, 5 s by
  default). A random pause comes between samples, so the poll's phase is
  random. Median, 90th percentile and maximum of --samples per repeat.

The cluster and the homes live in a fresh folder on the real disk (fsync on),
reached over the Unix socket, as daemons on the database machine would be;
over a network, add a round trip per statement.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Iterator

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run from a checkout

from tests.bench._common import log, pct  # noqa: E402
from tests.support.harness import Harness  # noqa: E402
from tests.support.machines import Machines, Network, wait_until  # noqa: E402

CONFIG = """
[lanes]
default = 4
"""


def throughput(first, everyone, n: int, place: dict[str, str], done: Callable[[], int] | None = None) -> float:
    """Queue n `true` jobs on ``first``; jobs/s until all are done. ``done``:
    how many jobs are done, asked of the database itself (a shared queue), so
    that the count is not one more load on the first daemon (a `list` every
    10 ms was 17% of its samples); by default asked of ``first``."""
    count = done or (lambda: first.call("list", states=["done"], limit=1)["total"])
    before = count()
    ids = first.add_many([{"command": ["true"], **place} for _ in range(n)])
    t0 = time.monotonic()
    wait_until(lambda: count() >= before + len(ids), 600, f"{n} jobs done", step_s=0.01)
    elapsed = time.monotonic() - t0
    assert all(m.daemon is not None and m.daemon.poll() is None for m in everyone)
    return n / elapsed


@contextlib.contextmanager
def done_in_db(ms: Machines) -> Iterator[Callable[[], int]]:
    """How many jobs of ``ms``'s queue are done, read by a connection of
    the benchmark's own (one indexed count; the daemons are not asked)."""
    import psycopg

    assert ms.network.cluster is not None
    with psycopg.connect(ms.network.cluster.url(ms.db), autocommit=True) as conn:
        yield lambda: conn.execute("SELECT count(*) FROM sloth.jobs WHERE state = 'done'").fetchone()[0]


def latencies(source, runner, samples: int, place: dict[str, str], stamp_dir: Path) -> list[float]:
    """Seconds from queueing on ``source`` to the job's first act on ``runner``."""
    out = []
    for i in range(samples):
        time.sleep(random.uniform(0.05, 0.5))
        stamp = stamp_dir / f"{time.monotonic_ns()}-{i}"
        t0 = time.time()
        jid = source.add_many([{"command": ["sh", "-c", f"date +%s.%N > {stamp}"], **place}])[0]
        wait_until(lambda: stamp.exists() and stamp.read_text().strip(), 60, f"job {jid} started", step_s=0.002)
        out.append(float(stamp.read_text()) - t0)
        runner.wait_state(jid, "done", timeout_s=60)
    return out


def sqlite_figures(root: Path, jobs: int, samples: int, results: dict[str, list[float]]) -> None:
    h = Harness(Path(tempfile.mkdtemp(prefix="sqlite-", dir=root)), config=CONFIG)  # a fresh queue each run
    try:
        h.start()
        results.setdefault("sqlite jobs/s", []).append(throughput(h, [h], jobs, {}))
        results.setdefault("sqlite latency", []).extend(latencies(h, h, samples, {}, root))
    finally:
        h.reap()


def pg_figures(net: Network, jobs: int, samples: int, results: dict[str, list[float]]) -> None:
    for n in (1, 3):
        with Machines(net, n, config_of=lambda i: CONFIG) as ms:
            ms.start()
            with done_in_db(ms) as done:
                results.setdefault(f"pg x{n} jobs/s", []).append(
                    throughput(ms[0], list(ms), jobs, {"place": "*"} if n > 1 else {}, done))
            if n == 1:
                results.setdefault("pg local latency", []).extend(latencies(ms[0], ms[0], samples, {}, ms.root))
    for listen in (True, False):
        with Machines(net, 2, config_of=lambda i: ("" if listen else "listen = false\n") + CONFIG) as ms:
            ms.start()
            key = "pg remote latency, " + ("NOTIFY" if listen else "polling")
            results.setdefault(key, []).extend(latencies(ms[0], ms[1], samples, {"place": "b"}, ms.root))


def fmt_lat(xs: list[float]) -> str:
    return (f"median {statistics.median(xs) * 1000:7.1f} ms  p90 {pct(xs, 0.9) * 1000:7.1f} ms"
            f"  max {max(xs) * 1000:7.1f} ms")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--jobs", type=int, default=600, help="jobs per throughput run")
    ap.add_argument("--samples", type=int, default=20, help="latency samples per repeat and case")
    ap.add_argument("--dir", help="parent folder (default: the system temp dir, on disk here)")
    a = ap.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="sloth-bench-machines-", dir=a.dir))
    os.chmod(work, 0o755)  # the server's user must reach its folder inside
    results: dict[str, list[float]] = {}
    net = Network(3, netns=False, parent=str(work))
    try:
        for r in range(a.repeat):
            log(f"run {r + 1}/{a.repeat} ...")
            sqlite_figures(work, a.jobs, a.samples, results)
            pg_figures(net, a.jobs, a.samples, results)
    finally:
        net.close()
        shutil.rmtree(work, ignore_errors=True)
    print(f"sloth daemons, Python {platform.python_version()}, {platform.system()} {platform.machine()},"
          f" {os.cpu_count()} CPUs; {a.repeat} runs; folder on {work.parent}")
    print(f"jobs/s ({a.jobs} x `true`, 4 slots per daemon; each run's figure, then the median):")
    for key in ("sqlite jobs/s", "pg x1 jobs/s", "pg x3 jobs/s"):
        v = results[key]
        print(f"  {key:<16} {' '.join(f'{x:6.0f}' for x in v)}   median {statistics.median(v):6.0f}")
    print(f"enqueue to start ({a.samples * a.repeat} samples each):")
    for key in ("sqlite latency", "pg local latency", "pg remote latency, NOTIFY", "pg remote latency, polling"):
        print(f"  {key:<28} {fmt_lat(results[key])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python
"""A/B: daemons on one PostgreSQL queue, two checkouts of sloth, interleaved,
with the database's own commit rate beside them. Not collected by pytest.

    python tests/bench/bench_machines_ab.py --a /path/to/main/checkout --b . [--runs 3] [--jobs 600]

jobs/s as in bench_machines.py (``--jobs`` x `true` queued in one request,
until the last is done; 4 slots per daemon; with 3 daemons queued
--anywhere), for 1 and 3 daemons, alternating A, B, A, B ... on one
throwaway cluster (fsync on, on the real disk) so that the load of a shared
machine hits both alike. The daemons of a side run that checkout's code
(PYTHONPATH; a checkout needs no venv of its own). Then the ceilings, on
the same cluster: one session's one-row INSERT commits per second
(bench_pg.pg_commit_rate) and pgbench's with 3 clients (group commit).
Per job, from the server's own counters (load cannot blur them): its
write transactions (commits) and WAL fsyncs.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run from a checkout

from tests.bench._common import log  # noqa: E402
from tests.bench.bench_machines import CONFIG, done_in_db, pgbench_rate, throughput  # noqa: E402
from tests.bench.bench_pg import pg_commit_rate, settle_wal  # noqa: E402
from tests.support.machines import Machines, Network  # noqa: E402


def server_counts(net: Network) -> tuple[int, int]:
    """The server's write transactions so far (transaction ids handed out:
    the per-database counters go with the database each run drops) and its
    WAL fsyncs."""
    assert net.cluster is not None
    with net.cluster.admin() as c:
        xacts = c.execute("SELECT pg_current_xact_id()::text::bigint").fetchone()[0]
        syncs = c.execute("SELECT wal_sync FROM pg_stat_wal").fetchone()[0]
    return int(xacts), int(syncs)


def side(net: Network, root: Path, jobs: int, n: int) -> tuple[float, float, float]:
    """jobs/s of ``n`` daemons running the code of ``root``; and per job, the
    server's write transactions (each a commit) and WAL fsyncs, counted from
    before the daemons start until after they stop, so each daemon's start
    and stop are in them too."""
    os.environ["PYTHONPATH"] = str(root)  # read by each Machine's environment as it is made
    x0, s0 = server_counts(net)
    try:
        with Machines(net, n, config_of=lambda i: CONFIG) as ms:
            ms.start()
            with done_in_db(ms) as done:
                rate = throughput(ms[0], list(ms), jobs, {"place": "*"} if n > 1 else {}, done)
    finally:
        del os.environ["PYTHONPATH"]
    x1, s1 = server_counts(net)
    return rate, (x1 - x0) / jobs, (s1 - s0) / jobs


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--a", type=Path, required=True)
    ap.add_argument("--b", type=Path, required=True)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--jobs", type=int, default=600)
    ap.add_argument("--dir", help="parent folder (default: the system temp dir, on disk here)")
    a = ap.parse_args(argv)
    roots = {"a": a.a.resolve(), "b": a.b.resolve()}
    work = Path(tempfile.mkdtemp(prefix="sloth-bench-mab-", dir=a.dir))
    os.chmod(work, 0o755)  # the server's user must reach its folder inside
    res: dict[str, list[float]] = {}
    net = Network(3, netns=False, parent=str(work))
    try:
        assert net.cluster is not None
        settle_wal(net.cluster, warm=True)
        for r in range(a.runs):
            for n in (1, 3):
                for k in ("a", "b"):
                    log(f"run {r + 1}/{a.runs}: {k} x{n} ...")
                    rate, xacts, syncs = side(net, roots[k], a.jobs, n)
                    res.setdefault(f"{k} x{n}", []).append(rate)
                    res.setdefault(f"{k} x{n} xacts", []).append(xacts)
                    res.setdefault(f"{k} x{n} syncs", []).append(syncs)
        settle_wal(net.cluster)
        one_session = pg_commit_rate(net.cluster, 1000)
        three = pgbench_rate(net, 3)
    finally:
        net.close()
        shutil.rmtree(work, ignore_errors=True)
    print(f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at the end; {a.runs} runs,"
          f" {a.jobs} x `true`, 4 slots per daemon")
    print(f"A = {roots['a']}\nB = {roots['b']}")
    for n in (1, 3):
        for k in ("a", "b"):
            v = res[f"{k} x{n}"]
            print(f"  {k.upper()} {n} daemon(s) jobs/s: {' '.join(f'{x:6.0f}' for x in v)}"
                  f"   median {statistics.median(v):6.0f}; per job: write transactions"
                  f" {statistics.median(res[f'{k} x{n} xacts']):5.1f}, WAL fsyncs"
                  f" {statistics.median(res[f'{k} x{n} syncs']):5.2f} (medians)")
        ratios = [b / a_ for a_, b in zip(res[f"a x{n}"], res[f"b x{n}"])]
        print(f"  B/A {n} daemon(s), run by run: {' '.join(f'{x:5.2f}' for x in ratios)}")
    print(f"PostgreSQL here: one session {one_session:6.0f} commits/s; pgbench, 3 clients {three:6.0f} tps")
    return 0


if __name__ == "__main__":
    sys.exit(main())

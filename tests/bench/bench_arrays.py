#!/usr/bin/env python
"""Benchmark: an array of 10,000 members (issue 33), SQLite and PostgreSQL.
Not collected by pytest.

    python tests/bench/bench_arrays.py              # 3 repeats
    python tests/bench/bench_arrays.py --repeat 5 --members 10000

Measured, each the median of --repeat runs, as cost per member:

* the queue: enqueue_many of N array members (each with its own
  {index, value, args}, one shared environment) as one batch with a handle,
  in one transaction, JobSpec checks included;
* the whole `sloth add --hold --range 1-N -- echo {}` through the real
  daemon: the client's expansion, checks and staging in frames under 1 MiB,
  the commit, the answer (the CLI's own start-up included once);
* the same with --shell (every member's line read by one `sh -n`).

The throwaway PostgreSQL cluster (tests/support/pg.py) is reached over its
Unix socket; files live in a fresh folder on the real disk (--dir).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run from a checkout

from sloth_daemon.backends.contract import Handle  # noqa: E402
from sloth_daemon.clock import SystemClock  # noqa: E402
from sloth_daemon.queue import open_queue  # noqa: E402
from tests.bench._common import log  # noqa: E402
from tests.support.harness import on_one_queue, temp_harness  # noqa: E402
from tests.support.pg import PgCluster  # noqa: E402


def queue_cost(target: str, n: int) -> float:
    """Seconds per member of one enqueue_many of ``n`` members."""
    env = dict(os.environ)
    specs = [{"command": ["echo", f"value-{i}"], "env": env, "cwd": "/tmp",
              "member": {"index": i, "value": f"value-{i}", "args": {}}} for i in range(1, n + 1)]
    q = open_queue(target, SystemClock())
    try:
        t0 = time.perf_counter()
        ids = q.enqueue_many(specs, batch=os.urandom(8).hex(), handle=Handle("bench"))
        took = time.perf_counter() - t0
        assert len(ids) == n
    finally:
        q.close()
    return took / n


def cli_cost(h, n: int, *, shell: bool) -> float:
    args = ["add", "--hold", "--range", f"1-{n}", *(["--shell", "--", "echo {} > /dev/null"] if shell else
                                                    ["--", "echo", "{}"])]
    t0 = time.perf_counter()
    p = h.cli(*args, timeout_s=600)
    took = time.perf_counter() - t0
    assert p.returncode == 0 and len(p.stdout.split()) == n, p.stderr
    return took / n  # the held jobs stay: each repeat adds to a fuller queue, as a day does


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--members", type=int, default=10_000)
    ap.add_argument("--dir", default=None, help="a folder on the disk to measure (default: the temp dir)")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="sloth-bench-arr-", dir=args.dir))
    os.chmod(work, 0o755)
    cluster = PgCluster(str(work))
    out: dict[str, list[float]] = {}
    try:
        for r in range(args.repeat):
            out.setdefault("queue sqlite", []).append(queue_cost(str(work / f"q{r}.db"), args.members))
            out.setdefault("queue postgres", []).append(
                queue_cost(cluster.create_database(f"arr{r}"), args.members))
        with temp_harness() as h:
            h.start()
            for _ in range(args.repeat):
                out.setdefault("sloth add sqlite", []).append(cli_cost(h, args.members, shell=False))
                out.setdefault("sloth add --shell sqlite", []).append(cli_cost(h, args.members, shell=True))
        url = cluster.create_database("arrcli")
        open_queue(url, SystemClock()).close()  # its schema made (a daemon only opens a migrated queue)
        with temp_harness() as h0:
            h = on_one_queue(lambda config, name: type(h0)(h0.home.parent / name, config=config), url, {"a": ""})[0]
            try:
                for _ in range(args.repeat):
                    out.setdefault("sloth add postgres", []).append(cli_cost(h, args.members, shell=False))
            finally:
                h.reap()
    finally:
        cluster.destroy()
    log(f"{args.members:,} members, median of {args.repeat}:")
    for name, vals in out.items():
        med = statistics.median(vals)
        log(f"  {name:<28} {med * 1e6:8.1f} us/member  ({med * args.members:.2f} s in all)")


if __name__ == "__main__":
    main()

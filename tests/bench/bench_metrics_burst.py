"""A burst of `sloth metrics` requests against a daemon on a long history:
K clients ask at once; what the last one waited and the daemon's CPU
seconds over the burst, interleaved with another tree's daemon on a copy
of the same queue (--against DIR: a checkout, run from its folder with
this venv's Python; say /work/main).

    python tests/bench/bench_metrics_burst.py [--jobs 20000] [--burst 60] [--rounds 3] [--against DIR]

The queue (N finished `true` jobs, made through the queue library, no
daemon) is built once per run in a temporary folder and copied for each
daemon, so both trees read the same history.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from sloth_daemon.backends import open_queue  # noqa: E402
from sloth_daemon.cli.client import Client  # noqa: E402
from tests.bench._common import cpu_s, log  # noqa: E402
from tests.support.harness import Harness  # noqa: E402


def build(db: Path, n: int) -> None:
    q = open_queue(db)
    for b in range(0, n, 1000):
        q.enqueue_many([{"command": ["true"], "cwd": "/", "env": {}}] * min(1000, n - b))
    while runs := q.claim_many("w", 500, lane="default"):
        for r in runs:
            q.complete(r.id, r.token, exit_code=0, runner={"pid": 1, "started_at": 0.0}, durable=False)
    q.close()


def burst(db: Path, tree: Path, k: int) -> tuple[float, float, int]:
    """(the last answer's wait, the daemon's CPU seconds, errors) of one burst of ``k``."""
    root = Path(tempfile.mkdtemp(prefix="slmb-"))
    h = Harness(root / "h", extra_env={"PYTHONPATH": str(tree)})
    try:
        for suffix in ("", "-wal", "-shm"):
            if Path(f"{db}{suffix}").exists():
                shutil.copy(f"{db}{suffix}", h.home / f"queue.db{suffix}")
        d = psutil.Process(h.start().pid)
        with Client(h.socket, timeout_s=60) as c:
            c.call("ping")
        waits: list[float] = []
        errors = 0

        def one() -> None:
            nonlocal errors
            t0 = time.monotonic()
            try:
                with Client(h.socket, timeout_s=30) as c:
                    c.call("metrics")
                waits.append(time.monotonic() - t0)
            except Exception:
                errors += 1

        cpu0 = cpu_s(d)
        threads = [threading.Thread(target=one) for _ in range(k)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return max(waits, default=0.0), cpu_s(d) - cpu0, errors
    finally:
        h.reap()
        shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=20000)
    ap.add_argument("--burst", type=int, default=60)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--against", type=Path)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="slmb-q-") as tmp:
        db = Path(tmp) / "queue.db"
        log(f"building a queue of {a.jobs} finished jobs")
        build(db, a.jobs)
        trees = {"this": REPO, **({"against": a.against.resolve()} if a.against else {})}
        got: dict[str, list[tuple[float, float, int]]] = {n: [] for n in trees}
        for r in range(a.rounds):
            for name, tree in trees.items():
                got[name].append(burst(db, tree, a.burst))
                log(f"round {r + 1} {name}: last {got[name][-1][0]:.2f} s, daemon CPU {got[name][-1][1]:.2f} s, "
                    f"errors {got[name][-1][2]}")
        for name, rows in got.items():
            last, cpu = [x[0] for x in rows], [x[1] for x in rows]
            print(f"{name}: a burst of {a.burst} on {a.jobs} jobs: the last answer {min(last):.2f}-{max(last):.2f} s "
                  f"(median {statistics.median(last):.2f}), daemon CPU {min(cpu):.2f}-{max(cpu):.2f} s, "
                  f"errors {sum(x[2] for x in rows)}  [{os.cpu_count()} CPUs]")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""A/B: 1,000 `true` jobs end to end on two checkouts of sloth, interleaved.

    python tests/bench/bench_ab.py --a /path/to/old/checkout --b . [--runs 5] [--slots 1]

Each checkout must have its own venv at .venv (with sloth installed from that
checkout); each run uses that checkout's tests/bench/bench_daemon.bench_jobs
under that venv's Python, so the daemon measured is the checkout's own. Runs
alternate A, B, A, B ... so drift on a shared machine hits both alike.
Prints every run and the medians, and B/A.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
from pathlib import Path

SNIPPET = ("import json, sys; sys.path.insert(0, {root!r}); "
           "from tests.bench.bench_daemon import bench_jobs; print(json.dumps(bench_jobs({n}, {slots})))")


def one(root: Path, n: int, slots: int) -> dict[str, float]:
    py = root / ".venv" / "bin" / "python"
    out = subprocess.run([str(py), "-c", SNIPPET.format(root=str(root), n=n, slots=slots)],
                         capture_output=True, text=True, check=True, cwd=root)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--a", type=Path, required=True)
    ap.add_argument("--b", type=Path, required=True)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--slots", type=int, default=1)
    ap.add_argument("--jobs", type=int, default=1000)
    args = ap.parse_args()
    res: dict[str, list[dict[str, float]]] = {"a": [], "b": []}
    for i in range(args.runs):
        for side in ("a", "b"):
            r = one(getattr(args, side).resolve(), args.jobs, args.slots)
            res[side].append(r)
            print(f"run {i + 1} {side.upper()}: {r['wall_s']:.3f} s, cpu {r['daemon_cpu_ms_per_job']:.2f} ms/job",
                  flush=True)
    ma, mb = (statistics.median(x["wall_s"] for x in res[s]) for s in ("a", "b"))
    ca, cb = (statistics.median(x["daemon_cpu_ms_per_job"] for x in res[s]) for s in ("a", "b"))
    print(f"\nA {args.a}: median {ma:.3f} s ({min(x['wall_s'] for x in res['a']):.3f}-"
          f"{max(x['wall_s'] for x in res['a']):.3f}), sloth CPU {ca:.2f} ms/job")
    print(f"B {args.b}: median {mb:.3f} s ({min(x['wall_s'] for x in res['b']):.3f}-"
          f"{max(x['wall_s'] for x in res['b']):.3f}), sloth CPU {cb:.2f} ms/job")
    print(f"B/A wall {mb / ma:.3f}x, CPU {cb / ca:.3f}x ({args.jobs} `true` jobs, {args.slots} slot(s))")


if __name__ == "__main__":
    main()

"""The daemon dormant (docs/idle.md, "Dormant"): what it holds and what the
first command after it pays.

    python tests/bench/bench_dormant.py [--runs N] [--idle-s S] [--jobs N]

Each run starts a real daemon in a temporary SLOTH_HOME (dormant_after_s
"4s", this tree byte-compiled as an install leaves it), runs N `true` jobs,
and reads, in the same run:
  rest      VmRSS of the whole daemon at rest (keeper gone, renewed)
  dormant   VmRSS and PSS of the same process once dormant, and its wake-ups
            (voluntary context switches) over S seconds
  first     wall time of `sloth add -- true` against the dormant process
            (it wakes the daemon), then of the same command against the
            woken daemon (`python -m sloth_daemon`, the same path both times)
Prints medians and ranges over the runs.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tests.bench._common import wakeups  # noqa: E402
from tests.bench.bench_daemon import _at_rest, compiled  # noqa: E402
from tests.support.harness import temp_harness  # noqa: E402

CONFIG = 'dormant_after_s = "4s"\n'


def dormant(pid: int) -> bool:
    try:
        return "dormant.py" in " ".join(psutil.Process(pid).cmdline())
    except psutil.Error:
        return False


def one_run(n: int, idle_s: float) -> dict[str, float]:
    with temp_harness(CONFIG) as h:
        d = h.start()
        ids: list[int] = []
        for i in range(0, n, 500):
            ids += h.add_many([{"command": ["true"]} for _ in range(min(500, n - i))])
        h.call("wait", ids=[ids[-1]])
        rest = _at_rest(h, d.pid)
        deadline = time.monotonic() + 60
        while not dormant(d.pid):
            if time.monotonic() > deadline:
                raise SystemExit("the daemon did not go dormant within 60 s:\n" + h.log_text()[-2000:])
            time.sleep(0.1)
        time.sleep(1.0)
        p = psutil.Process(d.pid)
        w0 = wakeups(p)
        time.sleep(idle_s)
        woke = (wakeups(p) - w0) / idle_s
        mem = p.memory_full_info()
        t0 = time.perf_counter()
        h.cli("add", "--", "true", check=True)
        first = time.perf_counter() - t0
        t0 = time.perf_counter()
        h.cli("add", "--", "true", check=True)
        again = time.perf_counter() - t0
        assert not dormant(d.pid) and p.pid == d.pid
        return {"rest_mb": rest, "dormant_mb": mem.rss / 2**20, "dormant_pss_mb": mem.pss / 2**20,
                "wakeups_per_s": woke, "first_s": first, "again_s": again}


def _range(xs: list[float], unit: str, fmt: str = ".2f") -> str:
    return f"{statistics.median(xs):{fmt}} {unit} ({min(xs):{fmt}}-{max(xs):{fmt}})"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--idle-s", type=float, default=30.0)
    ap.add_argument("--jobs", type=int, default=1000)
    a = ap.parse_args()
    compiled(REPO)
    rows = [one_run(a.jobs, a.idle_s) for _ in range(a.runs)]
    col = {k: [r[k] for r in rows] for k in rows[0]}
    print(f"\n## dormant ({a.runs} runs; medians, ranges; load {os.getloadavg()[0]:.1f})\n")
    print("| measure | value | target |")
    print("|---|---|---|")
    print(f"| the daemon at rest after {a.jobs:,} `true` jobs (keeper gone, renewed) | {_range(col['rest_mb'], 'MB')} | |")
    print(f"| the same process dormant: VmRSS | {_range(col['dormant_mb'], 'MB')} | <= 20 MB |")
    print(f"| ... PSS (its share of shared pages) | {_range(col['dormant_pss_mb'], 'MB')} | |")
    print(f"| ... wake-ups over {a.idle_s:.0f} s | {_range(col['wakeups_per_s'], '/s', '.3f')} | <= 0.2 /s |")
    print(f"| `sloth add -- true` waking it | {_range([x * 1000 for x in col['first_s']], 'ms', '.0f')} | |")
    print(f"| ... the same against the woken daemon | {_range([x * 1000 for x in col['again_s']], 'ms', '.0f')} | |")
    ratio = [f / g for f, g in zip(col["first_s"], col["again_s"], strict=True)]
    print(f"| ratio, same run | {_range(ratio, 'x')} | |")


if __name__ == "__main__":
    main()

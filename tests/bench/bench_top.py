#!/usr/bin/env python3
"""What `sloth top` costs the daemon: the daemon's CPU per second of wall
time while about 1,000 short jobs a minute flow, with 0, 1 and 5 views open.

    .venv/bin/python tests/bench/bench_top.py [--seconds 20] [--rate 1000] [--views 0,1,5] [--rounds 1]

One real daemon in a temporary home (4 slots); a feeder queues `true` jobs
every half second at ``--rate`` a minute; each view is the real app
(`TopApp`, what `sloth top` runs) in a process of its own, headless (it
draws to no terminal, but reads, listens and re-reads exactly as on one).
After a warm-up of 5 s with the views open, the daemon's CPU time (user +
system, from /proc) is measured over ``--seconds``; the jobs done in the
window say the flow held. With ``--rounds`` > 1 the view counts are
repeated in turn, so drift on a shared machine hits each alike.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.bench._common import log  # noqa: E402
from tests.support.harness import TEST_CONFIG, temp_harness  # noqa: E402

VIEW = "from sloth_daemon.cli.top.app import TopApp; TopApp().run(headless=True, size=(120, 36))"
WARM_S = 5.0


def feeder(h, rate_per_min: float, stop: threading.Event) -> None:
    every = 0.5
    per = rate_per_min / 60 * every
    owed = 0.0
    while not stop.wait(every):
        owed += per
        n = int(owed)
        if n:
            owed -= n
            h.add_many([{"command": ["true"], "max_attempts": 1} for _ in range(n)])


def done(h) -> int:
    return h.call("status")["counts"]["done"]


def measure(h, daemon: psutil.Process, views: int, seconds: float) -> dict[str, float]:
    procs = [subprocess.Popen([sys.executable, "-c", VIEW], env=h.env, cwd=str(h.home), stdin=subprocess.DEVNULL,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for _ in range(views)]
    try:
        time.sleep(WARM_S)
        for p in procs:
            assert p.poll() is None, "a view exited"
        c0, d0, t0 = sum(daemon.cpu_times()[:2]), done(h), time.monotonic()
        time.sleep(seconds)
        c1, d1, t1 = sum(daemon.cpu_times()[:2]), done(h), time.monotonic()
        view_cpu = sum(sum(psutil.Process(p.pid).cpu_times()[:2]) for p in procs)
    finally:
        for p in procs:
            p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
    wall = t1 - t0
    return {"views": views, "daemon_cpu_ms_per_s": (c1 - c0) / wall * 1000, "jobs_per_min": (d1 - d0) / wall * 60,
            "view_cpu_s_total": view_cpu}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--rate", type=float, default=1000.0, help="jobs a minute")
    ap.add_argument("--views", default="0,1,5")
    ap.add_argument("--rounds", type=int, default=1)
    args = ap.parse_args()
    counts = [int(v) for v in args.views.split(",")]
    config = TEST_CONFIG + '\n[lanes.default]\nconcurrency = 4\n'
    results: dict[int, list[dict[str, float]]] = {n: [] for n in counts}
    with temp_harness(config, prefix="slbt-") as h:
        h.start()
        assert h.daemon is not None
        daemon = psutil.Process(h.daemon.pid)
        stop = threading.Event()
        feed = threading.Thread(target=feeder, args=(h, args.rate, stop), daemon=True)
        feed.start()
        try:
            time.sleep(WARM_S)
            for r in range(args.rounds):
                for n in counts:
                    res = measure(h, daemon, n, args.seconds)
                    results[n].append(res)
                    log(f"round {r + 1}, {n} view(s): daemon {res['daemon_cpu_ms_per_s']:.1f} ms CPU/s, "
                        f"{res['jobs_per_min']:.0f} jobs/min done, views used {res['view_cpu_s_total']:.1f} s CPU")
        finally:
            stop.set()
            feed.join(5)
    load = os.getloadavg()
    print(f"daemon CPU per second of wall time, {args.rate:.0f} `true` jobs/min queued, {args.seconds:.0f} s windows, "
          f"{args.rounds} round(s); load average {load[0]:.1f} on {os.cpu_count()} CPUs")
    base = statistics.median(x["daemon_cpu_ms_per_s"] for x in results[counts[0]])
    for n in counts:
        cpu = statistics.median(x["daemon_cpu_ms_per_s"] for x in results[n])
        jobs = statistics.median(x["jobs_per_min"] for x in results[n])
        print(f"  {n} view(s): {cpu:6.1f} ms/s ({cpu / 10:.1f}% of a core), {jobs:5.0f} jobs/min done, "
              f"{cpu - base:+.1f} ms/s against {counts[0]} view(s)")


if __name__ == "__main__":
    main()

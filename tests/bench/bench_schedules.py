"""What 10,000 schedules cost an idle daemon (issue 23): its wake-ups
(voluntary context switches of all its threads, /proc/PID/task/*/status)
over a window, and a job's latency from `add` to `done` (the claim, the
spawn, the outcome), with no schedules and with 10,000, in the same run.

    python tests/bench/bench_schedules.py [--window 60] [--schedules 10000] [--jobs 30]

The schedules' slots lie days ahead (every 30d, @yearly, "0 3 1 * *"), as
most schedules' do: between slots a schedule should cost nothing. Prints
one line per case to stdout.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.bench._common import log, pct  # noqa: E402
from tests.support.harness import TEST_CONFIG, temp_harness  # noqa: E402

CONFIG = TEST_CONFIG.replace('clock_check_s = "1s"', 'clock_check_s = "5s"')


def switches(pid: int) -> int:
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            for line in (task / "status").read_text().splitlines():
                if line.startswith("voluntary_ctxt_switches"):
                    total += int(line.split()[1])
        except OSError:
            pass
    return total


def latency(h, n: int) -> list[float]:
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        job = h.call("add", jobs=[{"command": ["true"], "cwd": "/tmp"}])["ids"][0]
        for _ev in h.stream_wait(job):
            pass
        out.append((time.perf_counter() - t0) * 1000)
    return out


def case(schedules: int, window_s: float, jobs: int) -> str:
    with temp_harness(CONFIG) as h:
        h.start()
        from sloth_daemon.cli.client import Client

        h.stream_wait = lambda job: Client(h.socket, timeout_s=30).stream("wait", ids=[job])
        kinds = [{"every_s": 30 * 86400}, {"cron": "@yearly"}, {"cron": "0 3 1 * *"}]
        t0 = time.perf_counter()
        with Client(h.socket, timeout_s=60) as c:
            for i in range(schedules):
                c.call("schedule_add", name=f"s{i}", recipe={**kinds[i % 3], "job": {"command": ["true"]}})
        made_s = time.perf_counter() - t0
        latency(h, 3)  # warm
        time.sleep(2)
        pid = h.daemon.pid
        before = switches(pid)
        time.sleep(window_s)
        woke = switches(pid) - before
        lat = latency(h, jobs)
        return (f"schedules={schedules:6d}  wake-ups/{window_s:.0f}s={woke:4d}  add->done ms: median "
                f"{pct(lat, 0.5):6.1f} p90 {pct(lat, 0.9):6.1f}  (adding them took {made_s:.1f}s)")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--window", type=float, default=60.0)
    ap.add_argument("--schedules", type=int, default=10_000)
    ap.add_argument("--jobs", type=int, default=30)
    a = ap.parse_args()
    for n in (0, a.schedules):
        log(f"{n} schedules ...")
        print(case(n, a.window, a.jobs), flush=True)


if __name__ == "__main__":
    main()

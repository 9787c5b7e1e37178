"""A machine off for a year, then switched on (issue 28.4): N schedules of
"* * * * *" (each 525,600 missed slots) catch up, and the daemon answers
meanwhile. Runs a real daemon in a temporary SLOTH_HOME on the repository's
clock shim (tests/support/fakeclock.c), stops it, moves the clock a year
on, and measures:

  start      `sloth daemon start` (it fails if the socket does not answer in 10 s)
  status     the slowest and the median `status` round trip while it catches up
  caught up  from the start until every schedule has queued its catch-up
  plan       one schedule's plan (policy.plan) in this process, the same year

    python tests/bench/bench_catchup.py [--schedules 1000] [--days 365]

On main (52dd3eb) one such plan took 0.84 s (slots counted one cron step
each, capped at 100,000), 64 per turn of the event loop: `daemon start`
failed with 64 schedules after 30 days.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.bench._common import log  # noqa: E402
from tests.support.fakeclock import FakeClock, build  # noqa: E402
from tests.support.harness import TEST_CONFIG, temp_harness  # noqa: E402


def plan_ms(days: int) -> float:
    from sloth_daemon.daemon.schedules import policy
    from sloth_daemon.daemon.schedules.recipe import Recipe

    r = Recipe(job={"command": ["true"]}, cron="* * * * *", tz="UTC")
    since = 1_800_000_000
    t0 = time.perf_counter()
    p = policy.plan(r, since, since + days * 86400)
    assert p is not None and p.missed == days * 1440, p.missed
    return (time.perf_counter() - t0) * 1000


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--schedules", type=int, default=1000)
    ap.add_argument("--days", type=int, default=365)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="slc-") as tmp, temp_harness(TEST_CONFIG) as h:
        clock = FakeClock(build(Path(tmp)), Path(tmp) / "offset")
        h.env.update(clock.env())
        h.daemon_env.update(clock.env())
        h.start()
        from sloth_daemon.cli.client import Client

        log(f"adding {a.schedules} schedules ...")
        with Client(h.socket, timeout_s=60) as c:
            for i in range(a.schedules):
                c.call("schedule_add", name=f"m{i:04d}",
                       recipe={"cron": "* * * * *", "job": {"command": ["true"], "cwd": str(h.home)}})
        h.call("pause")  # the catch-up jobs wait: this measures the scheduler, not 1,000 `true`s
        h.stop()
        clock.jump(a.days * 86400)
        t0 = time.perf_counter()
        p = h.cli("daemon", "start")
        start_s = time.perf_counter() - t0
        if p.returncode != 0:
            print(f"daemon start FAILED after {start_s:.1f}s: {p.stderr.strip()}")
            print((h.home / "logs" / "daemon.log").read_text()[-3000:])
            return
        waits: list[float] = []
        done = threading.Event()
        caught_s = float("nan")
        while not done.is_set():
            t1 = time.perf_counter()
            with Client(h.socket, timeout_s=120) as c:
                c.call("status")
                waits.append((time.perf_counter() - t1) * 1000)
                fired = sum(1 for s in c.call("schedule_ls")["schedules"] if s["last_run"])
            if fired == a.schedules:
                caught_s = time.perf_counter() - t0
                done.set()
            elif time.perf_counter() - t0 > 600:
                break
            time.sleep(0.05)
        subprocess.run([sys.executable, "-m", "sloth_daemon", "daemon", "stop"], env=h.env, capture_output=True)
    print(f"{a.schedules} schedules \"* * * * *\", {a.days} days away: daemon start {start_s:.2f}s; "
          f"status during catch-up: median {statistics.median(waits):.1f} ms, max {max(waits):.1f} ms "
          f"({len(waits)} calls); all caught up after {caught_s:.1f}s; one plan in process {plan_ms(a.days):.1f} ms")


if __name__ == "__main__":
    main()

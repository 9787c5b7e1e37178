"""What reading progress costs the keeper, for a job that floods its output.

    python -m tests.bench.bench_progress [--lines 2000000] [--rounds 3]

Runs a job that prints ``--lines`` short lines as fast as it can (a
progress line every 100th, or none) through the keeper's own runner
(keeper/runner.py: its pipe, its capped log), with the progress meter
reading every chunk (keeper/progress.py) and without it, and prints for
each: the job's lines per second, and the keeper side's CPU per million
lines (this process's user + system time while the job ran). The meter
must cost the job nothing and the keeper little beside writing the log.
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

from sloth_daemon.keeper.joblog import LogWriter
from sloth_daemon.keeper.progress import ProgressMeter
from sloth_daemon.keeper.runner import JobProcess

JOB = ("import sys\n"
       "w = sys.stdout.write\n"
       "n, marks = int(sys.argv[1]), sys.argv[2] == 'marks'\n"
       "for i in range(n):\n"
       "    w(f'SLOTH_PROGRESS {i / n:.4f}\\n' if marks and i % 100 == 0 else f'row {i} of the data\\n')\n")


def cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


async def one(lines: int, meter: bool, marks: bool, folder: Path) -> tuple[float, float]:
    m = ProgressMeter() if meter else None
    log = LogWriter(folder / f"{time.monotonic_ns()}.log", 1 << 20)
    done = asyncio.Event()
    jp = JobProcess([sys.executable, "-c", JOB, str(lines), "marks" if marks else "plain"], cwd=None,
                    env={"PATH": "/usr/bin:/bin"}, log=log, on_output=m.feed if m else (lambda d: None),
                    on_exit=lambda _jp: done.set())
    c0, t0 = cpu(), time.perf_counter()
    jp.start(asyncio.get_running_loop())
    await done.wait()
    took, used = time.perf_counter() - t0, cpu() - c0
    log.close()
    if m is not None and marks:
        assert m.latest is not None and m.latest["fraction"] > 0.99, m.latest
    return lines / took, used / lines * 1e6


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lines", type=int, default=2_000_000)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for label, meter, marks in (("no meter, plain output", False, False), ("meter, plain output", True, False),
                                    ("no meter, a progress line every 100", False, True),
                                    ("meter, a progress line every 100", True, True)):
            runs = [await one(a.lines, meter, marks, Path(tmp)) for _ in range(a.rounds)]
            rate = statistics.median(r[0] for r in runs)
            per = statistics.median(r[1] for r in runs)
            print(f"{label:36s} {rate / 1e3:8.0f}k lines/s   keeper {per * 1e3:6.1f} ms CPU per million lines")


if __name__ == "__main__":
    asyncio.run(main())

"""Restart after kill -9 with N jobs left running: how long until the socket answers?

    python tests/bench/bench_restart.py [N ...]     (default: 1 8 32)

Recovery ends every leftover job process before re-issuing its job. It signals
them all at once and counts a zombie as gone (an init that is not ours may be
slow to reap orphans), so it costs one grace period at most, not one each.
Measured before that change: 15.4 s for 8 leftovers; after: ~0.2 s.
"""

import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.support.harness import temp_harness  # noqa: E402


def once(n: int) -> tuple[float, float]:
    with temp_harness(f'lease_s = "3s"\nkill_grace_s = "1s"\n[lanes]\ndefault = {n}\n', prefix="slr-") as h:
        t0 = time.monotonic()
        h.start()
        cold = time.monotonic() - t0
        for _ in range(n):
            h.add("sleep", "60")
        h.wait_for(lambda: len(running := h.call("status")["running"]) == n
                   and all(r["pid"] for r in running))
        time.sleep(0.3)
        h.kill9()
        t0 = time.monotonic()
        h.start()
        return cold, time.monotonic() - t0


def main() -> None:
    ns = [int(a) for a in sys.argv[1:]] or [1, 8, 32]
    print("| leftover jobs | cold start (median of 3) | restart after kill -9 (median of 3) |")
    print("|---|---|---|")
    for n in ns:
        runs = [once(n) for _ in range(3)]
        print(f"| {n} | {statistics.median(r[0] for r in runs):.2f} s "
              f"| {statistics.median(r[1] for r in runs):.2f} s |")


if __name__ == "__main__":
    main()

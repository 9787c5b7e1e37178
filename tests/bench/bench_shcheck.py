"""What the sh -n check of `sloth add` costs (docs/look.md): one line (as
`sloth add -s` checks it), 1,000 shell lines (one sh), and 1,000 with one
bad line in the middle (the shared script fails; the line is read again)."""

from __future__ import annotations

import statistics
import time
from typing import Callable

from sloth_daemon.cli.shell_check import first_error

ONE = ["echo a | tr a b"]
LINES = [f'echo "line {i}" | tr a-z A-Z' for i in range(1000)]
BAD = LINES[:500] + ['echo "x'] + LINES[500:]


def median_ms(fn: Callable[[], object], n: int) -> float:
    times = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1000)
    return statistics.median(times)


def main() -> None:
    assert first_error(LINES) is None and first_error(BAD) is not None
    one, many, bad = (median_ms(lambda: first_error(ONE), 50), median_ms(lambda: first_error(LINES), 10),
                      median_ms(lambda: first_error(BAD), 10))
    print(f"one line {one:.2f} ms; 1000 lines {many:.1f} ms; 1000 lines, one bad {bad:.1f} ms")


if __name__ == "__main__":
    main()

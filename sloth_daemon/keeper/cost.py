"""What one run cost: CPU time (user + system), peak memory, wall time and
how it ended, as the keeper records it when the run's root is reaped
(docs/progress.md).

Where the run has a cgroup of its own (a scope's, under ``--mem`` or
``--cpus``: keeper/resource_limits.py), its ``cpu.stat`` and
``memory.peak`` count every process it ever held ("covers": "cgroup").
Else the root's ``wait4`` rusage ("covers": "rusage"): the root and every
descendant that was waited for inside the job; a process that left the
tree (reparented to the keeper as subreaper, or elsewhere) is not counted,
and the peak is the largest single process's, not the tree's sum.
"""

from __future__ import annotations

import sys
from typing import Any

RUSAGE_KB = 1 if sys.platform == "darwin" else 1024  # ru_maxrss: bytes on macOS, KiB on Linux


def run_cost(rusage: Any, cgroup: dict[str, Any] | None, wall_s: float, ended: str) -> dict[str, Any]:
    """The ``cost`` of an attempt (the field name every view reads)."""
    if cgroup is not None:
        peak = cgroup.get("peak_rss_bytes")
        if peak is None and rusage is not None:
            peak = int(rusage.ru_maxrss) * RUSAGE_KB
        return {"cpu_s": round(float(cgroup["cpu_s"]), 3), "peak_rss_bytes": int(peak or 0),
                "wall_s": round(wall_s, 3), "ended": ended, "covers": "cgroup"}
    cpu = float(rusage.ru_utime + rusage.ru_stime) if rusage is not None else 0.0
    peak = int(rusage.ru_maxrss) * RUSAGE_KB if rusage is not None else 0
    return {"cpu_s": round(cpu, 3), "peak_rss_bytes": peak, "wall_s": round(wall_s, 3), "ended": ended,
            "covers": "rusage"}

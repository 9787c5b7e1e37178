"""What a run cost as the keeper tells it (keeper/cost.py): from its cgroup
where it has one (the files a cgroup v2 folder holds, laid out as the
kernel writes them: this machine has no delegated cgroup v2), else from the
rusage of its reaped root, read for real from a child that burns CPU and
memory."""

from __future__ import annotations

import os
import subprocess
import sys

from sloth_daemon.keeper.cost import run_cost
from sloth_daemon.keeper.resource_limits import cgroup_usage


def test_a_cgroups_cpu_and_peak(tmp_path):
    (tmp_path / "cpu.stat").write_text("usage_usec 1500000\nuser_usec 1000000\nsystem_usec 500000\n")
    (tmp_path / "memory.peak").write_text("209715200\n")
    used = cgroup_usage(str(tmp_path))
    assert used == {"cpu_s": 1.5, "peak_rss_bytes": 200 << 20}
    cost = run_cost(None, used, 2.0, "exit 0")
    assert cost == {"cpu_s": 1.5, "peak_rss_bytes": 200 << 20, "wall_s": 2.0, "ended": "exit 0", "covers": "cgroup"}


def test_a_cgroup_gone_or_without_memory_peak(tmp_path):
    assert cgroup_usage(str(tmp_path / "gone")) is None
    (tmp_path / "cpu.stat").write_text("usage_usec 250000\n")
    assert cgroup_usage(str(tmp_path)) == {"cpu_s": 0.25, "peak_rss_bytes": None}  # before Linux 5.19


def test_the_rusage_of_a_reaped_child():
    # The child says its own peak as the kernel keeps it; a forked child's peak counts the parent's pages it
    # held before exec (a pytest worker is ~300 MB; the keeper, whose children these are, ~20 MB): compare to that.
    p = subprocess.Popen([sys.executable, "-c", "import resource, time\nb = bytearray(64 << 20)"
                          "\nb[::4096] = b'x' * len(b[::4096])"
                          "\nend = time.process_time() + 0.3\nwhile time.process_time() < end: pass"
                          "\nprint(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)"], stdout=subprocess.PIPE)
    said = int(p.stdout.read())  # type: ignore[union-attr]
    _, status, ru = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    p.stdout.close()  # type: ignore[union-attr]
    cost = run_cost(ru, None, 0.5, "exit 0")
    assert cost["covers"] == "rusage"
    assert 0.25 <= cost["cpu_s"] <= 1.0, cost
    assert cost["peak_rss_bytes"] >= 60 << 20 and abs(cost["peak_rss_bytes"] - said) <= said // 10, (cost, said)

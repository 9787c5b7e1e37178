"""Daemon benchmark: idle cost, per-job overhead, resume-to-reclaim, memory.

    python tests/bench/bench_daemon.py [--quick] [--runs N] [--rest-only] [--baseline DIR]

Starts the real daemon in temporary SLOTH_HOMEs. Prints medians of several
runs (the machine is shared and noisy; ratios matter more than absolutes):
  idle      CPU seconds and wake-ups per second of an idle daemon (voluntary
            context switches from /proc/PID/status), over 60 s (10 s --quick)
  jobs      1,000 `true` jobs, enqueued in one batch while paused, from resume
            to all done; against bare subprocess spawning them one after another
  resume    a simulated sleep (LD_PRELOAD clock shim): time from the jump to a
            delayed job done and a dead holder's expired lease re-run
  rss       daemon resident memory, idle and after the 1,000 jobs, and at rest
            after them (the keeper let go and, where it renews itself, the
            fresh process ready: docs/idle.md): VmRSS from /proc

--rest-only: the idle and at-rest rows alone (issue 34's targets: RSS at rest
<= 20 MB, wake-ups at rest <= 0.2/s). --baseline DIR: a source tree (e.g.
`git -C /work/main archive HEAD | tar -x -C DIR`) whose daemon is measured
the same way, interleaved with this tree's, each row printed beside it.
Both trees are byte-compiled first, as an install leaves them (and as a
daemon's first renewal leaves its -OO files); --from-source removes their
compiled files instead (with PYTHONDONTWRITEBYTECODE=1, as on the machine
these were measured on, every start then compiles what it loads).
"""

from __future__ import annotations

import argparse
import compileall
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from sloth_daemon.queue import Queue  # noqa: E402
from tests.support import fakeclock as fc  # noqa: E402
from tests.bench._common import bench_bare, cpu_s, fsync_rate, wakeups  # noqa: E402
from tests.support.harness import Harness, temp_harness  # noqa: E402


def _tree(h: Harness, tree: Path | None) -> None:
    """Run ``tree``'s daemon (a baseline checkout), else this script's own
    tree's (not the installed one: a copy can be measured while the checkout changes)."""
    for env in (h.env, h.daemon_env):
        env["PYTHONPATH"] = str(tree or REPO)


def compiled(tree: Path) -> None:
    """``tree``'s modules byte-compiled, as an install leaves them (pip writes
    each module's .pyc) and as a daemon's first renewal leaves them (.opt-2.pyc,
    renewal.optimized): a run under PYTHONDONTWRITEBYTECODE=1 would otherwise
    compile every module from source at every start, its garbage in the figure."""
    compileall.compile_dir(tree / "sloth_daemon", quiet=1, optimize=[0, 2])


def bench_idle(seconds: float, config: str = "", tree: Path | None = None) -> dict[str, float]:
    """The daemon and its keeper, nothing to do: CPU, wake-ups, memory (both
    processes together: what sloth costs an idle machine)."""
    with temp_harness(config) as h:
        _tree(h, tree)
        d = h.start()
        time.sleep(2)  # settle after start-up
        _at_rest(h, d.pid)  # a keeper that holds nothing is let go (docs/idle.md): idle is without it
        keeper = h.call("status").get("keeper", {}).get("pid")
        ps = [psutil.Process(d.pid), *([psutil.Process(keeper)] if keeper else [])]
        c0, w0 = sum(cpu_s(p) for p in ps), sum(wakeups(p) for p in ps)
        time.sleep(seconds)
        c1, w1 = sum(cpu_s(p) for p in ps), sum(wakeups(p) for p in ps)
        mem = [p.memory_full_info() for p in ps]
        return {"cpu_pct": 100 * (c1 - c0) / seconds, "wakeups_per_s": (w1 - w0) / seconds,
                "rss_mb": sum(m.rss for m in mem) / 2**20, "daemon_rss_mb": mem[0].rss / 2**20,
                "keeper_rss_mb": sum(m.rss for m in mem[1:]) / 2**20, "pss_mb": sum(m.pss for m in mem) / 2**20}


def bench_jobs(n: int, concurrency: int = 1, tree: Path | None = None) -> dict[str, float]:
    with temp_harness(f"[lanes]\ndefault = {concurrency}\n") as h:
        _tree(h, tree)
        d = h.start()
        h.call("pause")
        ids: list[int] = []
        for i in range(0, n, 500):
            ids += h.add_many([{"command": ["true"]} for _ in range(min(500, n - i))])
        procs = [psutil.Process(d.pid)]
        keeper = h.call("status").get("keeper", {}).get("pid")  # none before the keeper existed
        if keeper:
            procs.append(psutil.Process(keeper))
        c0 = [p.cpu_times().user + p.cpu_times().system for p in procs]
        t0 = time.perf_counter()
        h.call("resume")
        # Jobs start in id order; wait (pushed, not polled) for the last one,
        # then for any stragglers of the other slot.
        h.call("wait", ids=[ids[-1]])
        while h.call("status")["counts"]["done"] < n:
            time.sleep(0.005)
        wall = time.perf_counter() - t0
        cpu = [p.cpu_times().user + p.cpu_times().system - c for p, c in zip(procs, c0)]
        rss = sum(p.memory_info().rss for p in procs) / 2**20
        rest = _at_rest(h, d.pid)
        # daemon_cpu_ms_per_job: daemon + keeper (the name bench_ab reads from any checkout)
        return {"wall_s": wall, "rss_mb": rss, "rest_mb": rest, "daemon_cpu_ms_per_job": sum(cpu) / n * 1000,
                "daemon_alone_ms_per_job": cpu[0] / n * 1000, "keeper_ms_per_job": sum(cpu[1:]) / n * 1000}


def _at_rest(h: Harness, pid: int, timeout_s: float = 30) -> float:
    """The daemon's VmRSS once its keeper is let go (nothing held for
    keeper_linger_s) and, if it renews itself at rest, once the fresh
    process is ready; NaN where this daemon keeps its keeper."""
    renewals = _log(h).count("renewing the process")
    deadline = time.monotonic() + timeout_s
    while h.call("status").get("keeper", {}).get("pid") is not None:
        if time.monotonic() > deadline:
            return float("nan")
        time.sleep(0.2)
    time.sleep(0.5)  # the rest's give-back (or the renewal) runs once the old keeper's lock is free
    if _log(h).count("renewing the process") > renewals:
        ready = _log(h).count(" ready: pid ")
        while _log(h).count(" ready: pid ") < ready + 1 and time.monotonic() < deadline:
            time.sleep(0.1)
        h.call("ping")
        time.sleep(0.5)
    return psutil.Process(pid).memory_info().rss / 2**20


def _log(h: Harness) -> str:
    return h.daemon_log.read_text(errors="replace")


def bench_resume(clock_check: str) -> dict[str, float]:
    home = Path(tempfile.mkdtemp(prefix="slb-"))
    so = fc.build(home / "so")
    clock = fc.FakeClock(so, home / "offset")
    cfg = f'clock_check_s = "{clock_check}"\n' if clock_check else ""
    h = Harness(home / "h", config=cfg, extra_env=clock.env())
    try:
        h.start()
        st = h.call("status")
        now = st["started_at"] + st["uptime_s"]
        delayed = h.call("add", jobs=[{"command": ["true"], "not_before": now + 1800, "lane": "later"}],
                         common={"env": dict(h.env)})["ids"][0]
        q = Queue(h.home / "queue.db")
        foreign = q.enqueue(["true"], lane="foreign")
        q.claim("dead-library-worker", lease_s=600, lanes=["foreign"])
        q.close()
        time.sleep(1.0)
        clock.jump(3600)
        t0 = time.perf_counter()
        done = {}
        while len(done) < 2:
            for jid in (delayed, foreign):
                if jid not in done and h.job(jid)["state"] == "done":
                    done[jid] = time.perf_counter() - t0
            time.sleep(0.01)
        return {"delayed_s": done[delayed], "reclaimed_s": done[foreign]}
    finally:
        h.reap()
        shutil.rmtree(home, ignore_errors=True)


def med(xs: list[float]) -> float:
    return statistics.median(xs)


def _range(xs: list[float], unit: str) -> str:
    return f"{med(xs):.2f} {unit} (range {min(xs):.2f}-{max(xs):.2f})" if xs else "-"


def from_source(tree: Path) -> None:
    """``tree``'s compiled files removed: under PYTHONDONTWRITEBYTECODE=1 each
    start then compiles every module it loads (a checkout nothing compiled)."""
    for cache in (tree / "sloth_daemon").rglob("__pycache__"):
        shutil.rmtree(cache)


def rest_rows(runs: int, idle_s: float, n: int, baseline: Path | None, *, source: bool = False) -> None:
    """Issue 34's targets at rest, this tree beside the baseline's, measured interleaved."""
    trees: list[tuple[str, Path | None]] = [("this tree", None)] + ([("baseline", baseline)] if baseline else [])
    for _, tree in trees:
        (from_source if source else compiled)(tree or REPO)
    rest: dict[str, list[float]] = {name: [] for name, _ in trees}
    wake: dict[str, list[float]] = {name: [] for name, _ in trees}
    for _ in range(runs):
        for name, tree in trees:
            rest[name].append(bench_jobs(n, 1, tree)["rest_mb"])
            wake[name].append(bench_idle(idle_s, tree=tree)["wakeups_per_s"])
    print(f"\n## at rest ({runs} runs interleaved, medians and ranges; load {os.getloadavg()[0]:.1f})\n")
    print("| measure | " + " | ".join(name for name, _ in trees) + " | target |")
    print("|---|" + "---|" * len(trees) + "---|")
    print(f"| daemon RSS at rest after {n:,} `true` jobs (keeper gone) | "
          + " | ".join(_range(rest[name], "MB") for name, _ in trees) + " | <= 20 MB |")
    print(f"| wake-ups at rest, daemon + keeper, over {idle_s:.0f} s | "
          + " | ".join(_range(wake[name], "/s") for name, _ in trees) + " | <= 0.2 /s |")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--rest-only", action="store_true", help="only the at-rest rows (RSS, wake-ups)")
    ap.add_argument("--baseline", type=Path, help="a source tree measured beside this one (at-rest rows)")
    ap.add_argument("--from-source", action="store_true",
                    help="at-rest rows with no compiled files (each start compiles: PYTHONDONTWRITEBYTECODE=1)")
    a = ap.parse_args()
    idle_s = 10 if a.quick else 60
    n = 1000
    if a.rest_only or a.baseline:
        rest_rows(a.runs, idle_s, n, a.baseline, source=a.from_source)
        if a.rest_only:
            return
    idle = [bench_idle(idle_s)]  # one window: a minute idle is long enough to read
    jobs1 = [bench_jobs(n, 1) for _ in range(a.runs)]
    jobs2 = [bench_jobs(n, 2) for _ in range(a.runs)]
    bare = [bench_bare(n) for _ in range(a.runs)]
    resume = [bench_resume("5s") for _ in range(a.runs)]

    b = med(bare)
    j1 = med([r["wall_s"] for r in jobs1])
    j2 = med([r["wall_s"] for r in jobs2])
    print(f"\n## sloth daemon benchmark ({a.runs} runs, medians)\n")
    with tempfile.TemporaryDirectory() as d:
        print(f"disk: {fsync_rate(Path(d)):,.0f} single commits/s (512 B write + fdatasync in the temp dir)\n")
    print("| measure | value | target |")
    print("|---|---|---|")
    print(f"| idle CPU over {idle_s:.0f}s (schedstat) | {med([r['cpu_pct'] for r in idle]):.3f} % | ~0 |")
    print(f"| idle wake-ups (at rest) | {med([r['wakeups_per_s'] for r in idle]):.2f} /s | <= 0.2 /s |")
    print(f"| idle RSS, daemon + keeper | {med([r['rss_mb'] for r in idle]):.1f} MB "
          f"({med([r['daemon_rss_mb'] for r in idle]):.1f} + {med([r['keeper_rss_mb'] for r in idle]):.1f}); "
          f"PSS {med([r['pss_mb'] for r in idle]):.1f} MB | <= 50 MB |")
    print(f"| 1,000 `true` jobs, 1 slot | {j1:.2f} s ({j1 / n * 1000:.2f} ms/job) | <= 2x bare |")
    print(f"| 1,000 `true` jobs, 2 slots | {j2:.2f} s | |")
    print(f"| bare subprocess.run loop | {b:.2f} s ({b / n * 1000:.2f} ms/job) | |")
    print(f"| ratio sloth(1 slot)/bare | {j1 / b:.2f}x | <= 2x |")
    print(f"| daemon + keeper CPU per job (1 slot) | {med([r['daemon_cpu_ms_per_job'] for r in jobs1]):.2f} ms"
          f" (daemon {med([r['daemon_alone_ms_per_job'] for r in jobs1]):.2f},"
          f" keeper {med([r['keeper_ms_per_job'] for r in jobs1]):.2f}) | daemon <= 1 ms |")
    print(f"| RSS after 1,000 jobs, daemon + keeper | {med([r['rss_mb'] for r in jobs1]):.1f} MB | |")
    print(f"| daemon RSS at rest after 1,000 jobs (keeper gone) | {med([r['rest_mb'] for r in jobs1]):.1f} MB "
          f"(range {min(r['rest_mb'] for r in jobs1):.1f}-{max(r['rest_mb'] for r in jobs1):.1f}) | <= 20 MB |")
    print(f"| resume -> delayed job done (clock check 5s) | {med([r['delayed_s'] for r in resume]):.2f} s "
          f"(max {max(r['delayed_s'] for r in resume):.2f}) | <= 5 s |")
    print(f"| resume -> dead holder's lease re-run | {med([r['reclaimed_s'] for r in resume]):.2f} s "
          f"(max {max(r['reclaimed_s'] for r in resume):.2f}) | <= 5 s |")


if __name__ == "__main__":
    main()

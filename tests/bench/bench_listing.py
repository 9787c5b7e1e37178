"""`sloth ls --json` of many jobs: memory of both processes and wall time.

    python tests/bench/bench_listing.py [--sizes 10000,100000,1000000] [--runs 3]
                                        [--finished 50] [--clients 1] [--offline]

For each size: a real daemon in a temporary SLOTH_HOME, paused; N jobs
queued through the library API in batches of 50,000 (then ``--finished``
percent of them marked done, so the listing has a long finished section as
well as a queued one); one `sloth ls --json -n 5` to warm the daemon up;
then ``--clients`` runs of `sloth ls --json > /dev/null` at once, through
the real daemon (and with ``--offline``, once more with the daemon stopped:
the client reads the queue itself). Measured:

  client   peak resident memory (VmHWM from /proc, sampled until it exits:
           its own peak after exec, which ru_maxrss is not -- that counts the
           forking parent's size too) and wall time
  daemon   VmHWM and VmRSS before and after (growth = what the listing cost),
           and the slowest answer to a ping sent every 50 ms while listings run

Each figure is printed as the range over ``--runs`` runs (min-max).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from sloth_daemon.queue import Queue  # noqa: E402
from tests.support.harness import TEST_CONFIG, Harness, temp_harness  # noqa: E402

BATCH = 50_000


def status_mb(pid: int, field: str) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    raise OSError(f"no {field} for pid {pid}")


def fill(h: Harness, n: int, finished_pct: int) -> float:
    """n jobs through the library API, while the daemon claims nothing; the
    seconds it took."""
    t0 = time.monotonic()
    h.call("pause")
    q = Queue(h.home / "queue.db")
    try:
        for i in range(0, n, BATCH):
            q.enqueue_many([{"command": ["true", str(j)], "cwd": str(h.home), "label": f"job {j}"}
                            for j in range(i, min(n, i + BATCH))])
        if finished_pct:
            with q.engine.store.conn:  # done jobs without running them: the listing's finished section
                q.engine.store.conn.execute("UPDATE jobs SET state = 'done', attempts = 1, tries = 1, exit_code = 0,"
                                " finished_at = created_at + id * 0.001 WHERE id % 100 < ?", (finished_pct,))
    finally:
        q.close()
    return time.monotonic() - t0


def run_client(h: Harness) -> dict[str, float]:
    """One `sloth ls --json > /dev/null`: its peak memory and wall time."""
    t0 = time.monotonic()
    p = subprocess.Popen([sys.executable, "-m", "sloth_daemon", "ls", "--json"], env=h.env,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=str(h.home))
    peak = 0.0
    while p.poll() is None:
        try:
            peak = max(peak, status_mb(p.pid, "VmHWM"))
        except OSError:
            pass  # exiting
        time.sleep(0.01)
    wall = time.monotonic() - t0
    if p.returncode != 0:
        raise SystemExit(f"sloth ls --json exited {p.returncode}: {p.stderr.read().decode()[-2000:]}")
    return {"client_peak_mb": peak, "wall_s": wall}


def clients(h: Harness, k: int) -> tuple[list[dict[str, float]], float]:
    """k listings at once, and the slowest answer to a ping sent every 50 ms
    meanwhile (the daemon serving others while listings stream)."""
    out: list[dict[str, float]] = []
    ts = [threading.Thread(target=lambda: out.append(run_client(h))) for _ in range(k)]
    for t in ts:
        t.start()
    worst = 0.0
    while any(t.is_alive() for t in ts):
        t0 = time.monotonic()
        h.call("ping")
        worst = max(worst, time.monotonic() - t0)
        time.sleep(0.05)
    for t in ts:
        t.join()
    return out, worst


def one_run(n: int, finished_pct: int, k: int, offline: bool) -> dict[str, float]:
    with temp_harness(TEST_CONFIG, prefix="slbl-") as h:
        d = h.start()
        fill_s = fill(h, n, finished_pct)
        h.cli("ls", "--json", "-n", "5", check=True)
        hwm0, rss0 = status_mb(d.pid, "VmHWM"), status_mb(d.pid, "VmRSS")
        got, ping_s = clients(h, k)
        hwm1, rss1 = status_mb(d.pid, "VmHWM"), status_mb(d.pid, "VmRSS")
        res = {"fill_s": fill_s, "client_peak_mb": max(g["client_peak_mb"] for g in got),
               "wall_s": max(g["wall_s"] for g in got), "ping_max_ms": ping_s * 1000, "daemon_hwm_before_mb": hwm0,
               "daemon_hwm_after_mb": hwm1, "daemon_hwm_growth_mb": hwm1 - hwm0,
               "daemon_rss_before_mb": rss0, "daemon_rss_after_mb": rss1}
        if offline:
            h.stop()
            off = run_client(h)
            res.update(offline_client_peak_mb=off["client_peak_mb"], offline_wall_s=off["wall_s"])
        return res


def span(values: list[float]) -> str:
    lo, hi = min(values), max(values)
    return f"{lo:.1f}" if f"{lo:.1f}" == f"{hi:.1f}" else f"{lo:.1f}-{hi:.1f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1000000", help="comma-separated numbers of jobs (default 1000000)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--finished", type=int, default=50, help="percent of the jobs marked done (default 50)")
    ap.add_argument("--clients", type=int, default=1, help="listings at once (default 1)")
    ap.add_argument("--offline", action="store_true", help="also list with the daemon stopped")
    a = ap.parse_args()
    sizes = [int(s.replace("_", "")) for s in a.sizes.split(",")]
    print(f"sloth ls --json > /dev/null, {a.clients} client(s) at once, {a.finished}% of the jobs done;"
          f" ranges over {a.runs} run(s)", flush=True)
    for n in sizes:
        runs = []
        for _ in range(a.runs):
            runs.append(one_run(n, a.finished, a.clients, a.offline))
            print(f"  {n:>9,} jobs: " + ", ".join(f"{k} {v:.1f}" for k, v in runs[-1].items()), flush=True)
        print(f"{n:>9,} jobs | " + " | ".join(f"{k} {span([r[k] for r in runs])}" for k in runs[0]), flush=True)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""The daemon's CPU per job on the worker's path, A/B against another checkout, interleaved.

    python tests/bench/bench_daemon_path.py --a /path/to/main --b . [--runs 4] [--jobs 1000] [--slots 1]
    python tests/bench/bench_daemon_path.py --b . --runs 1 --jobs 5000 --spy /tmp/daemon.txt   # where it goes
    python tests/bench/bench_daemon_path.py --a /path/to/main --b . --queue-only --runs 6 --jobs 4000

One run: a real daemon in a temp home (that checkout's venv), `sloth add
--stdin` of N `true`, then `sloth wait` on every id (issue 34's bulk
target). CPU of the daemon and of the keeper from /proc/PID/schedstat
(nanoseconds run on a CPU) from before the add to the wait's return; the
clients' from getrusage. Runs alternate A, B, A, B ... so drift on a shared
machine hits both alike; medians and ranges printed, B/A last.

``--queue-only``: the queue's part alone, in one process (no daemon, no
keeper, no fork): the worker's unit of a turn in a burst -- the outcomes
of the jobs it holds (record_cost, then complete with the process
identity) and the next 8 claimed (claim_many), one unit, then the group
commit's fsync -- CPU per job from process_time.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

CHILD = r'''
import json, os, resource, subprocess, sys, time
sys.path.insert(0, {root!r})
from tests.support.harness import temp_harness
SLOTH = os.path.join(os.path.dirname(sys.executable), "sloth")
def ns(pid):
    with open(f"/proc/{{pid}}/schedstat") as f:
        return int(f.read().split()[0])
with temp_harness("[lanes]\ndefault = {slots}\n") as h:
    d = h.start()
    h.call("ping")
    keeper = None
    c0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    d0 = ns(d.pid)
    t0 = time.perf_counter()
    p = subprocess.run([SLOTH, "add", "--stdin"], env=h.env, input="true\n" * {n}, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    ids = p.stdout.split()
    keeper = h.call("status").get("keeper", {{}}).get("pid")
    k0 = ns(keeper) if keeper else 0  # the keeper starts with the first job: its CPU before this is small
    spy = None
    if {spy!r}:
        spy = subprocess.Popen([os.path.join(os.path.dirname(sys.executable), "py-spy"), "record", "-r", "500",
                                "--gil", "-f", "raw", "-o", {spy!r}, "-p", str(d.pid), "--nonblocking"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    p = subprocess.run([SLOTH, "wait", *ids], env=h.env, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr[-300:]
    wall = time.perf_counter() - t0
    d1 = ns(d.pid)
    k1 = ns(keeper) if keeper else 0
    c1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    if spy is not None:
        spy.send_signal(2); spy.wait(30)
    cli = (c1.ru_utime + c1.ru_stime) - (c0.ru_utime + c0.ru_stime)
    n = {n}
    print(json.dumps({{"wall_s": wall, "daemon_ms": (d1 - d0) / 1e6 / n, "keeper_ms": (k1 - k0) / 1e6 / n,
                      "cli_ms": cli * 1000 / n}}))
'''

QUEUE_ONLY = r'''
import json, os, sys, tempfile, time
sys.path.insert(0, {root!r})
from sloth_daemon.queue import Queue
d = tempfile.mkdtemp(prefix="slb-")
q = Queue(os.path.join(d, "queue.db"))
n = {n}
q.enqueue_many([{{"command": ["true"], "env": {{"A": "b"}}}} for _ in range(n)])
runner = {{"pid": 123, "start": 1.0, "boot_id": "b", "exact": True, "started_at": time.time(), "instance": "x",
          "worker": "w@h"}}
cost = {{"cpu_s": 0.001, "peak_rss_bytes": 1000, "wall_s": 0.002, "ended": "exit", "covers": "rusage"}}
held, done = [], 0
t0 = time.process_time()
while done < n:
    with q.unit():
        for j in held:
            q.record_cost(j.id, j.attempts, cost, durable=False)
            q.complete(j.id, j.token, message="exit 0", exit_code=0, runner=runner, durable=False)
        done += len(held)
        held = q.claim_many("w@h", 8, lane="default")
    q.sync()
cpu = time.process_time() - t0
q.close()
print(json.dumps({{"daemon_ms": cpu * 1000 / n, "keeper_ms": 0.0, "cli_ms": 0.0, "wall_s": cpu}}))
'''


def one(root: Path, n: int, slots: int, spy: str, queue_only: bool = False) -> dict[str, float]:
    # a tree without a venv of its own (`git archive` of another branch): this interpreter, that tree's code
    py = root / ".venv" / "bin" / "python"
    env = None if py.exists() else {**os.environ, "PYTHONPATH": str(root)}
    code = QUEUE_ONLY.format(root=str(root), n=n) if queue_only else CHILD.format(root=str(root), n=n, slots=slots,
                                                                                  spy=spy)
    out = subprocess.run([str(py) if py.exists() else sys.executable, "-c", code],
                         capture_output=True, text=True, cwd=root, timeout=1200, env=env)
    if out.returncode != 0:
        raise SystemExit(f"{root}: {out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def show(name: str, rs: list[dict[str, float]]) -> dict[str, float]:
    med = {k: statistics.median(r[k] for r in rs) for k in rs[0]}
    rng = {k: (min(r[k] for r in rs), max(r[k] for r in rs)) for k in rs[0]}
    print(f"{name}: daemon {med['daemon_ms']:.3f} ms/job ({rng['daemon_ms'][0]:.3f}-{rng['daemon_ms'][1]:.3f}), "
          f"keeper {med['keeper_ms']:.3f} ({rng['keeper_ms'][0]:.3f}-{rng['keeper_ms'][1]:.3f}), "
          f"clients {med['cli_ms']:.3f}, wall {med['wall_s']:.3f} s ({rng['wall_s'][0]:.3f}-{rng['wall_s'][1]:.3f})")
    return med


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--a", type=Path)
    ap.add_argument("--b", type=Path, required=True)
    ap.add_argument("--runs", type=int, default=4)
    ap.add_argument("--jobs", type=int, default=1000)
    ap.add_argument("--slots", type=int, default=1)
    ap.add_argument("--spy", default="", help="py-spy record the daemon of side B into this file")
    ap.add_argument("--queue-only", action="store_true", help="the queue's unit alone, in one process")
    args = ap.parse_args()
    sides = [s for s in ("a", "b") if getattr(args, s) is not None]
    res: dict[str, list[dict[str, float]]] = {s: [] for s in sides}
    for i in range(args.runs):
        for s in sides:
            r = one(getattr(args, s).resolve(), args.jobs, args.slots, args.spy if s == "b" else "", args.queue_only)
            res[s].append(r)
            print(f"run {i + 1} {s.upper()}: daemon {r['daemon_ms']:.3f} ms/job, keeper {r['keeper_ms']:.3f}, "
                  f"clients {r['cli_ms']:.3f}, wall {r['wall_s']:.3f} s", flush=True)
    meds = {s: show(f"{s.upper()} {getattr(args, s)}", res[s]) for s in sides}
    if len(sides) == 2:
        a, b = meds["a"], meds["b"]
        keeper = f", keeper {b['keeper_ms'] / a['keeper_ms']:.3f}x" if a["keeper_ms"] else ""
        what = "the queue's unit alone" if args.queue_only else f"{args.slots} slot(s), wait on every id"
        print(f"B/A daemon CPU {b['daemon_ms'] / a['daemon_ms']:.3f}x{keeper}, wall {b['wall_s'] / a['wall_s']:.3f}x"
              f" ({args.jobs} `true`, {what})")


if __name__ == "__main__":
    main()

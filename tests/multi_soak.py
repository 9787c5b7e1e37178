#!/usr/bin/env python3
"""Many probe jobs on three machines sharing one PostgreSQL queue.

    python tests/multi_soak.py                 # 3,000 --anywhere probe jobs, three daemons
    python tests/multi_soak.py --jobs 500 --chaos

Three real daemons (each a SLOTH_HOME and a host name of its own; each in a
network namespace of its own when run as root: tests/support/machines.py)
serve one real PostgreSQL database. The jobs are tests/support/probe_job.py
(a flock per job, every start and end recorded), queued with `sloth add
--anywhere --stdin` from all three machines. Then: every job done, each by
exactly one run that ended well, no two runs of one job at once (flock
collisions and recorded intervals), and how the work spread.

``--chaos``: meanwhile one machine at a time is lost past the lease and
brought back -- its daemon SIGSTOPped, its network cut, or all of it killed
-9 and restarted. A job whose run was fenced may then run again (once its
first run is dead, never beside it); the re-runs are counted, overlaps must
still be none.

The suite runs the same check with 120 jobs and no chaos
(tests/acceptance/test_several_machines.py).
"""

from __future__ import annotations

import argparse
import random
import signal
import sys
import threading
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from tests.support import probes  # noqa: E402
from tests.support.machines import PROBE, Machine, Machines, Network, netns_unavailable, wait_until  # noqa: E402

CONFIG = """lease_s = "4s"
clock_check_s = "1s"
kill_grace_s = "1s"
poll_s = "1s"
backoff_cap_s = "2s"
max_attempts = 50
[lanes]
default = {concurrency}
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=3000)
    ap.add_argument("--concurrency", type=int, default=4, help="slots per machine")
    ap.add_argument("--hold", type=float, default=0.05, help="seconds each probe holds its lock")
    ap.add_argument("--chaos", action="store_true")
    ap.add_argument("--timeout", type=float, default=1800.0)
    a = ap.parse_args()
    net = Network(3, netns=netns_unavailable() is None)
    ms = Machines(net, 3, config_of=lambda i: CONFIG.format(concurrency=a.concurrency))
    try:
        return run(ms, net, a)
    finally:
        ms.close()
        net.close()


def run(ms: Machines, net: Network, a: argparse.Namespace) -> int:
    rec = ms.root / "rec"
    rec.mkdir()
    ms.start()
    t0 = time.monotonic()
    ids = enqueue(ms, rec, a.jobs, a.hold)
    print(f"queued {len(ids)} jobs in {time.monotonic() - t0:.1f}s (3 machines, {a.concurrency} slots each,"
          f" {'network namespaces' if net.links else 'one network'})")
    stop = threading.Event()
    chaos = threading.Thread(target=disrupt, args=(ms, net, stop), daemon=True) if a.chaos else None
    if chaos:
        chaos.start()
    wait_until(lambda: done(ms) >= len(ids), a.timeout, f"{len(ids)} jobs done", step_s=1.0)
    stop.set()
    if chaos:
        chaos.join()
    elapsed = time.monotonic() - t0
    return report(ms, rec, ids, elapsed)


def enqueue(ms: Machines, rec: Path, n: int, hold: float) -> list[int]:
    line = f"{sys.executable} {PROBE} {rec} --hold {hold}"
    ids: list[int] = []
    for i, m in enumerate(ms):
        k = n // 3 + (1 if i < n % 3 else 0)
        out = m.cli("add", "--anywhere", "--stdin", input="\n".join([line] * k), check=True, timeout_s=300).stdout
        ids += [int(x) for x in out.split()]
    return ids


def done(ms: Machines) -> int:
    for m in ms:
        try:
            return int(m.cli_json("ls", "--state", "done", "--limit", "1")["total"])
        except Exception:  # noqa: BLE001 - that machine is the one being disrupted: ask another
            continue
    return 0


def disrupt(ms: Machines, net: Network, stop: threading.Event) -> None:
    rng = random.Random()
    kinds = ["stop", "crash"] + (["partition"] if net.links else [])
    while not stop.wait(rng.uniform(4, 8)):
        i = rng.randrange(3)
        m, kind = ms[i], rng.choice(kinds)
        print(f"  chaos: {kind} {m.name}")
        lose_and_return(m, kind, net, i)


def lose_and_return(m: Machine, kind: str, net: Network, i: int) -> None:
    assert m.daemon is not None
    if kind == "stop":
        m.daemon.send_signal(signal.SIGSTOP)
        time.sleep(9)  # past the lease (4 s): its keeper fences, others take over
        m.daemon.send_signal(signal.SIGCONT)
    elif kind == "partition":
        net.links[i].cut()
        time.sleep(9)
        net.links[i].heal()
    else:
        m.crash()
        time.sleep(6)
        m.start()


def report(ms: Machines, rec: Path, ids: list[int], elapsed: float) -> int:
    runs = probes.runs(rec)
    ok_runs = Counter(j for j, rs in runs.items() for r in rs if r.end is not None)
    jobs = ms[0].cli_json("ls", "--all")["jobs"]
    by_host = Counter((j.get("worker") or "?").split(":")[1] for j in jobs)
    problems = {
        "not done": sum(1 for j in jobs if j["state"] != "done"),
        "missing": len(set(ids) - {j["id"] for j in jobs}),
        "never ran": len(set(ids) - set(runs)),
        "done by more than one successful run": sum(1 for i in ids if ok_runs[i] > 1),
        "overlaps": len(probes.overlaps(rec)),
        "collisions": len(probes.collisions(rec)),
    }
    reruns = sum(len(rs) - 1 for rs in runs.values())
    print(f"{len(ids)} jobs in {elapsed:.1f}s ({len(ids) / elapsed:.0f}/s); runs {sum(map(len, runs.values()))}"
          f" (re-runs {reruns}); done by host {dict(sorted(by_host.items()))}")
    print("  " + " | ".join(f"{k} {v}" for k, v in problems.items()))
    for o in probes.overlaps(rec)[:10]:
        print("  OVERLAP", o)
    bad = problems["not done"] + problems["missing"] + problems["overlaps"] + problems["collisions"]
    print("all invariants hold" if not bad else "VIOLATIONS")
    return 0 if not bad else 1


if __name__ == "__main__":
    sys.exit(main())

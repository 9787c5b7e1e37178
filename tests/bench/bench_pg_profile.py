#!/usr/bin/env python
"""Where a job's CPU goes with three daemons on one PostgreSQL queue: by
process and by statement. Not collected by pytest.

    python tests/bench/bench_pg_profile.py [--a <main checkout>] [--b .] [--runs 2] [--jobs 1500]

Each run queues ``--jobs`` x `true` (4 slots per daemon, --anywhere, as
bench_machines.py --throughput) on three daemons; with ``--a`` the two
checkouts alternate A, B, A, B ... on one cluster (each side's daemons run
its code through PYTHONPATH). Per job it prints:

* CPU (ms, /proc/PID/stat of each process, user + system) of the daemons,
  the keepers, the jobs (the keepers' reaped children), and the server's
  processes split by kind: the daemons' backends (by the daemons'
  connections), the other backends (the benchmark's own count), the WAL
  writer, the checkpointer, the rest;
* the server's write transactions and WAL fsyncs (its own counters);
* with pg_stat_statements (loaded into the throwaway cluster: the server is
  restarted with shared_preload_libraries once), the daemons' statements:
  calls per job and server time per job (total_exec_time), each statement
  top-level (what a client sent) and, separately, those run inside a
  trigger or a function (``toplevel = false``);
* NOTIFYs sent per job (pg_stat_statements sees pg_notify called in a
  trigger as a nested statement only when it is a statement; the count here
  is of the statements that name it).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run from a checkout

from tests.bench._common import log  # noqa: E402
from tests.bench.bench_machines import CONFIG, cpu_s, done_in_db, server_procs, throughput  # noqa: E402
from tests.bench.bench_machines_ab import server_counts  # noqa: E402
from tests.bench.bench_pg import settle_wal  # noqa: E402
from tests.support.machines import Machines, Network  # noqa: E402


def enable_statements(net: Network, explain_ms: float | None) -> None:
    assert net.cluster is not None
    with open(net.cluster.data / "postgresql.conf", "a") as f:
        if explain_ms is not None:
            f.write("auto_explain.log_min_duration = '%gms'\nauto_explain.log_analyze = on\n"
                    "auto_explain.log_buffers = on\nlog_min_messages = log\n" % explain_ms)
        f.write(f"shared_preload_libraries = 'pg_stat_statements{',auto_explain' if explain_ms is not None else ''}'\n"
                "pg_stat_statements.track = all\npg_stat_statements.max = 5000\npg_stat_statements.track_planning = on\n"
                "track_functions = all\n")
    net.cluster.stop()
    net.cluster.start()
    with net.cluster.admin() as c:
        c.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")


def statements(net: Network, db: str) -> dict[tuple[bool, str], tuple[int, float, int, float]]:
    assert net.cluster is not None
    with net.cluster.admin() as c:
        rows = c.execute(
            "SELECT s.toplevel, s.query, s.calls, s.total_exec_time, s.plans, s.total_plan_time"
            " FROM pg_stat_statements s"
            " JOIN pg_database d ON d.oid = s.dbid WHERE d.datname = %s", (db,)).fetchall()
    out: dict[tuple[bool, str], tuple[int, float, int, float]] = {}
    for top, q, calls, ms, plans, plan_ms in rows:
        k = (bool(top), " ".join(q.split()))
        c0, m0, p0, pm0 = out.get(k, (0, 0.0, 0, 0.0))
        out[k] = (c0 + calls, m0 + ms, p0 + plans, pm0 + plan_ms)
    return out


def server_kinds(net: Network) -> dict[int, str]:
    """Each server process's kind: a backend by its client's application_name
    (sloth-daemon, sloth-listen, the benchmark's own), else its backend type."""
    assert net.cluster is not None
    with net.cluster.admin() as c:
        rows = c.execute("SELECT pid, backend_type, application_name FROM pg_stat_activity").fetchall()
    return {pid: (f"backend {app or '?'}" if btype == "client backend" else btype) for pid, btype, app in rows}


def side(net: Network, root: Path | None, jobs: int, res: dict[str, list[float]], k: str,
         with_statements: bool = True) -> None:
    if root is not None:  # with SLOTH_CPROFILE: a folder with a sitecustomize.py that profiles the daemons
        os.environ["PYTHONPATH"] = str(root) + (os.pathsep + os.environ["SLOTH_CPROFILE"]
                                                if os.environ.get("SLOTH_CPROFILE") else "")
    try:
        with Machines(net, 3, config_of=lambda i: CONFIG) as ms:
            ms.start()
            assert net.cluster is not None
            if with_statements:
                with net.cluster.admin() as c:
                    c.execute("SELECT pg_stat_statements_reset()")
            daemons = [psutil.Process(m.daemon.pid) for m in ms if m.daemon is not None]
            with done_in_db(ms) as done:
                x0, f0 = server_counts(net)
                d0, s0 = cpu_s(daemons), cpu_s(server_procs(net))
                t0 = time.monotonic()
                rate = throughput(ms[0], list(ms), jobs, {"place": "*"}, done)
                wall = time.monotonic() - t0
                d1, s1 = cpu_s(daemons), cpu_s(server_procs(net))
                if os.environ.get("SLOTH_CPROFILE"):  # a sitecustomize of the caller's dumps on SIGUSR2
                    for p in daemons:
                        p.send_signal(12)
                    time.sleep(1)
                x1, f1 = server_counts(net)
                kinds = server_kinds(net)
            stm = statements(net, ms.db) if with_statements else {}
            keepers = [m.keeper() for m in ms]
            own, with_jobs = cpu_s(keepers), cpu_s(keepers, children=True)
    finally:
        os.environ.pop("PYTHONPATH", None)
    per = {"daemons": sum(d1[p] - d0.get(p, 0.0) for p in d1),
           "keepers": sum(own.values()), "jobs": sum(with_jobs.values()) - sum(own.values())}
    srv: dict[str, float] = {}
    for p in s1:
        kind = kinds.get(p, "other")
        srv[kind] = srv.get(kind, 0.0) + s1[p] - s0.get(p, 0.0)
    for kind, v in srv.items():
        per["server: " + kind] = v
    per["server"] = sum(srv.values())
    res.setdefault(f"{k} jobs/s", []).append(rate)
    res.setdefault(f"{k} wall", []).append(wall)
    for name, v in per.items():
        res.setdefault(f"{k} cpu {name}", []).append(v * 1000 / jobs)
    res.setdefault(f"{k} xacts", []).append((x1 - x0) / jobs)
    res.setdefault(f"{k} fsyncs", []).append((f1 - f0) / jobs)
    top = [(q, c, m, p, pm) for (tl, q), (c, m, p, pm) in stm.items() if tl]
    nested = [(q, c, m, p, pm) for (tl, q), (c, m, p, pm) in stm.items() if not tl]
    res.setdefault(f"{k} stmts", []).append(sum(r[1] for r in top) / jobs)
    res.setdefault(f"{k} stmt ms", []).append(sum(r[2] for r in top) / jobs)
    res.setdefault(f"{k} plans", []).append(sum(r[3] for r in top) / jobs)
    res.setdefault(f"{k} plan ms", []).append(sum(r[4] for r in top) / jobs)
    LAST[k] = (top, nested, jobs)


LAST: dict[str, tuple[list, list, int]] = {}


def show(k: str) -> None:
    top, nested, jobs = LAST[k]
    for title, rows in (("top-level statements", top), ("nested (triggers, functions)", nested)):
        rows = sorted(rows, key=lambda r: -r[2])
        print(f"  {k.upper()} {title}: calls/job  exec ms/job  plans/job  plan ms/job  query")
        for q, c, m, p, pm in rows[:25]:
            if c / jobs < 0.005:
                continue
            print(f"    {c / jobs:7.3f} {m / jobs:7.4f} {p / jobs:7.3f} {pm / jobs:7.4f}  {q[:130]}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--a", type=Path)
    ap.add_argument("--b", type=Path, default=Path("."))
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--jobs", type=int, default=1500)
    ap.add_argument("--dir", help="parent folder (default: the system temp dir, on disk here)")
    ap.add_argument("--no-statements", action="store_true", help="without pg_stat_statements (its own cost)")
    ap.add_argument("--explain-ms", type=float, help="log the plans of statements slower than this (auto_explain)"
                    " into the server log, copied to ./pg-explain.log")
    a = ap.parse_args(argv)
    sides = {"b": a.b.resolve()} if a.a is None else {"a": a.a.resolve(), "b": a.b.resolve()}
    work = Path(tempfile.mkdtemp(prefix="sloth-bench-prof-", dir=a.dir))
    os.chmod(work, 0o755)
    res: dict[str, list[float]] = {}
    net = Network(3, netns=False, parent=str(work))
    loads = []
    try:
        assert net.cluster is not None
        if not a.no_statements:
            enable_statements(net, a.explain_ms)
        settle_wal(net.cluster, warm=True)
        for r in range(a.runs):
            for k, root in sides.items():
                log(f"run {r + 1}/{a.runs}: {k} ...")
                settle_wal(net.cluster)
                side(net, root, a.jobs, res, k, not a.no_statements)
                loads.append(os.getloadavg()[0])
    finally:
        if a.explain_ms is not None and net.cluster is not None:
            shutil.copy(net.cluster.log, "pg-explain.log")
        net.close()
        shutil.rmtree(work, ignore_errors=True)
    print(f"{os.cpu_count()} CPUs, load average {min(loads):.1f}-{max(loads):.1f}; {a.runs} runs, 3 daemons,"
          f" {a.jobs} x `true`, 4 slots each" + ("" if a.no_statements else "; pg_stat_statements on"))
    for k, root in sides.items():
        print(f"{k.upper()} = {root}")
        print(f"  jobs/s {' '.join(f'{x:6.0f}' for x in res[f'{k} jobs/s'])}")
        names = [n[len(f'{k} cpu '):] for n in res if n.startswith(f"{k} cpu ")]
        for n in names:
            v = res[f"{k} cpu {n}"]
            if max(v) < 0.0005:
                continue
            print(f"  CPU ms/job {n:<32} {' '.join(f'{x:6.3f}' for x in v)}")
        tot = [sum(res[f"{k} cpu {n}"][i] for n in ("daemons", "keepers", "jobs", "server"))
               for i in range(len(res[f"{k} jobs/s"]))]
        print(f"  CPU ms/job {'SUM':<32} {' '.join(f'{x:6.3f}' for x in tot)}"
              f"  (2-CPU ceiling {' '.join(f'{2000 / x:5.0f}' for x in tot)} jobs/s)")
        for n in ("xacts", "fsyncs", "stmts", "stmt ms", "plans", "plan ms"):
            if f"{k} {n}" in res:
                print(f"  per job {n:<10} {' '.join(f'{x:6.3f}' for x in res[f'{k} {n}'])}")
    if "a" in sides:
        for n in ("daemons", "server", "keepers"):
            ratios = [b / a_ for a_, b in zip(res[f"a cpu {n}"], res[f"b cpu {n}"])]
            print(f"B/A CPU per job, {n}: {' '.join(f'{x:5.2f}' for x in ratios)}")
    if not a.no_statements:
        for k in sides:
            show(k)
    return 0


if __name__ == "__main__":
    sys.exit(main())

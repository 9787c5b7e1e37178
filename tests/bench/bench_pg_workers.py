#!/usr/bin/env python
"""Benchmark: the queue path of several daemons without the fork. Not
collected by pytest.

    python tests/bench/bench_pg_workers.py                  # 3 workers, 3,000 jobs, 3 runs
    python tests/bench/bench_pg_workers.py --workers 3 --jobs 5000 --repeat 5

Each worker is a process of its own that runs the daemon's own worker
(daemon/worker/loop.py: the turn, its claims and claim_many, pipelining,
one unit per turn, the group commit, each outcome and its cost) on one
PostgreSQL queue, 4 slots, as a daemon of a shared queue does, but with a
spawner that plays a keeper whose jobs end the moment they start (it
pipelines as the keeper does: a run sent ``after`` another starts when that
one ends; one taken back is dropped). No process is forked, no keeper, no
socket: the figure is what the queue path sustains through the daemon's
code, beside tests/bench/bench_machines.py's end to end figure, whose
difference is the keeper and the fork. Printed with the target (1,000
jobs/s, issue 34 item 3), the server's own commit rate in the same run and
the CPU per job of the workers and of the server.

The cluster lives in a fresh folder on the real disk (fsync on).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run from a checkout

from tests.bench._common import log  # noqa: E402
from tests.bench.bench_machines import TARGET, cpu_s  # noqa: E402
from tests.bench.bench_pg import pg_commit_rate, settle_wal  # noqa: E402
from tests.support.pg import PgCluster, PgDatabases  # noqa: E402

SLOTS = 4
COST = {"cpu_s": 0.001, "peak_rss_bytes": 1 << 20, "wall_s": 0.001, "ended": "exit 0", "covers": "rusage"}


class InstantSpawner:
    """A keeper whose jobs end as soon as they start (see the module docstring)."""

    pipelines = True

    def __init__(self) -> None:
        import asyncio

        self.loop: asyncio.AbstractEventLoop | None = None
        self.live: set[str] = set()  # runs started, not yet ended
        self.behind: dict[str, tuple[Any, Any]] = {}  # key of a run -> (request, sink) waiting for it
        self.held: set[str] = set()  # keys waiting behind another
        self.pid = 0

    def spawn(self, req: Any, sink: Any) -> None:
        if req.after is not None and (req.after in self.live or req.after in self.held):
            self.behind[req.after] = (req, sink)
            self.held.add(req.key)
        else:
            self._start(req, sink)

    def _start(self, req: Any, sink: Any) -> None:
        self.held.discard(req.key)
        self.live.add(req.key)
        assert self.loop is not None
        self.loop.call_soon(self._run, req, sink)

    def _run(self, req: Any, sink: Any) -> None:
        from sloth_daemon.daemon.worker.spawner import Outcome

        self.pid += 1
        sink.started(self.pid, {"pid": self.pid, "started_at": time.time()})
        self.live.discard(req.key)
        sink.exited(Outcome(0, ended_at=time.time(), cost=COST))
        nxt = self.behind.pop(req.key, None)
        if nxt is not None:
            self._start(*nxt)

    def unspawn(self, key: str) -> None:
        for after, (req, sink) in list(self.behind.items()):
            if req.key == key:
                del self.behind[after]
                self.held.discard(key)
                nxt = self.behind.pop(key, None)
                if nxt is not None:
                    self.behind[after] = nxt  # the one behind it moves up
                assert self.loop is not None
                self.loop.call_soon(sink.taken_back)
                return

    def kill(self, key: str, reason: str, grace_s: float) -> None:
        pass

    def attach(self, key: str, sink: Any) -> None:
        pass

    def trust(self, items: list[tuple[str, float]]) -> None:
        pass

    def ack(self, keys: list[str]) -> None:
        pass

    def tap(self, key: str) -> None:
        return None

    async def pause(self, keys: list[str], *, resume: bool = False) -> dict[str, Any]:
        return {}


def worker_main(url: str, name: str, folder: str) -> None:
    """One worker process: the daemon's Worker until ``folder``/stop appears."""
    import asyncio

    from sloth_daemon.clock import SystemClocks
    from sloth_daemon.config import Settings
    from sloth_daemon.daemon.worker.loop import Worker
    from sloth_daemon.queue import Queue

    d = Path(folder)
    q = Queue(url)
    sp = InstantSpawner()
    w = Worker(q, Settings(lanes={"default": SLOTS}), sp, clocks=SystemClocks(),  # type: ignore[arg-type]
               log_path=lambda j, a: d / "logs" / f"{j}.{a}.log", instance=name, host=name, places=[name, ""])
    q.on_side_change = w.side_change

    async def run() -> None:
        sp.loop = asyncio.get_running_loop()
        (d / f"ready-{name}").touch()
        while not (d / "go").exists():
            await asyncio.sleep(0.001)
        task = asyncio.get_running_loop().create_task(w.run())
        while not (d / "stop").exists():
            await asyncio.sleep(0.05)
        await w.shutdown(keep_jobs=True)
        await task

    asyncio.run(run())
    q.close()


def one_run(cluster: PgCluster, dbs: PgDatabases, work: Path, workers: int, jobs: int) -> tuple[float, float, float]:
    """jobs/s of ``workers`` worker processes on a fresh queue; the workers'
    and the server's CPU milliseconds per job."""
    import psycopg

    from sloth_daemon.queue import Queue

    url = dbs.fresh("w")
    d = Path(tempfile.mkdtemp(prefix="run-", dir=work))
    (d / "logs").mkdir()
    with Queue(url) as q:
        for start in range(0, jobs, 1000):
            q.enqueue_many([{"command": ["true"]} for _ in range(start, min(jobs, start + 1000))])
    procs = [subprocess.Popen([sys.executable, __file__, "--worker", url, f"h{i}", str(d)]) for i in range(workers)]
    try:
        while not all((d / f"ready-h{i}").exists() for i in range(workers)):
            time.sleep(0.01)
            if any(p.poll() is not None for p in procs):
                raise SystemExit("a worker died before it was ready")
        ps = [psutil.Process(p.pid) for p in procs]
        pid = int((cluster.data / "postmaster.pid").read_text().split()[0])
        server = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
        w0, s0 = cpu_s(ps), cpu_s(server)
        with psycopg.connect(url, autocommit=True) as conn:
            (d / "go").touch()
            t0 = time.monotonic()
            while conn.execute("SELECT count(*) FROM sloth.jobs WHERE state = 'done'").fetchone()[0] < jobs:
                time.sleep(0.01)
                if time.monotonic() - t0 > 600 or any(p.poll() is not None for p in procs):
                    raise SystemExit("the workers did not finish")
            elapsed = time.monotonic() - t0
        w1, s1 = cpu_s(ps), cpu_s(server + psutil.Process(pid).children(recursive=True))
        (d / "stop").touch()
        for p in procs:
            p.wait(60)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        dbs.drop(url)
    wcpu = sum(w1[p] - w0.get(p, 0.0) for p in w1)
    scpu = sum(s1[p] - s0.get(p, 0.0) for p in s1)
    return jobs / elapsed, wcpu * 1000 / jobs, scpu * 1000 / jobs


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workers", type=int, default=3)
    ap.add_argument("--jobs", type=int, default=3000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--dir", help="parent folder (default: the system temp dir, on disk here)")
    ap.add_argument("--worker", nargs=3, metavar=("URL", "NAME", "FOLDER"), help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.worker:
        worker_main(*a.worker)
        return 0
    work = Path(tempfile.mkdtemp(prefix="sloth-bench-pgw-", dir=a.dir))
    os.chmod(work, 0o755)  # the server's user must reach its folder inside
    rates, wcpu, scpu, commits = [], [], [], []
    cluster = PgCluster(str(work))
    try:
        dbs = PgDatabases(cluster)
        settle_wal(cluster, warm=True)
        for r in range(a.repeat):
            log(f"run {r + 1}/{a.repeat} ...")
            rate, w, s = one_run(cluster, dbs, work, a.workers, a.jobs)
            rates.append(rate)
            wcpu.append(w)
            scpu.append(s)
            settle_wal(cluster)
            commits.append(pg_commit_rate(cluster, 1000))
    finally:
        cluster.destroy()
        shutil.rmtree(work, ignore_errors=True)
    print(f"{a.workers} daemons' worker code, no fork ({a.jobs} jobs, {SLOTS} slots each; {os.cpu_count()} CPUs,"
          f" load average {os.getloadavg()[0]:.1f} at the end)")
    print(f"  jobs/s: {' '.join(f'{x:6.0f}' for x in rates)}   median {statistics.median(rates):6.0f};"
          f" target >= {TARGET:.0f} ({sum(x >= TARGET for x in rates)} of {len(rates)} runs)")
    print(f"  CPU per job (ms, medians): workers together {statistics.median(wcpu):.2f},"
          f" server {statistics.median(scpu):.2f}")
    print(f"  the server's own rate in these runs: one session {min(commits):.0f}-{max(commits):.0f} commits/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())

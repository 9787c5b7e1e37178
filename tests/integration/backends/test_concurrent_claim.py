"""Four real processes claim and complete 3,000 jobs from one queue: one
SQLite file, or one PostgreSQL database.

Each worker is a separate interpreter (subprocess) with its own connection and
the real clock (SQLite: the SystemClock; PostgreSQL: the server's). Workers report every (job_id, worker) they claimed in a JSON
file; the test checks that each job was claimed exactly once, all are done,
and no process hit an exception ("database is locked" or any other).

SQLite's busy handler is not fair: a process that just committed usually wins
the lock again while the others sleep out their back-off, so on a loaded CI
machine one worker could drain the whole queue alone and the test would prove
nothing about concurrent claims. Each worker therefore waits, after its first
claim, until every worker has claimed once: all four are then guaranteed to be
claiming from the same rows at the same time, before and after that barrier.
(PostgreSQL's SKIP LOCKED claims do not need it; it costs them nothing.)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections import Counter

import pytest

from sloth_daemon.queue import open_queue
from tests.support.queues import BACKENDS

N_JOBS = 3000
N_WORKERS = 4

WORKER = textwrap.dedent(
    """
    import json, os, sys, time, traceback
    target, name, out_path, go_path, n_workers = sys.argv[1:6]
    first_dir = os.path.dirname(out_path)
    claimed, error = [], None
    try:
        from sloth_daemon.queue import open_queue
        q = open_queue(target)  # the real clock
        open(out_path + ".ready", "w").close()
        while not os.path.exists(go_path):  # start together, to contend
            time.sleep(0.001)
        while True:
            job = q.claim(name, lease_s=600)
            if job is None:
                break
            claimed.append([job.id, name, job.attempts])
            q.complete(job.id, job.token, message=name)
            if len(claimed) == 1:  # barrier: everyone has claimed once
                open(out_path + ".first", "w").close()
                deadline = time.monotonic() + 60
                while sum(f.endswith(".first") for f in os.listdir(first_dir)) < int(n_workers):
                    if time.monotonic() > deadline:
                        raise RuntimeError("barrier: not every worker claimed a job within 60 s")
                    time.sleep(0.001)
        q.close()
    except BaseException:
        error = traceback.format_exc()
    with open(out_path, "w") as f:
        json.dump({"claimed": claimed, "error": error}, f)
    sys.exit(1 if error else 0)
    """
)


@pytest.mark.parametrize("backend", [
    pytest.param(b, marks=[pytest.mark.postgres] if b == "postgres" else []) for b in BACKENDS])
def test_four_processes_claim_each_job_exactly_once(tmp_path, backend, request):
    target = str(tmp_path / "queue.db") if backend == "sqlite" else request.getfixturevalue("pg_fresh")()
    with open_queue(target) as q:
        ids = q.enqueue_many([{"command": ["job", str(i)], "priority": i % 3} for i in range(N_JOBS)])
    assert len(set(ids)) == N_JOBS

    go = tmp_path / "go"
    outs = [tmp_path / f"w{i}.json" for i in range(N_WORKERS)]
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    procs = [
        subprocess.Popen([sys.executable, "-c", WORKER, target, f"w{i}", str(out), str(go), str(N_WORKERS)],
                         env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for i, out in enumerate(outs)
    ]
    try:
        for out, p in zip(outs, procs):
            while not (out.parent / (out.name + ".ready")).exists():
                assert p.poll() is None, p.communicate()
                try:
                    p.wait(0.005)
                except subprocess.TimeoutExpired:
                    pass
        go.touch()
        results = [p.communicate(timeout=100) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()

    claims: list[tuple[int, str]] = []
    for out, p, (stdout, stderr) in zip(outs, procs, results):
        rep = json.loads(out.read_text())
        assert rep["error"] is None, f"{out.name}:\n{rep['error']}"
        assert p.returncode == 0 and "Traceback" not in stderr, stderr
        for jid, worker, attempts in rep["claimed"]:
            assert attempts == 1, f"job {jid} claimed on attempt {attempts}"
            claims.append((jid, worker))

    per_job = Counter(jid for jid, _ in claims)
    twice = {jid: n for jid, n in per_job.items() if n > 1}
    assert not twice, f"claimed more than once: {sorted(twice.items())[:10]}"
    assert set(per_job) == set(ids), "some jobs were never claimed"
    workers = Counter(w for _, w in claims)
    assert len(workers) == N_WORKERS, f"a worker never claimed (the barrier should prevent it): {workers}"

    with open_queue(target) as q:
        assert q.counts() == {"blocked": 0, "queued": 0, "held": 0, "running": 0, "done": N_JOBS, "failed": 0, "cancelled": 0}
        # the database agrees with the workers: one claim and one done per job,
        # by the worker that reported it
        by_job = dict(claims)
        for jid in ids:
            assert [e.kind for e in q.events(jid)] == ["claimed", "done"], jid
        for j in q.jobs(limit=N_JOBS):
            assert (j.worker, j.message, j.attempts) == (by_job[j.id], by_job[j.id], 1)

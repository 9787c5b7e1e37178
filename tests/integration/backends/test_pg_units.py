"""A worker's turn as one transaction on PostgreSQL (Queue.unit) where only
a server shows it (a session killed midway, claimers racing), and an
outcome written lazily in one statement: what the batching of issue 34
item 3 must keep. What a unit does on both engines is
tests/unit/backends/test_queue_edges.py's.

On the real server of tests/support/pg.py; races with threads, judged by
their outcomes.
"""

from __future__ import annotations

import threading
from collections import Counter

import psycopg
import pytest

from sloth_daemon.queue import Queue
from sloth_daemon.errors import JobNotFound, LeaseLost, StorageError

pytestmark = pytest.mark.postgres


def state_elsewhere(url: str, job_id: int) -> str:
    """The job's state as another session sees it (committed only)."""
    with psycopg.connect(url) as c:
        return c.execute("SELECT state FROM sloth.jobs WHERE id = %s", (job_id,)).fetchone()[0]


def test_a_unit_whose_connection_dies_midway_keeps_nothing_and_the_queue_goes_on(pg_url):
    """The crash between a turn's writes: the server ends the session after
    two claims and an outcome; none of them is kept (the jobs are due again,
    the outcome is still to write: its lease holds), and the next unit
    reconnects."""
    with Queue(pg_url) as q:
        a, b, c = q.enqueue(["a"]), q.enqueue(["b"]), q.enqueue(["c"])
        ja = q.claim("w")
        with pytest.raises(StorageError):
            with q.unit():
                q.claim("w")
                q.complete(ja.id, ja.token, durable=False)
                pid = q.engine.store.db.read(lambda cur: cur.execute("SELECT pg_backend_pid() AS p").fetchone()["p"],
                                             "pid")
                with psycopg.connect(pg_url, autocommit=True) as other:
                    other.execute("SELECT pg_terminate_backend(%s)", (pid,))
                q.claim("w")
        assert [state_elsewhere(pg_url, i) for i in (a, b, c)] == ["running", "queued", "queued"]
        with q.unit():
            q.complete(ja.id, ja.token, durable=False)  # the outcome written again: nothing lost
            jb = q.claim("w")
        assert jb.id == b and jb.attempts == 1 and q.get(a).state.value == "done"
        assert [e.kind for e in q.events(b)] == ["claimed"]  # the lost claim left nothing


def test_units_racing_claim_each_job_exactly_once(pg_url):
    """Three claimers, each claiming a few jobs and completing the last
    turn's in one unit per turn (as the worker does): every job done once."""
    n = 300
    with Queue(pg_url) as q:
        ids = q.enqueue_many([{"command": [str(i)]} for i in range(n)])
    barrier = threading.Barrier(3)
    got: dict[str, list[int]] = {}

    def drain(name: str) -> None:
        mine: list[int] = []
        held: list = []
        with Queue(pg_url) as w:
            barrier.wait()
            while True:
                with w.unit():
                    for job in held:
                        w.complete(job.id, job.token, durable=False)
                    held = [j for j in (w.claim(name, reclaim=False) for _ in range(4)) if j is not None]
                mine += [j.id for j in held]
                if not held:
                    break
            w.flush()
        got[name] = mine

    threads = [threading.Thread(target=drain, args=(f"w{i}",)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    per_job = Counter(sum(got.values(), []))
    assert set(per_job) == set(ids) and max(per_job.values()) == 1
    with Queue(pg_url) as q:
        assert q.counts()["done"] == n


def test_a_lazy_outcome_with_its_process_keeps_the_order_of_its_events_and_the_session_durable(pg_url):
    """complete(durable=False) with the process identity, now one statement:
    ``started`` before ``done``, the runner written, and synchronous_commit
    off for that transaction only (the next claim commits durably)."""
    with Queue(pg_url) as q:
        a = q.enqueue(["a"])
        job = q.claim("w")
        q.complete(a, job.token, durable=False, runner={"pid": 7, "started_at": 5.0})
        setting = q.engine.store.db.read(lambda cur: cur.execute("SHOW synchronous_commit").fetchone(), "setting")
        assert setting["synchronous_commit"] == "on"
        ev = q.events(a)
        assert [e.kind for e in ev] == ["claimed", "started", "done"] and ev[1].message == "pid 7"
        assert ev[1].at == 5.0 and q.get(a).runner == {"pid": 7, "started_at": 5.0}
        q.flush()


def test_batched_claims_racing_never_share_a_job_and_each_token_fences_alone(pg_url):
    """claim_many (a lane's successors in one statement), three claimers at
    once in units as the worker makes them, some with places: every job
    claimed exactly once, each with a token of its own; a token of one job
    of a batch ends no other job, and a batch held by a claimer that died
    (its leases run out) is re-issued job by job, its old tokens fenced."""
    n = 300
    with Queue(pg_url) as q:
        ids = q.enqueue_many([{"command": [str(i)], "lane": "l", **({"place": "a"} if i % 3 == 0 else {})}
                              for i in range(n)])
    barrier = threading.Barrier(3)
    got: dict[str, list[tuple[int, str]]] = {}

    def drain(name: str, places: list[str] | None) -> None:
        mine: list[tuple[int, str]] = []
        with Queue(pg_url) as w:
            barrier.wait()
            while True:
                with w.unit():
                    batch = w.claim_many(name, 7, lane="l", places=places)
                mine += [(j.id, j.token) for j in batch]
                if not batch:
                    break
        got[name] = mine

    threads = [threading.Thread(target=drain, args=(f"w{i}", [p for p in (["", "a"] if i else [""])]))
               for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    claims = [c for v in got.values() for c in v]
    assert len(got) == 3 and all(got.values())  # each took some: SKIP LOCKED, not one claimer's queue
    assert Counter(i for i, _ in claims) == Counter(ids)  # each exactly once
    assert len({t for _, t in claims}) == n
    with Queue(pg_url) as q:
        (a, ta), (b, tb) = got["w1"][0], got["w1"][1]
        with pytest.raises(LeaseLost):
            q.complete(b, ta)  # one job's token holds no other job of its batch
        assert q.get(b).state == "running"
        with psycopg.connect(pg_url) as c:  # the claimer is gone: its leases run out
            c.execute("UPDATE sloth.jobs SET lease_until = sloth.now() - 1 WHERE id = ANY(%s)",
                      ([a, b],))
        again = [q.claim("w9", lanes=["l"]), q.claim("w9", lanes=["l"])]
        assert sorted(j.id for j in again if j) == sorted([a, b]) and q.claim("w9", lanes=["l"]) is None
        for job_id, old in ((a, ta), (b, tb)):
            with pytest.raises(LeaseLost):
                q.complete(job_id, old)  # fenced: the old holder's outcome is refused
        for j in again:
            q.complete(j.id, j.token)
        assert [q.get(x).attempts for x in (a, b)] == [2, 2]


def test_an_outcome_of_a_job_deleted_under_it_fails_alone_not_the_unit(pg_url):
    """A job gone while its run ran (deleted by hand): its outcome raises
    JobNotFound and the unit's other writes are kept. The read that finds
    why an outcome matched nothing used to raise inside the unit, failing
    it whole: every later turn wrote that outcome again and failed again."""
    with Queue(pg_url) as q:
        a, b, c = q.enqueue(["a"]), q.enqueue(["b"]), q.enqueue(["c"])
        ja, jb, jc = q.claim("w"), q.claim("w"), q.claim("w")
        with psycopg.connect(pg_url, autocommit=True) as other:
            other.execute("DELETE FROM sloth.jobs WHERE id = ANY(%s)", ([a, c],))
        with q.unit():
            with pytest.raises(JobNotFound):
                q.complete(ja.id, ja.token, durable=False)
            with pytest.raises(JobNotFound):
                q.unclaim(jc.id, jc.token)
            q.complete(jb.id, jb.token, durable=False)
        assert state_elsewhere(pg_url, b) == "done"

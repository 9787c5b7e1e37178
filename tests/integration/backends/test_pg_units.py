"""A worker's turn as one transaction on PostgreSQL (Queue.unit), the
claims that pipelining may undo (unclaim), and an outcome written lazily in
one statement: what the batching of issue 34 item 3 must keep.

On the real server of tests/support/pg.py; races with threads, judged by
their outcomes.
"""

from __future__ import annotations

import threading
from collections import Counter

import psycopg
import pytest

from sloth_daemon.queue import Queue
from sloth_daemon.errors import LeaseLost, StorageError

pytestmark = pytest.mark.postgres


def state_elsewhere(url: str, job_id: int) -> str:
    """The job's state as another session sees it (committed only)."""
    with psycopg.connect(url) as c:
        return c.execute("SELECT state FROM sloth.jobs WHERE id = %s", (job_id,)).fetchone()[0]


def test_a_unit_commits_its_writes_once_and_a_write_that_fails_alone_undoes_only_itself(pg_url):
    with Queue(pg_url) as q:
        seen = []
        q.on_side_change = lambda job: seen.append((job.id, state_elsewhere(pg_url, job.id)))
        a, b = q.enqueue(["a"]), q.enqueue(["b"])
        after_b = q.enqueue_many([{"command": ["c"], "after": [b]}])[0]
        with q.unit():
            ja = q.claim("w")
            with pytest.raises(LeaseLost):
                q.complete(a, "not-the-token")
            jb = q.claim("w")
            assert state_elsewhere(pg_url, a) == "queued"  # nothing seen before the unit commits
            assert q.get(a).state.value == "running"  # ... but by the unit itself
            q.complete(b, jb.token, durable=False)  # settles its dependent: told only after the commit
            assert seen == []
        assert (ja.id, jb.id) == (a, b)
        assert (state_elsewhere(pg_url, a), state_elsewhere(pg_url, b)) == ("running", "done")
        assert seen == [(after_b, "queued")]
        assert [e.kind for e in q.events(a)] == ["claimed"]


def test_a_unit_that_meets_a_database_error_keeps_none_of_its_writes(pg_url):
    with Queue(pg_url) as q:
        a, b = q.enqueue(["a"]), q.enqueue(["b"])
        ja = q.claim("w")
        with psycopg.connect(pg_url, autocommit=True) as c:
            c.execute("CREATE FUNCTION sloth.boom() RETURNS trigger LANGUAGE plpgsql AS $$"
                      " BEGIN IF NEW.kind = 'done' THEN RAISE EXCEPTION 'boom'; END IF; RETURN NEW; END $$")
            c.execute("CREATE TRIGGER boom BEFORE INSERT ON sloth.events FOR EACH ROW EXECUTE FUNCTION sloth.boom()")
        try:
            with pytest.raises(StorageError, match="not written: .*boom"):
                with q.unit():
                    q.claim("w")  # b: fine so far
                    with pytest.raises(StorageError, match="boom"):
                        q.complete(a, ja.token)
                    with pytest.raises(StorageError, match="not written"):
                        q.claim("w")  # refused at once, never committed alone
            assert (q.get(a).state.value, q.get(b).state.value, q.get(b).attempts) == ("running", "queued", 0)
        finally:
            with psycopg.connect(pg_url, autocommit=True) as c:
                c.execute("DROP TRIGGER boom ON sloth.events")
                c.execute("DROP FUNCTION sloth.boom()")
        with q.unit():  # the queue goes on as before
            q.complete(a, ja.token)
        assert q.get(a).state.value == "done"


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
                pid = q.engine.store.db.read(lambda cur: cur.execute("SELECT pg_backend_pid() AS p").fetchone()["p"], "pid")
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

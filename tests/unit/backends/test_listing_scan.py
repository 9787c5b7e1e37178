"""A listing read a chunk at a time (backends/sqlite/scan.py, backends/postgres/scan.py): the same
jobs, order, counts and left_out as ``listing``; each job of the start once
whatever changes between chunks; no read transaction held between chunks.
Against a real SQLite file and a real PostgreSQL database."""

from __future__ import annotations

import sqlite3

import pytest

from sloth_daemon.backends import open_read_only
from tests.support.queues import is_pg, sql


def fill(q, clock) -> list[int]:
    """A queue with every section: running, queued (due by priority, then
    delayed by when), blocked and finished (done, failed, cancelled)."""
    clock.set(100)
    ids = q.enqueue_many([{"command": ["j", str(i)], "lane": "ab"[i % 2], "priority": i % 3,
                           **({"not_before": 100 + (i % 4) * 10} if i % 5 == 0 else {})} for i in range(60)])
    ids += q.enqueue_many([{"command": ["b"], "after": [ids[-1]]}, {"command": ["b2"], "after": [ids[-2]]}])
    for _ in range(12):
        job = q.claim("w")
        if job.id % 3:
            q.complete(job.id, job.token) if job.id % 2 else q.fail(job.id, job.token, message="x", retry=False)
    q.cancel_many(ids[40:44])
    return ids


def read_all(scan, n: int) -> dict:
    jobs = []
    while chunk := scan.next(n):
        jobs += [j.to_dict() for j in chunk]
    return {**scan.head, "jobs": jobs, **scan.tail()}


@pytest.mark.parametrize("kw", [{}, {"lane": "a"}, {"states": ["queued"]}, {"states": ["claimed", "done"]},
                                {"limit": 7, "offset": 3}, {"finished_limit": 2}, {"offset": 55},
                                {"offset": 500}, {"lane": "nope"}, {"host": "nowhere"}])
def test_a_scan_lists_what_listing_lists(q, clock, queue_target, kw):
    fill(q, clock)
    with open_read_only(queue_target) as ro:
        want = ro.listing(now=clock.now(), **kw).to_dict()
        for n in (1, 4, 1000):
            scan = ro.scan(now=clock.now(), **kw)
            try:
                assert read_all(scan, n) == want
            finally:
                scan.close()


def test_each_job_of_the_start_is_listed_once_whatever_changes_between_chunks(q, clock, queue_target):
    ids = fill(q, clock)
    with open_read_only(queue_target) as ro:
        start = ro.listing(now=clock.now()).to_dict()
        scan = ro.scan(now=clock.now())
        seen = [j.id for j in scan.next(5)]
        for _ in range(8):  # claims, outcomes, new jobs, a prune: between every chunk
            job = q.claim("w")
            q.complete(job.id, job.token)
            q.enqueue(["new"], priority=9)
            seen += [j.id for j in scan.next(5)]
        pruned = {r[0] for r in sql(q, "SELECT id FROM jobs WHERE state = 'cancelled'")}
        clock.advance(10)
        assert q.prune(1, states=["cancelled"]) == len(pruned)
        while chunk := scan.next(5):
            seen += [j.id for j in chunk]
        tail = scan.tail()
        scan.close()
    listed_at_start = [j["id"] for j in start["jobs"]]
    assert len(seen) == len(set(seen))  # never twice
    assert set(seen) <= set(ids) and pruned  # nothing queued after the start
    gone = pruned - set(seen)
    assert [i for i in listed_at_start if i not in gone] == seen  # every other one, in the start's order
    assert scan.head["total"] == start["total"] and tail["left_out"] == len(gone)
    assert scan.head["offset"] + len(seen) + tail["left_out"] == scan.head["total"]


def test_between_chunks_a_scan_holds_no_read_transaction(q, clock, queue_target):
    """A reader that pauses must not keep SQLite from checkpointing its WAL
    (nor PostgreSQL from vacuuming): the scan's own connection is idle."""
    fill(q, clock)
    with open_read_only(queue_target) as ro:
        scan = ro.scan(now=clock.now())
        try:
            assert scan.next(3)
            q.enqueue(["write"])
            if is_pg(q):
                from psycopg.pq import TransactionStatus

                assert ro.engine.reads._db._conn.info.transaction_status == TransactionStatus.IDLE
            else:
                assert not ro.engine.reads.conn.in_transaction
                busy, _, _ = sql(q, "PRAGMA wal_checkpoint(TRUNCATE)")[0]
                assert busy == 0  # a reader holding a snapshot would make it busy
            assert scan.next(3)
        finally:
            scan.close()


@pytest.mark.backends("sqlite")
def test_a_scan_keeps_its_ids_on_disk_not_in_memory(q, clock, queue_target):
    fill(q, clock)
    with open_read_only(queue_target) as ro:
        scan = ro.scan(now=clock.now())
        assert ro.engine.reads.conn.execute("PRAGMA temp_store").fetchone()[0] == 1  # FILE
        scan.close()
        with pytest.raises(sqlite3.OperationalError):
            ro.engine.reads.conn.execute("SELECT 1 FROM temp.sloth_listing")  # dropped with the scan

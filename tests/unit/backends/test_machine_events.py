"""The machine's own history (issue 31; contract.Meta.machine_up,
machine_seen, machine_slept; Reads.machine_events), on both engines: a
daemon's time up with the stamp it refreshes, a clean stop said, a crash
seen by the next start, sleeps; bounded per host and pruned with the jobs;
read on a read-only view, and [] on a file older than them."""

from __future__ import annotations

import sqlite3

import pytest

from sloth_daemon.backends import open_read_only, rules


def rows(q, since=float("-inf"), host=None):
    return [(r["host"], r["kind"], r["start_at"], r["end_at"], r["detail"]) for r in q.machine_events(since, host)]


def test_a_daemons_time_up_its_stamp_a_clean_stop_and_a_crash_seen_at_the_next_start(q, clock):
    clock.set(100.0)
    first = q.machine_up("lap")
    clock.set(160.0)
    q.machine_seen(first)  # the stamp, while it runs
    clock.set(200.0)
    q.machine_seen(first, ended="stopped: signal SIGTERM")
    clock.set(300.0)
    second = q.machine_up("lap")
    clock.set(360.0)
    q.machine_seen(second)  # ... then it dies with no word: kill -9, a power cut
    clock.set(1000.0)
    third = q.machine_up("lap")
    assert len({first, second, third}) == 3
    assert rows(q) == [("lap", "up", 100.0, 200.0, "stopped: signal SIGTERM"),
                       ("lap", "up", 300.0, 360.0, "crashed"),  # its end: the last stamp it wrote
                       ("lap", "up", 1000.0, 1000.0, "running")]
    assert rows(q, since=361.0) == [("lap", "up", 1000.0, 1000.0, "running")]


def test_a_sleep_ends_when_it_was_seen_and_each_host_is_its_own(q, clock):
    clock.set(5000.0)
    q.machine_slept("lap", 3600.0, "machine slept 3600s")
    q.machine_up("desk")  # another machine on a shared queue: its running row is not this one's crash
    q.machine_up("lap")
    assert rows(q, host="lap") == [("lap", "sleep", 1400.0, 5000.0, "machine slept 3600s"),
                                   ("lap", "up", 5000.0, 5000.0, "running")]
    assert [r[4] for r in rows(q, host="desk")] == ["running"]


def test_growth_is_bounded_per_host_and_pruned_with_the_job_history(q, clock, monkeypatch):
    monkeypatch.setattr(rules, "MACHINE_EVENTS_KEPT", 5)
    for i in range(8):
        clock.set(float(i * 100))
        q.machine_slept("lap", 10.0, f"sleep {i}")
    assert [r[4] for r in rows(q)] == [f"sleep {i}" for i in range(3, 8)]  # the oldest went
    up = q.machine_up("lap")
    clock.set(10_000.0)
    q.machine_seen(up)
    q.prune(9000.0, states=["failed"])  # a partial prune leaves the machine's history
    assert len(rows(q)) == 5
    q.prune(9350.0)  # the whole history: what ended before the cut goes, the running daemon's row stays
    assert [(r[1], r[4]) for r in rows(q)] == [("sleep", "sleep 7"), ("up", "running")]
    q.prune(0.0)
    assert [(r[1], r[4]) for r in rows(q)] == [("up", "running")]


def test_the_read_only_view_reads_them(q, clock, queue_target):
    clock.set(50.0)
    q.machine_slept("lap", 20.0, "machine slept 20s")
    with open_read_only(queue_target) as ro:
        assert [(r["kind"], r["start_at"]) for r in ro.machine_events(0.0)] == [("sleep", 30.0)]


@pytest.mark.backends("sqlite")
def test_a_read_only_view_of_a_file_older_than_them_reads_none(q, db_path):
    q.close()
    conn = sqlite3.connect(db_path)
    conn.execute("DROP TABLE machine_events")
    conn.commit()
    conn.close()
    with open_read_only(db_path) as ro:
        assert ro.machine_events(0.0) == []


def test_the_timelines_jobs_are_read_a_page_at_a_time_newest_first_with_their_history(q, clock):
    clock.set(10.0)
    old = q.enqueue(["old"])
    job = q.claim("w")
    clock.set(20.0)
    q.complete(job.id, job.token)  # ended before the window: not read
    waiting = q.enqueue(["waits"], lane="slow")  # unfinished since long before: read
    clock.set(100.0)
    recent = [q.enqueue([f"r{i}"]) for i in range(5)]
    for _ in recent:
        job = q.claim("w", lanes=["default"])
        q.fail(job.id, job.token, message="exit 1", retry=False)
    first = q.window_jobs(50.0, limit=3)
    assert [j.id for j, _ in first] == recent[:-4:-1]
    rest = q.window_jobs(50.0, before_id=first[-1][0].id, limit=3)
    assert [j.id for j, _ in rest] == [recent[1], recent[0], waiting]
    assert [e.kind for e in first[0][1]] == ["claimed", "failed"]  # its history, oldest first
    assert rest[-1][1] == [] and old not in [j.id for j, _ in first + rest]
    assert [j.id for j, _ in q.window_jobs(0.0, lane="slow")] == [waiting]
    assert [j.id for j, _ in q.window_jobs(0.0)][-1] == old  # in a window that reaches it

"""The queue's part of issue 14's edges, as a contract both backends keep:
a batch recorded in the transaction that queued it, a try given back with a
delay, paths that are not UTF-8, text no database refuses, a queue's
identity, and what a job's end does to the jobs waiting for it on every
path that ends it. A real SQLite file and a real PostgreSQL database, on a
ManualClock (see conftest.py)."""

from __future__ import annotations

import pytest

from sloth_daemon.backends.rules import BATCH_RECORD_S
from sloth_daemon.errors import BadRequest, IllegalTransition, JobNotFound, StorageError
from sloth_daemon.models import JobState
from tests.support.queues import is_pg, make_inserts_fail, sql

LATIN1_DIR = b"/tmp/caf\xe9 \xff".decode("utf-8", "surrogateescape")  # a folder named in Latin-1


def test_a_batch_is_recorded_with_its_jobs_and_never_queued_twice(q, clock):
    ids = q.enqueue_many([{"command": [str(i)]} for i in range(5)] + [{"command": ["k"], "key": "k"}],
                         batch="tok-1")
    assert q.batch_ids("tok-1") == ids and q.batch_ids("tok-2") is None
    with pytest.raises(IllegalTransition, match="queued already"):
        q.enqueue_many([{"command": ["again"]}], batch="tok-1")
    assert len(q.jobs()) == 6
    assert q.enqueue_many([], batch="empty") == [] and q.batch_ids("empty") == []


def test_a_batch_that_fails_records_nothing(q):
    a = q.enqueue(["a"])
    with pytest.raises(JobNotFound):
        q.enqueue_many([{"command": ["x"]}, {"command": ["y"], "after": [a + 100]}], batch="bad")
    make_inserts_fail(q, "boom")
    with pytest.raises(StorageError):
        q.enqueue_many([{"command": ["x"]}, {"command": ["y"], "label": "boom"}], batch="boom")
    assert q.batch_ids("bad") is None and q.batch_ids("boom") is None
    assert [j.id for j in q.jobs()] == [a]


def test_batch_records_outlive_a_day_then_prune_forgets_them(q, clock):
    ids = q.enqueue_many([{"command": ["a"]}], batch="old")
    clock.advance(BATCH_RECORD_S - 1)
    q.prune(0)
    assert q.batch_ids("old") == ids
    clock.advance(2)
    q.prune(0)
    assert q.batch_ids("old") is None


def test_release_with_a_delay_gives_the_try_back_due_later(q, clock):
    jid = q.enqueue(["x"])
    job = q.claim("w")
    clock.set(10)
    out = q.release(jid, job.token, message="no file descriptors", kind="postponed", delay_s=30)
    assert (out.state, out.tries, out.not_before) == (JobState.QUEUED, 0, 40)
    assert q.events(jid)[-1].kind == "postponed" and q.next_due_at() == 40
    assert q.claim("w") is None
    clock.set(40)
    again = q.claim("w")
    for bad in (-1, float("nan"), "5"):
        with pytest.raises(BadRequest):
            q.release(jid, again.token, delay_s=bad)
    assert q.get(jid).token == again.token  # a bad delay changed nothing


def test_a_path_that_is_not_utf8_round_trips_and_is_copied_by_restart(q):
    jid = q.enqueue(["ls"], cwd=LATIN1_DIR)
    assert q.get(jid).cwd == LATIN1_DIR
    q.complete(jid, q.claim("w").token)
    (new,) = q.restart([jid]).jobs
    assert new.cwd == LATIN1_DIR and q.get(new.id).cwd == LATIN1_DIR
    assert q.get(q.enqueue(["ls"], cwd="/tmp/ünï")).cwd == "/tmp/ünï"


def test_messages_with_bytes_no_database_takes_are_kept_readably(q):
    a, b = q.enqueue(["a"]), q.enqueue(["b"])
    q.cancel(a, message="gone from " + LATIN1_DIR)
    job = q.claim("w")
    q.fail(b, job.token, message="exit 1: a\x00b", retry=False)
    assert q.get(a).message == "gone from /tmp/caf\\xe9 \\xff" == q.events(a)[-1].message
    assert q.get(b).message.startswith("exit 1: a") and "b" in q.get(b).message


def test_a_queue_has_one_identity_kept_across_opens(make_queue, queue_target, tmp_path, backend, request):
    q = make_queue()
    assert q.identity and q.broken is None
    q.check()  # a sound queue
    assert make_queue().identity == q.identity
    other = tmp_path / "other.db" if backend == "sqlite" else request.getfixturevalue("pg_fresh")()
    assert make_queue(target=other).identity != q.identity


# ------------------------------------------- what an end does to dependents
def test_an_expired_last_try_cancels_what_needs_it_done(make_queue, clock):
    q = make_queue(max_attempts=1, lease_s=10)
    seen = []
    q.on_side_change = lambda job: seen.append((job.id, job.state.value))
    a, other = q.enqueue(["a"], priority=5), q.enqueue(["other"])
    b, c = q.enqueue_many([{"command": ["b"], "after": [a]}, {"command": ["c"], "after_any": [a]}])
    assert q.claim("lost").id == a
    clock.advance(11)
    assert q.claim("w").id == other  # a failed on the way, lease expired: b cancelled, c queued
    assert q.get(a).state is JobState.FAILED and q.events(a)[-1].kind == "lease_expired"
    assert (q.get(b).state, q.get(c).state) == (JobState.CANCELLED, JobState.QUEUED)
    assert sorted(seen) == [(b, "cancelled"), (c, "queued")]
    assert q.claim("w").id == c


def test_a_reclaim_says_how_long_ago_the_lease_ran_out(q, clock):
    jid = q.enqueue(["x"])
    q.claim("w1")
    clock.set(100 + 90)
    q.claim("w2")
    assert q.events(jid)[-1].message == "by w2; lease of w1 ran out 1m30s before"


def test_every_end_settles_dependents_and_reports_them_once(q, clock):
    seen = []
    q.on_side_change = lambda job: seen.append(job.id)
    a, b, c = q.enqueue(["a"]), q.enqueue(["b"]), q.enqueue(["c"])
    x, y, z = q.enqueue_many([{"command": ["x"], "after": [a]}, {"command": ["y"], "after_any": [b]},
                              {"command": ["z"], "after": [c]}])
    q.complete(a, q.claim("w").token, durable=False)  # an outcome of a group commit
    q.fail(b, q.claim("w").token, retry=False, runner={"pid": 9})
    q.cancel_many([c])
    assert [q.get(i).state.value for i in (x, y, z)] == ["queued", "queued", "cancelled"]
    assert seen == [x, y, z]


def test_a_long_chain_is_cancelled_whole_in_one_request(q):
    a = q.enqueue(["a"])
    chain = q.enqueue_many([{"command": ["0"], "after": [a]}]
                           + [{"command": [str(i)], "after_previous": "after"} for i in range(1, 3000)])
    assert q.counts()["blocked"] == 3000
    res = q.cancel_many([a])
    assert [j.id for j in res.jobs] == [a]
    assert q.counts() == {"blocked": 0, "queued": 0, "held": 0, "running": 0, "done": 0, "failed": 0, "cancelled": 3001}
    assert q.events(chain[-1])[-1].message == f"not run: job {chain[-2]}, which it runs after, was cancelled"


def test_a_keyed_job_in_a_chain_waits_for_the_active_job_with_its_key(q):
    first = q.enqueue(["build"], key="build")
    same, after = q.enqueue_many([{"command": ["build"], "key": "build"},
                                  {"command": ["test"], "after_previous": "after"}])
    assert same == first and q.get(after).state is JobState.BLOCKED and q.prereqs(after)[0]["id"] == first
    q.complete(first, q.claim("w").token)
    assert q.get(after).state is JobState.QUEUED


def test_deps_rows_go_with_a_pruned_job(q, clock):
    a = q.enqueue(["a"])
    (b,) = q.enqueue_many([{"command": ["b"], "after": [a]}])
    q.complete(a, q.claim("w").token)
    clock.advance(10)
    assert q.prune(1) == 1
    assert q.prereqs(b) == [] and sql(q, "SELECT count(*) FROM deps")[0][0] == 0


# --------------------------------------------- several writes, one commit
# A worker's turn as one transaction (Queue.unit), on both engines.
def _state_seen_by_another_connection(q, job_id):
    """The job's state as another session sees it (committed only)."""
    if is_pg(q):
        import psycopg

        with psycopg.connect(str(q.target)) as c:
            return c.execute("SELECT state FROM sloth.jobs WHERE id = %s", (job_id,)).fetchone()[0]
    import sqlite3

    c = sqlite3.connect(q.target)
    try:
        return c.execute("SELECT state FROM jobs WHERE id = ?", (job_id,)).fetchone()[0]
    finally:
        c.close()


def _make_done_events_fail(q):
    """From now on writing a ``done`` event fails inside the database; the undo."""
    if not is_pg(q):
        q.engine.store.conn.execute("CREATE TEMP TRIGGER boom BEFORE INSERT ON main.events"
                                    " WHEN NEW.kind = 'done' BEGIN SELECT RAISE(ABORT, 'boom'); END")
        return lambda: q.engine.store.conn.execute("DROP TRIGGER temp.boom")
    sql(q, "CREATE FUNCTION boom() RETURNS trigger LANGUAGE plpgsql AS $$"
           " BEGIN IF NEW.kind = 'done' THEN RAISE EXCEPTION 'boom'; END IF; RETURN NEW; END $$")
    sql(q, "CREATE TRIGGER boom BEFORE INSERT ON events FOR EACH ROW EXECUTE FUNCTION boom()")
    return lambda: (sql(q, "DROP TRIGGER boom ON events"), sql(q, "DROP FUNCTION boom()"))


def test_a_unit_commits_its_writes_once_and_a_write_that_fails_alone_undoes_only_itself(q):
    from sloth_daemon.errors import LeaseLost

    seen = []
    q.on_side_change = lambda job: seen.append((job.id, _state_seen_by_another_connection(q, job.id)))
    a, b = q.enqueue(["a"]), q.enqueue(["b"])
    after_b = q.enqueue_many([{"command": ["c"], "after": [b]}])[0]
    with q.unit():
        ja = q.claim("w")
        with pytest.raises(LeaseLost):
            q.complete(a, "not-the-token")
        jb = q.claim("w")
        assert _state_seen_by_another_connection(q, a) == "queued"  # not before the unit ends
        assert q.get(a).state == "running"  # ... but by the unit itself
        q.complete(b, jb.token, durable=False)  # settles its dependent: told only after the commit
        assert seen == []
    assert (ja.id, jb.id) == (a, b) and (q.get(a).state, q.get(b).state) == ("running", "done")
    assert [_state_seen_by_another_connection(q, i) for i in (a, b)] == ["running", "done"]
    assert seen == [(after_b, "queued")]
    assert [e.kind for e in q.events(a)] == ["claimed"]


def test_a_unit_that_meets_a_storage_error_keeps_none_of_its_writes(q):
    a, b = q.enqueue(["a"]), q.enqueue(["b"])
    ja = q.claim("w", lanes=["default"])
    assert ja.id == a
    undo = _make_done_events_fail(q)
    try:
        with pytest.raises(StorageError, match="not written: .*boom"):
            with q.unit():
                q.claim("w")  # b: fine so far
                with pytest.raises(StorageError, match="boom"):
                    q.complete(a, ja.token)
                with pytest.raises(StorageError, match="not written"):
                    q.claim("w")  # after the unit failed: refused at once, never committed alone
        assert (q.get(a).state, q.get(b).state, q.get(b).attempts) == ("running", "queued", 0)
    finally:
        undo()
    with q.unit():  # the queue goes on as before
        q.complete(a, ja.token)
    assert q.get(a).state == "done"


@pytest.mark.backends("sqlite")
def test_a_unit_that_only_reads_takes_no_write_lock(q):
    import sqlite3

    a = q.enqueue(["a"])
    with q.unit():
        assert q.get(a).state == "queued"
        other = sqlite3.connect(q.target, timeout=0)
        try:
            other.execute("BEGIN IMMEDIATE")  # would raise "database is locked"
            other.execute("ROLLBACK")
        finally:
            other.close()


@pytest.mark.backends("sqlite")
def test_a_unit_rolled_back_under_it_writes_nothing_more_on_its_own(q):
    """A read between two writes of a unit that makes SQLite roll the
    transaction back (I/O trouble): the next write must not open a
    transaction of its own and commit alone (found in review)."""
    a, b = q.enqueue(["a"]), q.enqueue(["b"])
    with pytest.raises(StorageError, match="rolled back"):
        with q.unit():
            q.claim("w")
            q.engine.store.conn.execute("ROLLBACK")  # as SQLite does after SQLITE_IOERR or SQLITE_FULL
            with pytest.raises(StorageError, match="rolled back"):
                q.claim("w")
    assert (q.get(a).state, q.get(b).state) == ("queued", "queued")

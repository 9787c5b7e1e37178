"""Schema migrations: from nothing, from v1 (the first released schema) and from v2."""

from __future__ import annotations

import json
import sqlite3

import pytest

from sloth_daemon.backends.sqlite import db
from sloth_daemon.clock import ManualClock
from sloth_daemon.errors import StorageError
from sloth_daemon.models import JobState
from sloth_daemon.queue import Queue

V2_INDEXES = {"jobs_ready", "jobs_due", "jobs_lease", "jobs_by_state", "jobs_finished",
              "jobs_active_key", "events_job"}


def user_version(path) -> int:
    con = sqlite3.connect(path)
    try:
        return con.execute("PRAGMA user_version").fetchone()[0]
    finally:
        con.close()


def indexes(conn: sqlite3.Connection) -> set[str]:
    return {r[0] for r in conn.execute(
        "SELECT name FROM sqlite_master WHERE type = 'index' AND name NOT LIKE 'sqlite_%'")}


def columns(conn: sqlite3.Connection, table: str) -> list[str]:
    return [r[1] for r in conn.execute(f"PRAGMA table_info({table})")]


def test_schema_version_counts_the_migrations():
    assert db.SCHEMA_VERSION == len(db.MIGRATIONS) >= 2


@pytest.mark.parametrize("start", ["missing", "empty file"])
def test_migrates_from_nothing_to_current(tmp_path, start):
    path = tmp_path / "queue.db"
    if start == "empty file":
        path.write_bytes(b"")
    with Queue(path, ManualClock(0)) as q:
        assert q.engine.store.conn.execute("PRAGMA user_version").fetchone()[0] == db.SCHEMA_VERSION
        assert indexes(q.engine.store.conn) >= V2_INDEXES
        assert "jobs_state" not in indexes(q.engine.store.conn)
        jid = q.enqueue(["echo"])
        assert q.claim("w").id == jid
    assert user_version(path) == db.SCHEMA_VERSION


def test_migrate_is_idempotent_and_returns_the_version(tmp_path):
    path = tmp_path / "queue.db"
    Queue(path).close()
    conn = db.connect(path)
    try:
        assert db.migrate(conn) == db.SCHEMA_VERSION
        assert db.migrate(conn, 1) == db.SCHEMA_VERSION  # never goes backwards
        assert not conn.in_transaction
    finally:
        conn.close()


def test_every_step_bumps_user_version_by_one(tmp_path):
    conn = sqlite3.connect(tmp_path / "queue.db", isolation_level=None)
    try:
        for v in range(1, db.SCHEMA_VERSION + 1):
            assert db.migrate(conn, v) == v
            assert conn.execute("PRAGMA user_version").fetchone()[0] == v
    finally:
        conn.close()


def _make_v1(path):
    conn = sqlite3.connect(path, isolation_level=None)
    assert db.migrate(conn, 1) == 1
    assert "label" not in columns(conn, "jobs")  # really the v1 shape
    assert "jobs_state" in indexes(conn)
    return conn


V1_INSERT = (
    "INSERT INTO jobs (command, state, lane, priority, attempts, max_attempts, lease_s,"
    " timeout_s, not_before, lease_until, token, worker, key, cwd, env, message,"
    " created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)


def test_migrates_a_v1_database_keeping_jobs_claimable(tmp_path):
    path = tmp_path / "queue.db"
    conn = _make_v1(path)
    # rows as the v1 code wrote them
    conn.execute(V1_INSERT, (json.dumps(["make", "-j4"]), "queued", "build", 3, 1, 5, 30.0, 600.0,
                             10.0, None, None, None, "nightly", "/src", json.dumps({"CC": "gcc"}),
                             "", 1.0, 2.0))
    conn.execute(V1_INSERT, (json.dumps(["done"]), "done", "default", 0, 1, 3, 60.0, None,
                             1.0, None, None, "w1", None, None, None, "ok", 1.0, 5.0))
    conn.execute(V1_INSERT, (json.dumps(["running"]), "claimed", "default", 0, 1, 3, 60.0, None,
                             1.0, 70.0, "tok1", "w1", None, None, None, "", 1.0, 10.0))
    conn.execute("INSERT INTO events (job_id, at, kind, attempt, message) VALUES (1, 2.0, 'claimed', 1, '')")
    conn.execute("INSERT INTO events (job_id, at, kind, attempt, message) VALUES (2, 5.0, 'done', 1, 'ok')")
    conn.close()

    clock = ManualClock(100.0)
    with Queue(path, clock, lease_s=50) as q:
        c = q.engine.store.conn
        assert c.execute("PRAGMA user_version").fetchone()[0] == db.SCHEMA_VERSION
        assert indexes(c) >= V2_INDEXES and "jobs_state" not in indexes(c)
        j = q.get(1)
        assert j.command == ["make", "-j4"] and j.state is JobState.QUEUED
        assert (j.lane, j.priority, j.attempts, j.max_attempts, j.lease_s) == ("build", 3, 1, 5, 30.0)
        assert (j.timeout_s, j.not_before, j.key, j.cwd, j.env) == (600.0, 10.0, "nightly", "/src",
                                                                     {"CC": "gcc"})
        assert (j.created_at, j.updated_at) == (1.0, 2.0)
        assert (j.label, j.shell, j.runner, j.exit_code, j.finished_at) == (None, False, None, None, None)
        assert [e.kind for e in q.events(1)] == ["claimed"]

        # the running v1 job's token still holds its lapsed-but-unreclaimed lease
        assert q.heartbeat(3, "tok1").lease_until == 160.0  # its lease_s (60)
        # the key still deduplicates against the migrated active job
        assert q.enqueue(["make"], key="nightly") == 1

        claimed = q.claim("w2", lanes=["build"])
        assert claimed is not None and claimed.id == 1 and claimed.attempts == 2
        assert claimed.lease_until == 130.0  # its own lease_s (30)
        assert q.complete(1, claimed.token).state is JobState.DONE

        # a v1 finished job gets a finish time, so prune can remove it
        assert q.get(2).finished_at == 5.0
        assert q.prune(60) == 1
        assert {x.id for x in q.jobs()} == {1, 3}
        assert c.execute("SELECT count(*) FROM events WHERE job_id = 2").fetchone()[0] == 0


@pytest.mark.skipif(db.SCHEMA_VERSION < 3, reason="no v3 yet")
def test_migrates_a_v2_database_keeping_inline_envs(tmp_path):
    """v2 stored each job's env inline in jobs.env; v3 moved new ones to envs."""
    path = tmp_path / "queue.db"
    conn = sqlite3.connect(path, isolation_level=None)
    assert db.migrate(conn, 2) == 2
    assert "env_id" not in columns(conn, "jobs")
    conn.execute(
        "INSERT INTO jobs (command, state, lane, priority, attempts, max_attempts, lease_s,"
        " not_before, key, cwd, env, message, created_at, updated_at, label, shell)"
        " VALUES (?, 'queued', 'default', 0, 0, 3, 60.0, 5.0, 'k', '/w', ?, '', 1.0, 1.0, 'lbl', 1)",
        (json.dumps(["make"]), json.dumps({"PATH": "/bin", "HOME": "/h"})),
    )
    conn.close()
    with Queue(path, ManualClock(10.0)) as q:
        assert q.engine.store.conn.execute("PRAGMA user_version").fetchone()[0] == db.SCHEMA_VERSION
        j = q.get(1)
        assert (j.command, j.env, j.key, j.cwd, j.label, j.shell) == (
            ["make"], {"PATH": "/bin", "HOME": "/h"}, "k", "/w", "lbl", True)
        assert q.enqueue(["again"], key="k") == 1  # the key still deduplicates
        new = q.enqueue(["new"], env={"PATH": "/bin", "HOME": "/h"})
        assert q.get(new).env == j.env
        claimed = q.claim("w")
        assert claimed.id == 1 and claimed.env == {"PATH": "/bin", "HOME": "/h"}


def test_v1_duplicate_keys_are_rejected_by_the_new_unique_index(tmp_path):
    # v1 never allowed two active jobs with one key; should one exist anyway the
    # migration fails as a whole and leaves the database at v1.
    path = tmp_path / "queue.db"
    conn = _make_v1(path)
    for _ in range(2):
        conn.execute(V1_INSERT, ('["x"]', "queued", "default", 0, 0, 3, 60.0, None, 1.0, None,
                                 None, None, "dup", None, None, "", 1.0, 1.0))
    conn.close()
    with pytest.raises(StorageError):
        Queue(path)
    assert user_version(path) == 1
    conn = sqlite3.connect(path)
    assert "label" not in columns(conn, "jobs")  # the failed step was rolled back entirely
    assert conn.execute("SELECT count(*) FROM jobs").fetchone()[0] == 2
    conn.close()


def test_statements_splitter_drops_comments_and_blanks():
    stmts = db._statements("CREATE TABLE t (a INT -- a comment\n);\n\n -- only a comment\n;SELECT 1;")
    assert stmts == ["CREATE TABLE t (a INT \n)", "SELECT 1"]


@pytest.mark.parametrize("version", range(len(db.MIGRATIONS)))
def test_migration_scripts_survive_the_naive_splitter(version):
    # _statements splits on ';' before stripping comments: a ';' in a comment
    # would cut a statement in two.
    for line in db.MIGRATIONS[version].splitlines():
        assert ";" not in line.partition("--")[2], line


@pytest.mark.skipif(db.SCHEMA_VERSION < 4, reason="no v4 yet")
def test_migrates_a_v3_database_claimed_becomes_running_lanes_are_registered(tmp_path):
    path = tmp_path / "queue.db"
    conn = sqlite3.connect(path, isolation_level=None)
    assert db.migrate(conn, 3) == 3
    assert "prereqs" not in columns(conn, "jobs")
    insert = ("INSERT INTO jobs (command, state, lane, priority, attempts, max_attempts, lease_s, not_before,"
              " lease_until, token, worker, key, message, created_at, updated_at)"
              " VALUES (?, ?, ?, 0, ?, 3, 60.0, 1.0, ?, ?, ?, ?, '', ?, ?)")
    conn.execute(insert, ('["run"]', "claimed", "video", 1, 70.0, "tok", "w1", "k1", 5.0, 5.0))
    conn.execute(insert, ('["wait"]', "queued", "default", 0, None, None, None, None, 2.0, 2.0))
    conn.execute(insert, ('["old"]', "done", "gone", 1, None, None, "w1", None, 1.0, 3.0))
    conn.close()
    with Queue(path, ManualClock(50.0)) as q:
        assert q.engine.store.conn.execute("PRAGMA user_version").fetchone()[0] == db.SCHEMA_VERSION
        assert indexes(q.engine.store.conn) >= V2_INDEXES | {"jobs_blocked", "deps_after"}
        job = q.get(1)
        assert job.state is JobState.RUNNING and (job.after, job.no_retry_exit) == ([], [126, 127])
        assert q.heartbeat(1, "tok").lease_until == 110.0  # its holder keeps its lease
        assert q.enqueue(["again"], key="k1") == 1  # and its key
        assert {j.id for j in q.running()} == {1}
        assert set(q.lane_rows()) == {"video", "default", "gone"}  # a lane outlives its jobs
        assert q.claim("w2").id == 2
        (blocked,) = q.enqueue_many([{"command": ["after"], "after": [1]}])
        q.complete(1, "tok")
        assert q.get(blocked).state is JobState.QUEUED


def test_migrates_v10_batch_records_into_the_batches_table_and_keys_stay_unique(tmp_path):
    """Issue 33: the v5 batch records (meta rows) move into the batches
    table, still found by their token; a key stays taken by its active job."""
    path = tmp_path / "queue.db"
    conn = sqlite3.connect(path, isolation_level=None)
    assert db.migrate(conn, 10) == 10
    conn.execute("INSERT INTO meta (key, value) VALUES ('batch:tok1', ?)", (json.dumps({"at": 5.0, "ids": [[1, 2]]}),))
    conn.execute("INSERT INTO jobs (command, state, lane, priority, attempts, max_attempts, lease_s, not_before,"
                 " key, message, created_at, updated_at) VALUES ('[\"a\"]', 'queued', 'default', 0, 0, 3, 60.0, 1.0,"
                 " 'k1', '', 5.0, 5.0)")
    conn.close()
    with Queue(path, ManualClock(50.0)) as q:
        assert q.batch_ids("tok1") == [1, 2]
        assert q.engine.store.conn.execute("SELECT count(*) FROM meta WHERE key LIKE 'batch:%'").fetchone()[0] == 0
        assert q.get(1).batch is None and q.enqueue(["b"], key="k1") == 1
        assert indexes(q.engine.store.conn) >= {"jobs_active_key", "jobs_key_head", "jobs_batch", "batches_name"}

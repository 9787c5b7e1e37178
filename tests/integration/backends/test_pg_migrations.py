"""The PostgreSQL queue's schema migrations, from a database the previous
release (schema v2) used, with jobs in every state in it: as
tests/unit/test_migrations.py does for SQLite. On the real server of
tests/support/pg.py."""

from __future__ import annotations

import json

import psycopg
import pytest

from sloth_daemon.backends.postgres import migrate as pg_migrate, db as pgdb
from sloth_daemon.queue import Queue
from sloth_daemon.clock import ManualClock
from sloth_daemon.errors import StorageError
from sloth_daemon.models import JobState

pytestmark = pytest.mark.postgres

V2_INSERT = """
INSERT INTO sloth.jobs (command, state, lane, priority, attempts, tries, max_attempts, lease_s, timeout_s,
                        not_before, lease_until, token, worker, key, cwd, env_id, label, message,
                        created_at, updated_at, finished_at)
VALUES (%s, %s, %s, %s, %s, %s, %s, 60, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s) RETURNING id
"""


@pytest.fixture
def v2_url(pg_fresh):
    """A database at schema v2 with rows as the v2 code wrote them: queued,
    claimed (a live lease), done, failed; an environment; events."""
    url = pg_fresh(migrated=False)
    with pgdb.opened(url) as conn:
        assert pg_migrate.migrate(conn, 2) == 2
    with psycopg.connect(url, autocommit=True) as c:
        env = c.execute("INSERT INTO sloth.envs (hash, data) VALUES ('h', %s) RETURNING id",
                        (json.dumps({"CC": "gcc"}),)).fetchone()[0]
        token = f"{c.execute('SELECT nextval(%s)', ('sloth.fence',)).fetchone()[0]}-00112233aabbccdd"
        rows = [
            (["make", "-j4"], "queued", "build", 3, 1, 1, 5, 600.0, 10.0, None, None, None, "nightly", "/src",
             env, "build it", "", 1.0, 2.0, None),
            (["sleep", "9"], "claimed", "default", 0, 2, 2, 3, None, 1.0, 170.0, token, "w1", "held", None,
             None, None, "", 5.0, 110.0, None),
            (["true"], "done", "default", 0, 1, 1, 3, None, 1.0, None, None, "w1", None, None, None, None,
             "exit 0", 0.5, 8.0, 8.0),
            (["false"], "failed", "build", 0, 3, 3, 3, None, 1.0, None, None, "w1", "k", None, None, None,
             "exit 1", 3.0, 9.0, 9.0),
        ]
        ids = [c.execute(V2_INSERT, (json.dumps(r[0]), *r[1:])).fetchone()[0] for r in rows]
        for jid, kind in zip(ids, ["claimed", "claimed", "done", "failed"]):
            c.execute("INSERT INTO sloth.events (job_id, at, kind, attempt, message) VALUES (%s, 2, %s, 1, '')",
                      (jid, kind))
    return url, ids, token


def test_a_v2_database_refuses_work_until_migrated(v2_url):
    url, _, _ = v2_url
    with pytest.raises(StorageError, match="schema v2"):
        Queue(url, migrate=False)
    with pgdb.opened(url) as conn:
        st = pg_migrate.status(conn)
    assert (st.current, st.pending) == (2, [m.name for m in pg_migrate.migrations()[2:]])


def test_a_v2_database_with_jobs_in_it_migrates_and_keeps_every_job(v2_url):
    url, (queued, held, done, failed), token = v2_url
    clock = ManualClock(100.0)
    with Queue(url, clock, lease_s=50) as q:
        assert q.engine.reads.schema_status().up_to_date and q.identity
        assert q.counts() == {"blocked": 0, "queued": 1, "held": 0, "running": 1, "done": 1, "failed": 1, "cancelled": 0}
        j = q.get(queued)
        assert (j.command, j.lane, j.priority, j.key, j.cwd, j.env, j.label) == (
            ["make", "-j4"], "build", 3, "nightly", "/src", {"CC": "gcc"}, "build it")
        assert (j.attempts, j.tries, j.max_attempts, j.not_before, j.created_at) == (1, 1, 5, 10.0, 1.0)
        assert (j.after, j.retry_exit, j.no_retry_exit) == ([], None, [126, 127])
        assert [e.kind for e in q.events(held)] == ["claimed"]
        assert set(q.lane_rows()) == {"build", "default"} and q.lane_rows()["build"]["created_at"] == 1.0

        # the holder of a lease taken before the upgrade still holds it
        running = q.get(held)
        assert (running.state, running.token, running.lease_until) == (JobState.RUNNING, token, 170.0)
        assert q.heartbeat(held, token).lease_until == 160.0
        assert q.enqueue(["other"], key="held") == held  # a running job's key is still taken
        assert q.enqueue(["other"], key="nightly") == queued
        assert q.complete(held, token).state is JobState.DONE

        # the new schema works on the old rows: dependencies, retry, the claim
        (after,) = q.enqueue_many([{"command": ["after"], "after": [queued]}])
        assert q.get(after).state is JobState.BLOCKED
        assert q.retry(failed).state is JobState.QUEUED
        job = q.claim("w2", lanes=["build"])
        assert job.id == queued and job.attempts == 2 and int(job.token.split("-")[0]) > int(token.split("-")[0])
        q.complete(queued, job.token)
        assert q.get(after).state is JobState.QUEUED
        assert q.get(q.enqueue(["ls"], cwd="/tmp/caf\udce9")).cwd == "/tmp/caf\udce9"

"""What the PostgreSQL queue risks that the SQLite one does not: claimers on
several connections at once, the server's clock instead of ours, schema
migrations by daemons that start together, a server that restarts under
us, and connection settings. The contract itself is tested against both
backends in tests/unit/test_queue.py and test_queue_model.py.

Every test runs on the real server of tests/support/pg.py. Races are made
with threads and barriers and judged by their outcomes, never by time.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
from collections import Counter

import psycopg
import pytest

from sloth_daemon.backends.postgres import migrate as pg_migrate, db as pgdb
from sloth_daemon.queue import Queue
from sloth_daemon.clock import ManualClock, SystemClock
from sloth_daemon.errors import IllegalTransition, LeaseLost, StorageError
from sloth_daemon.models import JobState
from tests.support.queues import in_transaction, sql

pytestmark = pytest.mark.postgres


def server_now(url: str) -> float:
    with psycopg.connect(url) as c:
        return c.execute("SELECT extract(epoch FROM clock_timestamp())::float8").fetchone()[0]


def run_together(*fns):
    """Run each fn in its own thread, released at once by a barrier; return
    their results (or the exceptions they raised) in order."""
    barrier = threading.Barrier(len(fns))
    out: list = [None] * len(fns)

    def run(i, fn):
        barrier.wait()
        try:
            out[i] = fn()
        except Exception as e:  # the outcome is what the test judges
            out[i] = e

    threads = [threading.Thread(target=run, args=(i, fn)) for i, fn in enumerate(fns)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


# ------------------------------------------------------------ importing
def test_importing_the_queue_does_not_import_psycopg(tmp_path):
    """`sloth add` and the SQLite daemon never pay for psycopg."""
    code = textwrap.dedent(f"""
        import sys
        import sloth_daemon.queue, sloth_daemon.cli, sloth_daemon.daemon.main
        from sloth_daemon.queue import open_queue
        with open_queue({str(tmp_path / "q.db")!r}) as q:
            q.enqueue(["true"])
        print(sorted(m for m in sys.modules if m.split(".")[0] in ("psycopg", "psycopg_binary")))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout


def test_a_url_without_psycopg_is_a_storage_error_with_the_fix():
    code = textwrap.dedent("""
        import sys
        sys.modules["psycopg"] = None  # as if it were not installed
        from sloth_daemon.errors import StorageError
        from sloth_daemon.queue import open_queue
        try:
            open_queue("postgresql://nobody@127.0.0.1:1/sloth")
        except StorageError as e:
            print(e.message, "|", e.hint)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "needs psycopg" in out.stdout and "slothqueue[postgres]" in out.stdout, out.stdout


# ----------------------------------------------------------------- clock
def test_times_come_from_the_server_clock(pg_url):
    """clock=None (and a SystemClock, this machine's wall clock) use the
    server's clock: every time written lies between two readings of it."""
    for clock in (None, SystemClock()):
        with Queue(pg_url, clock, lease_s=30) as q:
            before = server_now(pg_url)
            jid = q.enqueue(["x"])
            job = q.claim("w")
            now = q.clock.now()
            after = server_now(pg_url)
            created = q.get(jid).created_at
            assert before <= created <= job.updated_at <= now <= after
            assert job.lease_until == job.updated_at + 30
            assert [e.at for e in q.events(jid)] == [job.updated_at]
            q.complete(jid, job.token)


def test_a_client_whose_wall_clock_is_ten_minutes_ahead_changes_nothing(pg_url, fakeclock):
    code = textwrap.dedent("""
        import json, sys, time
        from sloth_daemon.queue import open_queue
        with open_queue(sys.argv[1], lease_s=30) as q:   # the default clock: this machine's
            job = q.claim("skewed") if q.enqueue(["x"]) else None
            print(json.dumps({"local": time.time(), "created": job.created_at,
                              "claimed": job.updated_at, "lease_until": job.lease_until}))
    """)
    fakeclock.jump(600)
    before = server_now(pg_url)
    out = subprocess.run([sys.executable, "-c", code, pg_url], capture_output=True, text=True,
                         check=True, env={**os.environ, **fakeclock.env()})
    after = server_now(pg_url)
    got = json.loads(out.stdout)
    assert got["local"] > after + 500, "the child's clock was not skewed: the test proves nothing"
    assert before <= got["created"] <= got["claimed"] <= after
    assert got["lease_until"] == got["claimed"] + 30


def test_the_contract_on_the_server_clock(pg_url):
    """The production path (one-statement writes that commit alone) keeps
    the contract the pinned-clock tests check."""
    with Queue(pg_url, lease_s=60) as q:
        a = q.enqueue(["a"], priority=1)
        b = q.enqueue(["b"])
        job = q.claim("w1")
        assert (job.id, job.attempts, job.state) == (a, 1, JobState.CLAIMED)
        assert job.lease_until == job.updated_at + 60
        hb = q.heartbeat(a, job.token, lease_s=5)
        assert hb.lease_until == hb.updated_at + 5 and hb.token == job.token
        with pytest.raises(LeaseLost):
            q.heartbeat(a, "1-0000000000000000")
        with pytest.raises(IllegalTransition):
            q.complete(b, "1-0000000000000000")
        q.set_runner(a, job.token, {"pid": 7})
        q.abandon(a, job.token, message="holder died")
        again = q.claim("w2")  # the abandoned lease counts as expired
        assert (again.id, again.attempts, again.runner) == (a, 2, {"pid": 7})
        with pytest.raises(LeaseLost):
            q.complete(a, job.token)
        done = q.complete(a, again.token, exit_code=0)
        assert done.state == JobState.DONE and done.finished_at == done.updated_at
        assert [e.kind for e in q.events(a)] == ["claimed", "started", "abandoned", "reclaimed", "done"]
        assert not in_transaction(q)


# ------------------------------------------------------------ claimers
def test_a_claim_skips_a_row_another_session_holds_instead_of_waiting(pg_url):
    with Queue(pg_url) as q:
        first = q.enqueue(["first"], priority=1)
        second = q.enqueue(["second"])
        with psycopg.connect(pg_url) as other:  # holds the best row, as a claimer mid-statement would
            other.execute("SELECT 1 FROM sloth.jobs WHERE id = %s FOR UPDATE", (first,))
            # statement_timeout 5 s: if the claim waited for the lock, it would fail, not hang
            with Queue(pg_url, options=pgdb.PgOptions(statement_timeout_s=5)) as q2:
                assert q2.claim("w2").id == second
                assert q2.claim("w2") is None
        assert q.claim("w1").id == first


def test_two_claimers_racing_claim_each_job_exactly_once(pg_url):
    n = 400
    with Queue(pg_url) as q:
        ids = q.enqueue_many([{"command": [str(i)], "priority": i % 3} for i in range(n)])

    def drain(name):
        got = []
        with Queue(pg_url) as mine:
            while (job := mine.claim(name, lease_s=600)) is not None:
                got.append(job.id)
                mine.complete(job.id, job.token)
        return got

    a, b = run_together(lambda: drain("a"), lambda: drain("b"))
    assert not isinstance(a, Exception) and not isinstance(b, Exception), (a, b)
    per_job = Counter(a + b)
    assert set(per_job) == set(ids) and max(per_job.values()) == 1
    with Queue(pg_url) as q:
        assert q.counts()["done"] == n


def test_a_reclaim_racing_a_complete_never_overwrites_it(pg_url):
    """River #1302: whichever wins, the loser changes nothing. Either the
    holder completed (the job is done and nobody reclaimed it) or the
    reclaim came first (the holder's complete is refused)."""
    clock = ManualClock(0.0)
    outcomes = Counter()
    with Queue(pg_url, clock, lease_s=10) as holder, Queue(pg_url, clock, lease_s=10) as rescuer:
        for _ in range(150):
            clock.advance(100)
            jid = holder.enqueue(["x"])
            job = holder.claim("holder")
            clock.advance(11)  # the lease has expired: a rescuer may take it
            done, taken = run_together(lambda: holder.complete(jid, job.token),
                                       lambda: rescuer.claim("rescuer"))
            kinds = [e.kind for e in rescuer.events(jid)]
            final = rescuer.get(jid)
            if isinstance(done, LeaseLost):
                assert taken is not None and taken.id == jid and taken.attempts == 2
                assert final.state == JobState.CLAIMED and final.token == taken.token
                assert kinds == ["claimed", "reclaimed"]
                outcomes["reclaimed"] += 1
                rescuer.complete(jid, taken.token)
            else:
                assert not isinstance(done, Exception), done
                assert taken is None, "a completed job was handed out again"
                assert final.state == JobState.DONE and kinds == ["claimed", "done"]
                outcomes["completed"] += 1
    assert sum(outcomes.values()) == 150, outcomes


def test_racing_enqueues_of_one_key_make_one_job(pg_url):
    with Queue(pg_url) as q:
        for i in range(30):
            key = f"k{i}"
            queues = [Queue(pg_url) for _ in range(3)]
            try:
                ids = run_together(*[lambda mine=m: mine.enqueue(["x"], key=key) for m in queues])
            finally:
                for m in queues:
                    m.close()
            assert len(set(ids)) == 1 and isinstance(ids[0], int), ids
        assert sql(q, "SELECT count(*) FROM jobs")[0][0] == 30


# ------------------------------------------------------------ migrations
def test_daemons_opening_an_empty_database_together_migrate_it_once(pg_fresh):
    url = pg_fresh(migrated=False)
    results = run_together(*[lambda: Queue(url).close() for _ in range(6)])
    assert all(r is None for r in results), results
    with Queue(url, migrate=False) as q:
        assert sql(q, "SELECT version FROM migrations ORDER BY version") == [
            (v,) for v in range(1, pg_migrate.SCHEMA_VERSION + 1)]  # each applied once
        assert q.engine.reads.schema_status().up_to_date
        assert q.enqueue(["x"]) == 1


def test_a_newer_schema_is_refused_and_left_alone(pg_fresh):
    url = pg_fresh()
    future = pg_migrate.SCHEMA_VERSION + 1
    with psycopg.connect(url) as c:
        c.execute("INSERT INTO sloth.migrations (version, name) VALUES (%s, 'from the future')", (future,))
    for migrate in (True, False):
        with pytest.raises(StorageError) as ei:
            Queue(url, migrate=migrate)
        assert f"schema v{future}" in ei.value.message and "newer" in ei.value.message
        assert "Upgrade sloth" in ei.value.hint
    with pgdb.opened(url) as conn:
        st = pg_migrate.status(conn)
    assert (st.current, st.latest, st.newer) == (future, pg_migrate.SCHEMA_VERSION, True)


def test_without_migrate_an_empty_database_is_refused(pg_fresh):
    url = pg_fresh(migrated=False)
    with pytest.raises(StorageError) as ei:
        Queue(url, migrate=False)
    assert "sloth db migrate" in ei.value.hint
    with pgdb.opened(url) as conn:
        st = pg_migrate.status(conn)
        assert (st.current, st.pending) == (0, [m.name for m in pg_migrate.migrations()])
        assert pg_migrate.migrate(conn) == pg_migrate.SCHEMA_VERSION
        assert pg_migrate.status(conn).up_to_date


def test_migrations_are_numbered_without_gaps():
    ms = pg_migrate.migrations()
    assert [m.version for m in ms] == list(range(1, len(ms) + 1)) and pg_migrate.SCHEMA_VERSION == len(ms)


# ------------------------------------------------------------ connection
def test_a_server_restart_reconnects_or_raises_a_storage_error(pg_cluster, pg_fresh):
    url = pg_fresh()
    # retry_after_s=0: each call tries the server again (the window in which
    # calls fail at once after a failed reconnect has a test of its own)
    q = Queue(url, options=pgdb.PgOptions(reconnect_s=0.3, retry_after_s=0))
    try:
        kept = q.enqueue(["before"])
        pg_cluster.stop("fast")
        try:
            for op in (q.counts, lambda: q.enqueue(["x"]), lambda: q.claim("w")):
                with pytest.raises(StorageError) as ei:
                    op()
                assert "PostgreSQL" in ei.value.message and ei.value.hint
        finally:
            pg_cluster.start()
        job = q.claim("w")  # the first call after the restart is a write: it reconnects
        assert job.id == kept
        q.complete(job.id, job.token)
        pg_cluster.stop("immediate")  # a crash: committed work survives it
        pg_cluster.start()
        assert q.get(kept).state == JobState.DONE and q.counts()["done"] == 1
    finally:
        if not pg_cluster.running():
            pg_cluster.start()
        q.close()


def test_unreachable_server_and_unknown_database_are_storage_errors(pg_cluster):
    fast = pgdb.PgOptions(reconnect_s=0.2, connect_timeout_s=2)
    with pytest.raises(StorageError) as ei:
        Queue("postgresql://sloth@127.0.0.1:1/sloth", options=fast)
    assert "cannot connect to PostgreSQL at sloth@127.0.0.1:1/sloth" in ei.value.message
    with pytest.raises(StorageError) as ei:
        Queue(pg_cluster.url("no_such_db"))
    assert 'database "no_such_db" does not exist' in ei.value.message


def test_connection_settings_are_in_force_and_no_transaction_stays_open(pg_cluster, pg_url):
    tcp = pg_cluster.tcp_url(psycopg.conninfo.conninfo_to_dict(pg_url)["dbname"])
    with Queue(tcp, options=pgdb.PgOptions(statement_timeout_s=7, idle_in_transaction_s=11)) as q:
        conn = q.engine.store.db._conn
        assert conn.execute("SHOW statement_timeout").fetchone()["statement_timeout"] == "7s"
        assert conn.execute("SHOW idle_in_transaction_session_timeout").fetchone()[
            "idle_in_transaction_session_timeout"] == "11s"
        libpq = {o.keyword.decode(): (o.val or b"").decode() for o in conn.pgconn.info}
        assert (libpq["keepalives"], libpq["keepalives_idle"], libpq["tcp_user_timeout"],
                libpq["connect_timeout"]) == ("1", "10", "20000", "10")
        jid = q.enqueue(["x"])
        job = q.claim("w")
        for op in (lambda: q.heartbeat(jid, job.token), lambda: q.fail(jid, job.token),
                   lambda: q.cancel(jid), lambda: q.retry(jid), q.counts):
            op()
            assert not in_transaction(q)
        with pytest.raises(LeaseLost):
            q.complete(jid, job.token)
        assert not in_transaction(q)


def test_a_statement_stuck_behind_a_lock_becomes_a_storage_error(pg_url):
    with Queue(pg_url, options=pgdb.PgOptions(statement_timeout_s=0.2)) as q:
        jid = q.enqueue(["x"])
        with psycopg.connect(pg_url) as other:
            other.execute("SELECT 1 FROM sloth.jobs WHERE id = %s FOR UPDATE", (jid,))
            with pytest.raises(StorageError) as ei:
                q.cancel(jid)  # waits for the row lock until statement_timeout
            assert "statement_timeout" in ei.value.hint
        assert q.get(jid).state == JobState.QUEUED and not in_transaction(q)
        assert q.cancel(jid).state == JobState.CANCELLED

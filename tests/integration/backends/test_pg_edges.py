"""What the PostgreSQL queue must hold beyond the shared contract (which
tests/unit/test_queue*.py run on both backends): dependencies settled right
while several daemons end, add and retry jobs at once; a queue whose
database is dropped, emptied or swapped under it; waits for another
session's locks; the read-only view; the server's duration wording.

Every test runs on the real server of tests/support/pg.py. Races are made
with threads and barriers and judged by their outcomes, never by time.
"""

from __future__ import annotations

import psycopg
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from psycopg import sql as pgsql

from sloth_daemon.backends.postgres import pick
from sloth_daemon.backends.postgres import migrate as pg_migrate
from sloth_daemon.backends import open_read_only
from sloth_daemon.queue import Queue
from sloth_daemon.durations import format_duration
from sloth_daemon.errors import QueueBroken, StorageBusy, StorageError
from sloth_daemon.models import JobState
from tests.integration.backends.test_pg_queue import run_together
from tests.support.queues import in_transaction

pytestmark = pytest.mark.postgres
ROUNDS = 40


def dbname(url: str) -> str:
    return psycopg.conninfo.conninfo_to_dict(url)["dbname"]


# ------------------------------------------------- dependencies, raced
def test_two_prerequisites_ending_at_once_queue_their_dependent(pg_url):
    """Each end sees the other prerequisite unfinished in its own snapshot;
    the lock settle takes on the dependent makes the second one look again."""
    with Queue(pg_url) as q, Queue(pg_url) as q1, Queue(pg_url) as q2:
        for _ in range(ROUNDS):
            a, b = q.enqueue(["a"]), q.enqueue(["b"])
            (j,) = q.enqueue_many([{"command": ["j"], "after": [a, b]}])
            ta, tb = q.claim("w").token, q.claim("w").token
            out = run_together(lambda: q1.complete(a, ta), lambda: q2.complete(b, tb))
            assert not any(isinstance(x, Exception) for x in out), out
            assert q.get(j).state is JobState.QUEUED
            q.cancel(j)


def test_an_enqueue_after_a_job_racing_its_end_never_waits_forever(pg_url):
    with Queue(pg_url) as q, Queue(pg_url) as q1, Queue(pg_url) as q2:
        for i in range(ROUNDS):
            p = q.enqueue(["p"])
            token = q.claim("w").token
            end = (lambda: q1.complete(p, token)) if i % 2 else (lambda: q1.fail(p, token, retry=False))
            out = run_together(end, lambda: q2.enqueue_many([{"command": ["j"], "after_any": [p]}]))
            assert not isinstance(out[0], Exception) and isinstance(out[1], list), out
            (j,) = out[1]
            assert q.get(j).state is JobState.QUEUED, q.events(j)
            q.cancel(j)


def test_a_retry_racing_its_prerequisites_end_never_waits_forever(pg_url):
    with Queue(pg_url) as q, Queue(pg_url) as q1, Queue(pg_url) as q2:
        for _ in range(ROUNDS):
            p = q.enqueue(["p"])
            (j,) = q.enqueue_many([{"command": ["j"], "after": [p]}])
            q.cancel(j)
            token = q.claim("w").token
            out = run_together(lambda: q1.complete(p, token), lambda: q2.retry(j))
            assert not any(isinstance(x, Exception) for x in out), out
            assert q.get(j).state is JobState.QUEUED, q.events(j)
            q.cancel(j)


def test_requests_that_lock_jobs_in_opposite_orders_both_finish(pg_cluster, pg_fresh):
    """Two cancels of the same jobs in opposite orders deadlock; the server
    ends one, and it runs again instead of failing."""
    url = pg_fresh()
    with pg_cluster.admin() as admin:  # notice deadlocks in 20 ms, not 1 s
        admin.execute(pgsql.SQL("ALTER DATABASE {} SET deadlock_timeout = '20ms'").format(
            pgsql.Identifier(dbname(url))))
    with Queue(url) as q, Queue(url) as q1, Queue(url) as q2:
        for _ in range(ROUNDS):
            ids = [q.enqueue([str(i)]) for i in range(6)]
            out = run_together(lambda: q1.cancel_many(ids), lambda: q2.cancel_many(ids[::-1]))
            assert not any(isinstance(x, Exception) for x in out), out
            assert sorted(j.id for r in out for j in r.jobs) == ids  # each cancelled once


# ------------------------------------------------- the database changes
def test_a_queue_knows_its_identity_and_refuses_another(pg_url):
    with Queue(pg_url) as q, psycopg.connect(pg_url, autocommit=True) as other:
        q.check()
        jid = q.enqueue(["x"])
        other.execute("UPDATE sloth.meta SET value = '\"f00dfeedf00dfeed\"' WHERE key = 'queue_id'")
        with pytest.raises(QueueBroken) as ei:
            q.check()
        assert "another queue" in ei.value.message and "queue_url" in ei.value.hint
        assert "f00dfeedf00dfeed" in (q.broken or "")
        for op in (lambda: q.enqueue(["y"]), lambda: q.get(jid), lambda: q.claim("w"), q.check):
            with pytest.raises(QueueBroken):
                op()
        assert other.execute("SELECT count(*) FROM sloth.jobs").fetchone()[0] == 1


def test_two_daemons_opening_a_new_queue_agree_on_its_identity(pg_fresh):
    url = pg_fresh(migrated=False)
    queues = run_together(*[lambda: Queue(url) for _ in range(4)])
    try:
        assert len({q.identity for q in queues}) == 1, queues
    finally:
        for q in queues:
            if isinstance(q, Queue):
                q.close()


def test_a_dropped_database_breaks_the_queue(pg_cluster, pg_fresh):
    url = pg_fresh()
    q = Queue(url)
    try:
        q.enqueue(["x"])
        pg_cluster.drop_database(dbname(url))  # WITH (FORCE): ends our session too
        with pytest.raises(QueueBroken) as ei:
            q.enqueue(["y"])
        assert "is gone" in ei.value.message and "does not exist" in ei.value.message
        with pytest.raises(QueueBroken):
            q.check()
        assert q.broken is not None
    finally:
        q.close()


def test_a_url_that_reaches_another_database_after_a_reconnect_breaks_the_queue(pg_cluster, pg_fresh):
    """A failover to the wrong server, or another database put in its place:
    the first request on the new connection finds another queue there."""
    mine, theirs = pg_fresh(), pg_fresh()
    Queue(theirs).close()  # a queue with an identity of its own
    q = Queue(mine)
    try:
        q.enqueue(["x"])
        with pg_cluster.admin() as admin:
            for name in (dbname(mine), dbname(theirs)):
                admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s",
                              (name,))
            admin.execute(pgsql.SQL("ALTER DATABASE {} RENAME TO {}").format(
                pgsql.Identifier(dbname(mine)), pgsql.Identifier(dbname(mine) + "_old")))
            admin.execute(pgsql.SQL("ALTER DATABASE {} RENAME TO {}").format(
                pgsql.Identifier(dbname(theirs)), pgsql.Identifier(dbname(mine))))
        with pytest.raises(QueueBroken) as ei:
            q.counts()
        assert "another queue" in ei.value.message
        assert Queue(mine).close() is None  # the other queue itself is fine
    finally:
        q.close()
        pg_cluster.drop_database(dbname(mine) + "_old")


def test_a_schema_dropped_under_an_open_queue_breaks_it(pg_fresh):
    url = pg_fresh()
    with Queue(url) as q:
        q.enqueue(["x"])
        with psycopg.connect(url, autocommit=True) as other:
            other.execute("DROP SCHEMA sloth CASCADE")
        with pytest.raises(QueueBroken) as ei:
            q.enqueue(["y"])
        assert "lost its schema" in ei.value.message
        assert not in_transaction(q)


# ----------------------------------------------------------- lock waits
def test_a_write_waits_for_a_held_row_only_as_long_as_lock_wait_s(pg_url):
    with Queue(pg_url, lock_wait_s=0.2) as q, psycopg.connect(pg_url) as other:
        jid = q.enqueue(["x"])
        other.execute("SELECT 1 FROM sloth.jobs WHERE id = %s FOR UPDATE", (jid,))
        with pytest.raises(StorageBusy):
            q.cancel(jid)
        assert not in_transaction(q)
        other.rollback()
        assert q.cancel(jid).state is JobState.CANCELLED


# ------------------------------------------------------------ read-only
def test_the_read_only_view_refuses_a_database_without_the_schema_and_creates_nothing(pg_fresh):
    url = pg_fresh(migrated=False)
    with pytest.raises(StorageError) as ei:
        open_read_only(url)
    assert "sloth db migrate" in ei.value.hint
    with psycopg.connect(url) as c:
        assert c.execute("SELECT to_regnamespace('sloth')").fetchone()[0] is None


def test_the_read_only_view_refuses_a_newer_schema(pg_fresh):
    url = pg_fresh()
    with psycopg.connect(url) as c:
        c.execute("INSERT INTO sloth.migrations (version, name) VALUES (%s, 'future')",
                  (pg_migrate.SCHEMA_VERSION + 1,))
    with pytest.raises(StorageError, match="newer"):
        open_read_only(url)


# ------------------------------------------------- what a claim reads
class _Rollback(Exception):
    pass


PLANS: list[dict] = []  # the last plans explained, for a failure's message


def rows_read(q: Queue, sql: str, params: dict, *, first: str | None = None) -> int:
    """Rows of sloth.jobs the server read to run ``sql`` (EXPLAIN ANALYZE,
    rolled back): work, not time. ``first``: a statement the queue runs
    before it in the same transaction."""
    found: list[int] = []

    def explain(c):
        if first:
            c.execute(first)
        plan = c.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + sql, params).fetchone()["QUERY PLAN"]
        found.append(_jobs_rows(plan[0]["Plan"]))
        PLANS.append(plan[0]["Plan"])
        raise _Rollback

    with pytest.raises(_Rollback):
        q.engine.store.db.write(explain, "explaining")
    return found[0]


def _plan_text(node: dict, depth: int = 0) -> str:
    """A plan as lines of node type, relation, index and rows read (a failure's message)."""
    line = (f"{'  ' * depth}{node['Node Type']} {node.get('Relation Name', '')} {node.get('Index Name', '')}"
            f" rows={node.get('Actual Rows')} removed={node.get('Rows Removed by Filter', 0)}"
            f" loops={node.get('Actual Loops')} filter={node.get('Filter', node.get('Index Cond', ''))}")
    return "\n".join([line] + [_plan_text(c, depth + 1) for c in node.get("Plans", [])])


def _jobs_rows(node: dict) -> int:
    n = 0
    if node.get("Relation Name") == "jobs":
        n += (node["Actual Rows"] + node.get("Rows Removed by Filter", 0)) * node["Actual Loops"]
    return n + sum(_jobs_rows(child) for child in node.get("Plans", []))


def test_a_lane_with_a_backlog_costs_a_claim_that_skips_it_nothing(pg_url):
    """The daemon claims with its full and paused lanes excluded: their
    backlog must not be walked by every claim (it was: 20,000 rows each)."""
    with Queue(pg_url) as q:
        q.enqueue_many([{"command": ["x"], "lane": "busy", "priority": 5} for _ in range(20_000)])
        q.enqueue_many([{"command": ["y"], "lane": lane} for lane in "abc" for _ in range(5)])
        # The statistics of these rows, not of whatever test ran before on this
        # worker: pg_statistic survives the TRUNCATE between tests (CI once
        # planned this claim on such leftovers and read 140,097 rows).
        q.engine.store.db.write(lambda c: c.execute("ANALYZE sloth.jobs"), "analyzing")
        for kw in ({"exclude_lanes": {"busy"}}, {"lanes": ["b"]}, {}):
            sql, args = pick.claim_statement("w", None, kw.get("lanes"), kw.get("exclude_lanes", ()), ())
            assert rows_read(q, sql, {**args, "rand": "0" * 16}) < 40, (kw, _plan_text(PLANS[-1]))
            sql, args = pick.next_due_statement(kw.get("lanes"), kw.get("exclude_lanes", ()), ())
            assert rows_read(q, sql, args) < 40, kw
        assert q.claim("w", exclude_lanes={"busy"}).lane == "a"


def test_jobs_waiting_on_a_gate_cost_a_claim_nothing(pg_url):
    """20,000 higher-priority jobs waiting for mains power (issue 24) are out
    of the claim indexes: a claim, a due time and the list of gates read a
    few rows, not them."""
    with Queue(pg_url) as q:
        q.enqueue_many([{"command": ["g"], "when": ["ac"], "priority": 9} for _ in range(20_000)])
        q.enqueue_many([{"command": ["y"], "lane": lane} for lane in "abc" for _ in range(5)])
        sql, args = pick.claim_statement("w", None, None, (), ())
        assert rows_read(q, sql, {**args, "rand": "0" * 16}) < 40
        sql, args = pick.next_due_statement(None, (), ())
        assert rows_read(q, sql, args) < 40
        # The gates' skip-scan is judged on a table the server has analyzed (as
        # autovacuum does after such a load): on the statistics a whole suite's
        # earlier tests left, it was seen to walk every gated row (40,030).
        q.engine.store.db.write(lambda c: c.execute("ANALYZE sloth.jobs"), "analyzing")
        assert rows_read(q, pick.SQL_GATES, {}, first=pick.SQL_GATES_PLAN) < 10
        sql, args = pick.gated_statement((), (), None)
        assert rows_read(q, sql, {**args, "gates": ['{"when":["ac"]}']}) < 20
        assert q.claim("w").lane == "a"


# ----------------------------------------------- the server's durations
@settings(max_examples=300, deadline=None)
@given(st.one_of(st.floats(0, 10, allow_nan=False), st.floats(0, 1e7, allow_nan=False),
                 st.floats(-100, 0, allow_nan=False), st.integers(0, 10**7).map(float),
                 st.integers(0, 2000).map(lambda n: n / 200), st.integers(0, 8000).map(lambda n: n / 8000)))
def test_the_server_words_durations_as_python_does(pg_dbs, seconds):
    """Reclaim events say how long ago a lease ran out, written by the
    server in the claim statement: in the same words as on SQLite."""
    with psycopg.connect(pg_dbs.shared_url) as c:
        got = c.execute("SELECT sloth.format_duration(%s)", (seconds,)).fetchone()[0]
    assert got == format_duration(seconds), seconds

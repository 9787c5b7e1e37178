"""The hot statements of the PostgreSQL queue read what they take, whatever
the planner's statistics say. A burst of jobs lands in a table the server
last analyzed when it was empty; until autovacuum catches up, a statement
whose plan depends on those statistics may walk every queued row for each
claim. Counted here in rows read (EXPLAIN ANALYZE of the very statement the
queue runs, rolled back), never in time.
"""

from __future__ import annotations

import json
import os

import psycopg
from psycopg import sql as psql
import pytest

from sloth_daemon.backends.postgres import pick
from sloth_daemon.queue import Queue

pytestmark = pytest.mark.postgres


def rows_read(url: str, sql: str, args: dict) -> int:
    """Rows the plan's scans of sloth.jobs produced (each loop counted),
    the statement run and rolled back."""
    with psycopg.connect(url) as c:
        plan = c.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + sql, args).fetchone()[0]
        c.rollback()
    if isinstance(plan, str):
        plan = json.loads(plan)

    def walk(node: dict) -> int:
        own = (node["Actual Rows"] * node["Actual Loops"]
               if node.get("Relation Name") == "jobs" and "Scan" in node["Node Type"] else 0)
        return own + sum(walk(p) for p in node.get("Plans", []))

    return walk(plan[0]["Plan"])


@pytest.mark.parametrize("places", [None, ["a", ""]])
def test_claim_many_reads_only_the_rows_it_takes_after_a_burst_the_statistics_predate(pg_url, places):
    with Queue(pg_url) as q:
        with psycopg.connect(pg_url, autocommit=True) as c:
            c.execute("ANALYZE sloth.jobs")  # the statistics of an empty queue
        q.enqueue_many([{"command": ["true"], **({"place": "*"} if places else {})} for _ in range(1500)])
    sql, args = pick.claim_many_statement("w", None, 4, "default", places)
    read = rows_read(pg_url, sql, {**args, "rand": os.urandom(8).hex()})
    # 4 taken (per place looked into at most 4 read, locked and sorted); main read 1,499 + these
    assert read <= 4 * (len(places) if places else 1) + 4, read


def test_complete_many_reads_only_the_rows_it_ends_after_a_burst_the_statistics_predate(pg_url):
    from sloth_daemon.backends.contract import Completion
    from sloth_daemon.backends.postgres import leases

    with Queue(pg_url) as q:
        with psycopg.connect(pg_url, autocommit=True) as c:
            c.execute("ANALYZE sloth.jobs")  # the statistics of an empty queue
        q.enqueue_many([{"command": ["true"]} for _ in range(1500)])
        held = q.claim_many("w", 32, lane="default")
        pg = q.engine.leases
        items = [pg._completion(n, Completion(j.id, j.token, "", 0, None, {"pid": 1})) for n, j in enumerate(held)]
    sql = leases.SQL_COMPLETE_MANY.format(lazy="", join_lazy="")
    with psycopg.connect(pg_url) as c:  # planned as a unit plans it (db.UNIT_PLANS)
        c.execute("SET plan_cache_mode = force_generic_plan")
        c.execute(sql, {"items": json.dumps(items)}, prepare=True)  # the generic plan, kept by the session
        c.rollback()
        c.execute("PREPARE probe(jsonb) AS " + sql.replace("%(items)s", "$1"))
        plan = c.execute(psql.SQL("EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE probe({})").format(
            psql.Literal(json.dumps(items)))).fetchone()[0]
        c.rollback()

    def walk(node: dict) -> int:
        own = (node["Actual Rows"] * node["Actual Loops"]
               if node.get("Relation Name") == "jobs" and "Scan" in node["Node Type"] else 0)
        return own + sum(walk(p) for p in node.get("Plans", []))

    read = walk(plan[0]["Plan"])
    assert read <= 2 * 32, read  # the UPDATE's and the cost's look-ups by id

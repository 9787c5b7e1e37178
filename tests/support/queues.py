"""Backend-neutral helpers for the queue contract tests."""

from __future__ import annotations

from typing import Any, Sequence

BACKENDS = ("sqlite", "postgres")


def is_pg(q: Any) -> bool:
    from sloth_daemon.backends import is_url

    return is_url(str(q.target))


def sql(q: Any, stmt: str, params: Sequence[Any] = ()) -> list[tuple]:
    """Run one statement with ``?`` placeholders on the queue's own database
    (tables unqualified) and return its rows as tuples. For tests that look
    under the contract: stored text, row counts, a forced attempt count."""
    if not is_pg(q):
        return q.engine.reads.conn.execute(stmt, params).fetchall()

    def run(c):
        c.execute("SET LOCAL search_path = sloth")
        c.execute(stmt.replace("?", "%s"), params)
        return [tuple(r.values()) for r in c.fetchall()] if c.description else []

    return q.engine.reads._db.write(run, "running a test statement")


def make_inserts_fail(q: Any, label: str) -> None:
    """From now on inserting a job with this label fails inside the database
    (a trigger), so a test can check that a batch rolls back whole."""
    if not is_pg(q):
        q.engine.reads.conn.execute(
            "CREATE TEMP TRIGGER boom BEFORE INSERT ON main.jobs"
            f" WHEN NEW.label = '{label}' BEGIN SELECT RAISE(ABORT, 'boom'); END")
        return
    sql(q, f"""CREATE OR REPLACE FUNCTION sloth_test_boom() RETURNS trigger LANGUAGE plpgsql AS $$
               BEGIN IF NEW.label = '{label}' THEN RAISE EXCEPTION 'boom'; END IF;
               RETURN NEW; END $$""")
    sql(q, "CREATE TRIGGER sloth_test_boom BEFORE INSERT ON jobs FOR EACH ROW"
           " EXECUTE FUNCTION sloth_test_boom()")


def in_transaction(q: Any) -> bool:
    if not is_pg(q):
        return q.engine.reads.conn.in_transaction
    from psycopg.pq import TransactionStatus

    conn = q.engine.reads._db._conn
    return conn is not None and conn.info.transaction_status != TransactionStatus.IDLE

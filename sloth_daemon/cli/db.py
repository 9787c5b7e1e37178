"""`sloth db migrate` and `sloth db status`: the queue's schema, which queue
it is, and (a shared queue) the machines that serve it.

A daemon migrates a SQLite queue itself when it starts; a shared
PostgreSQL queue is migrated only here, deliberately: every machine that
serves it must know its schema, and a daemon refuses one it does not know
(older: `sloth db migrate`; newer: upgrade sloth on that machine).
"""

from __future__ import annotations

from typing import Any

from sloth_daemon.cli.connection import paths

from sloth_daemon.cli.output import echo, emit_json


def db_migrate(*, as_json: bool) -> None:
    """`sloth db migrate` (its help and options: commands.py)."""
    res = _migrate()
    if as_json:
        emit_json(res)
        return
    if res["before"] == res["after"]:
        echo(f"{res['queue']}: schema v{res['after']}, up to date")
    else:
        echo(f"{res['queue']}: schema v{res['before']} -> v{res['after']}")


def db_status(*, as_json: bool) -> None:
    """`sloth db status` (its help and options: commands.py)."""
    from sloth_daemon.durations import format_duration

    st = _status()
    if as_json:
        emit_json(st)
        return
    s = st["schema"]
    echo(f"queue     {st['queue']}")
    note = "up to date" if not s["pending"] else (
        f"{len(s['pending'])} migration(s) pending: {', '.join(s['pending'])} (`sloth db migrate`)")
    if s["current"] > s["latest"]:
        note = "NEWER than this sloth: upgrade sloth on this machine"
    echo(f"schema    v{s['current']} (this sloth: v{s['latest']}); {note}")
    echo(f"identity  {st['identity'] or '(none yet)'}")
    for h in st["hosts"]:
        tags = f" ({', '.join(h['tags'])})" if h["tags"] else ""
        echo(f"host      {h['name']}{tags}: pid {h['pid']}, sloth {h['version']},"
                   f" seen {format_duration(max(h['ago'], 0))} ago")


# ------------------------------------------------------------------- inside
def _target() -> Any:
    from sloth_daemon.cli.offline import target

    return target(paths())


def _migrate() -> dict[str, Any]:
    t = _target()
    if not isinstance(t, str):
        from sloth_daemon.backends.sqlite import db

        before = _sqlite_version(t)
        db.connect(t).close()  # connect migrates
        return {"queue": str(t), "before": before, "after": db.SCHEMA_VERSION}
    from sloth_daemon.backends.postgres import migrate as pg_migrate, db as pgdb
    from sloth_daemon.backends.postgres.errors import describe
    from sloth_daemon.queue import Queue

    with pgdb.opened(t) as conn:
        before = pg_migrate.status(conn).current
    Queue(t, migrate=True).close()  # migrates under the lock, and gives a new queue its identity
    return {"queue": describe(t), "before": before, "after": pg_migrate.SCHEMA_VERSION}


def _sqlite_version(path: Any) -> int:
    import sqlite3

    from sloth_daemon.backends.sqlite import db

    try:
        conn = db.connect_readonly(path)
    except FileNotFoundError:
        return 0
    except Exception:  # noqa: BLE001 - another schema: the migration says what it is
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return int(conn.execute("PRAGMA user_version").fetchone()[0])
    finally:
        conn.close()


def _status() -> dict[str, Any]:
    t = _target()
    if not isinstance(t, str):
        return _sqlite_status(t)
    from sloth_daemon.backends.postgres import migrate as pg_migrate, db as pgdb
    from sloth_daemon.backends.postgres.errors import describe

    with pgdb.opened(t) as conn:
        s = pg_migrate.status(conn)
        ident = conn.read(_identity, "reading the queue's identity") if s.current else None
        hosts = conn.read(lambda c: c.execute(
            "SELECT *, sloth.now() - last_seen AS ago FROM sloth.hosts ORDER BY name").fetchall(),
            "listing hosts") if s.current >= 4 else []
    return {"queue": describe(t), "kind": "postgresql", "identity": ident,
            "schema": {"current": s.current, "latest": s.latest, "pending": s.pending},
            "hosts": [{k: (list(v) if k == "tags" else v) for k, v in h.items() if k != "boot_id"} for h in hosts]}


def _identity(c: Any) -> Any:
    import json

    from sloth_daemon.backends.postgres.identity import SQL_ID

    row = c.execute(SQL_ID).fetchone()
    return None if row is None else json.loads(row["value"])


def _sqlite_status(path: Any) -> dict[str, Any]:
    from sloth_daemon.backends.sqlite import db
    from sloth_daemon.backends.sqlite.identity import recorded

    current = _sqlite_version(path)
    pending = [f"v{v + 1}" for v in range(current, db.SCHEMA_VERSION)]
    return {"queue": str(path), "kind": "sqlite", "identity": recorded(paths()),
            "schema": {"current": current, "latest": db.SCHEMA_VERSION, "pending": pending}, "hosts": []}

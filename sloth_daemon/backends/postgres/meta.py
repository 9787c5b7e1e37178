"""The PostgreSQL queue's own records beside its jobs: the meta table
(small persisted settings such as paused lanes; the queue's identity is
identity.py's), the lanes table and the machine's own history
(machine_events: each host's daemon up, its sleeps; docs/timeline.md).
Their reads are reads.py's."""

from __future__ import annotations

import json
from typing import Any

from sloth_daemon.backends import contract, rules
from sloth_daemon.backends.postgres.db import Connection, Cursor, one

SQL_SET_META = ("INSERT INTO sloth.meta (key, value) VALUES (%s, %s)"
                " ON CONFLICT (key) DO UPDATE SET value = excluded.value")
SQL_SET_LANE = ("INSERT INTO sloth.lanes (name, concurrency, config_was, created_at) VALUES (%s, %s, %s, sloth.now())"
                " ON CONFLICT (name) DO UPDATE SET concurrency = excluded.concurrency,"
                " config_was = excluded.config_was")

SQL_CRASHED = ("UPDATE sloth.machine_events SET detail = 'crashed'"
               " WHERE host = %s AND kind = 'up' AND detail = 'running'")
SQL_UP = ("INSERT INTO sloth.machine_events (host, kind, start_at, end_at, detail)"
          " VALUES (%s, 'up', sloth.now(), sloth.now(), 'running') RETURNING id")
SQL_SEEN = ("UPDATE sloth.machine_events SET end_at = greatest(end_at, sloth.now()), detail = coalesce(%s, detail)"
            " WHERE id = %s")
SQL_SLEPT = ("INSERT INTO sloth.machine_events (host, kind, start_at, end_at, detail)"
             " VALUES (%s, 'sleep', sloth.now() - %s, sloth.now(), %s)")
SQL_BOUNDED = ("DELETE FROM sloth.machine_events WHERE host = %(host)s AND id <= (SELECT id FROM sloth.machine_events"
               " WHERE host = %(host)s ORDER BY id DESC LIMIT 1 OFFSET %(kept)s)")


class PgMeta(contract.Meta):
    """Writes of meta and lanes on ``db`` (their reads are reads.py's)."""

    def __init__(self, db: Connection) -> None:
        self.db = db

    def set_meta(self, key: str, value: Any) -> None:
        text = json.dumps(value)
        self.db.write(lambda c: c.execute(SQL_SET_META, (key, text)), "saving a setting")

    def set_lane(self, name: str, concurrency: int | None, config_was: int | None = None) -> None:
        self.db.write(lambda c: c.execute(SQL_SET_LANE, (name, concurrency, config_was)), "saving a lane")

    def forget_lane(self, name: str) -> None:
        self.db.write(lambda c: c.execute("DELETE FROM sloth.lanes WHERE name = %s", (name,)),
                      "forgetting a lane")

    def machine_up(self, host: str) -> int:
        def up(c: Cursor) -> int:
            c.execute(SQL_CRASHED, (host,))
            row_id = int(one(c.execute(SQL_UP, (host,)))["id"])
            c.execute(SQL_BOUNDED, {"host": host, "kept": rules.MACHINE_EVENTS_KEPT})
            return row_id
        return self.db.write(up, "recording the daemon's start")

    def machine_seen(self, row_id: int, *, ended: str | None = None) -> None:
        self.db.write(lambda c: c.execute(SQL_SEEN, (ended, row_id)), "stamping the daemon's time up")

    def machine_slept(self, host: str, seconds: float, why: str) -> None:
        def slept(c: Cursor) -> None:
            c.execute(SQL_SLEPT, (host, max(0.0, float(seconds)), why))
            c.execute(SQL_BOUNDED, {"host": host, "kept": rules.MACHINE_EVENTS_KEPT})
        self.db.write(slept, "recording a sleep")

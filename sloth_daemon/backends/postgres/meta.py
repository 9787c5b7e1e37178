"""The PostgreSQL queue's own records beside its jobs: the meta table
(small persisted settings such as paused lanes; the queue's identity is
identity.py's) and the lanes table. Their reads are reads.py's."""

from __future__ import annotations

import json
from typing import Any

from sloth_daemon.backends import contract
from sloth_daemon.backends.postgres.db import Connection

SQL_SET_META = ("INSERT INTO sloth.meta (key, value) VALUES (%s, %s)"
                " ON CONFLICT (key) DO UPDATE SET value = excluded.value")
SQL_SET_LANE = ("INSERT INTO sloth.lanes (name, concurrency, config_was, created_at) VALUES (%s, %s, %s, sloth.now())"
                " ON CONFLICT (name) DO UPDATE SET concurrency = excluded.concurrency,"
                " config_was = excluded.config_was")


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

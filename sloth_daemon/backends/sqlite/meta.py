"""The SQLite queue's own records beside its jobs: the meta table (the
queue's identity, small persisted settings such as paused lanes) and the
lanes table (a lane outlives its jobs; `sloth lane set` records its
concurrency there). The reads of both are reads.py's."""

from __future__ import annotations

import os
import json
from typing import Any

from sloth_daemon.backends import contract
from sloth_daemon.backends.sqlite.reads import reads
from sloth_daemon.backends.sqlite.unit import SqliteStore
from sloth_daemon.clock import Clock


class SqliteMeta(contract.Meta):
    """Writes of meta and lanes through ``store``; ``clock`` stamps them."""

    def __init__(self, store: SqliteStore, clock: Clock) -> None:
        self.store, self.conn, self.clock = store, store.conn, clock

    def identity(self) -> str:
        """This queue's stable id: random, made with the queue (or the first
        time a queue of an older sloth is opened), kept in meta. Logs live
        under it, so a new queue in the same folder never writes into an old
        queue's log files (identity.py)."""
        found = self._recorded_id()
        if isinstance(found, str):
            return found
        with self.store.tx() as c:
            row = c.execute("SELECT value FROM meta WHERE key = 'queue_id'").fetchone()
            if row is not None:
                return str(json.loads(row[0]))
            qid = os.urandom(8).hex()
            c.executemany("INSERT INTO meta (key, value) VALUES (?, ?)", [
                ("queue_id", json.dumps(qid)), ("queue_created_at", json.dumps(self.clock.now()))])
            return qid

    @reads
    def _recorded_id(self) -> Any:
        row = self.conn.execute("SELECT value FROM meta WHERE key = 'queue_id'").fetchone()
        return None if row is None else json.loads(row[0])

    def set_meta(self, key: str, value: Any) -> None:
        with self.store.tx() as c:
            c.execute(
                "INSERT INTO meta (key, value) VALUES (?, ?)"
                " ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                (key, json.dumps(value)),
            )

    def set_lane(self, name: str, concurrency: int | None, config_was: int | None = None) -> None:
        with self.store.tx() as c:
            c.execute(
                "INSERT INTO lanes (name, concurrency, config_was, created_at) VALUES (?, ?, ?, ?)"
                " ON CONFLICT(name) DO UPDATE SET concurrency = excluded.concurrency,"
                " config_was = excluded.config_was", (name, concurrency, config_was, self.clock.now()))

    def forget_lane(self, name: str) -> None:
        with self.store.tx() as c:
            c.execute("DELETE FROM lanes WHERE name = ?", (name,))

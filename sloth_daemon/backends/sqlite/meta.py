"""The SQLite queue's own records beside its jobs: the meta table (the
queue's identity, small persisted settings such as paused lanes) and the
lanes table (a lane outlives its jobs; `sloth lane set` records its
concurrency there), and the machine's own history (machine_events: the
daemon's time up, the sleeps; docs/timeline.md). The reads of all are reads.py's."""

from __future__ import annotations

import os
import json
import sqlite3
from typing import Any

from sloth_daemon.backends import contract, rules
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

    def machine_up(self, host: str) -> int:
        now = self.clock.now()
        with self.store.tx() as c:
            c.execute("UPDATE machine_events SET detail = 'crashed'"
                      " WHERE host = ? AND kind = 'up' AND detail = 'running'", (host,))
            row_id = int(c.execute("INSERT INTO machine_events (host, kind, start_at, end_at, detail)"
                                   " VALUES (?, 'up', ?, ?, 'running')", (host, now, now)).lastrowid or 0)
            _keep_bounded(c, host)
            return row_id

    def machine_seen(self, row_id: int, *, ended: str | None = None) -> None:
        # A stamp needs no fsync: lost to a power cut, the downtime starts a stamp earlier.
        with self.store.tx(durable=ended is not None) as c:
            c.execute("UPDATE machine_events SET end_at = max(end_at, ?), detail = coalesce(?, detail)"
                      " WHERE id = ?", (self.clock.now(), ended, row_id))

    def machine_slept(self, host: str, seconds: float, why: str) -> None:
        now = self.clock.now()
        with self.store.tx() as c:
            c.execute("INSERT INTO machine_events (host, kind, start_at, end_at, detail) VALUES (?, 'sleep', ?, ?, ?)",
                      (host, now - max(0.0, float(seconds)), now, why))
            _keep_bounded(c, host)


def _keep_bounded(c: sqlite3.Connection, host: str) -> None:
    """At most rules.MACHINE_EVENTS_KEPT rows of ``host``: the oldest go."""
    c.execute("DELETE FROM machine_events WHERE host = ? AND id <= (SELECT id FROM machine_events WHERE host = ?"
              " ORDER BY id DESC LIMIT 1 OFFSET ?)", (host, host, rules.MACHINE_EVENTS_KEPT))

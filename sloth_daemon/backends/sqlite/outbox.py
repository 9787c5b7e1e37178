"""The outbox on the SQLite queue (contract.Outbox, docs/telling.md): the
rows the trigger events_tell writes with each run's start and end (db.py,
migration 10 -> 11), leased to the daemon's sender, marked sent or failed,
retried or dropped by hand. Every time is the injected clock's."""

from __future__ import annotations

import json
import os
from typing import Any, Mapping, Sequence

from sloth_daemon.backends import contract
from sloth_daemon.backends.sqlite.reads import reads
from sloth_daemon.backends.sqlite.unit import SqliteStore
from sloth_daemon.clock import Clock
from sloth_daemon.text import storable

SQL_DUE = ("SELECT id FROM outbox INDEXED BY outbox_due WHERE state = 'pending' AND next_at <= ?"
           " AND (lease_until IS NULL OR lease_until < ?) ORDER BY next_at, id LIMIT ?")
SQL_LEASE = ("UPDATE outbox SET token = ?, sender = ?, lease_until = ?, tries = tries + 1"
             " WHERE id = ? RETURNING *")




class SqliteOutbox(contract.Outbox):
    """The outbox's rows: writes through ``store``, ``now`` from ``clock``."""

    def __init__(self, store: SqliteStore, clock: Clock) -> None:
        self.store, self.conn, self.clock = store, store.conn, clock

    def claim(self, sender: str, *, limit: int, lease_s: float) -> list[contract.Message]:
        now = self.clock.now()
        with self.store.tx(durable=False) as c:
            ids = [r[0] for r in c.execute(SQL_DUE, (now, now, limit)).fetchall()]
            lease = (os.urandom(8).hex(), sender, now + lease_s)
            return [contract.Message.from_row(c.execute(SQL_LEASE, (*lease, i)).fetchone()) for i in ids]

    def free(self, prefix: str) -> int:
        with self.store.tx(durable=False) as c:
            return c.execute("UPDATE outbox SET lease_until = NULL, token = NULL WHERE state = 'pending'"
                             " AND lease_until IS NOT NULL AND substr(sender, 1, ?) = ?",
                             (len(prefix), prefix)).rowcount

    def sent(self, msg_id: int, token: str) -> bool:
        now = self.clock.now()
        with self.store.tx() as c:
            return c.execute("UPDATE outbox SET state = 'sent', sent_at = ?, lease_until = NULL, last_error = NULL"
                             " WHERE id = ? AND token = ? AND state = 'pending'", (now, msg_id, token)).rowcount > 0

    def failed_try(self, msg_id: int, token: str, error: str, retry_in_s: float | None) -> bool:
        now = self.clock.now()
        state, next_at = ("failed", now) if retry_in_s is None else ("pending", now + retry_in_s)
        with self.store.tx() as c:
            return c.execute("UPDATE outbox SET state = ?, next_at = ?, lease_until = NULL, last_error = ?"
                             " WHERE id = ? AND token = ? AND state = 'pending'",
                             (state, next_at, storable(error[:contract.Message.MAX_ERROR]), msg_id, token)).rowcount > 0

    @reads
    def next_at(self) -> float | None:
        row = self.conn.execute("SELECT min(max(next_at, coalesce(lease_until, 0))) FROM outbox"
                                " WHERE state = 'pending'").fetchone()
        return row[0]

    @reads
    def messages(self, states: Sequence[str] = ("pending", "failed"), limit: int = 200) -> list[contract.Message]:
        marks = ", ".join("?" * len(states))
        return [contract.Message.from_row(r) for r in self.conn.execute(
            f"SELECT * FROM outbox WHERE state IN ({marks}) ORDER BY id LIMIT ?", (*states, limit))]

    @reads
    def retry(self, ids: Sequence[int]) -> list[int]:
        now = self.clock.now()
        with self.store.tx() as c:
            return [r[0] for i in _ids(ids) for r in c.execute(
                "UPDATE outbox SET state = 'pending', next_at = ?, tries = 0, lease_until = NULL"
                " WHERE id = ? AND state IN ('pending', 'failed')"
                " AND (lease_until IS NULL OR lease_until < ?)"  # being sent now: freed, it would go twice
                " RETURNING id", (now, i, now)).fetchall()]

    def drop(self, ids: Sequence[int]) -> list[int]:
        with self.store.tx() as c:
            return [r[0] for i in _ids(ids) for r in c.execute(
                "DELETE FROM outbox WHERE id = ? AND state IN ('pending', 'failed') RETURNING id", (i,)).fetchall()]

    def add(self, key: str, event: str, channels: Sequence[Mapping[str, Any]], *, schedule: str | None = None,
            note: str = "") -> int:
        now = self.clock.now()
        rows = [(key, event, json.dumps(ch, sort_keys=True), schedule, storable(note), now, now)
                for ch in channels if event in ch.get("on", ())]
        with self.store.tx() as c:
            return sum(c.execute("INSERT OR IGNORE INTO outbox (key, event, channel, schedule, note, at, next_at)"
                                 " VALUES (?, ?, ?, ?, ?, ?, ?)", r).rowcount for r in rows)

    def prune(self, sent_before_s: float, failed_before_s: float) -> int:
        now = self.clock.now()
        with self.store.tx(durable=False) as c:
            return c.execute("DELETE FROM outbox WHERE (state = 'sent' AND sent_at < ?)"
                             " OR (state = 'failed' AND next_at < ?)",
                             (now - sent_before_s, now - failed_before_s)).rowcount


def _ids(ids: Sequence[int]) -> list[int]:
    return [i for i in ids if isinstance(i, int) and not isinstance(i, bool)]

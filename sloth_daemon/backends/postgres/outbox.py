"""The outbox on the PostgreSQL queue (contract.Outbox, docs/telling.md),
the counterpart of backends/sqlite/outbox.py: the rows the trigger
sloth.events_tell writes with each run's start and end (migration 0013),
leased to one machine's sender at a time (FOR UPDATE SKIP LOCKED: two
daemons claiming at once take different rows), on the server's clock."""

from __future__ import annotations

import json
import os
from typing import Any, Mapping, Sequence

from sloth_daemon.backends import contract
from sloth_daemon.backends.postgres.db import Connection, Cursor, one, storable_text

SQL_CLAIM = """UPDATE sloth.outbox o SET token = t.token, sender = %(sender)s,
        lease_until = sloth.now() + %(lease_s)s, tries = o.tries + 1
    FROM (SELECT id, md5(random()::text || id::text || %(salt)s) AS token FROM sloth.outbox
          WHERE state = 'pending' AND next_at <= sloth.now()
            AND (lease_until IS NULL OR lease_until < sloth.now())
          ORDER BY next_at, id LIMIT %(limit)s FOR UPDATE SKIP LOCKED) t
    WHERE o.id = t.id RETURNING o.*"""
SQL_ADD = ("INSERT INTO sloth.outbox (key, event, channel, schedule, note, at, next_at)"
           " VALUES (%s, %s, %s, %s, %s, sloth.now(), sloth.now()) ON CONFLICT DO NOTHING")




class PgOutbox(contract.Outbox):
    """The outbox's rows on ``db``. No state of its own."""

    def __init__(self, db: Connection) -> None:
        self.db = db

    def claim(self, sender: str, *, limit: int, lease_s: float) -> list[contract.Message]:
        args = {"sender": sender, "lease_s": lease_s, "limit": limit, "salt": os.urandom(8).hex()}

        def tx(c: Cursor) -> list[contract.Message]:
            rows = c.execute(SQL_CLAIM, args).fetchall()
            return sorted((contract.Message.from_row(r) for r in rows), key=lambda m: m.id)
        return self.db.write(tx, "claiming messages to send")

    def free(self, prefix: str) -> int:
        return self.db.write(lambda c: c.execute(
            "UPDATE sloth.outbox SET lease_until = NULL, token = NULL WHERE state = 'pending'"
            " AND lease_until IS NOT NULL AND left(sender, %s) = %s", (len(prefix), prefix)).rowcount,
            "freeing a dead sender's messages")

    def sent(self, msg_id: int, token: str) -> bool:
        return self.db.write(lambda c: c.execute(
            "UPDATE sloth.outbox SET state = 'sent', sent_at = sloth.now(), lease_until = NULL, last_error = NULL"
            " WHERE id = %s AND token = %s AND state = 'pending'", (msg_id, token)).rowcount > 0,
            "marking a message sent")

    def failed_try(self, msg_id: int, token: str, error: str, retry_in_s: float | None) -> bool:
        state = "failed" if retry_in_s is None else "pending"
        return self.db.write(lambda c: c.execute(
            "UPDATE sloth.outbox SET state = %s, next_at = sloth.now() + %s, lease_until = NULL, last_error = %s"
            " WHERE id = %s AND token = %s AND state = 'pending'",
            (state, retry_in_s or 0.0, storable_text(error[:contract.Message.MAX_ERROR]), msg_id, token)).rowcount > 0,
            "noting a failed delivery")

    def next_at(self) -> float | None:
        row = self.db.read(lambda c: one(c.execute(
            "SELECT min(greatest(next_at, coalesce(lease_until, 0))) AS t FROM sloth.outbox"
            " WHERE state = 'pending'")), "reading the outbox")
        return row["t"]

    def messages(self, states: Sequence[str] = ("pending", "failed"), limit: int = 200) -> list[contract.Message]:
        rows = self.db.read(lambda c: c.execute(
            "SELECT * FROM sloth.outbox WHERE state = ANY(%s) ORDER BY id LIMIT %s",
            (list(states), limit)).fetchall(), "reading the outbox")
        return [contract.Message.from_row(r) for r in rows]

    def retry(self, ids: Sequence[int]) -> list[int]:
        return self.db.write(lambda c: [r["id"] for r in c.execute(
            "UPDATE sloth.outbox SET state = 'pending', next_at = sloth.now(), tries = 0, lease_until = NULL"
            " WHERE id = ANY(%s) AND state IN ('pending', 'failed')"
            " AND (lease_until IS NULL OR lease_until < sloth.now())"  # being sent now: freed, it would go twice
            " RETURNING id", (_ids(ids),)).fetchall()],
            "retrying messages")

    def drop(self, ids: Sequence[int]) -> list[int]:
        return self.db.write(lambda c: [r["id"] for r in c.execute(
            "DELETE FROM sloth.outbox WHERE id = ANY(%s) AND state IN ('pending', 'failed') RETURNING id",
            (_ids(ids),)).fetchall()], "dropping messages")

    def add(self, key: str, event: str, channels: Sequence[Mapping[str, Any]], *, schedule: str | None = None,
            note: str = "") -> int:
        rows = [(key, event, json.dumps(ch, sort_keys=True), schedule, storable_text(note))
                for ch in channels if event in ch.get("on", ())]
        return self.db.write(lambda c: sum(c.execute(SQL_ADD, r).rowcount for r in rows), "writing a message")

    def prune(self, sent_before_s: float, failed_before_s: float) -> int:
        return self.db.write(lambda c: c.execute(
            "DELETE FROM sloth.outbox WHERE (state = 'sent' AND sent_at < sloth.now() - %s)"
            " OR (state = 'failed' AND next_at < sloth.now() - %s)",
            (sent_before_s, failed_before_s)).rowcount, "pruning sent and failed messages")


def _ids(ids: Sequence[int]) -> list[int]:
    return sorted({i for i in ids if isinstance(i, int) and not isinstance(i, bool)})

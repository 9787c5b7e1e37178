"""The PostgreSQL queue's storage as the contract's Store: its one
connection (db.Connection: connecting, reconnecting, the unit of a
worker's turn, the sticky ``broken``), the writer that tells changed
dependents after a commit, and the queue's identity that every new
connection is checked against."""

from __future__ import annotations

from typing import ContextManager

from sloth_daemon.backends import contract
from sloth_daemon.backends.postgres import identity as pg_identity
from sloth_daemon.backends.postgres.db import Connection
from sloth_daemon.backends.postgres.writer import PgWriter

SQL_FLUSH = ("INSERT INTO sloth.meta (key, value) VALUES ('flushed', '0')"
             " ON CONFLICT (key) DO UPDATE SET value = (sloth.meta.value::bigint + 1)::text")


class PgStore(contract.Store):
    """The store over ``db`` of the queue ``identity``; ``writer`` holds
    ``on_side_change``. A unit commits synchronously: what it wrote is
    durable once it ends, and sync() is flush()."""

    units_durable = True

    def __init__(self, db: Connection, writer: PgWriter, identity: str) -> None:
        self.db, self.writer, self.identity = db, writer, identity

    @property
    def on_side_change(self) -> contract.SideChange | None:
        return self.writer.on_side_change

    @on_side_change.setter
    def on_side_change(self, fn: contract.SideChange | None) -> None:
        self.writer.on_side_change = fn

    def unit(self) -> ContextManager[None]:
        return self.db.unit()

    def flush(self) -> None:
        self.db.write(lambda c: c.execute(SQL_FLUSH), "flushing the log of commits")

    def sync(self) -> None:
        # one synchronous commit makes the lazy ones before it durable: a flush
        self.flush()

    def check(self) -> None:
        why = self.db.read(lambda c: pg_identity.other_queue(c.connection, self.identity), "checking the queue")
        if why is not None:
            raise self.db.mark_broken(why)

    @property
    def broken(self) -> str | None:
        return self.db.broken

    def rest(self) -> None:
        pass  # Nothing to give back: the server holds the cache.

    def checkpoint(self) -> None:
        pass  # The server's files: no process of ours watches them.

    def revalidate(self) -> None:
        self.db.revalidate()

    def close(self) -> None:
        self.db.close()

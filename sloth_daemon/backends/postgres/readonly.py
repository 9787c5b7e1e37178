"""The PostgreSQL queue opened to read only: what the CLI reads when no
daemon answers (``ls``, ``show``, ``logs``; the counterpart of
backends/sqlite/readonly.py). Never migrates or writes: every transaction on its
connection is read only, so the server itself refuses a write, and a
schema that is not exactly this sloth's is refused, never touched."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from sloth_daemon.backends.postgres import identity as pg_identity, migrate as pg_migrate, db as pgdb
from sloth_daemon.backends.postgres.hosts import PgHosts
from sloth_daemon.backends.postgres.logs import PgLogs
from sloth_daemon.backends.postgres.reads import PgReads
from sloth_daemon.backends.postgres.scan import PgScan

# One look, for a command that must answer whatever the server does (`sloth
# config`): libpq's shortest connect timeout (it reads less than 2 s as 2),
# no reconnecting, statements bounded as tightly.
QUICK = pgdb.PgOptions(connect_timeout_s=2, tcp_user_timeout_s=2.0, statement_timeout_s=2.0, reconnect_s=0.0)


class PgReadOnly(PgReads, PgHosts, PgLogs):
    def __init__(self, url: str, options: pgdb.PgOptions | None = None) -> None:
        """Raises StorageError (unreachable, or no queue of this sloth's schema there)."""
        self.url = url
        self._envs: dict[int, dict[str, str]] = {}
        options = dataclasses.replace(options or pgdb.PgOptions(), read_only=True)
        self._db = pgdb.Connection(url, options, lambda: None)
        try:
            pg_migrate.check_schema(self._db)
            row = self._db.read(lambda c: c.execute(pg_identity.SQL_ID).fetchone(), "reading the queue's identity")
            self.identity: str | None = None if row is None else str(json.loads(row["value"]))
        except BaseException:
            self._db.close()
            raise

    def scan(self, *, owns_reader: bool = False, **kw: Any) -> PgScan:
        """The listing ``listing(**kw)`` would give, read a chunk at a time
        on this connection (backends/postgres/scan.py); ``owns_reader``: closing the scan
        closes this view."""
        return PgScan(self, owns_reader=owns_reader, **kw)

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> "PgReadOnly":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

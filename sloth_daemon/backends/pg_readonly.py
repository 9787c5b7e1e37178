"""The PostgreSQL queue opened to read only: what the CLI reads when no
daemon answers (``ls``, ``show``, ``logs``; the counterpart of
sqlite_readonly.py). Never migrates or writes: every transaction on its
connection is read only, so the server itself refuses a write, and a
schema that is not exactly this sloth's is refused, never touched."""

from __future__ import annotations

import dataclasses

from . import pg_migrate, pgdb
from .pg_reads import PgReads


class PgReadOnly(PgReads):
    def __init__(self, url: str, options: pgdb.PgOptions | None = None) -> None:
        """Raises StorageError (unreachable, or no queue of this sloth's schema there)."""
        self.url = url
        self._envs: dict[int, dict[str, str]] = {}
        options = dataclasses.replace(options or pgdb.PgOptions(), read_only=True)
        self._db = pgdb.Connection(url, options, lambda: None)
        try:
            pg_migrate.check_schema(self._db)
        except BaseException:
            self._db.close()
            raise

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> "PgReadOnly":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

"""The SQLite queue opened to read only, for the CLI when no daemon answers:
``ls``, ``show``, ``logs`` and ``config`` still work (and say so). Never
creates, migrates or writes the file, so it is safe beside a daemon that is
starting, and on a file the user may not write."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from typing import Any

from sloth_daemon.backends.sqlite import db
from sloth_daemon.backends.sqlite.reads import SqliteReads
from sloth_daemon.backends.sqlite.scan import SqliteScan


class SqliteReadOnly(SqliteReads):
    def __init__(self, path: str | os.PathLike[str]) -> None:
        """Raises FileNotFoundError (no queue yet) or StorageError."""
        self.path = Path(path)
        self._conn = db.connect_readonly(self.path)
        self._conn.row_factory = sqlite3.Row
        self._envs: dict[int, dict[str, str]] = {}

    def scan(self, *, owns_reader: bool = False, **kw: Any) -> SqliteScan:
        """The listing ``listing(**kw)`` would give, read a chunk at a time
        on this connection (backends/sqlite/scan.py); ``owns_reader``: closing the
        scan closes this view."""
        return SqliteScan(self, owns_reader=owns_reader, **kw)

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> "SqliteReadOnly":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

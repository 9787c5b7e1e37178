"""Attempt logs kept in the PostgreSQL queue, so that `sloth logs` works
from any machine: the daemon that runs an attempt appends its capped log
file to the attempt's row as it grows (logship.py), and marks it done once
all of it is there.

An append names the length it expects the row to have: an append that was
already made (its answer lost) or a row that moved on is not doubled, and
the caller asks for the length and goes on from there. The first append
alone creates the row. The size is bounded by the caller (the log file is
capped: log_cap_bytes, head and tail) and rows go with their job (a prune).
"""

from __future__ import annotations

from typing import Any

from sloth_daemon.backends import contract
from sloth_daemon.backends.contract import LogPart
from sloth_daemon.backends.postgres.db import Connection

SQL_APPEND = """
WITH new AS (
    INSERT INTO sloth.logs AS l (job_id, attempt, host, data, done, updated_at)
    SELECT %(job)s, %(attempt)s, %(host)s, %(data)s, %(done)s, sloth.now() WHERE %(offset)s = 0
    ON CONFLICT (job_id, attempt) DO NOTHING
    RETURNING octet_length(data) AS size
), old AS (
    UPDATE sloth.logs l SET data = l.data || %(data)s, done = %(done)s, host = %(host)s, updated_at = sloth.now()
    WHERE job_id = %(job)s AND attempt = %(attempt)s AND octet_length(l.data) = %(offset)s
      AND NOT EXISTS (SELECT 1 FROM new)
    RETURNING octet_length(data) AS size
)
SELECT size FROM new UNION ALL SELECT size FROM old
"""
SQL_SIZE = "SELECT octet_length(data) AS size, done FROM sloth.logs WHERE job_id = %s AND attempt = %s"
SQL_READ = ("SELECT substring(data FROM %s FOR %s) AS data, octet_length(data) AS size, done, host"
            " FROM sloth.logs WHERE job_id = %s AND attempt = %s")
SQL_OPEN = ("SELECT job_id, attempt, octet_length(data) AS size FROM sloth.logs"
            " WHERE host = %s AND NOT done ORDER BY job_id, attempt")


def append(db: Connection, job_id: int, attempt: int, host: str, data: bytes, offset: int,
           done: bool) -> int | None:
    """Append ``data`` where the stored log is ``offset`` bytes long (and
    mark it ``done``); the new length, or None if the stored length is not
    ``offset`` (see stored_size)."""
    rows = db.write_one(SQL_APPEND, {"job": job_id, "attempt": attempt, "host": host, "data": data,
                                     "offset": offset, "done": done}, "storing a job's log")
    return int(rows[0]["size"]) if rows else None


def stored_size(db: Connection, job_id: int, attempt: int) -> tuple[int, bool] | None:
    """(length, done) of the stored log, or None if there is none."""
    row = db.read(lambda c: c.execute(SQL_SIZE, (job_id, attempt)).fetchone(), "reading a job's log")
    return None if row is None else (int(row["size"]), bool(row["done"]))


def read(db: Connection, job_id: int, attempt: int, offset: int = 0, limit: int = 1 << 20) -> LogPart:
    """Up to ``limit`` bytes of the stored log from ``offset``."""
    row: Any = db.read(lambda c: c.execute(SQL_READ, (offset + 1, limit, job_id, attempt)).fetchone(),
                       "reading a job's log")
    if row is None:
        return LogPart(b"", None, False, None)
    return LogPart(bytes(row["data"]), int(row["size"]), bool(row["done"]), row["host"])


def unfinished(db: Connection, host: str) -> list[tuple[int, int, int]]:
    """(job, attempt, stored length) of the logs ``host`` began and never
    marked done (its daemon stopped before it could)."""
    rows = db.read(lambda c: c.execute(SQL_OPEN, (host,)).fetchall(), "reading unfinished logs")
    return [(int(r["job_id"]), int(r["attempt"]), int(r["size"])) for r in rows]


class PgLogs(contract.Logs):
    """The stored logs over ``db``, as the PostgreSQL queue (and its read-only view)
    offer them. No state of its own."""

    def __init__(self, db: Connection) -> None:
        self._db = db

    def stored_log(self, job_id: int, attempt: int, offset: int = 0, limit: int = 1 << 20) -> LogPart:
        return read(self._db, job_id, attempt, offset, limit)

"""The PostgreSQL queue's schema: the numbered SQL files of migrations/,
applied in order by whichever daemon opens the database first (the
PostgreSQL counterpart of db.py's migrations; backends/postgres/db.py connects).

Each migration runs in its own transaction under a transaction-level
advisory lock, so daemons that start together take turns and the second
finds the work done. A schema newer than this code is refused, never
touched: every machine sharing a queue must know its schema.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources

from sloth_daemon.errors import StorageError
from sloth_daemon.backends.postgres.db import Connection, Cursor, one

# pg_advisory_xact_lock key for migrations: b"sloth-mi" as a big-endian int64.
MIGRATION_LOCK = int.from_bytes(b"sloth-mi", "big") - 2**63


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str


def migrations() -> list[Migration]:
    """The numbered SQL files of migrations/, in order; numbers must run
    1, 2, 3... without a gap (checked: a gap would skip a schema change)."""
    folder = resources.files(__package__).joinpath("migrations")
    found = sorted(p.name for p in folder.iterdir() if p.name.endswith(".sql"))
    out = []
    for i, name in enumerate(found, start=1):
        number = int(name.split("_", 1)[0])
        if number != i:
            raise RuntimeError(f"migrations: expected migration {i}, found {name}")
        out.append(Migration(i, name[:-4], folder.joinpath(name).read_text(encoding="utf-8")))
    return out


SCHEMA_VERSION = len(migrations())


@dataclass(frozen=True)
class SchemaStatus:
    """What `sloth db status` shows: the database's schema version and this
    code's. ``newer`` means the database was migrated by a newer sloth."""

    current: int
    latest: int
    pending: list[str]

    @property
    def newer(self) -> bool:
        return self.current > self.latest

    @property
    def up_to_date(self) -> bool:
        return self.current == self.latest


def _version(cur: Cursor) -> int:
    if not one(cur.execute("SELECT to_regclass('sloth.migrations') IS NOT NULL AS present"))["present"]:
        return 0
    return int(one(cur.execute("SELECT coalesce(max(version), 0) AS v FROM sloth.migrations"))["v"])


def _refuse_newer(version: int, where: str) -> None:
    if version > SCHEMA_VERSION:
        raise StorageError(
            f"the queue at {where} has schema v{version}, newer than this sloth knows (v{SCHEMA_VERSION})",
            hint="Upgrade sloth on this machine: every machine sharing the queue must run a"
                 " version that knows its schema.",
        )


def status(conn: Connection) -> SchemaStatus:
    """The schema status of the database behind ``conn`` (reads only)."""
    current = conn.read(_version, "reading the schema version")
    return SchemaStatus(current, SCHEMA_VERSION,
                        [m.name for m in migrations() if m.version > current])


def migrate(conn: Connection, target: int = SCHEMA_VERSION) -> int:
    """Apply pending migrations up to ``target``, one transaction each (see
    the module docstring). Refuses (StorageError) a schema newer than this
    code. Returns the version reached."""
    todo = {m.version: m for m in migrations()}
    while True:
        reached = conn.write(lambda cur: _step(cur, todo, target, conn.where), "migrating the schema")
        if reached is not None:
            return reached


def _step(cur: Cursor, todo: dict[int, Migration], target: int, where: str) -> int | None:
    """Under the migration lock: the version reached when nothing is left
    to do, else apply the next migration and return None."""
    cur.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
    version = _version(cur)
    _refuse_newer(version, where)
    if version >= target:
        return version
    m = todo[version + 1]
    cur.execute(m.sql, prepare=False)  # no parameters: may hold many statements
    cur.execute("INSERT INTO sloth.migrations (version, name) VALUES (%s, %s)", (m.version, m.name))
    return None


def check_schema(conn: Connection) -> None:
    """Refuse to work on a schema this code does not know (newer or missing)."""
    version = conn.read(_version, "reading the schema version")
    _refuse_newer(version, conn.where)
    if version < SCHEMA_VERSION:
        raise StorageError(
            f"the queue at {conn.where} has schema v{version}; this sloth needs v{SCHEMA_VERSION}",
            hint="Run `sloth db migrate` (or open the queue with migrate=True).",
        )


__all__ = ["Migration", "SCHEMA_VERSION", "SchemaStatus", "check_schema", "migrate", "migrations", "status"]

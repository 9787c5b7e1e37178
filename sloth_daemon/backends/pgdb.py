"""PostgreSQL connection, schema migrations and the one transaction helper
(the PostgreSQL counterpart of db.py). Imported only when a
``postgresql://`` URL is opened: it imports psycopg.

One connection per queue, in autocommit mode: a read is one statement and
holds no transaction; a write of one statement (a claim, a renewal, a
completion with its event) commits alone, one round trip; a longer write is
``BEGIN`` ... ``COMMIT`` around the statements of one queue call and nothing
else, so no transaction stays open while a job runs or while the caller
thinks. ``sloth.now()`` is the server's clock at the start of the
transaction (see the migration); with a test clock every write runs in a
transaction that first pins ``sloth.now`` to the test clock's reading.

Durability: unlike SQLite's claims and renewals (db.transaction durable=False)
every commit here waits for the WAL flush (synchronous_commit stays on).
On one machine a power cut kills the claimed process with the queue; with a
server shared by several machines a lost claim or renewal would let a second
machine start a job the first is still running.
"""

from __future__ import annotations

import contextlib
import math
import select
import time
from dataclasses import dataclass
from importlib import resources
from typing import Any, Callable, Iterator, TypeVar

import psycopg
from psycopg import errors as pgerr
from psycopg import pq
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import dict_row

from ..errors import SlothError, StorageError

T = TypeVar("T")

SCHEMA = "sloth"
# pg_advisory_xact_lock key for migrations: b"sloth-mi" as a big-endian int64.
MIGRATION_LOCK = int.from_bytes(b"sloth-mi", "big") - 2**63
HINT_REACH = ("Check that the PostgreSQL server is running and reachable, and that queue_url"
              " (or SLOTH_QUEUE_URL) names the right host, port, database and user.")


@dataclass(frozen=True)
class PgOptions:
    """Per-connection settings. The defaults bound every wait far below a
    lease (60 s by default), so that a dead network or server turns into an
    error the daemon can act on while its leases still hold.

    * connect_timeout_s: libpq waits forever by default.
    * keepalives_*: notice a silently dead peer on an idle connection in
      ~idle + interval * count = 25 s instead of the kernel's two hours.
    * tcp_user_timeout_s: keepalives are not sent while data is unacknowledged
      (a request in flight to a machine that vanished); this drops such a
      connection after 20 s instead of ~15 minutes of retransmissions.
    * statement_timeout_s: our statements take milliseconds; one that waits
      longer is stuck behind a lock or an overloaded server.
    * idle_in_transaction_s: a client stopped inside a transaction (SIGSTOP,
      suspend, a debugger) has the server end its session and free the row
      locks, instead of blocking every other daemon's claims.
    * reconnect_s: how long one call keeps reconnecting (with backoff) after
      the connection was lost before it raises StorageError.
    """

    connect_timeout_s: int = 10
    keepalives_idle_s: int = 10
    keepalives_interval_s: int = 5
    keepalives_count: int = 3
    tcp_user_timeout_s: float = 20.0
    statement_timeout_s: float = 30.0
    idle_in_transaction_s: float = 60.0
    reconnect_s: float = 10.0
    application_name: str = "sloth"

    def connect_kwargs(self) -> dict[str, Any]:
        """libpq parameters; server settings travel in ``options``."""
        ms = lambda s: max(1, int(s * 1000))  # noqa: E731
        return {
            "connect_timeout": max(1, int(self.connect_timeout_s)),
            "keepalives": 1,
            "keepalives_idle": self.keepalives_idle_s,
            "keepalives_interval": self.keepalives_interval_s,
            "keepalives_count": self.keepalives_count,
            "tcp_user_timeout": ms(self.tcp_user_timeout_s),
            "application_name": self.application_name,
            "options": (f"-c statement_timeout={ms(self.statement_timeout_s)}"
                        f" -c idle_in_transaction_session_timeout={ms(self.idle_in_transaction_s)}"),
        }


def describe(url: str) -> str:
    """user@host:port/dbname of a URL, without its password (for messages)."""
    try:
        d = conninfo_to_dict(url)
    except psycopg.Error:
        return "(an unparsable URL)"
    host = d.get("host") or "localhost"
    port = f":{d['port']}" if d.get("port") else ""
    user = f"{d['user']}@" if d.get("user") else ""
    return f"{user}{host}{port}/{d.get('dbname', '')}"


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


# The server answered and said no (unknown database or role, failed auth,
# pg_hba): waiting will not change that. Said while it starts or stops, or
# when it is full, it will.
_PASSING = ("starting up", "shutting down", "in recovery", "too many", "remaining connection slots")


def _refused(e: psycopg.OperationalError) -> bool:
    text = str(e)
    return "FATAL:" in text and not any(p in text for p in _PASSING)


def _reason(e: BaseException) -> str:
    """libpq's message without its 'connection to server at ... failed:' preamble."""
    text = " ".join(str(e).split())
    for marker in ("FATAL: ", "failed: "):
        if marker in text:
            text = text.rsplit(marker, 1)[1]
            break
    return text or type(e).__name__


def storage_error(e: psycopg.Error, doing: str) -> StorageError:
    """A psycopg error as the StorageError a user sees: what and how to fix it."""
    if isinstance(e, pgerr.QueryCanceled):
        return StorageError(f"PostgreSQL cancelled {doing}: {_first_line(e)}",
                            hint="A statement waited longer than statement_timeout: the server is"
                                 " overloaded or another session holds a lock for long.")
    if isinstance(e, pgerr.InsufficientPrivilege):
        return StorageError(f"PostgreSQL refused {doing}: {_first_line(e)}",
                            hint="Grant the role in queue_url the rights on schema sloth"
                                 " (or run `sloth db migrate` as its owner).")
    if isinstance(e, pgerr.UndefinedTable) or isinstance(e, pgerr.UndefinedFunction):
        return StorageError(f"the sloth schema is missing or damaged ({doing}): {_first_line(e)}",
                            hint="Run `sloth db status` and `sloth db migrate`.")
    return StorageError(f"queue database error while {doing}: {_first_line(e)}",
                        hint="See `sloth db status` and the PostgreSQL server log.")


class Connection:
    """One autocommit connection that reconnects (with backoff) when lost.

    ``pin()`` returns the time to pin for the next transaction, or None for
    the server's clock.
    """

    def __init__(self, url: str, options: PgOptions, pin: Callable[[], float | None]) -> None:
        self.url = url
        self.options = options
        self._pin = pin
        self._conn: psycopg.Connection | None = None
        self.where = describe(url)

    # ---------------------------------------------------------- connecting
    def _connect_once(self) -> psycopg.Connection:
        return psycopg.connect(self.url, autocommit=True, row_factory=dict_row,
                               **self.options.connect_kwargs())

    def _ensure(self, deadline: float) -> psycopg.Connection:
        """The live connection, reconnecting with exponential backoff (50 ms
        doubling to 1 s) until ``deadline``; then StorageError."""
        if self._conn is not None and _still_up(self._conn):
            return self._conn
        self._drop()
        delay = 0.05
        while True:
            try:
                self._conn = self._connect_once()
                return self._conn
            except psycopg.OperationalError as e:
                if _refused(e) or time.monotonic() + delay > deadline:
                    raise StorageError(f"cannot connect to PostgreSQL at {self.where}: {_reason(e)}",
                                       hint=HINT_REACH) from e
            except psycopg.Error as e:  # a malformed URL, an unknown option
                raise StorageError(f"cannot connect to PostgreSQL at {self.where}: {_first_line(e)}",
                                   hint=HINT_REACH) from e
            time.sleep(delay)
            delay = min(delay * 2, 1.0)

    def _lost(self) -> bool:
        c = self._conn
        return c is None or c.closed or c.broken

    def _drop(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(Exception):
                self._conn.close()
        self._conn = None

    def close(self) -> None:
        self._drop()

    # ----------------------------------------------------------- running
    def read(self, fn: Callable[[psycopg.Cursor], T], doing: str) -> T:
        """Run ``fn(cursor)`` outside any transaction (each statement commits
        alone). Retried on a lost connection: reads change nothing."""
        return self._retrying(lambda conn: fn(conn.cursor()), doing)

    def write(self, fn: Callable[[psycopg.Cursor], T], doing: str) -> T:
        """Run ``fn(cursor)`` in one transaction with ``sloth.now`` pinned.

        A connection lost before COMMIT was sent means the server rolled the
        transaction back: it is run again on a new connection. Lost during
        COMMIT, nobody can know whether it committed: StorageError says so.
        """
        return self._retrying(lambda conn: self._transaction(conn, fn, doing), doing)

    def write_one(self, sql: str, params: Any, doing: str) -> list[dict[str, Any]]:
        """One statement that writes, and its rows. On the server's clock it
        commits alone (one round trip); with a test clock it runs in a
        transaction that pins the clock first. A connection found dead
        before sending is replaced; one lost while the statement ran leaves
        its outcome unknown, and StorageError says so."""
        if self._pin() is not None:
            return self.write(lambda c: c.execute(sql, params).fetchall(), doing)
        conn = self._ensure(time.monotonic() + self.options.reconnect_s)
        try:
            return conn.execute(sql, params).fetchall()
        except psycopg.Error as e:
            if self._lost():
                self._drop()
                raise StorageError(
                    f"lost the connection to PostgreSQL at {self.where} while {doing};"
                    " the change may or may not have been made",
                    hint="Check the job with `sloth show ID` once the server is reachable again.",
                ) from e
            raise storage_error(e, doing) from e

    def _retrying(self, attempt: Callable[[psycopg.Connection], T], doing: str) -> T:
        deadline = time.monotonic() + self.options.reconnect_s
        while True:
            conn = self._ensure(deadline)
            try:
                return attempt(conn)
            except _Retry as e:
                if time.monotonic() > deadline:
                    raise StorageError(f"lost the connection to PostgreSQL at {self.where} while"
                                       f" {doing}: {_first_line(e.cause)}", hint=HINT_REACH) from e.cause
            except psycopg.Error as e:
                if self._lost():  # a read that lost its connection: run it again
                    self._drop()
                    if time.monotonic() <= deadline:
                        continue
                    raise StorageError(f"lost the connection to PostgreSQL at {self.where} while"
                                       f" {doing}: {_first_line(e)}", hint=HINT_REACH) from e
                raise storage_error(e, doing) from e

    def _transaction(self, conn: psycopg.Connection, fn: Callable[[psycopg.Cursor], T], doing: str) -> T:
        cur = conn.cursor()
        try:
            cur.execute(self._begin_sql(), prepare=False)
            result = fn(cur)
        except BaseException as e:
            lost = isinstance(e, psycopg.Error) and self._lost()
            if lost:
                self._drop()
                raise _Retry(e) from e  # never committed: safe to run again
            self._rollback(conn)
            if isinstance(e, psycopg.Error):
                raise storage_error(e, doing) from e
            raise  # SlothError (LeaseLost, ...) or a bug: nothing was written
        try:
            conn.execute("COMMIT", prepare=False)
        except psycopg.Error as e:
            if self._lost():
                self._drop()
                raise StorageError(
                    f"lost the connection to PostgreSQL at {self.where} while committing ({doing});"
                    " the change may or may not have been made",
                    hint="Check the job with `sloth show ID` once the server is reachable again.",
                ) from e
            self._rollback(conn)
            raise storage_error(e, doing) from e
        return result

    def _begin_sql(self) -> str:
        """BEGIN and the pin of ``sloth.now`` in one round trip (a simple query
        may hold several statements when it has no parameters)."""
        t = self._pin()
        if t is None:
            return "BEGIN"  # sloth.now() is the server's clock at BEGIN
        if not math.isfinite(t):
            raise StorageError(f"the injected clock returned {t!r}, not a finite time")
        # repr() round-trips a float exactly, and is only digits, '.', 'e', '-'
        return f"BEGIN; SELECT set_config('sloth.now', '{float(t)!r}', true)"

    def _rollback(self, conn: psycopg.Connection) -> None:
        with contextlib.suppress(psycopg.Error):
            conn.execute("ROLLBACK", prepare=False)
        if self._lost():
            self._drop()


def _still_up(conn: psycopg.Connection) -> bool:
    """False if the connection is closed, or the server spoke while it sat
    idle: an idle connection only hears from a server that is ending it
    (restart, idle timeout, pg_terminate_backend). A select() with no wait,
    not a round trip; it lets a write after a server restart reconnect
    instead of failing with an unknown outcome."""
    if conn.closed or conn.broken:
        return False
    try:
        if select.select([conn.fileno()], [], [], 0)[0]:
            conn.pgconn.consume_input()
        return conn.pgconn.status == pq.ConnStatus.OK
    except (OSError, ValueError, psycopg.Error):
        return False


class _Retry(Exception):
    """The connection died inside a transaction before COMMIT: run it again."""

    def __init__(self, cause: psycopg.Error) -> None:
        super().__init__(str(cause))
        self.cause = cause


# ------------------------------------------------------------- migrations
@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str


def migrations() -> list[Migration]:
    """The numbered SQL files of pg_migrations/, in order; numbers must run
    1, 2, 3... without a gap (checked: a gap would skip a schema change)."""
    folder = resources.files(__package__).joinpath("pg_migrations")
    found = sorted(p.name for p in folder.iterdir() if p.name.endswith(".sql"))
    out = []
    for i, name in enumerate(found, start=1):
        number = int(name.split("_", 1)[0])
        if number != i:
            raise RuntimeError(f"pg_migrations: expected migration {i}, found {name}")
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


def _version(cur: psycopg.Cursor) -> int:
    cur.execute("SELECT to_regclass('sloth.migrations') IS NOT NULL AS present")
    if not cur.fetchone()["present"]:
        return 0
    cur.execute("SELECT coalesce(max(version), 0) AS v FROM sloth.migrations")
    return int(cur.fetchone()["v"])


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
    """Apply pending migrations up to ``target``, each in its own transaction
    under a transaction-level advisory lock, so daemons that start together
    take turns: the second finds the work done. Refuses (StorageError) a
    schema newer than this code. Returns the version reached."""
    todo = {m.version: m for m in migrations()}
    while True:
        def step(cur: psycopg.Cursor) -> int | None:
            cur.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
            version = _version(cur)
            _refuse_newer(version, conn.where)
            if version >= target:
                return version
            m = todo[version + 1]
            cur.execute(m.sql, prepare=False)  # no parameters: may hold many statements
            cur.execute("INSERT INTO sloth.migrations (version, name) VALUES (%s, %s)",
                        (m.version, m.name))
            return None

        reached = conn.write(step, "migrating the schema")
        if reached is not None:
            return reached


def check_schema(conn: Connection) -> None:
    """Refuse to work on a schema this code does not know (newer or missing)."""
    version = conn.read(_version, "reading the schema version")
    _refuse_newer(version, conn.where)
    if version < SCHEMA_VERSION:
        raise StorageError(
            f"the queue at {conn.where} has schema v{version}; this sloth needs v{SCHEMA_VERSION}",
            hint="Run `sloth db migrate` (or open the queue with migrate=True).",
        )


@contextlib.contextmanager
def opened(url: str, options: PgOptions | None = None) -> Iterator[Connection]:
    """A Connection on the server clock, closed on the way out (for reports
    and `sloth db` commands)."""
    c = Connection(url, options or PgOptions(), lambda: None)
    try:
        yield c
    finally:
        c.close()


__all__ = ["Connection", "PgOptions", "SchemaStatus", "SCHEMA_VERSION", "check_schema", "describe",
           "migrate", "migrations", "opened", "status", "storage_error", "SlothError"]

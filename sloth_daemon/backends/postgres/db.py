"""PostgreSQL connection and the one transaction helper (the PostgreSQL
counterpart of db.py; backends/postgres/migrate.py migrates). Imported only when a
``postgresql://`` URL is opened: it imports psycopg.

One connection per queue, in autocommit mode: a read is one statement and
holds no transaction; a write of one statement (a claim, a renewal, a
completion with its event) commits alone, one round trip; a longer write is
``BEGIN`` ... ``COMMIT`` around the statements of one queue call and nothing
else, so no transaction stays open while a job runs or while the caller
thinks. ``sloth.now()`` is the server's clock at the start of the
transaction (see the migration); with a test clock every write runs in a
transaction that first pins ``sloth.now`` to the test clock's reading.

A unit (``unit()``, a worker's turn) is the exception: its writes share
one transaction, begun by its first write, each multi-statement write a
savepoint of it, and one synchronous commit at its end; a database error or
a lost connection inside fails the whole unit (nothing of it is kept).

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
from typing import Any, Callable, Hashable, Iterator, TypeVar

import psycopg
from psycopg import errors as pgerr
from psycopg import pq
from psycopg.rows import DictRow, dict_row

from sloth_daemon.errors import QueueBroken, StorageError
from sloth_daemon.text import storable
from sloth_daemon.backends.postgres.errors import (
    HINT_BROKEN, HINT_REACH, HINT_UNKNOWN, describe, first_line, reason, refused, storage_error,
)

T = TypeVar("T")
# Every connection returns rows as dicts (row_factory=dict_row).
Row = DictRow
Cursor = psycopg.Cursor[DictRow]
PgConnection = psycopg.Connection[DictRow]

# Errors after which the server rolled the transaction back and running it
# again may well succeed: two transactions that locked rows in opposite orders.
_TRY_AGAIN = (pgerr.DeadlockDetected, pgerr.SerializationFailure)
# Met by an open queue (its schema was there when it opened): someone dropped it.
_SCHEMA_GONE = (pgerr.UndefinedTable, pgerr.InvalidSchemaName, pgerr.UndefinedFunction)
SNAPSHOT = "BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY"
# A unit (a worker's turn) runs the queue's hot statements: its claims,
# outcomes, renewals. Each is prepared (psycopg, after a few runs) and would
# still be planned again at every run: the server keeps choosing a custom
# plan for them (their LIMIT and array parameters), and a claim's plan took
# longer than its run (measured, 3 daemons: a plan per claim, a third of the
# server's time in their statements). Their plans are index walks whatever
# the values, so a unit plans each once per connection: sent with its BEGIN,
# no round trip more.
UNIT_PLANS = "; SET LOCAL plan_cache_mode = force_generic_plan"


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
    * lock_wait_s: how long a statement waits for a row another session holds
      before StorageBusy (None: up to statement_timeout); as SQLite's lock_wait_s.
    * read_only: every transaction is read only (the server refuses writes).
    * retry_after_s: after reconnecting failed for reconnect_s, calls fail at
      once for this long (doubling to 4x) instead of each waiting again: a
      daemon cut off from its server keeps its loop turning.
    """

    connect_timeout_s: int = 10
    keepalives_idle_s: int = 10
    keepalives_interval_s: int = 5
    keepalives_count: int = 3
    tcp_user_timeout_s: float = 20.0
    statement_timeout_s: float = 30.0
    idle_in_transaction_s: float = 60.0
    reconnect_s: float = 10.0
    lock_wait_s: float | None = None
    read_only: bool = False
    application_name: str = "sloth"
    retry_after_s: float = 0.5
    origin: str | None = None  # the daemon's host name: a job this connection inserts records it (jobs.origin)

    def connect_kwargs(self) -> dict[str, Any]:
        """libpq parameters; server settings travel in ``options``."""
        return {
            "connect_timeout": max(1, int(self.connect_timeout_s)),
            "keepalives": 1,
            "keepalives_idle": self.keepalives_idle_s,
            "keepalives_interval": self.keepalives_interval_s,
            "keepalives_count": self.keepalives_count,
            "tcp_user_timeout": _ms(self.tcp_user_timeout_s),
            "application_name": self.application_name,
            "options": (f"-c statement_timeout={_ms(self.statement_timeout_s)}"
                        f" -c idle_in_transaction_session_timeout={_ms(self.idle_in_transaction_s)}"
                        + ("" if self.lock_wait_s is None else f" -c lock_timeout={_ms(self.lock_wait_s)}")
                        + (" -c default_transaction_read_only=on" if self.read_only else "")
                        + ("" if self.origin is None else f" -c sloth.origin={self.origin}")),
        }


def _ms(seconds: float) -> int:
    """Whole milliseconds, at least 1: libpq and the server read 0 as "no limit"."""
    return max(1, int(seconds * 1000))


def storable_text(s: str) -> str:
    """``s`` as PostgreSQL text can hold it: a byte that is not UTF-8 as
    ``\\xNN`` (text.storable, as SQLite stores messages), and NUL, which
    PostgreSQL text refuses, as ``\\x00`` (what text.showable shows it as)."""
    return storable(s).replace("\x00", "\\x00")


def finite(t: object) -> float | None:
    """A reported time if it is a finite number, else None (then: now)."""
    if isinstance(t, bool) or not isinstance(t, (int, float)):
        return None
    try:
        f = float(t)
    except OverflowError:  # an int too large for a float is no time either
        return None
    return f if math.isfinite(f) else None


def one(cur: Cursor) -> Row:
    """The row of a statement that always returns one (an aggregate, an
    UPDATE ... RETURNING of a row this transaction holds locked)."""
    row = cur.fetchone()
    if row is None:
        raise StorageError("PostgreSQL returned no row where the queue expects one",
                           hint="See `sloth db status` and the PostgreSQL server log.")
    return row


class Connection:
    """One autocommit connection that reconnects (with backoff) when lost.

    ``pin()`` returns the time to pin for the next transaction, or None for
    the server's clock. ``verify(conn)``, once set, checks every new
    connection after the first (a reconnect may reach another database
    under the same URL): it returns why that is not this queue, or None.
    ``broken``: why this queue takes no more requests (sticky, like SQLite's
    Guard): its database was dropped, or the URL now reaches another queue.
    """

    def __init__(self, url: str, options: PgOptions, pin: Callable[[], float | None]) -> None:
        self.url = url
        self.options = options
        self._pin = pin
        self._conn: PgConnection | None = None
        self.where = describe(url)
        self.verify: Callable[[PgConnection], str | None] | None = None
        self.broken: str | None = None
        self._down: tuple[float, float, StorageError] | None = None  # (until, backoff, why): see retry_after_s
        self._unit: _Unit | None = None  # the open unit of work (unit())

    # ---------------------------------------------------------- connecting
    def _connect_once(self) -> PgConnection:
        return psycopg.connect(self.url, autocommit=True, row_factory=dict_row,
                               **self.options.connect_kwargs())

    def _ensure(self, deadline: float) -> PgConnection:
        """The live connection, or a new one (see _connect_until), verified."""
        if self.broken is not None:
            raise self.broken_error()
        if self._conn is not None and _still_up(self._conn):
            return self._conn
        self._drop()
        conn = self._connect_or_wait(deadline)
        why = None if self.verify is None else self.verify(conn)
        if why is not None:
            with contextlib.suppress(Exception):
                conn.close()
            raise self.mark_broken(why)
        self._conn = conn
        return conn

    def mark_broken(self, why: str) -> QueueBroken:
        """From now on every request raises QueueBroken (``why``); returns it."""
        self.broken = self.broken or why
        return self.broken_error()

    def broken_error(self) -> QueueBroken:
        return QueueBroken(f"the queue at {self.where} {self.broken}; it takes no more requests",
                           hint=HINT_BROKEN)

    def _connect_or_wait(self, deadline: float) -> PgConnection:
        """_connect_until, unless it failed a moment ago: then that error at once."""
        down = self._down
        if down is not None and time.monotonic() < down[0]:
            raise down[2]
        try:
            conn = self._connect_until(deadline)
        except StorageError as e:
            backoff = min(down[1] * 2, 4 * self.options.retry_after_s) if down else self.options.retry_after_s
            self._down = (time.monotonic() + backoff, backoff, e)
            raise
        self._down = None
        return conn

    def revalidate(self) -> None:
        """The connection may have died unseen (the machine slept, the
        network moved): drop it, and forget a recent failure, so the next
        call connects afresh at once."""
        self._drop()
        self._down = None

    def _connect_until(self, deadline: float) -> PgConnection:
        """Connect, retrying with exponential backoff (50 ms doubling to 1 s)
        until ``deadline`` unless the server refused us; then StorageError."""
        delay = 0.05
        while True:
            try:
                return self._connect_once()
            except psycopg.OperationalError as e:
                if self.verify is not None and refused(e) and "does not exist" in str(e):
                    raise self.mark_broken(f"is gone ({reason(e)})") from e
                if refused(e) or time.monotonic() + delay > deadline:
                    raise self._cannot_connect(reason(e)) from e
            except psycopg.Error as e:  # a malformed URL, an unknown option
                raise self._cannot_connect(first_line(e)) from e
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

    # ------------------------------------------------------------- errors
    def _cannot_connect(self, reason: str) -> StorageError:
        return StorageError(f"cannot connect to PostgreSQL at {self.where}: {reason}", hint=HINT_REACH)

    def _lost_while(self, doing: str, e: BaseException) -> StorageError:
        """Lost with nothing written (a read, or a transaction before COMMIT)."""
        return StorageError(f"lost the connection to PostgreSQL at {self.where} while"
                            f" {doing}: {first_line(e)}", hint=HINT_REACH)

    def _outcome_unknown(self, doing: str) -> StorageError:
        """Lost after a write was sent: nobody can know whether it committed."""
        return StorageError(f"lost the connection to PostgreSQL at {self.where} while {doing};"
                            " the change may or may not have been made", hint=HINT_UNKNOWN)

    # ----------------------------------------------------------- running
    def read(self, fn: Callable[[Cursor], T], doing: str, *, snapshot: bool = False) -> T:
        """Run ``fn(cursor)`` outside any transaction (each statement commits
        alone), or with ``snapshot`` in one read-only REPEATABLE READ
        transaction (its statements agree: a listing's total and its rows).
        Retried on a lost connection: reads change nothing. Inside a unit
        that has written: in its transaction (it sees the unit's writes)."""
        if self._unit is not None and self._unit.conn is not None:
            return self._in_unit(self._unit, fn, doing, savepoint=False)
        if snapshot:
            return self._retrying(lambda conn: self._transaction(conn, fn, doing, SNAPSHOT), doing)
        return self._retrying(lambda conn: fn(conn.cursor()), doing)

    def write(self, fn: Callable[[Cursor], T], doing: str) -> T:
        """Run ``fn(cursor)`` in one transaction with ``sloth.now`` pinned.

        A connection lost before COMMIT was sent means the server rolled the
        transaction back: it is run again on a new connection. Lost during
        COMMIT, nobody can know whether it committed: StorageError says so.
        Inside a unit: a savepoint of the unit's transaction.
        """
        if self._unit is not None:
            return self._in_unit(self._unit, fn, doing, savepoint=True)
        return self._retrying(lambda conn: self._transaction(conn, fn, doing), doing)

    def write_one(self, sql: str, params: Any, doing: str) -> list[Row]:
        """One statement that writes, and its rows. On the server's clock it
        commits alone (one round trip); with a test clock it runs in a
        transaction that pins the clock first. A connection found dead
        before sending is replaced; one lost while the statement ran leaves
        its outcome unknown, and StorageError says so. Inside a unit: a
        statement of its transaction (one statement needs no savepoint: it
        writes whole or fails the unit). Prepared at its first run, not its
        sixth (psycopg's default): the hot statements' texts are few, and
        inside a unit each is then planned once (UNIT_PLANS)."""
        if self._unit is not None:
            return self._in_unit(self._unit, lambda c: c.execute(sql, params, prepare=True).fetchall(), doing,
                                 savepoint=False)
        if self._pin() is not None:
            return self.write(lambda c: c.execute(sql, params, prepare=True).fetchall(), doing)
        deadline = time.monotonic() + self.options.reconnect_s
        conn = self._ensure(deadline)
        while True:
            try:
                return conn.execute(sql, params, prepare=True).fetchall()
            except _TRY_AGAIN as e:  # rolled back whole: run it again
                if time.monotonic() > deadline:
                    raise self._error(e, doing) from e
            except psycopg.Error as e:
                if self._lost():
                    self._drop()
                    raise self._outcome_unknown(doing) from e
                raise self._error(e, doing) from e

    def write_along(self, key: Hashable, sql: str, params: Any, doing: str) -> None:
        """One statement that writes and whose rows nobody needs (a run's
        cost before its outcome), under ``key``. Inside a unit it waits:
        the unit's next write may take it (``take_along``) into its own
        statement, no round trip of its own; else it runs before the unit's
        next statement or its commit. A part of the unit all the same (its
        failure fails the unit). Outside a unit: write_one, now."""
        if self._unit is None:
            self.write_one(sql, params, doing)
        elif self._unit.failed is not None:
            raise self._unit.refused()
        else:
            self._unit.along[key] = (sql, params)

    def take_along(self, key: Hashable) -> tuple[str, Any] | None:
        """The statement waiting under ``key`` (write_along), now the caller's to run."""
        return None if self._unit is None else self._unit.along.pop(key, None)

    # ------------------------------------------------------------- units
    @contextlib.contextmanager
    def unit(self) -> Iterator[None]:
        """The writes inside as one transaction and one synchronous commit
        (contract.Store.unit). Nested: part of the outer one."""
        if self._unit is not None:
            yield
            return
        u = self._unit = _Unit()
        try:
            yield
        except BaseException:
            self._unit = None
            self._end_unit(u, commit=False)
            raise
        self._unit = None
        self._end_unit(u, commit=True)

    def after_commit(self, fn: Callable[[], None]) -> None:
        """``fn()`` once what was just written is committed: now, or at the
        end of the open unit (never, if the unit fails)."""
        if self._unit is None:
            fn()
        else:
            self._unit.after.append(fn)

    def _in_unit(self, u: "_Unit", fn: Callable[[Cursor], T], doing: str, *, savepoint: bool) -> T:
        """``fn(cursor)`` in the unit's transaction (begun by its first write),
        after the statements written along (write_along) that no write took.
        A SlothError of ``fn`` (a lease lost, a job gone) undoes its own
        savepoint alone; a database error or a lost connection fails the
        whole unit: rolled back, and every later write and its end raise."""
        if u.failed is not None:
            raise u.refused()
        if u.conn is None:
            conn = self._ensure(time.monotonic() + self.options.reconnect_s)  # nothing begun: may reconnect
            try:
                conn.execute(self._begin_sql() + UNIT_PLANS, prepare=False)
            except psycopg.Error as e:
                raise self._fail_unit(u, e, doing) from e
            u.conn = conn
        elif u.conn is not self._conn or self._lost():
            raise self._fail_unit(u, None, doing)
        cur = u.conn.cursor()
        try:
            while u.along:
                q, p = u.along.pop(next(iter(u.along)))
                cur.execute(q, p)
            if savepoint:
                cur.execute("SAVEPOINT unit_write", prepare=False)
            out = fn(cur)
            if savepoint:
                cur.execute("RELEASE unit_write", prepare=False)
            return out
        except psycopg.Error as e:
            raise self._fail_unit(u, e, doing) from e
        except StorageError as e:
            self._fail_unit(u, None, doing, e)
            raise
        except BaseException:
            if savepoint:
                try:
                    cur.execute("ROLLBACK TO unit_write; RELEASE unit_write", prepare=False)
                except psycopg.Error as e:
                    raise self._fail_unit(u, e, doing) from e
            else:  # a statement of its own cannot be undone alone
                self._fail_unit(u, None, doing, StorageError(f"not written: {doing} failed"))
            raise

    def _fail_unit(self, u: "_Unit", e: psycopg.Error | None, doing: str,
                   why: StorageError | None = None) -> StorageError:
        """Roll the unit back; the error its writes and its end raise from now on."""
        if u.failed is None:
            if why is None:
                why = (self._error(e, doing) if e is not None and not self._lost()
                       else self._lost_while(doing, e if e is not None else Exception("the connection was lost")))
            u.failed = why
            u.after.clear()
            u.along.clear()
            if u.conn is not None and u.conn is self._conn:
                self._rollback(u.conn)  # drops it if lost: the server rolls back then
        return u.failed

    def _end_unit(self, u: "_Unit", *, commit: bool) -> None:
        """Commit the unit's transaction, synchronously whatever its writes
        asked (a claim in it must be on disk before its process may start),
        then run what waited for it; or roll it back. Raises StorageError if
        the unit failed or its commit does."""
        if u.failed is not None:
            if commit:
                raise u.refused()
            return
        if commit and u.along:  # written along, then nothing more: sent on their own
            self._in_unit(u, lambda c: None, "committing this turn's writes", savepoint=False)
            if u.failed is not None:
                raise u.refused()
        if u.conn is None:
            return
        if not commit:
            if u.conn is self._conn:
                self._rollback(u.conn)
            return
        if u.conn is not self._conn or self._lost():
            raise self._fail_unit(u, None, "committing this turn's writes")
        try:
            u.conn.execute("SET LOCAL synchronous_commit TO on; COMMIT", prepare=False)
        except psycopg.Error as e:
            if self._lost():
                self._drop()
                u.failed = self._outcome_unknown("committing this turn's writes")
                raise u.failed from e
            raise self._fail_unit(u, e, "committing this turn's writes") from e
        for fn in u.after:
            fn()

    def _error(self, e: psycopg.Error, doing: str) -> StorageError:
        """storage_error, and a schema that vanished under an open queue breaks it."""
        if self.verify is not None and isinstance(e, _SCHEMA_GONE):
            return self.mark_broken(f"lost its schema ({first_line(e)})")
        return storage_error(e, doing)

    def _retrying(self, attempt: Callable[[PgConnection], T], doing: str) -> T:
        """``attempt(conn)``, run again on a new connection while the old one
        was lost before anything was committed, until reconnect_s has passed."""
        deadline = time.monotonic() + self.options.reconnect_s
        while True:
            conn = self._ensure(deadline)
            try:
                return attempt(conn)
            except _Retry as e:
                if time.monotonic() > deadline:
                    if isinstance(e.cause, _TRY_AGAIN):
                        raise self._error(e.cause, doing) from e.cause
                    raise self._lost_while(doing, e.cause) from e.cause
            except psycopg.Error as e:
                if not self._lost():
                    raise self._error(e, doing) from e
                self._drop()  # a read that lost its connection: run it again
                if time.monotonic() > deadline:
                    raise self._lost_while(doing, e) from e

    def _transaction(self, conn: PgConnection, fn: Callable[[Cursor], T], doing: str,
                     begin: str | None = None) -> T:
        result = self._before_commit(conn, fn, doing, begin)
        self._commit(conn, doing)
        return result

    def _before_commit(self, conn: PgConnection, fn: Callable[[Cursor], T], doing: str,
                       begin: str | None) -> T:
        """BEGIN (with the clock pinned) and ``fn``; rolled back if either fails."""
        cur = conn.cursor()
        try:
            cur.execute(begin or self._begin_sql(), prepare=False)
            return fn(cur)
        except _TRY_AGAIN as e:
            self._rollback(conn)
            raise _Retry(e) from e  # the server rolled it back: safe to run again
        except psycopg.Error as e:
            if self._lost():
                self._drop()
                raise _Retry(e) from e  # never committed: safe to run again
            self._rollback(conn)
            raise self._error(e, doing) from e
        except BaseException:
            self._rollback(conn)
            raise  # SlothError (LeaseLost, ...) or a bug: nothing was written

    def _commit(self, conn: PgConnection, doing: str) -> None:
        try:
            conn.execute("COMMIT", prepare=False)
        except psycopg.Error as e:
            if self._lost():
                self._drop()
                raise self._outcome_unknown(f"committing ({doing})") from e
            self._rollback(conn)
            raise self._error(e, doing) from e

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

    def _rollback(self, conn: PgConnection) -> None:
        with contextlib.suppress(psycopg.Error):
            conn.execute("ROLLBACK", prepare=False)
        if self._lost():
            self._drop()


def _still_up(conn: PgConnection) -> bool:
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


class _Unit:
    """An open unit of work: its connection once its transaction began,
    why it failed, and what waits for its commit."""

    def __init__(self) -> None:
        self.conn: PgConnection | None = None
        self.failed: StorageError | None = None
        self.after: list[Callable[[], None]] = []
        self.along: dict[Hashable, tuple[str, Any]] = {}  # statements written along (write_along), not yet run

    def refused(self) -> StorageError:
        assert self.failed is not None
        return StorageError(f"not written: {self.failed.message}", hint=self.failed.hint)


class _Retry(Exception):
    """The connection died inside a transaction before COMMIT, or the server
    rolled it back (a deadlock): run it again."""

    def __init__(self, cause: psycopg.Error) -> None:
        super().__init__(str(cause))
        self.cause = cause


@contextlib.contextmanager
def opened(url: str, options: PgOptions | None = None) -> Iterator[Connection]:
    """A Connection on the server clock, closed on the way out (for reports
    and `sloth db` commands)."""
    c = Connection(url, options or PgOptions(), lambda: None)
    try:
        yield c
    finally:
        c.close()


__all__ = ["Connection", "Cursor", "PgOptions", "Row", "describe", "one", "opened", "storage_error"]

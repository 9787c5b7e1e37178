"""The SQLite queue's connection and its unit of work: the one transaction
helper every write goes through, the write unit of a worker's turn, what a
transaction changed besides the job it was about (told after the commit),
and the guard against a file that changed under the open queue.

Several writes, one commit: a daemon's turn (the jobs it claims and the
outcomes it records) as one SQLite transaction instead of one each.

A commit is most of what a small write costs (~100 us here: a WAL frame
for every page it touched), and a claim and an outcome touch the same
pages; a turn in a burst of short jobs makes one of each, or several.

Inside ``Queue.unit()`` the transaction begins at the first write (a turn
that only reads takes no lock) and each write is a savepoint of it: a write
that raises for its own reason (its lease lost, its job gone) undoes itself
alone and the others stand. A storage error (disk full, I/O, the file
damaged) undoes the whole unit: SQLite may have rolled the transaction
back already, and a write after that would commit on its own. From then
every write of the unit raises at once, and so does its end: the caller
must undo what it did on the strength of the unit's writes (the worker:
claims it has not sent on yet, outcomes it keeps to write again). A write
that asked to be durable is: the commit is followed by an fsync of the WAL.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator

from sloth_daemon.backends import contract
from sloth_daemon.backends.sqlite import db
from sloth_daemon.errors import StorageError
from sloth_daemon.safefile import open_file

if TYPE_CHECKING:
    from sloth_daemon.models import Job

# As SQLite syncs its log: the data, not the inode's times (fsync where the
# platform has no fdatasync, as macOS).
_datasync = getattr(os, "fdatasync", os.fsync)
_NEVER_CLOSED: list[sqlite3.Connection] = []  # connections of broken queues (see close)


class WriteUnit:
    def __init__(self, conn: sqlite3.Connection, patience_s: float) -> None:
        self.conn, self.patience_s = conn, patience_s
        self.failed: StorageError | None = None
        self.durable = False  # a write asked for an fsync: the commit gets one
        self._tx: contextlib.ExitStack | None = None  # the open transaction (db.transaction)

    @contextlib.contextmanager
    def write(self, durable: bool, single: bool = False) -> Iterator[sqlite3.Connection]:
        """A write of the unit: a savepoint of its transaction, undone alone
        if it raises for its own reason; ``single``: one statement, atomic by
        itself (a statement that fails leaves nothing), so no savepoint."""
        c = self._begin()
        if single:
            try:
                yield c
            except sqlite3.DatabaseError as e:
                raise self._fail(e) from e
            except StorageError as e:
                self._fail(e)
                raise
            self.durable |= durable
            return
        try:
            c.execute("SAVEPOINT unit_write")
        except sqlite3.DatabaseError as e:
            raise self._fail(e) from e
        try:
            yield c
        except sqlite3.DatabaseError as e:
            raise self._fail(e) from e
        except StorageError as e:  # said by our own code inside (e.g. a broken queue)
            self._fail(e)
            raise
        except BaseException:
            self._undo_write()
            raise
        try:
            c.execute("RELEASE unit_write")
        except sqlite3.DatabaseError as e:
            raise self._fail(e) from e
        self.durable |= durable

    def _begin(self) -> sqlite3.Connection:
        if self.failed is not None:
            raise self._refused()
        if self._tx is None:
            tx = contextlib.ExitStack()
            c = tx.enter_context(db.transaction(self.conn, durable=False, patience_s=self.patience_s))
            self._tx = tx  # not before: a begin that failed (a lock) leaves nothing to undo
            return c
        self._check_open()
        return self.conn

    def _check_open(self) -> None:
        """Fail the unit if SQLite rolled its transaction back under it (a
        read in between met I/O trouble): a write now would commit alone."""
        if self._tx is not None and not self.conn.in_transaction:
            raise self._fail(StorageError("the queue database rolled back this turn's writes"))

    def _refused(self) -> StorageError:
        """A write (or the end) of a unit that failed: what it failed of."""
        assert self.failed is not None
        return StorageError(f"not written: {self.failed.message}", hint=self.failed.hint)

    def _undo_write(self) -> None:
        try:
            self.conn.execute("ROLLBACK TO unit_write")
            self.conn.execute("RELEASE unit_write")
        except sqlite3.DatabaseError as e:
            self._fail(e)

    def _fail(self, e: sqlite3.DatabaseError | StorageError) -> StorageError:
        """Undo the whole unit; the error its writes and its end raise from now on."""
        if self.failed is None:
            self.failed = e if isinstance(e, StorageError) else db.failed(self.conn, e)
            self.abort()
        return self.failed

    def abort(self) -> None:
        tx, self._tx = self._tx, None
        if tx is not None:
            with contextlib.suppress(_Abort, StorageError):
                tx.__exit__(_Abort, _Abort(), None)  # db.transaction rolls back

    def commit(self) -> None:
        """End the unit: commit what it wrote, if anything. Raises
        StorageError if it failed, or the commit does."""
        if self.failed is not None:
            raise self._refused()
        self._check_open()
        tx, self._tx = self._tx, None
        if tx is None:
            return
        try:
            tx.close()
        except StorageError as e:
            self.failed = e
            raise


class _Abort(Exception):
    """Thrown into db.transaction to make it roll back."""


class SqliteStore(contract.Store):
    """The queue's one connection and its unit of work (see the module
    docstring). State: the connection, the patience of a write for another
    process's lock, the open unit (``unit()``), and the dependents the open
    transaction queued or cancelled (``settled``), told to
    ``on_side_change`` after the commit. Every reader and writer of the queue
    works through it: ``tx()`` for a write, ``conn`` for a read."""

    units_durable = False  # a unit's commit is made durable by the group commit's sync()

    def __init__(self, conn: sqlite3.Connection, path: Path, patience_s: float,
                 job: Callable[[sqlite3.Row], Job]) -> None:
        """``job``: how a row is told (reads.JobRows.job)."""
        self.conn, self.path, self.patience_s = conn, path, patience_s
        self.on_side_change: Callable[[Job], None] | None = None
        self._job = job
        self._side: list[sqlite3.Row] = []  # dependents changed by the open transaction
        self._unit: WriteUnit | None = None  # writes that share one transaction (unit())

    @contextlib.contextmanager
    def tx(self, *, durable: bool = True, single: bool = False) -> Iterator[sqlite3.Connection]:
        """db.transaction (with this queue's patience for locks), then (after
        the commit only) tell ``on_side_change`` of each dependent the
        transaction queued or cancelled. Inside ``unit()``: a savepoint of
        the unit's transaction, told of when the unit commits (``single``:
        the write is one statement, which needs none: WriteUnit.write)."""
        if self._unit is not None:
            mark = len(self._side)
            try:
                with self._unit.write(durable, single) as c:
                    yield c
            except BaseException:
                del self._side[mark:]  # undone with the write
                raise
            return
        self._side = []
        with db.transaction(self.conn, durable=durable, patience_s=self.patience_s) as c:
            yield c
        self._tell_side()

    def settled(self, rows: list[sqlite3.Row]) -> None:
        """Dependents the open transaction queued or cancelled (told after its commit)."""
        self._side += rows

    def was_settled(self, job_id: int) -> bool:
        """Whether the open transaction queued or cancelled this dependent already."""
        return any(r["id"] == job_id for r in self._side)

    @contextlib.contextmanager
    def unit(self) -> Iterator[None]:
        if self._unit is not None:
            yield
            return
        self._side, self._unit = [], WriteUnit(self.conn, self.patience_s)
        unit = self._unit
        try:
            yield
        except BaseException:
            unit.abort()
            self._side = []
            raise
        finally:
            self._unit = None
        try:
            unit.commit()
        except StorageError:
            self._side = []
            raise
        if unit.durable:
            self.sync()
        self._tell_side()

    def _tell_side(self) -> None:
        side, self._side = self._side, []
        if self.on_side_change is not None:
            for row in side:
                self.on_side_change(self._job(row))

    def flush(self) -> None:
        with self.tx() as c:
            c.execute("INSERT INTO meta (key, value) VALUES ('flushed', '0')"
                      " ON CONFLICT(key) DO UPDATE SET value = CAST(value AS INTEGER) + 1")

    def sync(self) -> None:
        try:
            fd = open_file(f"{self.path}-wal")  # never waits on a FIFO there (paths.py)
        except FileNotFoundError:
            return  # no log: every commit is in the database file, checkpointed with an fsync
        except OSError as e:
            raise StorageError(f"cannot open the queue's write-ahead log: {e.strerror or e}") from e
        try:
            _datasync(fd)
        except OSError as e:
            raise StorageError(f"cannot make the queue's writes durable: {e.strerror or e}") from e
        finally:
            os.close(fd)

    def check(self) -> None:
        guard = db.guard_of(self.conn)
        if guard is not None:
            guard.check()

    def rest(self) -> None:
        self.conn.execute("PRAGMA shrink_memory")

    def checkpoint(self) -> None:
        if self.broken is None:
            try:
                self.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()  # busy: as far as it could go
            except sqlite3.Error:
                pass  # best effort: the close checkpoints, and the dormant process wakes on its change

    def revalidate(self) -> None:
        pass  # A file has no connection to lose.

    @property
    def broken(self) -> str | None:
        guard = db.guard_of(self.conn)
        return None if guard is None else guard.broken

    def close(self) -> None:
        if self.broken is None:
            self.conn.close()
        else:
            _NEVER_CLOSED.append(self.conn)

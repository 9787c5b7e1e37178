"""The lease holder's side of the SQLite queue: renewing a lease, recording
the process that runs it, handing it to a new holder, declaring a holder
gone, and making earlier commits durable.

A base class of SqliteQueue (backends/sqlite/queue.py): the transitions that end a lease
(complete, fail, release) stay there, beside claim.
"""

from __future__ import annotations

import json
import math
import os
import sqlite3
from typing import TYPE_CHECKING, Any, ContextManager

from sloth_daemon.errors import StorageError
from sloth_daemon.models import Job
from sloth_daemon.paths import open_file
from sloth_daemon.spec import number

# A run cut short by a crash of sloth itself (the keeper gone too: a reboot,
# a power cut) does not count against max_attempts -- but only this many
# times between user retries, so a job that brings sloth down cannot loop.
MAX_CRASH_REFUNDS = 3


# As SQLite syncs its log: the data, not the inode's times (fsync where the
# platform has no fdatasync, as macOS).
_datasync = getattr(os, "fdatasync", os.fsync)


class SqliteLeases:
    if TYPE_CHECKING:
        from pathlib import Path

        from sloth_daemon.clock import Clock

        clock: Clock
        path: Path

        def _tx(self, *, durable: bool = True) -> ContextManager[sqlite3.Connection]: ...
        def _held(self, c: sqlite3.Connection, job_id: int, token: str) -> sqlite3.Row: ...
        def _get_row(self, c: sqlite3.Connection, job_id: int) -> sqlite3.Row: ...
        def _job(self, row: sqlite3.Row) -> Job: ...
        @staticmethod
        def _event(c: sqlite3.Connection, job_id: int, at: float, kind: str, attempt: int,
                   message: str) -> None: ...

    def heartbeat(self, job_id: int, token: str, *, lease_s: float | None = None) -> Job:
        """Extend the lease of the holder of ``token``: ``lease_until = now + lease``.

        The token decides, not the clock: a lapsed lease that nobody reclaimed
        may still be renewed. Raises LeaseLost (stale token) or JobNotFound.
        """
        now = self.clock.now()
        with self._tx(durable=False) as c:
            row = self._held(c, job_id, token)
            return self._extend(c, row, now, lease_s)

    def renew_after_resume(self, job_id: int, token: str, message: str) -> Job:
        """Heartbeat after the machine slept, and record a ``resumed`` event."""
        now = self.clock.now()
        with self._tx(durable=False) as c:
            row = self._held(c, job_id, token)
            job = self._extend(c, row, now, None)
            self._event(c, job_id, now, "resumed", row["attempts"], message)
            return job

    def _extend(self, c: sqlite3.Connection, row: sqlite3.Row, now: float, lease_s: float | None) -> Job:
        lease = row["lease_s"] if lease_s is None else number(lease_s, "lease_s", 0.0, lo=0.001)
        out = c.execute(
            "UPDATE jobs SET lease_until = ?, updated_at = ? WHERE id = ? RETURNING *",
            (now + lease, now, row["id"]),
        ).fetchone()
        return self._job(out)

    def set_runner(self, job_id: int, token: str, runner: dict[str, Any]) -> Job:
        """Record the identity of the process running this attempt (event ``started``)."""
        now = self.clock.now()
        with self._tx(durable=False) as c:
            row = self._held(c, job_id, token)
            self._put_runner(c, row, runner, now)
            return self._job(c.execute("SELECT * FROM jobs WHERE id = ?", (job_id,)).fetchone())

    def note_ended(self, job_id: int, attempt: int, message: str, *, ended_at: float | None = None,
                   durable: bool = True) -> Job:
        """A run of a job it no longer holds ended (it was cancelled while
        it ran): event ``ended`` for ``attempt``, nothing else changes, so
        its history says how the run it had started ended. Raises JobNotFound."""
        now = self.clock.now()
        with self._tx(durable=durable) as c:
            row = self._get_row(c, job_id)
            self._event(c, job_id, past(ended_at, now), "ended", attempt, message)
            return self._job(row)

    def _put_runner(self, c: sqlite3.Connection, row: sqlite3.Row, runner: dict[str, Any] | None,
                    now: float) -> None:
        if runner is None:
            return
        c.execute("UPDATE jobs SET runner = ?, updated_at = ? WHERE id = ?", (json.dumps(runner), now, row["id"]))
        self._event(c, row["id"], past(runner.get("started_at"), now), "started", row["attempts"],
                    f"pid {runner.get('pid')}")

    def flush(self) -> None:
        """Make every commit made with ``durable=False`` durable now (one fsync)."""
        with self._tx() as c:
            c.execute("INSERT INTO meta (key, value) VALUES ('flushed', '0')"
                      " ON CONFLICT(key) DO UPDATE SET value = CAST(value AS INTEGER) + 1")

    def sync(self) -> None:
        """Make every commit so far durable: one fsync of the write-ahead
        log. Blocking, and safe to call from another thread (it touches no
        connection, only a descriptor of its own): the daemon runs it off
        its loop, so the next jobs start while the disk catches up, and the
        outcomes that end meanwhile share the next one (group commit).
        Raises StorageError."""
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

    def unclaim(self, job_id: int, token: str, *, durable: bool = True) -> Job:
        """running -> queued as if the claim of ``token`` had not happened:
        its run never started (the daemon held it in the keeper behind
        another run and took it back, or it was dropped before it started).
        ``attempts`` and ``tries`` back, token and lease cleared, and the
        claim's ``claimed`` event deleted, with the ``adopted`` or ``resumed``
        events of its lease after it: nothing ran, so history shows nothing.
        The worker name is cleared on a job that has never run.
        Meant for plain claims (``claim(reclaim=False)``): a reclaim's
        event would stay (the lease it says was lost was lost), beside the
        next claim's of the same attempt. Raises LeaseLost or JobNotFound."""
        now = self.clock.now()
        with self._tx(durable=durable) as c:
            row = self._held(c, job_id, token)
            out = c.execute(
                "UPDATE jobs SET state = 'queued', attempts = max(attempts - 1, 0), tries = max(tries - 1, 0),"
                " token = NULL, lease_until = NULL, worker = CASE WHEN attempts <= 1 THEN NULL ELSE worker END,"
                " updated_at = ? WHERE id = ? RETURNING *", (now, job_id)).fetchone()
            # The claim's event and what only the lease saw after it (adopted,
            # resumed): nothing ran. No claim event (a reclaim): nothing goes.
            c.execute("DELETE FROM events WHERE job_id = ? AND attempt = ? AND id >= (SELECT max(id) FROM events"
                      " WHERE job_id = ? AND attempt = ? AND kind = 'claimed')",
                      (job_id, row["attempts"], job_id, row["attempts"]))
            return self._job(out)

    def adopt(self, job_id: int, token: str, worker: str, *, message: str) -> Job:
        """A new holder takes over the lease of ``token`` (a daemon adopting
        a run that outlived the daemon that claimed it): the lease is renewed
        from now and ``worker`` renamed; event ``adopted``. The token decides,
        as for a heartbeat: a lapsed lease that nobody reclaimed is still
        ours. Raises LeaseLost or JobNotFound."""
        now = self.clock.now()
        with self._tx(durable=False) as c:
            row = self._held(c, job_id, token)
            out = c.execute(
                "UPDATE jobs SET worker = ?, lease_until = ?, updated_at = ? WHERE id = ? RETURNING *",
                (worker, now + row["lease_s"], now, job_id),
            ).fetchone()
            self._event(c, job_id, now, "adopted", row["attempts"], message)
            return self._job(out)

    def abandon(self, job_id: int, token: str, *, message: str, refund: bool = False) -> Job:
        """Declare the holder of ``token`` gone (e.g. the daemon that held it
        died: the single-instance lock proves it). The lease counts as expired
        from now, so the next claim re-issues the job with a ``reclaimed``
        event (attempts + 1). Event ``abandoned``. With ``refund`` (the run
        was cut short by a crash of sloth, not of the job) its try is given
        back, at most MAX_CRASH_REFUNDS times between user retries; past that
        the crash counts. Raises LeaseLost."""
        now = self.clock.now()
        with self._tx() as c:
            row = self._held(c, job_id, token)
            give = refund and may_refund(row)
            out = c.execute(
                "UPDATE jobs SET lease_until = ?, tries = tries - ?, refunds = refunds + ?, updated_at = ?"
                " WHERE id = ? RETURNING *",
                (math.nextafter(now, -math.inf), int(give), int(give), now, job_id),
            ).fetchone()
            if refund:
                message += (f"; not counted as a try ({row['refunds'] + 1} of {MAX_CRASH_REFUNDS} forgiven)"
                            if give else f"; counted as a try ({MAX_CRASH_REFUNDS} crashes already forgiven)")
            self._event(c, job_id, now, "abandoned", row["attempts"], message)
            return self._job(out)



def may_refund(row: Any) -> bool:
    """Whether a run cut short by sloth (a crash, a fence) may give its try
    back: MAX_CRASH_REFUNDS times between user retries, one count for both."""
    return bool(row["refunds"] < MAX_CRASH_REFUNDS and row["tries"] > 0)


def refund_note(row: Any, given: bool) -> str:
    """What the history says of a fence's try (given back or counted)."""
    if given:
        return f"; not counted as a try ({row['refunds'] + 1} of {MAX_CRASH_REFUNDS} forgiven)"
    return f"; counted as a try ({MAX_CRASH_REFUNDS} crashes or fences already forgiven)"


def past(t: float | None, now: float) -> float:
    """A reported time, never later than now (clocks of other processes)."""
    return now if t is None or not math.isfinite(t) or t > now else t

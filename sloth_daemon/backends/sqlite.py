"""The lease queue on one SQLite file: leases and transitions. Its SQL lives
in the sqlite*.py modules of this package (sqlite_enqueue: adding jobs,
sqlite_pick: what a claim picks, sqlite_reads: the read side); db.py
connects and migrates.

Knows nothing of sockets, processes or the CLI. Every write is one short
``BEGIN IMMEDIATE`` transaction (db.transaction), every time is a bound
parameter read from the injected clock: SQL never reads the clock.

What ``claim`` picks, and in which order, is sqlite_pick.py's.
"""

from __future__ import annotations

import json
import math
import os
import secrets
import sqlite3
from pathlib import Path
from typing import Any, Collection, Sequence

from .. import db
from . import sqlite_pick as pick
from .sqlite_enqueue import SQL_ACTIVE_KEY, SqliteEnqueue
from .sqlite_reads import SqliteReads
from ..clock import Clock, SystemClock
from ..errors import BadRequest, IllegalTransition, LeaseLost
from ..models import ACTIVE_STATES, FINISHED_STATES, Job, JobState
from ..spec import number
from ..text import storable

DEFAULT_LEASE_S = 60.0
DEFAULT_MAX_ATTEMPTS = 3
DEFAULT_BACKOFF_CAP_S = 300.0
_NEVER_CLOSED: list[sqlite3.Connection] = []  # connections of broken queues (see close)


class SqliteQueue(SqliteEnqueue, SqliteReads):
    """A durable lease queue over one SQLite file (see module docstring)."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        clock: Clock | None = None,
        *,
        lease_s: float = DEFAULT_LEASE_S,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        backoff_cap_s: float = DEFAULT_BACKOFF_CAP_S,
    ) -> None:
        self.path = Path(path)
        self.clock: Clock = clock or SystemClock()
        self.lease_s = float(lease_s)
        self.max_attempts = int(max_attempts)
        self.backoff_cap_s = float(backoff_cap_s)
        self._conn = db.connect(self.path)
        self._envs: dict[int, dict[str, str]] = {}  # env_id -> env, decoded once
        self._conn.row_factory = sqlite3.Row
        self.identity: str = self._identity()

    def _identity(self) -> str:
        """This queue's stable id: random, made with the queue (or the first
        time a queue of an older sloth is opened), kept in meta. Logs live
        under it, so a new queue in the same folder never writes into an old
        queue's log files (identity.py)."""
        found = self.get_meta("queue_id")
        if isinstance(found, str):
            return found
        with db.transaction(self._conn) as c:
            row = c.execute("SELECT value FROM meta WHERE key = 'queue_id'").fetchone()
            if row is not None:
                return str(json.loads(row[0]))
            qid = secrets.token_hex(8)
            c.executemany("INSERT INTO meta (key, value) VALUES (?, ?)", [
                ("queue_id", json.dumps(qid)), ("queue_created_at", json.dumps(self.clock.now()))])
            return qid

    def check(self) -> None:
        """Raise QueueBroken if the file was replaced, truncated or found
        damaged under this queue (then it takes no more writes)."""
        guard = db.guard_of(self._conn)
        if guard is not None:
            guard.check()

    # ------------------------------------------------------------------- claim
    def claim(
        self, worker: str, *, lease_s: float | None = None, lanes: Sequence[str] | None = None,
        exclude_lanes: Collection[str] = (), exclude_ids: Collection[int] = (),
    ) -> Job | None:
        """Lease the most urgent due job to ``worker``, or return None.

        Due means ``queued`` with ``not_before <= now``, or ``claimed`` with an
        expired lease (``lease_until < now``, strict). Transition: -> claimed,
        ``attempts`` + 1, fresh token, ``lease_until = now + lease``, event
        ``claimed`` or ``reclaimed``. An expired job with no attempts left goes
        to ``failed`` instead (event ``lease_expired``) and the search goes on.
        The returned Job keeps the previous attempt's ``runner`` identity so a
        caller can make sure that process is gone before running it again.
        ``exclude_lanes`` skips lanes (full or paused ones, for the daemon);
        ``exclude_ids`` never re-issues these jobs' expired leases (the
        daemon's own running jobs: after a stall it renews them instead).

        Not fsynced (see db.transaction): after a power cut the claimed
        process is gone anyway, and the job simply runs again.
        """
        if lease_s is not None:  # refuse a bad lease even when nothing is due
            lease_s = number(lease_s, "lease_s", None, lo=0.001)
        if isinstance(lanes, str):  # a bare string would be read as its letters
            raise BadRequest(f"lanes must be a list of lane names, got the string {lanes!r}")
        if lanes is not None and not lanes:
            return None
        now = self.clock.now()
        with db.transaction(self._conn, durable=False) as c:
            while True:
                cand = pick.best_candidate(c, now, lanes, exclude_lanes, exclude_ids)
                if cand is None:
                    return None
                row, expired = cand
                if expired and row["attempts"] >= row["max_attempts"]:
                    self._lease_expired_for_good(c, row, now)
                    continue
                return self._lease(c, row, expired, worker, now, row["lease_s"] if lease_s is None else lease_s)

    def _lease_expired_for_good(self, c: sqlite3.Connection, row: sqlite3.Row, now: float) -> None:
        self._finish(c, row["id"], JobState.FAILED, now, row["attempts"], "lease_expired",
                     f"lease expired on the last attempt ({row['attempts']}/{row['max_attempts']});"
                     f" worker {row['worker']} was lost")

    def _lease(self, c: sqlite3.Connection, row: sqlite3.Row, expired: bool, worker: str, now: float,
               lease: float) -> Job:
        """claimed, attempt + 1, a fresh token, event claimed or reclaimed."""
        token = secrets.token_hex(8)
        attempt = row["attempts"] + 1
        out = c.execute(
            "UPDATE jobs SET state = 'claimed', attempts = ?, token = ?, worker = ?,"
            " lease_until = ?, updated_at = ? WHERE id = ? RETURNING *",
            (attempt, token, worker, now + lease, now, row["id"]),
        ).fetchone()
        msg = f"by {worker}"
        if expired:
            msg += f"; lease of {row['worker']} expired at {row['lease_until']:.3f}"
        self._event(c, row["id"], now, "reclaimed" if expired else "claimed", attempt, msg)
        return self._job(out)

    # --------------------------------------------------------- lease holders
    def heartbeat(self, job_id: int, token: str, *, lease_s: float | None = None) -> Job:
        """Extend the lease of the holder of ``token``: ``lease_until = now + lease``.

        The token decides, not the clock: a lapsed lease that nobody reclaimed
        may still be renewed. Raises LeaseLost (stale token) or JobNotFound.
        """
        now = self.clock.now()
        with db.transaction(self._conn, durable=False) as c:
            row = self._held(c, job_id, token)
            return self._extend(c, row, now, lease_s)

    def renew_after_resume(self, job_id: int, token: str, message: str) -> Job:
        """Heartbeat after the machine slept, and record a ``resumed`` event."""
        now = self.clock.now()
        with db.transaction(self._conn, durable=False) as c:
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
        with db.transaction(self._conn, durable=False) as c:
            row = self._held(c, job_id, token)
            out = c.execute(
                "UPDATE jobs SET runner = ?, updated_at = ? WHERE id = ? RETURNING *",
                (json.dumps(runner), now, job_id),
            ).fetchone()
            self._event(c, job_id, now, "started", row["attempts"], f"pid {runner.get('pid')}")
            return self._job(out)

    def complete(self, job_id: int, token: str, *, message: str = "", exit_code: int | None = None) -> Job:
        """claimed -> done. Raises LeaseLost for a stale token."""
        now = self.clock.now()
        with db.transaction(self._conn) as c:
            row = self._held(c, job_id, token)
            return self._finish(c, job_id, JobState.DONE, now, row["attempts"], "done",
                                message, exit_code=exit_code)

    def fail(
        self, job_id: int, token: str, *, message: str = "", retry: bool = True,
        exit_code: int | None = None,
    ) -> Job:
        """claimed -> queued with ``not_before = now + min(2**attempts, cap)`` while
        attempts remain (and ``retry``), else -> failed. Raises LeaseLost."""
        now = self.clock.now()
        with db.transaction(self._conn) as c:
            row = self._held(c, job_id, token)
            attempts = row["attempts"]
            if retry and attempts < row["max_attempts"]:
                delay = min(2.0 ** min(attempts, 1000), self.backoff_cap_s)  # 2.0**1024 overflows
                out = c.execute(
                    "UPDATE jobs SET state = 'queued', not_before = ?, token = NULL,"
                    " lease_until = NULL, message = ?, exit_code = ?, updated_at = ?"
                    " WHERE id = ? RETURNING *",
                    (now + delay, storable(message), exit_code, now, job_id),
                ).fetchone()
                self._event(c, job_id, now, "failed", attempts,
                            _join(message, f"retry {attempts + 1}/{row['max_attempts']} in {delay:g}s"))
                return self._job(out)
            why = "no attempts left" if retry else "not retried"
            return self._finish(c, job_id, JobState.FAILED, now, attempts, "failed",
                                _join(message, why), exit_code=exit_code, stored_message=message)

    def release(self, job_id: int, token: str, *, message: str = "interrupted", delay_s: float = 0.0,
                kind: str = "interrupted") -> Job:
        """claimed -> queued, due in ``delay_s``, attempt refunded (event ``kind``).

        For a run cut short by no fault of the job: a graceful shutdown
        (``interrupted``), or a spawn that failed for the daemon's own lack of
        resources (``postponed``, with a delay). It does not use up the job's
        failure budget. Raises LeaseLost."""
        delay = number(delay_s, "delay_s", 0.0, lo=0)
        now = self.clock.now()
        with db.transaction(self._conn) as c:
            row = self._held(c, job_id, token)
            out = c.execute(
                "UPDATE jobs SET state = 'queued', not_before = ?, token = NULL, lease_until = NULL,"
                " attempts = max(attempts - 1, 0), updated_at = ? WHERE id = ? RETURNING *",
                (now + delay, now, job_id),
            ).fetchone()
            self._event(c, job_id, now, kind, row["attempts"], message)
            return self._job(out)

    # ---------------------------------------------------------- user actions
    def cancel(self, job_id: int, *, message: str = "cancelled by user") -> Job:
        """queued|claimed -> cancelled. A claimed job's holder loses its lease
        (its token is cleared); ending its process is the caller's business."""
        now = self.clock.now()
        with db.transaction(self._conn) as c:
            row = self._get_row(c, job_id)
            if row["state"] not in ACTIVE_STATES:
                raise IllegalTransition(
                    f"job {job_id} is {row['state']}; only queued or running jobs can be cancelled"
                )
            return self._finish(c, job_id, JobState.CANCELLED, now, row["attempts"],
                                "cancelled", message)

    def retry(self, job_id: int) -> Job:
        """failed|cancelled -> queued, due now, with a fresh attempt budget."""
        now = self.clock.now()
        with db.transaction(self._conn) as c:
            row = self._get_row(c, job_id)
            if row["state"] not in (JobState.FAILED.value, JobState.CANCELLED.value):
                raise IllegalTransition(
                    f"job {job_id} is {row['state']}; only failed or cancelled jobs can be retried",
                    hint="A queued or running job will run anyway; a done job can be re-added.",
                )
            if row["key"] is not None:
                other = c.execute(SQL_ACTIVE_KEY, (row["key"],)).fetchone()
                if other:
                    raise IllegalTransition(
                        f"job {other[0]} with the same key {row['key']!r} is still active",
                        hint=f"Wait for job {other[0]} or cancel it first.",
                    )
            out = c.execute(
                "UPDATE jobs SET state = 'queued', attempts = 0, not_before = ?, token = NULL,"
                " lease_until = NULL, finished_at = NULL, updated_at = ? WHERE id = ? RETURNING *",
                (now, now, job_id),
            ).fetchone()
            self._event(c, job_id, now, "retried", 0, "back to queued by user")
            return self._job(out)

    def prune(self, older_than_s: float) -> int:
        """Delete finished jobs (and their events) that ended more than
        ``older_than_s`` ago. Returns how many jobs were deleted."""
        if older_than_s is None:
            raise BadRequest("older_than_s must be a number of seconds, got None")
        older = number(older_than_s, "older_than_s", 0.0, lo=0)
        cutoff = self.clock.now() - older
        with db.transaction(self._conn) as c:
            cur = c.execute(
                "DELETE FROM jobs WHERE finished_at IS NOT NULL AND finished_at < ?"
                " AND state IN (?, ?, ?)", (cutoff, *FINISHED_STATES),
            )
            if cur.rowcount:
                c.execute("DELETE FROM envs WHERE NOT EXISTS"
                          " (SELECT 1 FROM jobs WHERE jobs.env_id = envs.id)")
                self._envs.clear()
            self._prune_batch_records(c, self.clock.now())
            return cur.rowcount

    def set_meta(self, key: str, value: Any) -> None:
        with db.transaction(self._conn) as c:
            c.execute(
                "INSERT INTO meta (key, value) VALUES (?, ?)"
                " ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                (key, json.dumps(value)),
            )

    def abandon(self, job_id: int, token: str, *, message: str) -> Job:
        """Declare the holder of ``token`` gone (e.g. the daemon that held it
        died: the single-instance lock proves it). The lease counts as expired
        from now, so the next claim re-issues the job with a ``reclaimed``
        event. Event ``abandoned``. Raises LeaseLost."""
        now = self.clock.now()
        with db.transaction(self._conn) as c:
            row = self._held(c, job_id, token)
            out = c.execute(
                "UPDATE jobs SET lease_until = ?, updated_at = ? WHERE id = ? RETURNING *",
                (math.nextafter(now, -math.inf), now, job_id),
            ).fetchone()
            self._event(c, job_id, now, "abandoned", row["attempts"], message)
            return self._job(out)

    @property
    def broken(self) -> str | None:
        """Why this queue takes no more writes (its file changed under it), or None."""
        guard = db.guard_of(self._conn)
        return None if guard is None else guard.broken

    def close(self) -> None:
        """Close the file. A broken queue's connection is left open instead:
        closing checkpoints the WAL into whatever file is now at the path (into
        a truncated file, a patchwork of old pages that looks like a queue).
        A process that ends with such a queue should leave by os._exit."""
        if self.broken is None:
            self._conn.close()
        else:
            _NEVER_CLOSED.append(self._conn)

    def __enter__(self) -> "SqliteQueue":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --------------------------------------------------------------- helpers
    def _held(self, c: sqlite3.Connection, job_id: int, token: str) -> sqlite3.Row:
        row = self._get_row(c, job_id)
        if row["state"] != JobState.CLAIMED.value or row["token"] is None or row["token"] != token:
            if (row["state"] == JobState.QUEUED.value and row["token"] is None
                    and row["attempts"] == 0 and not _ever_claimed(c, job_id)):
                raise IllegalTransition(f"job {job_id} is queued, not claimed by anyone")
            raise LeaseLost(
                f"job {job_id}: token {str(token)[:16]!r} no longer holds the lease "
                f"(job is {row['state']}, attempt {row['attempts']})"
            )
        return row

    def _finish(
        self, c: sqlite3.Connection, job_id: int, state: JobState, now: float, attempt: int,
        kind: str, message: str, *, exit_code: int | None = None, stored_message: str | None = None,
    ) -> Job:
        out = c.execute(
            "UPDATE jobs SET state = ?, token = NULL, lease_until = NULL, message = ?,"
            " exit_code = coalesce(?, exit_code), finished_at = ?, updated_at = ?"
            " WHERE id = ? RETURNING *",
            (state.value, storable(message if stored_message is None else stored_message),
             exit_code, now, now, job_id),
        ).fetchone()
        self._event(c, job_id, now, kind, attempt, message)
        return self._job(out)

    @staticmethod
    def _event(c: sqlite3.Connection, job_id: int, at: float, kind: str, attempt: int, message: str) -> None:
        c.execute(
            "INSERT INTO events (job_id, at, kind, attempt, message) VALUES (?, ?, ?, ?, ?)",
            (job_id, at, kind, attempt, storable(message)),
        )


def _ever_claimed(c: sqlite3.Connection, job_id: int) -> bool:
    """True if a token was ever issued for the job (release/retry reset attempts to 0)."""
    return c.execute(
        "SELECT 1 FROM events WHERE job_id = ? AND kind IN ('claimed', 'reclaimed') LIMIT 1",
        (job_id,),
    ).fetchone() is not None


def _join(a: str, b: str) -> str:
    return f"{a}; {b}" if a else b

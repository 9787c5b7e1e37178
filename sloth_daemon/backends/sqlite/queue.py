"""The lease queue on one SQLite file: leases and transitions. Its SQL lives
in the sqlite*.py modules of this package (sqlite_enqueue: adding jobs,
sqlite_pick: what a claim picks, sqlite_reads: the read side); db.py
connects and migrates.

Knows nothing of sockets, processes or the CLI. Every write is one short
``BEGIN IMMEDIATE`` transaction (db.transaction), every time is a bound
parameter read from the injected clock: SQL never reads the clock.

What ``claim`` picks, and in which order, is backends/sqlite/pick.py's; what a job's
end does to the jobs waiting for it, backends/sqlite/deps.py's.

States: blocked -> queued -> running -> done | failed | cancelled (and
running -> queued for a retry or an interruption). Besides the job it
returns, a transition that ends a job may queue or cancel jobs that were
added after it; those are passed, after the commit, to ``on_side_change``.
"""

from __future__ import annotations

import json
import os
import secrets
import sqlite3
from pathlib import Path
from typing import Any, Callable, Collection, Sequence

from sloth_daemon.backends.sqlite import db
from sloth_daemon.backends.sqlite import deps
from sloth_daemon.backends.sqlite import pick
from sloth_daemon.backends.sqlite.batch import SqliteBatch
from sloth_daemon.backends.sqlite.leases import SqliteLeases, may_refund, past, refund_note
from sloth_daemon.backends.sqlite.enqueue import SQL_ACTIVE_KEY, SqliteEnqueue
from sloth_daemon.backends.sqlite.reads import SqliteReads
from sloth_daemon.backends.sqlite.unit import SqliteUnits, WriteUnit
from sloth_daemon.clock import Clock, SystemClock
from sloth_daemon.durations import format_duration
from sloth_daemon.errors import BadRequest, IllegalTransition, LeaseLost
from sloth_daemon.models import ACTIVE_STATES, Job, JobState
from sloth_daemon.spec import number
from sloth_daemon.text import storable

DEFAULT_LEASE_S = 60.0
DEFAULT_MAX_ATTEMPTS = 3
DEFAULT_BACKOFF_CAP_S = 300.0
_NEVER_CLOSED: list[sqlite3.Connection] = []  # connections of broken queues (see close)


class SqliteQueue(SqliteUnits, SqliteLeases, SqliteBatch, SqliteEnqueue, SqliteReads):
    """A durable lease queue over one SQLite file (see module docstring)."""

    on_side_change: Callable[[Job], None] | None = None  # see the module docstring

    def __init__(
        self,
        path: str | os.PathLike[str],
        clock: Clock | None = None,
        *,
        lease_s: float = DEFAULT_LEASE_S,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        backoff_cap_s: float = DEFAULT_BACKOFF_CAP_S,
        lock_wait_s: float = 30.0,
    ) -> None:
        """``lock_wait_s``: how long a write waits for another process's lock
        before raising StorageBusy (the daemon uses a short wait and tries
        again later, so its event loop never freezes behind a foreign writer)."""
        self.path = Path(path)
        self.clock: Clock = clock or SystemClock()
        self.lease_s = float(lease_s)
        self.max_attempts = int(max_attempts)
        self.backoff_cap_s = float(backoff_cap_s)
        self._patience_s = float(lock_wait_s)
        self._conn = db.connect(self.path, busy_timeout_s=min(self._patience_s, db.BUSY_TIMEOUT_MS / 1000))
        self._envs: dict[int, dict[str, str]] = {}  # env_id -> env, decoded once
        self._conn.row_factory = sqlite3.Row
        self._side: list[sqlite3.Row] = []  # dependents changed by the open transaction
        self._unit: WriteUnit | None = None  # writes that share one transaction (unit())
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
        places: Collection[str] | None = None, reclaim: bool = True,
    ) -> Job | None:
        """Lease the most urgent due job to ``worker``, or return None.

        Due means ``queued`` with ``not_before <= now``, or ``running`` with an
        expired lease (``lease_until < now``, strict); never ``blocked``.
        Transition: -> running, ``attempts`` and ``tries`` + 1, fresh token,
        ``lease_until = now + lease``, event ``claimed`` or ``reclaimed``. An
        expired job with no tries left goes
        to ``failed`` instead (event ``lease_expired``) and the search goes on.
        The returned Job keeps the previous attempt's ``runner`` identity so a
        caller can make sure that process is gone before running it again.
        ``exclude_lanes`` skips lanes (full or paused ones, for the daemon);
        ``exclude_ids`` never re-issues these jobs' expired leases (the
        daemon's own running jobs: after a stall it renews them instead);
        ``places``: only jobs placed there ("" anywhere; None: any job).
        ``reclaim=False`` takes queued jobs only, never an expired lease: a
        claim that may be undone (unclaim) must be a plain one.

        Not fsynced (see db.transaction): after a power cut the claimed
        process is gone anyway, and the job simply runs again.
        """
        if lease_s is not None:  # refuse a bad lease even when nothing is due
            lease_s = number(lease_s, "lease_s", None, lo=0.001)
        for name, v in (("lanes", lanes), ("places", places)):
            if isinstance(v, str):  # a bare string would be read as its letters
                raise BadRequest(f"{name} must be a list of names, got the string {v!r}")
        if lanes is not None and not lanes:
            return None
        now = self.clock.now()
        with self._tx(durable=False) as c:
            while True:
                cand = pick.best_candidate(c, now, lanes, exclude_lanes, exclude_ids, places, expired=reclaim)
                if cand is None:
                    return None
                row, expired = cand
                if expired and row["tries"] >= row["max_attempts"]:
                    self._lease_expired_for_good(c, row, now)
                    continue
                return self._lease(c, row, expired, worker, now, row["lease_s"] if lease_s is None else lease_s)

    def _lease_expired_for_good(self, c: sqlite3.Connection, row: sqlite3.Row, now: float) -> None:
        self._finish(c, row["id"], JobState.FAILED, now, row["attempts"], "lease_expired",
                     f"lease expired on the last attempt ({row['tries']}/{row['max_attempts']});"
                     f" worker {row['worker']} was lost")

    def _lease(self, c: sqlite3.Connection, row: sqlite3.Row, expired: bool, worker: str, now: float,
               lease: float) -> Job:
        """claimed, attempt + 1, a fresh token, event claimed or reclaimed."""
        token = secrets.token_hex(8)
        attempt = row["attempts"] + 1
        out = c.execute(
            "UPDATE jobs SET state = 'running', attempts = ?, tries = tries + 1, token = ?, worker = ?,"
            " lease_until = ?, updated_at = ? WHERE id = ? RETURNING *",
            (attempt, token, worker, now + lease, now, row["id"]),
        ).fetchone()
        msg = f"by {worker}"
        if expired:  # how long ago, not an epoch: the event's own time is shown beside it
            msg += f"; lease of {row['worker']} ran out {format_duration(now - row['lease_until'])} before"
        self._event(c, row["id"], now, "reclaimed" if expired else "claimed", attempt, msg)
        return self._job(out)

    # --------------------------------------------------------- lease holders
    def complete(self, job_id: int, token: str, *, message: str = "", exit_code: int | None = None,
                 ended_at: float | None = None, runner: dict[str, Any] | None = None,
                 durable: bool = True) -> Job:
        """running -> done (dependents may be queued). ``ended_at``: when the process really ended (it
        may have ended while no daemon ran), else now. ``runner``: the
        attempt's process identity if not recorded yet (set_runner), written
        in the same transaction. ``durable=False`` commits without an fsync:
        for all but the last of a batch of outcomes (group commit), whose one
        fsync, or a flush(), makes them all durable. Raises LeaseLost for a
        stale token."""
        now = self.clock.now()
        with self._tx(durable=durable) as c:
            row = self._held(c, job_id, token)
            self._put_runner(c, row, runner, now)
            return self._finish(c, job_id, JobState.DONE, past(ended_at, now), row["attempts"], "done",
                                message, exit_code=exit_code)

    def fail(
        self, job_id: int, token: str, *, message: str = "", retry: bool = True,
        exit_code: int | None = None, ended_at: float | None = None,
        runner: dict[str, Any] | None = None, durable: bool = True,
    ) -> Job:
        """running -> queued with ``not_before = now + min(2**tries, cap)`` while
        tries remain (and ``retry``), else -> failed (dependents that need it
        done are cancelled, the others may be queued). ``ended_at``,
        ``runner`` and ``durable`` as for complete. Raises LeaseLost."""
        now = self.clock.now()
        with self._tx(durable=durable) as c:
            row = self._held(c, job_id, token)
            self._put_runner(c, row, runner, now)
            return self._fail_row(c, row, message, retry, exit_code, past(ended_at, now), now)

    def _fail_row(self, c: sqlite3.Connection, row: sqlite3.Row, message: str, retry: bool,
                  exit_code: int | None, ended: float, now: float, kind: str = "failed") -> Job:
        """A try that counts ended: queued after a backoff while tries remain
        (and ``retry``, the event ``kind``), else failed."""
        job_id, attempts, tries = row["id"], row["attempts"], row["tries"]
        if retry and tries < row["max_attempts"]:
            delay = min(2.0 ** min(tries, 1000), self.backoff_cap_s)  # 2.0**1024 overflows
            out = c.execute(
                "UPDATE jobs SET state = 'queued', not_before = ?, token = NULL,"
                " lease_until = NULL, message = ?, exit_code = ?, updated_at = ?"
                " WHERE id = ? RETURNING *",
                (now + delay, storable(message), exit_code, now, job_id),
            ).fetchone()
            self._event(c, job_id, ended, kind, attempts,
                        _join(message, f"retry {tries + 1}/{row['max_attempts']} in {delay:g}s"))
            return self._job(out)
        why = "no attempts left" if retry else "not retried"
        return self._finish(c, job_id, JobState.FAILED, ended, attempts, "failed",
                            _join(message, why), exit_code=exit_code, stored_message=message)

    def release(self, job_id: int, token: str, *, message: str = "interrupted", delay_s: float = 0.0,
                kind: str = "interrupted", runner: dict[str, Any] | None = None,
                durable: bool = True) -> Job:
        """running -> queued, due in ``delay_s``, the try given back (event
        ``kind``: ``interrupted`` by a stopping daemon, ``fenced`` when its
        keeper ended it for want of a lease renewal, ``postponed`` when it
        could not start for the spawner's own lack of resources).

        The end was not the job's fault, so it does not use up its failure
        budget -- a fence only MAX_CRASH_REFUNDS times, as a crash of sloth
        (abandon; one count for both), so a lease its job cannot keep cannot
        loop: past that it counts as a failed try. ``runner``, ``durable``:
        as for complete. Raises LeaseLost.
        """
        delay = number(delay_s, "delay_s", 0.0, lo=0)
        now = self.clock.now()
        with self._tx(durable=durable) as c:
            row = self._held(c, job_id, token)
            self._put_runner(c, row, runner, now)
            forgiven = kind != "fenced" or may_refund(row)
            if kind == "fenced":
                message += refund_note(row, forgiven)
            if not forgiven:
                return self._fail_row(c, row, message, True, None, now, now, kind)
            out = c.execute(
                "UPDATE jobs SET state = 'queued', not_before = ?, token = NULL, lease_until = NULL,"
                " tries = max(tries - 1, 0), refunds = refunds + ?, updated_at = ? WHERE id = ? RETURNING *",
                (now + delay, int(kind == "fenced"), now, job_id),
            ).fetchone()
            self._event(c, job_id, now, kind, row["attempts"], message)
            return self._job(out)

    # ---------------------------------------------------------- user actions
    def cancel(self, job_id: int, *, message: str = "cancelled by user") -> Job:
        """blocked|queued|running -> cancelled; what waits for it to be done is
        cancelled too. A running job's holder loses its lease (its token is
        cleared); ending its process is the caller's business. Raises
        IllegalTransition for a finished job, JobNotFound."""
        now = self.clock.now()
        with self._tx() as c:
            row = self._get_row(c, job_id)
            if row["state"] not in ACTIVE_STATES:
                raise IllegalTransition(
                    f"job {job_id} is {row['state']}; only blocked, queued or running jobs can be cancelled"
                )
            return self._finish(c, job_id, JobState.CANCELLED, now, row["attempts"],
                                "cancelled", message)

    def retry(self, job_id: int) -> Job:
        """failed|cancelled -> queued, due now, with a fresh budget of tries
        (``attempts`` keeps counting runs);
        -> blocked instead while a job it was added after is unfinished (one
        that failed no longer stops it: retrying is the user's say-so).
        Raises IllegalTransition (other states, or its key is taken by an
        active job), JobNotFound."""
        now = self.clock.now()
        with self._tx() as c:
            return self._retry(c, self._get_row(c, job_id), now)

    def _retry(self, c: sqlite3.Connection, row: sqlite3.Row, now: float) -> Job:
        job_id = row["id"]
        if row["state"] not in (JobState.FAILED.value, JobState.CANCELLED.value):
            raise IllegalTransition(
                f"job {job_id} is {row['state']}; only failed or cancelled jobs can be retried",
                hint="A queued or running job will run anyway; `sloth restart` queues a finished one again.",
            )
        if row["key"] is not None:
            other = c.execute(SQL_ACTIVE_KEY, (row["key"],)).fetchone()
            if other:
                raise IllegalTransition(
                    f"job {other[0]} with the same key {row['key']!r} is still active",
                    hint=f"Wait for job {other[0]} or cancel it first.",
                )
        waits = deps.still_waits(c, job_id)
        out = c.execute(
            "UPDATE jobs SET state = ?, tries = 0, refunds = 0, not_before = ?, token = NULL,"
            " lease_until = NULL, finished_at = NULL, updated_at = ? WHERE id = ? RETURNING *",
            ("queued" if waits is None else "blocked", now, now, job_id),
        ).fetchone()
        why = "back to queued by user" if waits is None else f"retried by user; waits for job {waits}"
        self._event(c, job_id, now, "retried", row["attempts"], why)
        return self._job(out)

    def set_meta(self, key: str, value: Any) -> None:
        with self._tx() as c:
            c.execute(
                "INSERT INTO meta (key, value) VALUES (?, ?)"
                " ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                (key, json.dumps(value)),
            )

    def set_lane(self, name: str, concurrency: int | None, config_was: int | None = None) -> None:
        """Record a lane (and, unless None, the concurrency `sloth lane set`
        gave it, with the config's value at that moment)."""
        with self._tx() as c:
            c.execute(
                "INSERT INTO lanes (name, concurrency, config_was, created_at) VALUES (?, ?, ?, ?)"
                " ON CONFLICT(name) DO UPDATE SET concurrency = excluded.concurrency,"
                " config_was = excluded.config_was", (name, concurrency, config_was, self.clock.now()))

    def forget_lane(self, name: str) -> None:
        """Remove a lane from the lanes table (its jobs, if any, keep their lane)."""
        with self._tx() as c:
            c.execute("DELETE FROM lanes WHERE name = ?", (name,))

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
        if row["state"] != JobState.RUNNING.value or row["token"] is None or row["token"] != token:
            if (row["state"] == JobState.QUEUED.value and row["token"] is None
                    and row["attempts"] == 0):
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
        self._side += deps.release(c, job_id, state.value, now)
        return self._job(out)

    @staticmethod
    def _event(c: sqlite3.Connection, job_id: int, at: float, kind: str, attempt: int, message: str) -> None:
        c.execute(
            "INSERT INTO events (job_id, at, kind, attempt, message) VALUES (?, ?, ?, ?, ?)",
            (job_id, at, kind, attempt, storable(message)),
        )


def _join(a: str, b: str) -> str:
    return f"{a}; {b}" if a else b

"""The lease holder's side of the SQLite queue (the claim that grants a
lease is claim.py's): renewing it, recording the process that runs it, handing it to a new
holder, declaring a holder gone, and the outcomes that end it (complete,
fail, release) or undo it (unclaim).

What a job's end does to the jobs waiting for it is ends.py's and deps.py's.
"""

from __future__ import annotations

import json
import math
import sqlite3
from typing import Any, Mapping

from sloth_daemon.backends import attempt_rules, contract, rules
from sloth_daemon.backends.sqlite.ends import SqliteEnds, event
from sloth_daemon.backends.sqlite.reads import JobRows
from sloth_daemon.backends.sqlite.unit import SqliteStore
from sloth_daemon.clock import Clock
from sloth_daemon.models import Job, JobState
from sloth_daemon.spec import number
from sloth_daemon.text import storable

class SqliteLeases(contract.Leases):
    """Leases and the transitions of their holders (see the module
    docstring). Its own state: the clock it reads ``now`` from and the
    backoff cap of a failed try; writes go through ``store``, ended jobs
    through ``ends``, rows are told by ``rows``."""

    def __init__(self, store: SqliteStore, rows: JobRows, ends: SqliteEnds, clock: Clock,
                 defaults: contract.QueueDefaults) -> None:
        self.store, self.rows, self.ends, self.clock = store, rows, ends, clock
        self.defaults = defaults

    def set_waiting(self, gate: str, why: str | None) -> int:
        with self.store.tx(durable=False) as c:
            return c.execute("UPDATE jobs SET wait_reason = ? WHERE state = 'queued' AND gate = ?"
                             " AND wait_reason IS NOT ?", (why, gate, why)).rowcount

    def complete(self, job_id: int, token: str, *, message: str = "", exit_code: int | None = None,
                 ended_at: float | None = None, runner: dict[str, Any] | None = None,
                 durable: bool = True) -> Job:
        now = self.clock.now()
        # the process identity and its event with the end's update and event (_put_runner's, folded),
        # the lease checked by that update (_held's, folded)
        ident = None if runner is None else json.dumps(runner)
        started = None if runner is None else started_event(runner, now)
        with self.store.tx(durable=durable) as c:
            return self.ends.finish(c, job_id, JobState.DONE, past(ended_at, now), None, "done", message,
                                    exit_code=exit_code, runner=ident, started=started, held_by=token)

    def fail(
        self, job_id: int, token: str, *, message: str = "", retry: bool = True,
        exit_code: int | None = None, ended_at: float | None = None,
        runner: dict[str, Any] | None = None, durable: bool = True, rule: str = "",
    ) -> Job:
        now = self.clock.now()
        with self.store.tx(durable=durable) as c:
            row = self._held(c, job_id, token)
            self._put_runner(c, row, runner, now)
            return self._fail_row(c, row, message, retry, exit_code, past(ended_at, now), now, rule=rule)

    def _fail_row(self, c: sqlite3.Connection, row: sqlite3.Row, message: str, retry: bool,
                  exit_code: int | None, ended: float, now: float, kind: str = "failed", *, rule: str = "") -> Job:
        """A try that counts ended: queued after a backoff while tries remain
        (and ``retry``, the event ``kind``), else failed."""
        job_id, attempts, tries = row["id"], row["attempts"], row["tries"]
        if retry and tries < row["max_attempts"]:
            delay = rules.job_backoff_s(row, self.defaults.backoff_cap_s)
            out = c.execute(
                "UPDATE jobs SET state = 'queued', not_before = ?, token = NULL,"
                " lease_until = NULL, message = ?, exit_code = ?, updated_at = ?"
                " WHERE id = ? RETURNING *",
                (now + delay, storable(message), exit_code, now, job_id),
            ).fetchone()
            event(c, job_id, ended, kind, attempts, rules.retry_message(rules.with_rule(message, rule), row, delay))
            return self.rows.job(out)
        return self.ends.finish(c, job_id, JobState.FAILED, ended, attempts, "failed",
                                rules.give_up_message(rules.with_rule(message, rule), retry), exit_code=exit_code,
                                stored_message=message)

    def release(self, job_id: int, token: str, *, message: str = "interrupted", delay_s: float = 0.0,
                kind: str = "interrupted", runner: dict[str, Any] | None = None,
                durable: bool = True) -> Job:
        delay = number(delay_s, "delay_s", 0.0, lo=0)
        now = self.clock.now()
        with self.store.tx(durable=durable) as c:
            row = self._held(c, job_id, token)
            self._put_runner(c, row, runner, now)
            forgiven = kind != "fenced" or rules.may_refund(row)
            if kind == "fenced":
                message += rules.refund_note(row, forgiven)
            if not forgiven:
                return self._fail_row(c, row, message, True, None, now, now, kind)
            out = c.execute(
                "UPDATE jobs SET state = 'queued', not_before = ?, token = NULL, lease_until = NULL,"
                " tries = max(tries - 1, 0), refunds = refunds + ?, updated_at = ? WHERE id = ? RETURNING *",
                (now + delay, int(kind == "fenced"), now, job_id),
            ).fetchone()
            event(c, job_id, now, kind, row["attempts"], message)
            return self.rows.job(out)

    def heartbeat(self, job_id: int, token: str, *, lease_s: float | None = None) -> Job:
        now = self.clock.now()
        with self.store.tx(durable=False) as c:
            row = self._held(c, job_id, token)
            return self._extend(c, row, now, lease_s)

    def renew_after_resume(self, job_id: int, token: str, message: str) -> Job:
        now = self.clock.now()
        with self.store.tx(durable=False) as c:
            row = self._held(c, job_id, token)
            job = self._extend(c, row, now, None)
            event(c, job_id, now, "resumed", row["attempts"], message)
            return job

    def _extend(self, c: sqlite3.Connection, row: sqlite3.Row, now: float, lease_s: float | None) -> Job:
        lease = row["lease_s"] if lease_s is None else number(lease_s, "lease_s", 0.0, lo=0.001)
        out = c.execute(
            "UPDATE jobs SET lease_until = ?, updated_at = ? WHERE id = ? RETURNING *",
            (now + lease, now, row["id"]),
        ).fetchone()
        return self.rows.job(out)

    def set_runner(self, job_id: int, token: str, runner: dict[str, Any]) -> Job:
        now = self.clock.now()
        with self.store.tx(durable=False) as c:
            row = self._held(c, job_id, token)
            self._put_runner(c, row, runner, now)
            return self.rows.job(c.execute("SELECT * FROM jobs WHERE id = ?", (job_id,)).fetchone())

    def note_run(self, job_id: int, token: str, kind: str, message: str) -> Job:
        now = self.clock.now()
        with self.store.tx(durable=False) as c:
            row = self._held(c, job_id, token)
            event(c, job_id, now, kind, row["attempts"], message)
            return self.rows.job(row)

    def set_paused(self, job_id: int, token: str, paused: bool, message: str, *, at: float | None = None) -> Job:
        now = self.clock.now()
        with self.store.tx() as c:
            row = self._held(c, job_id, token)
            out = c.execute("UPDATE jobs SET paused_run = ?, updated_at = ? WHERE id = ? RETURNING *",
                            (token if paused else None, now, job_id)).fetchone()
            event(c, job_id, past(at, now), "paused" if paused else "continued", row["attempts"], message)
            return self.rows.job(out)

    def set_progress(self, job_id: int, token: str, progress: Mapping[str, Any]) -> Job:
        with self.store.tx(durable=False) as c:
            row = self._held(c, job_id, token)
            out = c.execute("UPDATE jobs SET progress = ? WHERE id = ? RETURNING *",
                            (attempt_rules.progress_json(progress, row["attempts"]), job_id)).fetchone()
            return self.rows.job(out)

    def record_cost(self, job_id: int, attempt: int, cost: Mapping[str, Any], *, durable: bool = False) -> None:
        values = attempt_rules.cost_values(cost)
        with self.store.tx(durable=durable, single=True) as c:
            c.execute("INSERT OR REPLACE INTO attempts (job_id, attempt, cpu_s, peak_rss_bytes, wall_s, ended, covers)"
                      " SELECT id, ?, ?, ?, ?, ?, ? FROM jobs WHERE id = ?", (attempt, *values, job_id))

    def note_ended(self, job_id: int, attempt: int, message: str, *, ended_at: float | None = None,
                   durable: bool = True, kind: str = "ended") -> Job:
        now = self.clock.now()
        with self.store.tx(durable=durable) as c:
            row = self.rows.row(c, job_id)
            event(c, job_id, past(ended_at, now), kind, attempt, message)
            return self.rows.job(row)

    def _put_runner(self, c: sqlite3.Connection, row: sqlite3.Row, runner: dict[str, Any] | None,
                    now: float) -> None:
        if runner is None:
            return
        c.execute("UPDATE jobs SET runner = ?, updated_at = ? WHERE id = ?", (json.dumps(runner), now, row["id"]))
        at, said = started_event(runner, now)
        event(c, row["id"], at, "started", row["attempts"], said)

    def keep_result(self, job_id: int, attempt: int, data: str, *, durable: bool = True) -> None:
        with self.store.tx(durable=durable) as c:
            c.execute("INSERT INTO results (job_id, attempt, data, at) SELECT ?, ?, ?, ? WHERE EXISTS"
                      " (SELECT 1 FROM jobs WHERE id = ?) ON CONFLICT DO NOTHING",
                      (job_id, attempt, data, self.clock.now(), job_id))

    def unclaim(self, job_id: int, token: str, *, durable: bool = True) -> Job:
        now = self.clock.now()
        with self.store.tx(durable=durable) as c:
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
            return self.rows.job(out)

    def adopt(self, job_id: int, token: str, worker: str, *, message: str) -> Job:
        now = self.clock.now()
        with self.store.tx(durable=False) as c:
            row = self._held(c, job_id, token)
            out = c.execute(
                "UPDATE jobs SET worker = ?, lease_until = ?, updated_at = ? WHERE id = ? RETURNING *",
                (worker, now + row["lease_s"], now, job_id),
            ).fetchone()
            event(c, job_id, now, "adopted", row["attempts"], message)
            return self.rows.job(out)

    def abandon(self, job_id: int, token: str, *, message: str, refund: bool = False) -> Job:
        now = self.clock.now()
        with self.store.tx() as c:
            row = self._held(c, job_id, token)
            give = refund and rules.may_refund(row)
            out = c.execute(
                "UPDATE jobs SET lease_until = ?, tries = tries - ?, refunds = refunds + ?, updated_at = ?"
                " WHERE id = ? RETURNING *",
                (math.nextafter(now, -math.inf), int(give), int(give), now, job_id),
            ).fetchone()
            event(c, job_id, now, "abandoned", row["attempts"], message + rules.abandon_note(refund, give, row))
            return self.rows.job(out)

    def _held(self, c: sqlite3.Connection, job_id: int, token: str) -> sqlite3.Row:
        row = self.rows.row(c, job_id)
        if not rules.holds(row, token):
            raise rules.not_held(row, token)
        return row



def started_event(runner: dict[str, Any], now: float) -> tuple[float, str]:
    """The ``started`` event of a run whose process identity is ``runner``: (at, message)."""
    return past(runner.get("started_at"), now), f"pid {runner.get('pid')}"


def past(t: float | None, now: float) -> float:
    """A reported time, never later than now (clocks of other processes)."""
    return now if t is None or not math.isfinite(t) or t > now else t



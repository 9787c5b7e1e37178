"""The lease holder's side of the PostgreSQL queue: renewing a lease,
recording the process that runs it, handing it to a new holder, declaring a
holder gone, and the outcomes that end a
lease (complete, fail, release): the counterpart of backends/sqlite/leases.py.

PgLeases, a part of the PostgreSQL engine (engine.py). A renewal, and the
completion of a job nobody waits for, is one UPDATE that matches id AND
token and writes its event in the same statement: one round trip, and a
stale holder changes nothing. An outcome that settles dependents, or
records the process with it, is a transaction through the PgWriter.
"""

from __future__ import annotations

import json
from typing import Any, Mapping, Sequence

from sloth_daemon.errors import IllegalTransition, JobNotFound, LeaseLost, SlothError
from sloth_daemon.models import Job, JobState
from sloth_daemon.spec import number
from sloth_daemon.backends import attempt_rules, contract, rules
from sloth_daemon.backends.rules import holds, not_held
from sloth_daemon.backends.postgres.reads import JobRows, check_id, get_row
from sloth_daemon.backends.postgres.db import Connection, Cursor, Row, finite, one, storable_text
from sloth_daemon.backends.postgres.writer import FINISH, PgWriter, event

# SET lists of the one-statement writes of lease holders (_held_step).
EXTEND = "lease_until = sloth.now() + coalesce(%(lease_s)s, lease_s), updated_at = sloth.now()"
ADOPT = "worker = %(worker)s, lease_until = sloth.now() + lease_s, updated_at = sloth.now()"
SET_RUNNER = "runner = %(runner)s, updated_at = sloth.now()"
SET_PAUSED = "paused_run = %(paused_run)s, updated_at = sloth.now()"
SET_PROGRESS = "progress = (%(progress)s::jsonb || jsonb_build_object('attempt', attempts))::text"
SQL_COST = ("INSERT INTO sloth.attempts (job_id, attempt, cpu_s, peak_rss_bytes, wall_s, ended, covers)"
            " SELECT id, %s, %s, %s, %s, %s, %s FROM sloth.jobs WHERE id = %s"
            " ON CONFLICT (job_id, attempt) DO UPDATE SET cpu_s = excluded.cpu_s,"
            " peak_rss_bytes = excluded.peak_rss_bytes, wall_s = excluded.wall_s, ended = excluded.ended,"
            " covers = excluded.covers")
SQL_COST_LAZY = "WITH lazy AS (SELECT set_config('synchronous_commit', 'off', true)) " + SQL_COST.replace(
    " WHERE id = %s", " CROSS JOIN lazy WHERE id = %s")
# The same as a part of an outcome's statement (_held_step): written whatever becomes of the outcome
COST_ARGS = ("cost_attempt", "cost_cpu_s", "cost_peak", "cost_wall_s", "cost_ended", "cost_covers", "cost_job")
SQL_COST_ALONG = ", cost AS (" + SQL_COST.replace("SELECT id, %s, %s, %s, %s, %s, %s FROM sloth.jobs WHERE id = %s",
                                                  "SELECT id, " + ", ".join(f"%({a})s" for a in COST_ARGS[:-1])
                                                  + f" FROM sloth.jobs WHERE id = %({COST_ARGS[-1]})s") + ")"
# complete_many: the outcomes in one statement, each under its own token
# (a stale one matches no row: nothing of it is written), each with its
# process identity and ``started`` event if given, its ``done`` event, and
# its run's cost (written whatever becomes of its outcome, as SQL_COST_ALONG).
# The items travel as one JSON parameter. ``{lazy}``: SQL_NOT_DURABLE's join.
SQL_COMPLETE_MANY = """WITH i AS (
    SELECT * FROM jsonb_to_recordset(%(items)s::jsonb) AS x(
        n int, id bigint, token text, message text, exit_code bigint, ended_at double precision, runner text,
        started_at double precision, started_message text, cost_attempt bigint, cost_cpu_s double precision,
        cost_peak bigint, cost_wall_s double precision, cost_ended text, cost_covers text)
), u AS (
    UPDATE sloth.jobs j SET state = 'done', token = NULL, lease_until = NULL, message = i.message,
        exit_code = coalesce(i.exit_code, j.exit_code),
        finished_at = least(coalesce(i.ended_at, sloth.now()), sloth.now()), updated_at = sloth.now(),
        runner = coalesce(i.runner, j.runner)
    FROM i WHERE j.id = i.id AND j.state = 'running' AND j.token = i.token AND NOT j.waited_on
    RETURNING j.*, i.n
), ev AS (
    INSERT INTO sloth.events (job_id, at, kind, attempt, message)
    SELECT u.id, least(coalesce(e.at, sloth.now()), sloth.now()), e.kind, u.attempts, e.message
    FROM u JOIN i ON i.n = u.n CROSS JOIN LATERAL (VALUES (1, i.started_at, 'started', i.started_message),
                                                         (2, i.ended_at, 'done', i.message)) e(k, at, kind, message)
    WHERE e.k = 2 OR i.runner IS NOT NULL
    ORDER BY u.n, e.k
), cost AS (
    INSERT INTO sloth.attempts (job_id, attempt, cpu_s, peak_rss_bytes, wall_s, ended, covers)
    SELECT j.id, i.cost_attempt, i.cost_cpu_s, i.cost_peak, i.cost_wall_s, i.cost_ended, i.cost_covers
    FROM i JOIN sloth.jobs j ON j.id = i.id WHERE i.cost_attempt IS NOT NULL
    ON CONFLICT (job_id, attempt) DO UPDATE SET cpu_s = excluded.cpu_s, peak_rss_bytes = excluded.peak_rss_bytes,
        wall_s = excluded.wall_s, ended = excluded.ended, covers = excluded.covers
){lazy}
SELECT u.* FROM u{join_lazy}"""
SQL_KEEP_RESULT = ("INSERT INTO sloth.results (job_id, attempt, data, at) SELECT %s, %s, %s, sloth.now()"
                   " WHERE EXISTS (SELECT 1 FROM sloth.jobs WHERE id = %s) ON CONFLICT DO NOTHING")
SQL_HELD_UPDATE = ("WITH u AS (UPDATE sloth.jobs SET {assignments} WHERE id = %(id)s"
                   " AND state = 'running' AND token = %(token)s {unwaited} RETURNING *)")
SQL_HELD_EVENT = (", ev AS (INSERT INTO sloth.events (job_id, at, kind, attempt, message)"
                  " SELECT id, least(coalesce(%(at)s, sloth.now()), sloth.now()), %(kind)s, attempts,"
                  " %(event_message)s FROM u)")
# An outcome that also records its process (it ended before its start was
# written): the two events in the order they happened, in one INSERT.
SQL_HELD_EVENTS = (", ev AS (INSERT INTO sloth.events (job_id, at, kind, attempt, message)"
                   " SELECT u.id, least(coalesce(e.at, sloth.now()), sloth.now()), e.kind, u.attempts, e.message"
                   " FROM u CROSS JOIN (VALUES (1, %(started_at)s::double precision, 'started', %(started_message)s),"
                   " (2, %(at)s::double precision, %(kind)s, %(event_message)s)) e(n, at, kind, message)"
                   " ORDER BY e.n)")
# A commit that need not wait for the disk (durable=False: a later
# synchronous commit or flush() makes it durable), set inside the statement
# so that it stays one round trip; the join makes the server evaluate it.
SQL_NOT_DURABLE = ", lazy AS (SELECT set_config('synchronous_commit', 'off', true) AS off)"
SQL_ABANDON = ("UPDATE sloth.jobs SET lease_until = sloth.just_before(sloth.now()), tries = tries - %s,"
               " refunds = refunds + %s, updated_at = sloth.now() WHERE id = %s RETURNING *")
# unclaim in one statement: the job back to queued where the token still
# holds it, and the claim's event with what only the lease saw after it
# (adopted, resumed) deleted: nothing ran. No claim event (a reclaim):
# nothing goes. ``attempts + 1``: the attempt undone (attempts of a held job >= 1).
SQL_UNCLAIM = """WITH u AS (
    UPDATE sloth.jobs SET state = 'queued', attempts = greatest(attempts - 1, 0), tries = greatest(tries - 1, 0),
        token = NULL, lease_until = NULL, worker = CASE WHEN attempts <= 1 THEN NULL ELSE worker END,
        updated_at = sloth.now()
    WHERE id = %(id)s AND state = 'running' AND token = %(token)s RETURNING *
), d AS (
    DELETE FROM sloth.events e USING u WHERE e.job_id = u.id AND e.attempt = u.attempts + 1
        AND e.id >= (SELECT max(id) FROM sloth.events WHERE job_id = u.id AND attempt = u.attempts + 1
                     AND kind = 'claimed')
)"""
SQL_SET_RUNNER = "UPDATE sloth.jobs SET runner = %s, updated_at = sloth.now() WHERE id = %s"
SQL_BACK_OFF = ("UPDATE sloth.jobs SET state = 'queued', not_before = sloth.now() + %s,"
                " token = NULL, lease_until = NULL, message = %s, exit_code = %s,"
                " updated_at = sloth.now() WHERE id = %s RETURNING *")
SQL_RELEASE = ("UPDATE sloth.jobs SET state = 'queued', not_before = sloth.now() + %s, token = NULL,"
               " lease_until = NULL, tries = greatest(tries - 1, 0), refunds = refunds + %s,"
               " updated_at = sloth.now() WHERE id = %s RETURNING *")


class PgLeases(contract.Leases):
    """What a lease holder asks of the queue: one-statement writes on ``db``,
    transactions through ``writer``; ``rows`` makes the Jobs returned;
    ``defaults.backoff_cap_s`` bounds the delay before a failed try is due again.
    No state of its own."""

    def __init__(self, db: Connection, rows: JobRows, writer: PgWriter, defaults: contract.QueueDefaults) -> None:
        self._db = db
        self.rows = rows
        self.writer = writer
        self.defaults = defaults

    def heartbeat(self, job_id: int, token: str, *, lease_s: float | None = None) -> Job:
        if lease_s is not None:
            lease_s = number(lease_s, "lease_s", None, lo=0.001)
        return self._held_step(job_id, token, EXTEND, {"lease_s": lease_s}, "renewing a lease")

    def renew_after_resume(self, job_id: int, token: str, message: str) -> Job:
        return self._held_step(job_id, token, EXTEND, {"lease_s": None}, "renewing a lease after resume",
                               event=("resumed", message))

    def set_runner(self, job_id: int, token: str, runner: dict[str, Any]) -> Job:
        return self._held_step(job_id, token, SET_RUNNER, {"runner": json.dumps(runner)},
                               "recording a job's process", event=("started", f"pid {runner.get('pid')}"),
                               at=finite(runner.get("started_at")))

    def note_run(self, job_id: int, token: str, kind: str, message: str) -> Job:
        return self._held_step(job_id, token, "updated_at = sloth.now()", {}, "noting on a run",
                               event=(kind, message))

    def set_paused(self, job_id: int, token: str, paused: bool, message: str, *, at: float | None = None) -> Job:
        return self._held_step(job_id, token, SET_PAUSED, {"paused_run": token if paused else None},
                               "recording a pause", event=("paused" if paused else "continued", message),
                               at=finite(at))

    def set_progress(self, job_id: int, token: str, progress: Mapping[str, Any]) -> Job:
        value = attempt_rules.progress_json(progress, -1)  # checked here; its attempt is the row's
        return self._held_step(job_id, token, SET_PROGRESS, {"progress": value}, "noting a run's progress",
                               durable=False)

    def record_cost(self, job_id: int, attempt: int, cost: Mapping[str, Any], *, durable: bool = False) -> None:
        check_id(job_id)
        values = attempt_rules.cost_values(cost)
        # one statement; in a unit it waits for the job's outcome, whose statement takes it in (_held_step)
        self._db.write_along(("cost", job_id), (SQL_COST if durable else SQL_COST_LAZY) + " RETURNING 1",
                             (attempt, *values, job_id), "recording what a run cost")

    def note_ended(self, job_id: int, attempt: int, message: str, *, ended_at: float | None = None,
                   durable: bool = True, kind: str = "ended") -> Job:
        check_id(job_id)

        def tx(c: Cursor) -> Job:
            row = get_row(c, job_id)
            event(c, job_id, kind, attempt, message, at=finite(ended_at))
            return self.rows.job(row, c)

        return self.writer.write(tx, "recording how a cancelled job's run ended")

    def keep_result(self, job_id: int, attempt: int, data: str, *, durable: bool = True) -> None:
        check_id(job_id)
        self.writer.write(lambda c: c.execute(SQL_KEEP_RESULT, (job_id, attempt, storable_text(data), job_id)),
                          "keeping a job's result")

    def adopt(self, job_id: int, token: str, worker: str, *, message: str) -> Job:
        return self._held_step(job_id, token, ADOPT, {"worker": worker}, "adopting a lease",
                               event=("adopted", message))

    def abandon(self, job_id: int, token: str, *, message: str, refund: bool = False) -> Job:
        def tx(c: Cursor) -> Job:
            row = self._held(c, job_id, token)
            give = refund and rules.may_refund(row)
            out = one(c.execute(SQL_ABANDON, (int(give), int(give), job_id)))
            event(c, job_id, "abandoned", row["attempts"], message + rules.abandon_note(refund, give, row))
            return self.rows.job(out, c)

        return self.writer.write(tx, "abandoning a lease")

    def unclaim(self, job_id: int, token: str, *, durable: bool = True) -> Job:
        # in one statement
        check_id(job_id)
        sql = SQL_UNCLAIM + rows_of_u(durable)
        rows = self._db.write_one(sql, {"id": job_id, "token": token if isinstance(token, str) else None},
                                  "undoing a claim")
        if rows:
            return self.rows.job(rows[0])
        raise not_held(self._row_now(job_id, "undoing a claim"), token)

    # ------------------------------------------------------------ outcomes
    def complete(self, job_id: int, token: str, *, message: str = "", exit_code: int | None = None,
                 ended_at: float | None = None, runner: dict[str, Any] | None = None,
                 durable: bool = True) -> Job:
        # durable=False: synchronous_commit off for this transaction; a later
        # synchronous commit or flush() makes it durable
        at = finite(ended_at)
        if True:  # the hot path: one statement, with its process and lazy commit if asked
            try:
                return self._held_step(job_id, token, FINISH, {
                    "state": JobState.DONE.value, "message": storable_text(message), "exit_code": exit_code,
                    "ended_at": at}, "completing a job", event=("done", message), at=at, unwaited=True,
                    runner=runner, durable=durable)
            except WaitedOn:
                pass  # its end settles the jobs that wait for it: a transaction

        def tx(c: Cursor) -> Job:
            row = self._begin_end(c, job_id, token, runner, durable)
            return self.writer.finish(c, job_id, JobState.DONE, row["attempts"], "done", message,
                                exit_code=exit_code, at=at)

        return self.writer.write(tx, "completing a job")

    def complete_many(self, items: Sequence[contract.Completion], *,
                      durable: bool = True) -> list[Job | SlothError]:
        # one statement for the batch; a job others wait for (its end settles them) alone, by complete()
        out: list[Job | SlothError | None] = [None] * len(items)
        ids = [x.job_id for x in items if isinstance(x.job_id, int) and not isinstance(x.job_id, bool)]
        if len(set(ids)) < len(ids):  # a job twice: each in turn, as complete() would (before a cost is taken along)
            return contract.complete_each(self.complete, items, durable=durable)
        batch: list[dict[str, Any]] = []
        for n, x in enumerate(items):
            try:
                check_id(x.job_id)
            except JobNotFound as e:
                out[n] = e
                continue
            batch.append(self._completion(n, x))
        if batch:
            sql = SQL_COMPLETE_MANY.format(lazy="" if durable else SQL_NOT_DURABLE,
                                           join_lazy="" if durable else " CROSS JOIN lazy")
            for row in self._db.write_one(sql, {"items": json.dumps(batch)}, "completing jobs"):
                out[row["n"]] = self.rows.job(row)
        missed = [x.job_id for n, x in enumerate(items) if out[n] is None]
        if missed:  # a read that raises nothing: inside a unit an error of a read would fail it whole
            rows = {r["id"]: r for r in self._db.read(
                lambda c: c.execute("SELECT * FROM sloth.jobs WHERE id = ANY(%s)", (missed,)).fetchall(),
                "completing jobs")}
            for n, x in enumerate(items):
                if out[n] is None:
                    out[n] = self._not_completed(x, rows.get(x.job_id), durable)
        return [x for x in out if x is not None]

    def _completion(self, n: int, x: contract.Completion) -> dict[str, Any]:
        """One item of SQL_COMPLETE_MANY, with its run's cost if one waits (record_cost)."""
        runner = x.runner
        item = {"n": n, "id": x.job_id, "token": x.token if isinstance(x.token, str) else None,
                "message": storable_text(x.message), "exit_code": x.exit_code, "ended_at": finite(x.ended_at),
                "runner": None if runner is None else json.dumps(runner),
                "started_at": None if runner is None else finite(runner.get("started_at")),
                "started_message": None if runner is None else storable_text(f"pid {runner.get('pid')}")}
        cost = self._db.take_along(("cost", x.job_id))
        if cost is not None:
            item.update(zip(COST_ARGS[:-1], cost[1][:-1], strict=True))
        return item

    def _not_completed(self, x: contract.Completion, row: Row | None, durable: bool) -> Job | SlothError:
        """An item complete_many's statement did not write (``row``: its job
        now): a job others wait for (complete() ends it, settling them),
        else why not."""
        if row is None:
            return JobNotFound(x.job_id)
        try:
            if row["waited_on"] and holds(row, x.token):
                return self.complete(x.job_id, x.token, message=x.message, exit_code=x.exit_code,
                                     ended_at=x.ended_at, runner=x.runner, durable=durable)
            raise not_held(row, x.token)
        except (LeaseLost, JobNotFound, IllegalTransition) as e:
            return e

    def _begin_end(self, c: Cursor, job_id: int, token: str, runner: dict[str, Any] | None,
                   durable: bool) -> Row:
        """The first steps of an outcome written in a transaction: its commit
        durability, the lease check, the process identity if not yet written."""
        if not durable:
            c.execute("SET LOCAL synchronous_commit TO OFF")
        row = self._held(c, job_id, token)
        if runner is not None:
            c.execute(SQL_SET_RUNNER, (json.dumps(runner), job_id))
            event(c, job_id, "started", row["attempts"], f"pid {runner.get('pid')}",
                        finite(runner.get("started_at")))
        return row

    def fail(
        self, job_id: int, token: str, *, message: str = "", retry: bool = True,
        exit_code: int | None = None, ended_at: float | None = None,
        runner: dict[str, Any] | None = None, durable: bool = True, rule: str = "",
    ) -> Job:
        at = finite(ended_at)

        def tx(c: Cursor) -> Job:
            row = self._begin_end(c, job_id, token, runner, durable)
            return self._fail_row(c, row, message, retry, exit_code, at, rule=rule)

        return self.writer.write(tx, "failing a job")

    def _fail_row(self, c: Cursor, row: Row, message: str, retry: bool, exit_code: int | None,
                  at: float | None, kind: str = "failed", *, rule: str = "") -> Job:
        """A try that counts ended: backed off while tries remain (and
        ``retry``, the event ``kind``), else failed."""
        if retry and row["tries"] < row["max_attempts"]:
            return self._back_off(c, row, message, exit_code, at, kind, rule=rule)
        return self.writer.finish(c, row["id"], JobState.FAILED, row["attempts"], "failed",
                                  rules.give_up_message(rules.with_rule(message, rule), retry), exit_code=exit_code,
                                  stored_message=message, at=at)

    def _back_off(self, c: Cursor, row: Row, message: str, exit_code: int | None, at: float | None,
                  kind: str = "failed", *, rule: str = "") -> Job:
        """A failed try with tries left: queued again after a delay that
        doubles with each try, up to backoff_cap_s (or the job's --backoff)."""
        delay = rules.job_backoff_s(row, self.defaults.backoff_cap_s)
        out = one(c.execute(SQL_BACK_OFF, (delay, storable_text(message), exit_code, row["id"])))
        event(c, row["id"], kind, row["attempts"], rules.retry_message(rules.with_rule(message, rule), row, delay),
              at)
        return self.rows.job(out, c)

    def release(self, job_id: int, token: str, *, message: str = "interrupted", delay_s: float = 0.0,
                kind: str = "interrupted", runner: dict[str, Any] | None = None,
                durable: bool = True) -> Job:
        delay = number(delay_s, "delay_s", 0.0, lo=0)

        def tx(c: Cursor) -> Job:
            row = self._begin_end(c, job_id, token, runner, durable)
            forgiven = kind != "fenced" or rules.may_refund(row)
            note = rules.refund_note(row, forgiven) if kind == "fenced" else ""
            if not forgiven:
                return self._fail_row(c, row, message + note, True, None, None, kind)
            out = one(c.execute(SQL_RELEASE, (delay, int(kind == "fenced"), job_id)))
            event(c, job_id, kind, row["attempts"], message + note)
            return self.rows.job(out, c)

        return self.writer.write(tx, "releasing a job")

    def set_waiting(self, gate: str, why: str | None) -> int:
        def tx(c: Cursor) -> int:
            return c.execute("UPDATE sloth.jobs SET wait_reason = %s WHERE state = 'queued' AND gate = %s"
                             " AND wait_reason IS DISTINCT FROM %s", (why, gate, why)).rowcount
        return self.writer.write(tx, "saying why jobs wait")

    def _row_now(self, job_id: int, doing: str) -> Row:
        """The job's row after a write that matched none, or JobNotFound:
        raised after the read, not inside it (inside a unit a read that
        raises fails the whole unit, and a worker whose outcome met a job
        deleted under it would fail every turn)."""
        row = self._db.read(lambda c: c.execute("SELECT * FROM sloth.jobs WHERE id = %s", (job_id,)).fetchone(),
                            doing)
        if row is None:
            raise JobNotFound(job_id)
        return row

    def _held(self, c: Cursor, job_id: int, token: str) -> Row:
        """The job's row, locked, if ``token`` holds its lease; else the error."""
        row = get_row(c, job_id, lock=True)
        if not holds(row, token):
            raise not_held(row, token)
        return row

    def _held_step(self, job_id: int, token: str, assignments: str, args: dict[str, Any],
                   doing: str, *, event: tuple[str, str] | None = None, at: float | None = None,
                   unwaited: bool = False, runner: dict[str, Any] | None = None, durable: bool = True) -> Job:
        """One statement (the hot path: renewals, completions): UPDATE the job
        where id AND token still hold its lease, and write its event. No
        match: a read finds the reason (JobNotFound, IllegalTransition,
        LeaseLost). ``unwaited``: only a job nobody waits for; WaitedOn for
        one that others wait for (its end must settle them: a transaction).
        ``runner``: the process identity too, with its ``started`` event
        first (needs ``event``); ``durable`` False: the commit does not wait
        for the disk."""
        check_id(job_id)
        if runner is not None:
            assignments += ", runner = %(runner)s"
        sql = SQL_HELD_UPDATE.format(assignments=assignments, unwaited="AND NOT waited_on" if unwaited else "")
        args = {**args, "id": job_id, "token": token if isinstance(token, str) else None}
        if event is not None:
            sql += SQL_HELD_EVENT if runner is None else SQL_HELD_EVENTS
            args.update(kind=event[0], event_message=storable_text(event[1]), at=at)
        if runner is not None:
            args.update(runner=json.dumps(runner), started_at=finite(runner.get("started_at")),
                        started_message=storable_text(f"pid {runner.get('pid')}"))
        cost = self._db.take_along(("cost", job_id))  # its run's cost, written with it (record_cost)
        if cost is not None:
            sql += SQL_COST_ALONG
            args.update(zip(COST_ARGS, cost[1], strict=True))
        sql += rows_of_u(durable)
        rows = self._db.write_one(sql, args, doing)
        if rows:
            return self.rows.job(rows[0])
        row = self._row_now(job_id, doing)
        if unwaited and row["waited_on"] and holds(row, token):
            raise WaitedOn(job_id)
        raise not_held(row, token)


def rows_of_u(durable: bool) -> str:
    """The end of a one-statement write: the rows of its ``u``, and (not
    ``durable``) its commit not waiting for the disk."""
    return " SELECT u.* FROM u" if durable else SQL_NOT_DURABLE + " SELECT u.* FROM u CROSS JOIN lazy"


class WaitedOn(Exception):
    """Other jobs wait for this one: its end is not a one-statement write."""

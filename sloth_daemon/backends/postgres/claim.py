"""Claiming a job on the PostgreSQL queue: PgClaims runs the claim statement
of backends/postgres/pick.py (the counterpart of backends/sqlite/claim.py), and
fails a job others wait for whose lease expired on its last try, in a
transaction that settles them.
"""

from __future__ import annotations

import os
import functools
import json
from typing import Any, Collection, Sequence

from sloth_daemon.backends import contract, rules
from sloth_daemon.models import Job, JobState
from sloth_daemon.backends.postgres import pick
from sloth_daemon.backends.postgres.db import Connection, Cursor
from sloth_daemon.backends.postgres.reads import JobRows
from sloth_daemon.backends.postgres.writer import PgWriter
from sloth_daemon.errors import BadRequest

SQL_EXPIRED = ("SELECT *, lease_until < sloth.now() AS lapsed FROM sloth.jobs WHERE id = %s"
               " AND state = 'running' FOR UPDATE")


class PgClaims(contract.Claims):
    """claim() of the queue: a one-statement write on ``db`` (a transaction
    through ``writer`` only to fail an expired job others wait for);
    ``rows`` makes the Job it returns. No state of its own."""

    def __init__(self, db: Connection, rows: JobRows, writer: PgWriter) -> None:
        self._db = db
        self.rows = rows
        self.writer = writer

    def claim(
        self, worker: str, *, lease_s: float | None = None, lanes: Sequence[str] | None = None,
        exclude_lanes: Collection[str] = (), exclude_ids: Collection[int] = (),
        places: Collection[str] | None = None, reclaim: bool = True,
        gated: tuple[int, dict[str, list[str]] | None] | None = None,
    ) -> Job | None:
        # now is the server's; rows another claimer holds locked right now are skipped, not waited for
        lease_s = pick.claim_lease(lease_s, lanes)
        if lanes is not None and not lanes:
            return None
        sql, args = pick.claim_statement(worker, lease_s, lanes, exclude_lanes, exclude_ids, places, reclaim)
        if gated is not None:
            job = self._claim_gated(gated, sql, args, lanes, exclude_lanes, places)
            if job is not None:
                return job
        while True:  # until a job is leased or none is due
            rows = self._db.write_one(sql, {**args, "rand": os.urandom(8).hex()}, "claiming a job")
            if not rows:
                return None
            if rows[0]["was_state"] == "settle":
                self.writer.write(functools.partial(self._expire, job_id=rows[0]["id"]),
                                  "failing a job whose lease expired")
            elif not rows[0]["spent"]:  # spent: failed, lease expired on the last attempt
                return self.rows.job(rows[0])

    def claim_many(self, worker: str, n: int, *, lane: str, lease_s: float | None = None,
                   places: Collection[str] | None = None) -> list[Job]:
        n = rules.claim_count(n)
        lease_s = pick.claim_lease(lease_s, None)
        if not isinstance(lane, str):
            raise BadRequest(f"lane must be a lane name, got {lane!r}")
        if n == 0:
            return []
        sql, args = pick.claim_many_statement(worker, lease_s, n, lane, places)
        rows = self._db.write_one(sql, {**args, "rand": os.urandom(8).hex()}, "claiming jobs")
        return [self.rows.job(row) for row in rows]

    def _claim_gated(self, gated: tuple[int, dict[str, list[str]] | None], sql: str, args: dict[str, Any],
                     lanes: Sequence[str] | None, exclude_lanes: Collection[str],
                     places: Collection[str] | None) -> Job | None:
        """The gated job the caller chose, if still due and at least as
        urgent as the best ungated one (a read first; a claimer elsewhere
        may take that one meanwhile, which only makes ours the better)."""
        job_id, tokens = gated
        if not pick.is_job_id(job_id):
            return None
        peek_sql, peek_args = pick.peek_statement(lanes, exclude_lanes, places)

        def look(c: Cursor) -> tuple[Any, Any]:
            return (c.execute(pick.SQL_GATED_ROW, {"id": job_id}).fetchone(),
                    c.execute(peek_sql, peek_args).fetchone())
        g, best = self._db.write(look, "looking at a gated job")  # sloth.now pinned, as in the claim
        if g is None or (best is not None and (-best["priority"], best["not_before"], best["id"])
                         < (-g["priority"], g["not_before"], g["id"])):
            return None
        if g["spent"]:  # an expired lease on its last try: failed, as a claim does
            self.writer.write(functools.partial(self._expire, job_id=job_id), "failing a job whose lease expired")
            return None
        one_row = sql.replace("SELECT * FROM (SELECT * FROM q UNION ALL SELECT * FROM e) candidates",
                              "SELECT * FROM (" + pick.SQL_GATED_ROW.replace("%(id)s", "%(gated_id)s")
                              + " FOR UPDATE SKIP LOCKED) candidates")
        rows = self._db.write_one(one_row, {**args, "rand": os.urandom(8).hex(), "gated_id": job_id,
                                            "tokens": json.dumps(tokens) if tokens else None,
                                            "held_note": "; holds " + rules.tokens_text(tokens) if tokens else ""},
                                 "claiming a job")
        return self.rows.job(rows[0]) if rows and not rows[0]["spent"] else None

    def _expire(self, c: Cursor, job_id: int) -> None:
        """A job others wait for whose lease expired on its last try: failed
        (event ``lease_expired``), its dependents settled. Checked again
        under its lock: its holder may have renewed or ended it meanwhile."""
        row = c.execute(SQL_EXPIRED, (job_id,)).fetchone()
        if row is None or not row["lapsed"] or row["tries"] < row["max_attempts"]:
            return
        self.writer.finish(c, job_id, JobState.FAILED, row["attempts"], "lease_expired",
                           f"lease expired on the last attempt ({row['tries']}/{row['max_attempts']});"
                           f" worker {row['worker']} was lost")

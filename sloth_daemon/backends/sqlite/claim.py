"""The claim on the SQLite queue: the lease it grants to the most urgent
due job (or a gated one the caller chose), and the expired leases with no
tries left that it fails on its way. What it picks, and in which order, is
pick.py's; what an end does to the jobs waiting, ends.py's and deps.py's.
"""

from __future__ import annotations

import json
import os
import sqlite3
from typing import Collection, Sequence

from sloth_daemon.backends import contract, rules
from sloth_daemon.backends.sqlite import pick
from sloth_daemon.backends.sqlite.ends import SQL_EVENT, SqliteEnds, event
from sloth_daemon.backends.sqlite.reads import JobRows
from sloth_daemon.backends.sqlite.unit import SqliteStore
from sloth_daemon.clock import Clock
from sloth_daemon.durations import format_duration
from sloth_daemon.errors import BadRequest
from sloth_daemon.models import Job, JobState
from sloth_daemon.spec import number


class SqliteClaims(contract.Claims):
    """Claims: writes through ``store``, an expired lease with no tries left
    ended through ``ends``, rows told by ``rows``, ``now`` from ``clock``."""

    def __init__(self, store: SqliteStore, rows: JobRows, ends: SqliteEnds, clock: Clock) -> None:
        self.store, self.rows, self.ends, self.clock = store, rows, ends, clock

    def claim(
        self, worker: str, *, lease_s: float | None = None, lanes: Sequence[str] | None = None,
        exclude_lanes: Collection[str] = (), exclude_ids: Collection[int] = (),
        places: Collection[str] | None = None, reclaim: bool = True,
        gated: tuple[int, dict[str, list[str]] | None] | None = None,
    ) -> Job | None:
        if lease_s is not None:  # refuse a bad lease even when nothing is due
            lease_s = number(lease_s, "lease_s", None, lo=0.001)
        for name, v in (("lanes", lanes), ("places", places)):
            if isinstance(v, str):  # a bare string would be read as its letters
                raise BadRequest(f"{name} must be a list of names, got the string {v!r}")
        if lanes is not None and not lanes:
            return None
        now = self.clock.now()
        with self.store.tx(durable=False) as c:
            while True:
                cand = pick.best_candidate(c, now, lanes, exclude_lanes, exclude_ids, places, expired=reclaim)
                tokens = None
                if gated is not None:
                    g = self._gated_row(c, gated[0], now)
                    if g is not None and (cand is None or pick._urgency(g[0]) <= pick._urgency(cand[0])):
                        cand, tokens = g, gated[1]
                    gated = None  # looked at once: an expired one failed for good leaves the ungated
                if cand is None:
                    return None
                row, expired = cand
                if expired and row["tries"] >= row["max_attempts"]:
                    self._lease_expired_for_good(c, row, now)
                    continue
                return self._lease(c, row, expired, worker, now, row["lease_s"] if lease_s is None else lease_s,
                                   tokens)

    def claim_many(self, worker: str, n: int, *, lane: str, lease_s: float | None = None,
                   places: Collection[str] | None = None) -> list[Job]:
        n = rules.claim_count(n)
        if not isinstance(lane, str):
            raise BadRequest(f"lane must be a lane name, got {lane!r}")
        if places is not None:  # the library's: one claim after another, as claim() takes them
            return self._claim_each(worker, n, lane, lease_s, places)
        if lease_s is not None:
            lease_s = number(lease_s, "lease_s", None, lo=0.001)
        if n == 0:
            return []
        now = self.clock.now()
        # One write of a batch: the rows in the claim's order (pick.ready_rows),
        # leased by one statement, their events by one more; not a claim()
        # (a savepoint, two reads, an update and an event) per job.
        with self.store.tx(durable=False) as c:
            rows = pick.ready_rows(c, now, lane, n)
            if not rows:
                return []
            ids = [r["id"] for r in rows]
            marks = ",".join("?" * len(ids))
            out = {r["id"]: r for r in c.execute(
                "UPDATE jobs SET state = 'running', attempts = attempts + 1, tries = tries + 1,"
                " token = lower(hex(randomblob(8))), worker = ?, lease_until = ? + coalesce(?, lease_s),"
                f" tokens = NULL, wait_reason = NULL, updated_at = ? WHERE id IN ({marks}) RETURNING *",
                (worker, now, lease_s, now, *ids)).fetchall()}
            msg = f"by {worker}"
            c.executemany(SQL_EVENT, [(i, now, "claimed", out[i]["attempts"], msg) for i in ids])
            return [self.rows.job(out[i]) for i in ids]

    def _claim_each(self, worker: str, n: int, lane: str, lease_s: float | None,
                    places: Collection[str]) -> list[Job]:
        out: list[Job] = []
        with self.store.unit():  # one transaction: the claims one after another, as claim() takes them
            while len(out) < n:
                job = self.claim(worker, lease_s=lease_s, lanes=[lane], places=places, reclaim=False)
                if job is None:
                    break
                out.append(job)
        return out

    def _gated_row(self, c: sqlite3.Connection, job_id: int, now: float) -> tuple[sqlite3.Row, bool] | None:
        """The gated job the caller chose, if it is still claimable: queued
        and due, or running with an expired lease."""
        row = c.execute("SELECT * FROM jobs WHERE id = ?", (job_id,)).fetchone()
        if row is None or row["gate"] is None:
            return None
        if row["state"] == "queued" and row["not_before"] <= now:
            return row, False
        if row["state"] == "running" and row["lease_until"] is not None and row["lease_until"] < now:
            return row, True
        return None

    def _lease_expired_for_good(self, c: sqlite3.Connection, row: sqlite3.Row, now: float) -> None:
        self.ends.finish(c, row["id"], JobState.FAILED, now, row["attempts"], "lease_expired",
                         f"lease expired on the last attempt ({row['tries']}/{row['max_attempts']});"
                         f" worker {row['worker']} was lost")

    def _lease(self, c: sqlite3.Connection, row: sqlite3.Row, expired: bool, worker: str, now: float,
               lease: float, tokens: dict[str, list[str]] | None = None) -> Job:
        """claimed, attempt + 1, a fresh token, event claimed or reclaimed;
        ``tokens``: the resource tokens the run takes (kept with it)."""
        token = os.urandom(8).hex()
        attempt = row["attempts"] + 1
        held = json.dumps(tokens) if tokens else None
        out = c.execute(
            "UPDATE jobs SET state = 'running', attempts = ?, tries = tries + 1, token = ?, worker = ?,"
            " lease_until = ?, tokens = ?, wait_reason = NULL, updated_at = ? WHERE id = ? RETURNING *",
            (attempt, token, worker, now + lease, held, now, row["id"]),
        ).fetchone()
        msg = f"by {worker}"
        if tokens:
            msg += "; holds " + rules.tokens_text(tokens)
        if expired:  # how long ago, not an epoch: the event's own time is shown beside it
            msg += f"; lease of {row['worker']} ran out {format_duration(now - row['lease_until'])} before"
        event(c, row["id"], now, "reclaimed" if expired else "claimed", attempt, msg)
        return self.rows.job(out)

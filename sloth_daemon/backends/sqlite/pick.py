"""Finding what the SQLite queue could claim next, by index seeks.

Ordering of a claim: highest ``priority`` first, then the job that became
due first (``not_before``), then the oldest id. A pick is O(log n) whatever
the mix of delayed and due rows: it walks the few distinct (lane, priority)
groups with index seeks instead of scanning rows (see ``_best_queued``).
Read-only; claim.py makes the transitions.
"""

from __future__ import annotations

import math
import sqlite3
from typing import Collection, Sequence

Row = sqlite3.Row

# The statements claim() and next_due_at() run, by name, so that
# tests/unit/test_query_plan.py checks the plan of exactly what runs.
# INDEXED BY pins each to its partial index: without ANALYZE statistics (we
# never run ANALYZE) the planner prefers jobs_by_state(state, id) for
# "state = 'queued'", which walks every queued row and makes a claim O(n).
SQL_LANE_FIRST = "SELECT min(lane) FROM jobs INDEXED BY jobs_due WHERE state = 'queued' AND gate IS NULL"
SQL_LANE_NEXT = (
    "SELECT min(lane) FROM jobs INDEXED BY jobs_due WHERE state = 'queued' AND gate IS NULL AND lane > ?"
)
SQL_PRIO_MAX = (
    "SELECT max(priority) FROM jobs INDEXED BY jobs_ready WHERE state = 'queued' AND gate IS NULL AND lane = ?"
)
SQL_PRIO_BELOW = (
    "SELECT max(priority) FROM jobs INDEXED BY jobs_ready WHERE state = 'queued' AND gate IS NULL AND lane = ?"
    " AND priority < ?"
)
SQL_READY_AT_PRIO = (
    "SELECT * FROM jobs INDEXED BY jobs_ready WHERE state = 'queued' AND gate IS NULL AND lane = ?"
    " AND priority = ? AND not_before <= ? ORDER BY not_before, id LIMIT 1"
)
SQL_READY_MANY_AT_PRIO = (  # claim_many's: the first n due at one priority
    "SELECT * FROM jobs INDEXED BY jobs_ready WHERE state = 'queued' AND gate IS NULL AND lane = ?"
    " AND priority = ? AND not_before <= ? ORDER BY not_before, id LIMIT ?"
)
SQL_EXPIRED = (
    "SELECT * FROM jobs INDEXED BY jobs_lease WHERE state = 'running' AND lease_until < ?"
)
SQL_FIRST_DUE_IN_LANE = (
    "SELECT min(not_before) FROM jobs INDEXED BY jobs_due WHERE state = 'queued' AND gate IS NULL AND lane = ?"
)
SQL_LEASES = (
    "SELECT id, lane, lease_until, place, gate FROM jobs INDEXED BY jobs_lease WHERE state = 'running'"
    " AND lease_until IS NOT NULL ORDER BY lease_until"
)
# claim(places=...): a daemon of one machine never asks (every job runs
# here); the library may. Plain statements: the contract, not the hot path.
SQL_PLACED_READY = ("SELECT * FROM jobs WHERE state = 'queued' AND gate IS NULL AND lane = ? AND place = ?"
                    " AND not_before <= ?"
                    " ORDER BY priority DESC, not_before, id LIMIT 1")
SQL_PLACED_DUE = ("SELECT min(not_before) FROM jobs WHERE state = 'queued' AND gate IS NULL AND lane = ?"
                  " AND place = ?")


def best_candidate(c: sqlite3.Connection, now: float, lanes: Sequence[str] | None,
                   exclude: Collection[str] = (), exclude_ids: Collection[int] = (),
                   places: Collection[str] | None = None, expired: bool = True) -> tuple[Row, bool] | None:
    """The most urgent claimable row and whether it is an expired lease (a
    reclaim) rather than a queued job (``expired=False``: queued ones only);
    None when nothing is due. ``places``: only jobs placed there ("" anywhere); None: any."""
    q = _best_queued(c, now, lanes, exclude) if places is None else _best_placed(c, now, lanes, exclude, places)
    e = _best_expired(c, now, lanes, exclude, exclude_ids, places) if expired else None
    if q is None and e is None:
        return None
    if e is None:
        assert q is not None
        return q, False
    if q is None:
        return e, True
    qk = (-q["priority"], q["not_before"], q["id"])
    ek = (-e["priority"], e["not_before"], e["id"])
    return (e, True) if ek <= qk else (q, False)

def _best_queued(c: sqlite3.Connection, now: float, lanes: Sequence[str] | None,
             exclude: Collection[str] = ()) -> Row | None:
    """Loose index scan: for each lane, walk priorities high to low with
    index seeks and take the first due row. Cost is O(groups * log n), not
    O(rows skipped), so a million delayed high-priority rows cost nothing."""
    best = None
    for lane in _pick_lanes(c, lanes, exclude):
        prio = c.execute(SQL_PRIO_MAX, (lane,)).fetchone()[0]
        while prio is not None:
            if best is not None and prio < best["priority"]:
                break
            row = c.execute(SQL_READY_AT_PRIO, (lane, prio, now)).fetchone()
            if row is not None:
                if best is None or _urgency(row) < _urgency(best):
                    best = row
                break
            prio = c.execute(SQL_PRIO_BELOW, (lane, prio)).fetchone()[0]
    return best

def ready_rows(c: sqlite3.Connection, now: float, lane: str, n: int) -> list[Row]:
    """Up to ``n`` due ungated queued rows of ``lane`` in the claim's order
    (what ``n`` claims in a row would take, expired leases aside): the
    priorities high to low by index seeks, each one's due rows by one read."""
    out: list[Row] = []
    prio = c.execute(SQL_PRIO_MAX, (lane,)).fetchone()[0]
    while prio is not None and len(out) < n:
        out += c.execute(SQL_READY_MANY_AT_PRIO, (lane, prio, now, n - len(out))).fetchall()
        prio = c.execute(SQL_PRIO_BELOW, (lane, prio)).fetchone()[0] if len(out) < n else None
    return out

def _best_placed(c: sqlite3.Connection, now: float, lanes: Sequence[str] | None,
                 exclude: Collection[str], places: Collection[str]) -> Row | None:
    rows = [c.execute(SQL_PLACED_READY, (lane, p, now)).fetchone()
            for lane in _pick_lanes(c, lanes, exclude) for p in set(places)]
    return min((r for r in rows if r is not None), key=_urgency, default=None)

def _best_expired(c: sqlite3.Connection, now: float, lanes: Sequence[str] | None,
              exclude: Collection[str] = (), exclude_ids: Collection[int] = (),
              places: Collection[str] | None = None) -> Row | None:
    # Claimed rows are few (one per running job); the partial index on
    # lease_until finds the expired ones directly.
    rows = c.execute(SQL_EXPIRED, (now,)).fetchall()
    rows = [r for r in rows if _lane_ok(r["lane"], lanes, exclude) and r["id"] not in exclude_ids
            and (places is None or r["place"] in places) and r["gate"] is None]
    return min(rows, key=_urgency, default=None)

def _pick_lanes(c: sqlite3.Connection, lanes: Sequence[str] | None, exclude: Collection[str]) -> list[str]:
    return [ln for ln in (queued_lanes(c) if lanes is None else lanes) if ln not in exclude]

def queued_lanes(c: sqlite3.Connection) -> list[str]:
    """Distinct lanes of queued jobs, by index seeks (skip-scan)."""
    out: list[str] = []
    row = c.execute(SQL_LANE_FIRST).fetchone()
    while row[0] is not None:
        out.append(row[0])
        row = c.execute(SQL_LANE_NEXT, (row[0],)).fetchone()
    return out


def next_due_at(c: sqlite3.Connection, lanes: Sequence[str] | None = None,
            exclude_lanes: Collection[str] = (), exclude_ids: Collection[int] = (),
            places: Collection[str] | None = None) -> float | None:
    """Earliest wall time at which ``claim`` (with the same filters) could
    return something: the first queued ``not_before``, or just after the
    first lease expiry."""
    best: float | None = None
    for lane in _pick_lanes(c, lanes, exclude_lanes):
        for t in _first_due(c, lane, places):
            if t is not None and (best is None or t < best):
                best = t
    for r in c.execute(SQL_LEASES).fetchall():  # soonest lease first
        if not _lane_ok(r["lane"], lanes, exclude_lanes) or r["id"] in exclude_ids or (
                places is not None and r["place"] not in places) or r["gate"] is not None:
            continue
        t = math.nextafter(r["lease_until"], math.inf)  # strict: expired only after
        if best is None or t < best:
            best = t
        break
    return best


def _first_due(c: sqlite3.Connection, lane: str, places: Collection[str] | None) -> list[float | None]:
    if places is None:
        return [c.execute(SQL_FIRST_DUE_IN_LANE, (lane,)).fetchone()[0]]
    return [c.execute(SQL_PLACED_DUE, (lane, p)).fetchone()[0] for p in set(places)]


# Gated jobs (a gate: conditions, needs or slots) are out of jobs_ready and
# jobs_due; jobs_gated groups them by gate text. The daemon lists the gates
# (a skip scan), decides which hold here, and asks for the head of each
# (gate, lane) it may run: O(gates * lanes * priorities * log n), however
# many jobs wait for a condition that does not hold.
SQL_GATE_FIRST = "SELECT min(gate) FROM jobs INDEXED BY jobs_gated WHERE state = 'queued' AND gate IS NOT NULL"
SQL_GATE_NEXT = ("SELECT min(gate) FROM jobs INDEXED BY jobs_gated WHERE state = 'queued' AND gate IS NOT NULL"
                 " AND gate > ?")
SQL_GATE_LANE = ("SELECT min(lane) FROM jobs INDEXED BY jobs_gated WHERE state = 'queued' AND gate = ?"
                 " AND lane > ?")
SQL_GATE_PRIO_MAX = ("SELECT max(priority) FROM jobs INDEXED BY jobs_gated WHERE state = 'queued' AND gate = ?"
                     " AND lane = ?")
SQL_GATE_PRIO_BELOW = ("SELECT max(priority) FROM jobs INDEXED BY jobs_gated WHERE state = 'queued' AND gate = ?"
                       " AND lane = ? AND priority < ?")
SQL_GATE_FIRST_AT_PRIO = ("SELECT * FROM jobs INDEXED BY jobs_gated WHERE state = 'queued' AND gate = ?"
                          " AND lane = ? AND priority = ? ORDER BY not_before, id LIMIT 1")
SQL_GATE_PLACED = ("SELECT * FROM jobs WHERE state = 'queued' AND gate = ? AND lane = ? AND place = ?"
                   " ORDER BY not_before > ?, priority DESC, not_before, id LIMIT 1")


def gates(c: sqlite3.Connection) -> list[str]:
    """The distinct gates of queued jobs, by index seeks."""
    out: list[str] = []
    row = c.execute(SQL_GATE_FIRST).fetchone()
    while row[0] is not None:
        out.append(row[0])
        row = c.execute(SQL_GATE_NEXT, (row[0],)).fetchone()
    return out


def gated_heads(c: sqlite3.Connection, now: float, wanted: Collection[str], exclude: Collection[str],
                exclude_ids: Collection[int], places: Collection[str] | None) -> tuple[list[Row], float | None]:
    """For each gate in ``wanted`` and each lane not excluded, its most
    urgent due queued job; and the gated jobs whose lease expired (any
    gate: their gate is the caller's to judge). Returns them most urgent
    first, and the earliest time a job of a wanted gate that is not yet
    due becomes due (None: none)."""
    heads: list[Row] = []
    later: float | None = None
    for gate in wanted:
        lane = ""
        while (lane := c.execute(SQL_GATE_LANE, (gate, lane)).fetchone()[0]) is not None:
            if lane in exclude:
                continue
            for row in _gate_lane_heads(c, gate, lane, now, places):
                if row["not_before"] <= now:
                    heads.append(row)
                elif later is None or row["not_before"] < later:
                    later = row["not_before"]
    expired = [r for r in c.execute(SQL_EXPIRED, (now,)).fetchall()
               if r["gate"] is not None and r["lane"] not in exclude and r["id"] not in exclude_ids
               and (places is None or r["place"] in places)]
    return sorted([*heads, *expired], key=_urgency), later


def _gate_lane_heads(c: sqlite3.Connection, gate: str, lane: str, now: float,
                     places: Collection[str] | None) -> list[Row]:
    """The due head of one (gate, lane), or the first of each priority that
    is not due yet (for the wake-up), walking priorities high to low."""
    if places is not None:
        return [r for p in set(places) if (r := c.execute(SQL_GATE_PLACED, (gate, lane, p, now)).fetchone())]
    out: list[Row] = []
    prio = c.execute(SQL_GATE_PRIO_MAX, (gate, lane)).fetchone()[0]
    while prio is not None:
        row = c.execute(SQL_GATE_FIRST_AT_PRIO, (gate, lane, prio)).fetchone()
        out.append(row)
        if row["not_before"] <= now:
            break
        prio = c.execute(SQL_GATE_PRIO_BELOW, (gate, lane, prio)).fetchone()[0]
    return out


def _lane_ok(lane: str, lanes: Sequence[str] | None, exclude: Collection[str]) -> bool:
    return (lanes is None or lane in lanes) and lane not in exclude


def _urgency(row: sqlite3.Row) -> tuple:
    return (-row["priority"], row["not_before"], row["id"])

"""What the PostgreSQL queue claims next, and when something will be due:
the claim statement (run by backends/postgres/claim.py), and the lane and
id filters it shares with next_due_at's (backends/postgres/reads.py); the
counterpart of backends/sqlite/pick.py.

Ordering of a claim: highest ``priority`` first, then the job that became
due first (``not_before``), then the oldest id. Candidates come from
``FOR UPDATE SKIP LOCKED`` selects, so claimers on several machines never
wait for, or take, the same row.
"""

from __future__ import annotations

from typing import Any, Collection, Sequence

from sloth_daemon.errors import BadRequest
from sloth_daemon.spec import number

INT64 = (-(2**63), 2**63)

# The lanes that have queued jobs, by index seeks on jobs_due (a skip scan):
# a claim or a due time looks into each lane on its own, so a lane it must
# skip (full, paused) costs a seek, not a walk over its backlog.
QUEUED_LANES = """queued_lanes(lane) AS (
    (SELECT lane FROM sloth.jobs WHERE state = 'queued' AND gate IS NULL ORDER BY lane LIMIT 1)
    UNION ALL
    SELECT (SELECT j.lane FROM sloth.jobs j WHERE j.state = 'queued' AND j.gate IS NULL AND j.lane > l.lane
            ORDER BY j.lane LIMIT 1)
    FROM queued_lanes l WHERE l.lane IS NOT NULL
)"""
GIVEN_LANES = "queued_lanes(lane) AS (SELECT DISTINCT unnest(%(lanes)s::text[]))"  # claim(lanes=[...])
# The claim: the best due queued row and the best expired lease, the
# better of the two, updated in the same statement with its due-ness
# checked again, and its event written. The queued row: the head of each
# lane (by jobs_ready, unlocked), then lane by lane in the order of their
# heads, the first row not locked by another claimer; only the row taken
# is locked. {lanes}/{ids} are filled with fixed fragments, never with
# input. An
# expired lease with no tries left becomes failed instead (event
# lease_expired; the caller then claims again) -- unless other jobs wait
# for it: then the statement changes nothing and returns it marked
# was_state = 'settle', for the caller to fail it in a transaction that
# also settles its dependents (backends/postgres/claim.py, _expire).
HEADS = """heads AS (
    SELECT l.lane, {head_place} AS place, h.priority, h.not_before, h.id
    FROM queued_lanes l {places} CROSS JOIN LATERAL (
        SELECT priority, not_before, id FROM sloth.jobs
        WHERE state = 'queued' AND gate IS NULL AND lane = l.lane {place_is} AND not_before <= sloth.now()
        ORDER BY priority DESC, not_before, id LIMIT 1
    ) h
    WHERE l.lane IS NOT NULL {lanes}
    ORDER BY h.priority DESC, h.not_before, h.id
)"""
# A job with a gate (conditions, needs, slots) is out of jobs_ready, jobs_due
# and jobs_placed*: this statement never takes one (see SQL_CLAIM_GATED).
SQL_CLAIM = """
WITH RECURSIVE {queued_lanes}, """ + HEADS + """, q AS (
    SELECT c.* FROM heads CROSS JOIN LATERAL (
        SELECT id, priority, not_before, state, worker, lease_until, false AS spent FROM sloth.jobs
        WHERE state = 'queued' AND gate IS NULL AND lane = heads.lane {head_place_is}
          AND not_before <= sloth.now()
        ORDER BY priority DESC, not_before, id LIMIT 1 FOR UPDATE SKIP LOCKED
    ) c
    ORDER BY heads.priority DESC, heads.not_before, heads.id LIMIT 1
), e AS (
    SELECT id, priority, not_before, state, worker, lease_until, tries >= max_attempts AS spent
    FROM sloth.jobs
    WHERE state = 'running' AND %(reclaim)s AND lease_until < sloth.now() AND gate IS NULL {lanes} {ids} {placed}
    ORDER BY priority DESC, not_before, id LIMIT 1 FOR UPDATE SKIP LOCKED
), pick AS (
    SELECT * FROM (SELECT * FROM q UNION ALL SELECT * FROM e) candidates
    ORDER BY priority DESC, not_before, id LIMIT 1
), u AS (
UPDATE sloth.jobs j SET
    state = CASE WHEN pick.spent THEN 'failed' ELSE 'running' END,
    attempts = CASE WHEN pick.spent THEN j.attempts ELSE j.attempts + 1 END,
    tries = CASE WHEN pick.spent THEN j.tries ELSE j.tries + 1 END,
    token = CASE WHEN pick.spent THEN NULL
                 ELSE nextval('sloth.fence')::text || '-' || %(rand)s END,
    worker = CASE WHEN pick.spent THEN j.worker ELSE %(worker)s END,
    lease_until = CASE WHEN pick.spent THEN NULL
                       ELSE sloth.now() + coalesce(%(lease_s)s, j.lease_s) END,
    tokens = CASE WHEN pick.spent THEN j.tokens ELSE %(tokens)s END,
    wait_reason = NULL,
    message = CASE WHEN pick.spent
                   THEN format('lease expired on the last attempt (%%s/%%s); worker %%s was lost',
                               j.tries, j.max_attempts, j.worker)
                   ELSE j.message END,
    finished_at = CASE WHEN pick.spent THEN sloth.now() ELSE j.finished_at END,
    updated_at = sloth.now()
FROM pick
WHERE j.id = pick.id AND NOT (pick.spent AND j.waited_on)
  AND ((j.state = 'queued' AND j.not_before <= sloth.now())
       OR (j.state = 'running' AND j.lease_until < sloth.now()))
RETURNING j.*, pick.state AS was_state, pick.spent
), ev AS (
INSERT INTO sloth.events (job_id, at, kind, attempt, message)
SELECT u.id, sloth.now(),
       CASE WHEN u.spent THEN 'lease_expired'
            WHEN u.was_state = 'running' THEN 'reclaimed' ELSE 'claimed' END,
       u.attempts,
       CASE WHEN u.spent THEN u.message
            WHEN u.was_state = 'running'
            THEN format('by %%s%%s; lease of %%s ran out %%s before', %(worker)s, %(held_note)s::text, pick.worker,
                        sloth.format_duration(sloth.now() - pick.lease_until))
            ELSE 'by ' || %(worker)s || %(held_note)s::text END
FROM u JOIN pick ON pick.id = u.id
)
SELECT * FROM u
UNION ALL
SELECT j.*, 'settle', true FROM sloth.jobs j JOIN pick ON j.id = pick.id WHERE pick.spent AND j.waited_on
"""
# claim_many: up to n due ungated queued jobs of one lane, in one statement,
# each leased as the claim above leases a queued one (its own token from the
# fence sequence, attempts and tries + 1, event claimed). Per place (or
# once for any place), the lane's first n unlocked rows by the claim's order
# (jobs_ready / jobs_placed_due), locked as read and skipping rows another
# claimer holds; the n best of those are taken. With several places a row
# read but not taken stays locked until the transaction ends (n per place at
# most): another claimer skips it meanwhile, as it would a row being taken.
# The UPDATE matches on id alone: c read each row's state and due time
# under its lock (FOR UPDATE checks them again on the newest version), and
# the lock holds until this transaction ends. Checking the state again there
# let a planner whose statistics predate a burst (a table just filled: 1
# queued row expected) walk jobs_by_state over every queued job and join
# each to c (measured: 1,499 rows, 7 ms a claim, half the server's time).
SQL_CLAIM_MANY = """
WITH c AS (
    SELECT r.id, r.priority, r.not_before FROM {places_from} CROSS JOIN LATERAL (
        SELECT id, priority, not_before FROM sloth.jobs
        WHERE state = 'queued' AND gate IS NULL AND lane = %(lane)s {place_is} AND not_before <= sloth.now()
        ORDER BY priority DESC, not_before, id LIMIT %(n)s FOR UPDATE SKIP LOCKED
    ) r
    ORDER BY r.priority DESC, r.not_before, r.id LIMIT %(n)s
), u AS (
UPDATE sloth.jobs j SET
    state = 'running', attempts = j.attempts + 1, tries = j.tries + 1,
    token = nextval('sloth.fence')::text || '-' || %(rand)s, worker = %(worker)s,
    lease_until = sloth.now() + coalesce(%(lease_s)s, j.lease_s), tokens = NULL, wait_reason = NULL,
    updated_at = sloth.now()
FROM c
WHERE j.id = c.id
RETURNING j.*
), ev AS (
INSERT INTO sloth.events (job_id, at, kind, attempt, message)
SELECT u.id, sloth.now(), 'claimed', u.attempts, 'by ' || %(worker)s FROM u
)
SELECT * FROM u ORDER BY priority DESC, not_before, id
"""
# next_due_at: the first queued not_before (a seek per lane), and the first
# lease to expire.
SQL_NEXT_DUE = """
WITH RECURSIVE {queued_lanes}
SELECT (SELECT min(d.t) FROM queued_lanes l {places} CROSS JOIN LATERAL
          (SELECT not_before AS t FROM sloth.jobs WHERE state = 'queued' AND gate IS NULL AND lane = l.lane
           {place_is} ORDER BY not_before LIMIT 1) d
        WHERE l.lane IS NOT NULL {filt}) AS due,
       (SELECT min(lease_until) FROM sloth.jobs WHERE state = 'running' AND gate IS NULL {lease_filt} {placed})
        AS lease
"""
# A claim given a gated job (contract.Claims.claim's ``gated``): the most urgent
# ungated head first (a read), so the gated one is taken only when at least
# as urgent; then that one row, if still due, by the same transition.
SQL_PEEK = "WITH RECURSIVE {queued_lanes}, " + HEADS + " SELECT priority, not_before, id FROM heads LIMIT 1"
SQL_GATED_ROW = ("SELECT id, priority, not_before, state, worker, lease_until, tries >= max_attempts AS spent"
                 " FROM sloth.jobs WHERE id = %(id)s AND gate IS NOT NULL"
                 " AND ((state = 'queued' AND not_before <= sloth.now())"
                 " OR (state = 'running' AND lease_until < sloth.now()))")
# The gates of queued jobs (a skip scan on jobs_gated), and the heads of
# each (gate, lane): O(gates * lanes * log n) however many jobs wait.
# The gates' skip-scan walks jobs_gated one seek per distinct gate; a planner
# that has not yet analyzed a table just filled with gated jobs may pick a
# sequential scan of every queued row for each step instead (seen: 40,030 rows
# read for 20,000 jobs of one gate). Gates are few, and the seeks are right
# whatever the statistics: the read runs with this first, in its transaction.
SQL_GATES_PLAN = "SET LOCAL enable_seqscan = off"
SQL_GATES = """
WITH RECURSIVE g(gate) AS (
    (SELECT gate FROM sloth.jobs WHERE state = 'queued' AND gate IS NOT NULL ORDER BY gate LIMIT 1)
    UNION ALL
    SELECT (SELECT j.gate FROM sloth.jobs j WHERE j.state = 'queued' AND j.gate IS NOT NULL AND j.gate > g.gate
            ORDER BY j.gate LIMIT 1)
    FROM g WHERE g.gate IS NOT NULL
) SELECT gate FROM g WHERE gate IS NOT NULL"""
SQL_GATED_HEADS = """
WITH RECURSIVE gl(gate, lane) AS (
    SELECT gw.gate, (SELECT j.lane FROM sloth.jobs j WHERE j.state = 'queued' AND j.gate = gw.gate
                     ORDER BY j.lane LIMIT 1)
    FROM unnest(%(gates)s::text[]) gw(gate)
    UNION ALL
    SELECT gl.gate, (SELECT j.lane FROM sloth.jobs j WHERE j.state = 'queued' AND j.gate = gl.gate
                     AND j.lane > gl.lane ORDER BY j.lane LIMIT 1)
    FROM gl WHERE gl.lane IS NOT NULL
)
SELECT h.* FROM gl CROSS JOIN LATERAL (
    SELECT * FROM sloth.jobs WHERE state = 'queued' AND gate = gl.gate AND lane = gl.lane
        AND not_before <= sloth.now() {place_is_any} {lanes_out}
    ORDER BY priority DESC, not_before, id LIMIT 1
) h WHERE gl.lane IS NOT NULL
UNION ALL
SELECT * FROM sloth.jobs WHERE state = 'running' AND gate IS NOT NULL AND lease_until < sloth.now()
    {lanes_out} {ids_out} {placed_any}"""
SQL_GATED_LATER = ("SELECT min(not_before) AS t FROM sloth.jobs WHERE state = 'queued'"
                   " AND gate = ANY(%(gates)s::text[]) AND not_before > sloth.now() {lanes_out} {placed_any}")
# claim(places=[...]): each of its places is looked into on its own (jobs_placed, jobs_placed_due).
PLACED = {"places": "CROSS JOIN unnest(%(places)s::text[]) pl(place)", "place_is": "AND place = pl.place",
          "head_place": "pl.place", "head_place_is": "AND place = heads.place",
          "placed": "AND place = ANY(%(places)s::text[])"}
ANY_PLACE = {"places": "", "place_is": "", "head_place": "NULL::text", "head_place_is": "", "placed": ""}
LANES_IN = "AND lane = ANY(%({p}lanes)s)"
LANES_OUT = "AND lane <> ALL(%({p}exclude_lanes)s)"
IDS_OUT = "AND id <> ALL(%({p}exclude_ids)s)"


def is_job_id(x: object) -> bool:
    """Job ids are 64-bit ints; anything else names no job (and must not
    reach the server as a parameter it cannot take)."""
    return isinstance(x, int) and not isinstance(x, bool) and INT64[0] <= x < INT64[1]


def claim_lease(lease_s: float | None, lanes: Sequence[str] | None) -> float | None:
    """claim()'s arguments checked even when nothing is due: its lease, and
    ``lanes`` as a list (a bare string would be read as its letters)."""
    if lease_s is not None:
        lease_s = number(lease_s, "lease_s", None, lo=0.001)
    if isinstance(lanes, str):
        raise BadRequest(f"lanes must be a list of lane names, got the string {lanes!r}")
    return lease_s


def claim_statement(worker: str, lease_s: float | None, lanes: Sequence[str] | None,
                    exclude_lanes: Collection[str], exclude_ids: Collection[int],
                    places: Collection[str] | None = None, reclaim: bool = True) -> tuple[str, dict[str, Any]]:
    """The claim and its parameters, but for ``rand`` (fresh for each run);
    ``reclaim`` False: queued jobs only, never an expired lease."""
    lane_filt, args = filters(lanes, exclude_lanes, ())
    id_filt, id_args = filters(None, (), exclude_ids)
    source = QUEUED_LANES if lanes is None else GIVEN_LANES
    where, place_args = placed(places)
    return (SQL_CLAIM.format(queued_lanes=source, lanes=lane_filt, ids=id_filt, **where),
            {**args, **id_args, **place_args, "worker": worker, "lease_s": lease_s, "tokens": None,
             "held_note": "", "reclaim": bool(reclaim)})


def claim_many_statement(worker: str, lease_s: float | None, n: int, lane: str,
                         places: Collection[str] | None) -> tuple[str, dict[str, Any]]:
    """claim_many's statement and parameters, but for ``rand`` (fresh for each run)."""
    where, place_args = placed(places)
    many = ({"places_from": "unnest(%(places)s::text[]) pl(place)", "place_is": "AND place = pl.place"}
            if places is not None else {"places_from": "(VALUES (1)) any_place", "place_is": ""})
    return (SQL_CLAIM_MANY.format(**many),
            {**place_args, "worker": worker, "lease_s": lease_s, "n": n, "lane": str(lane)})


def peek_statement(lanes: Sequence[str] | None, exclude_lanes: Collection[str],
                   places: Collection[str] | None) -> tuple[str, dict[str, Any]]:
    """The most urgent due ungated queued job's (priority, not_before, id)."""
    lane_filt, args = filters(lanes, exclude_lanes, ())
    where, place_args = placed(places)
    source = QUEUED_LANES if lanes is None else GIVEN_LANES
    return SQL_PEEK.format(queued_lanes=source, lanes=lane_filt, **where), {**args, **place_args}


def gated_statement(exclude_lanes: Collection[str], exclude_ids: Collection[int],
                    places: Collection[str] | None) -> tuple[str, dict[str, Any]]:
    """gated_heads' query (its ``gates`` parameter is the caller's)."""
    lane_filt, args = filters(None, exclude_lanes, ())
    id_filt, id_args = filters(None, (), exclude_ids)
    _, place_args = placed(places)
    anyp = "AND place = ANY(%(places)s::text[])" if places is not None else ""
    return (SQL_GATED_HEADS.format(place_is_any=anyp, placed_any=anyp, lanes_out=lane_filt, ids_out=id_filt),
            {**args, **id_args, **place_args})


def gated_later_statement(exclude_lanes: Collection[str], places: Collection[str] | None) -> tuple[str, dict[str, Any]]:
    lane_filt, args = filters(None, exclude_lanes, ())
    _, place_args = placed(places)
    anyp = "AND place = ANY(%(places)s::text[])" if places is not None else ""
    return SQL_GATED_LATER.format(lanes_out=lane_filt, placed_any=anyp), {**args, **place_args}


def next_due_statement(lanes: Sequence[str] | None, exclude_lanes: Collection[str],
                       exclude_ids: Collection[int],
                       places: Collection[str] | None = None) -> tuple[str, dict[str, Any]]:
    """next_due_at's query: ``exclude_ids`` only hides leases (as in a claim)."""
    filt, args = filters(lanes, exclude_lanes, ())
    lease_filt, lease_args = filters(lanes, exclude_lanes, exclude_ids, prefix="l_")
    source = QUEUED_LANES if lanes is None else GIVEN_LANES
    where, place_args = placed(places)
    return (SQL_NEXT_DUE.format(queued_lanes=source, filt=filt, lease_filt=lease_filt, **where),
            {**args, **lease_args, **place_args})


def placed(places: Collection[str] | None) -> tuple[dict[str, str], dict[str, Any]]:
    """The place fragments of a claim or a due time (fixed text) and their
    parameter: None takes jobs of any place, a list only jobs placed there
    ("" is anywhere)."""
    if places is None:
        return ANY_PLACE, {}
    if isinstance(places, str):
        raise BadRequest(f"places must be a list of names, got the string {places!r}")
    return PLACED, {"places": sorted({str(p) for p in places})}


def filters(lanes: Sequence[str] | None, exclude_lanes: Collection[str],
            exclude_ids: Collection[int], prefix: str = "") -> tuple[str, dict[str, Any]]:
    """WHERE fragments (fixed text) and their parameters (named with
    ``prefix``) for the lane and id filters."""
    parts: list[str] = []
    args: dict[str, Any] = {}
    if lanes is not None:
        parts.append(LANES_IN.format(p=prefix))
        args[prefix + "lanes"] = [str(x) for x in lanes]
    if exclude_lanes:
        parts.append(LANES_OUT.format(p=prefix))
        args[prefix + "exclude_lanes"] = [str(x) for x in exclude_lanes]
    ids = [i for i in exclude_ids if is_job_id(i)]
    if ids:
        parts.append(IDS_OUT.format(p=prefix))
        args[prefix + "exclude_ids"] = ids
    return " ".join(parts), args

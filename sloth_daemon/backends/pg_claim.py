"""What the PostgreSQL queue claims next, and when something will be due:
the claim statement and the lane and id filters it shares with
next_due_at (the counterpart of sqlite_pick.py; postgres.py runs them).

Ordering of a claim: highest ``priority`` first, then the job that became
due first (``not_before``), then the oldest id. Candidates come from
``FOR UPDATE SKIP LOCKED`` selects, so claimers on several machines never
wait for, or take, the same row.
"""

from __future__ import annotations

from typing import Any, Collection, Sequence

from ..errors import BadRequest
from ..spec import number

INT64 = (-(2**63), 2**63)

# The claim: the best due queued row and the best expired lease (each the
# first unlocked one in claim order), the better of the two, updated in the
# same statement with its due-ness checked again, and its event written.
# {lanes}/{ids} are filled with fixed fragments, never with input. An
# expired lease with no tries left becomes failed instead (event
# lease_expired; the caller then claims again).
SQL_CLAIM = """
WITH q AS (
    SELECT id, priority, not_before, state, worker, lease_until, false AS spent FROM sloth.jobs
    WHERE state = 'queued' AND not_before <= sloth.now() {lanes}
    ORDER BY priority DESC, not_before, id LIMIT 1 FOR UPDATE SKIP LOCKED
), e AS (
    SELECT id, priority, not_before, state, worker, lease_until, tries >= max_attempts AS spent
    FROM sloth.jobs
    WHERE state = 'claimed' AND lease_until < sloth.now() {lanes} {ids}
    ORDER BY priority DESC, not_before, id LIMIT 1 FOR UPDATE SKIP LOCKED
), pick AS (
    SELECT * FROM (SELECT * FROM q UNION ALL SELECT * FROM e) candidates
    ORDER BY priority DESC, not_before, id LIMIT 1
), u AS (
UPDATE sloth.jobs j SET
    state = CASE WHEN pick.spent THEN 'failed' ELSE 'claimed' END,
    attempts = CASE WHEN pick.spent THEN j.attempts ELSE j.attempts + 1 END,
    tries = CASE WHEN pick.spent THEN j.tries ELSE j.tries + 1 END,
    token = CASE WHEN pick.spent THEN NULL
                 ELSE nextval('sloth.fence')::text || '-' || %(rand)s END,
    worker = CASE WHEN pick.spent THEN j.worker ELSE %(worker)s END,
    lease_until = CASE WHEN pick.spent THEN NULL
                       ELSE sloth.now() + coalesce(%(lease_s)s, j.lease_s) END,
    message = CASE WHEN pick.spent
                   THEN format('lease expired on the last attempt (%%s/%%s); worker %%s was lost',
                               j.tries, j.max_attempts, j.worker)
                   ELSE j.message END,
    finished_at = CASE WHEN pick.spent THEN sloth.now() ELSE j.finished_at END,
    updated_at = sloth.now()
FROM pick
WHERE j.id = pick.id
  AND ((j.state = 'queued' AND j.not_before <= sloth.now())
       OR (j.state = 'claimed' AND j.lease_until < sloth.now()))
RETURNING j.*, pick.state AS was_state, pick.spent
), ev AS (
INSERT INTO sloth.events (job_id, at, kind, attempt, message)
SELECT u.id, sloth.now(),
       CASE WHEN u.spent THEN 'lease_expired'
            WHEN u.was_state = 'claimed' THEN 'reclaimed' ELSE 'claimed' END,
       u.attempts,
       CASE WHEN u.spent THEN u.message
            WHEN u.was_state = 'claimed'
            THEN format('by %%s; lease of %%s expired at %%s', %(worker)s, pick.worker,
                        round(pick.lease_until::numeric, 3))
            ELSE 'by ' || %(worker)s END
FROM u JOIN pick ON pick.id = u.id
)
SELECT * FROM u
"""
# next_due_at: the first queued not_before, and the first lease to expire.
SQL_NEXT_DUE = ("SELECT (SELECT min(not_before) FROM sloth.jobs WHERE state = 'queued' {filt}) AS due,"
                " (SELECT min(lease_until) FROM sloth.jobs WHERE state = 'claimed' {lease_filt})"
                " AS lease")
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
                    exclude_lanes: Collection[str], exclude_ids: Collection[int]) -> tuple[str, dict[str, Any]]:
    """The claim and its parameters, but for ``rand`` (fresh for each run)."""
    lane_filt, args = filters(lanes, exclude_lanes, ())
    id_filt, id_args = filters(None, (), exclude_ids)
    return (SQL_CLAIM.format(lanes=lane_filt, ids=id_filt),
            {**args, **id_args, "worker": worker, "lease_s": lease_s})


def next_due_statement(lanes: Sequence[str] | None, exclude_lanes: Collection[str],
                       exclude_ids: Collection[int]) -> tuple[str, dict[str, Any]]:
    """next_due_at's query: ``exclude_ids`` only hides leases (as in a claim)."""
    filt, args = filters(lanes, exclude_lanes, ())
    lease_filt, lease_args = filters(lanes, exclude_lanes, exclude_ids, prefix="l_")
    return SQL_NEXT_DUE.format(filt=filt, lease_filt=lease_filt), {**args, **lease_args}


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

"""A request's arguments, checked: the frame is untrusted, so each op
(handlers.py, job_ops.py, lane_ops.py, edit_ops.py, streams.py) reads its
arguments through these, and a bad one is a BadRequest (or JobNotFound)
that changes nothing."""

from __future__ import annotations

from typing import Any

from sloth_daemon.backends import rules
from sloth_daemon.backends.contract import Handle
from sloth_daemon.errors import BadRequest, JobNotFound
from sloth_daemon.models import STATE_NAMES, Job, state_name

MAX_LIST = 100_000  # jobs per listing page
_TOKEN_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-")


def job_id(v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise BadRequest(f"job id must be a whole number, got {v!r}")
    if not 1 <= v < 2**63:  # SQLite integers are 64-bit
        raise JobNotFound(v)
    return v


def job_ids(v: Any, name: str = "ids") -> list[int]:
    if not isinstance(v, list) or not v:
        raise BadRequest(f"{name} must be a non-empty list of job ids")
    return [job_id(i) for i in v]


def attempt_of(job: Job, v: Any, *, allow_none: bool = False) -> int | None:
    if v is None:
        if job.attempts == 0:
            if allow_none:
                return None
            raise rules.never_ran(job)
        return job.attempts
    if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= max(job.attempts, 1):
        raise BadRequest(f"job {job.id} has attempts 1..{job.attempts}, not {v!r}")
    return v


def selection(a: dict[str, Any]) -> tuple[list[int] | None, str | None, list[str] | None]:
    """(ids, lane, states) of a request on many jobs: ids, or a lane and/or states."""
    ids = a.get("ids")
    lane, states = lane_name(a.get("lane")), states_arg(a.get("states"))
    if ids is not None and (lane is not None or states is not None):
        raise BadRequest("name jobs by ids or by lane/states, not both")
    if ids is None and lane is None and states is None:
        raise BadRequest("name the jobs: id, ids, lane or states")
    return (None if ids is None else job_ids(ids)), lane, states


def listing_args(a: dict[str, Any]) -> dict[str, Any]:
    """The selection of ``list`` and ``scan`` (all but the limit), checked."""
    fl = a.get("finished_limit")
    return {"states": states_arg(a.get("states")), "lane": lane_name(a.get("lane")),
            "offset": whole(a.get("offset", 0), "offset", 0, 2**62),
            "finished_limit": None if fl is None else whole(fl, "finished_limit", 0, MAX_LIST),
            **host_arg(a.get("host")), **({} if a.get("batch") is None else {"batch": job_id(a["batch"])})}


def states_arg(v: Any) -> list[str] | None:
    """A list of state names; ``claimed`` is read as ``running``."""
    if v is None:
        return None
    if not isinstance(v, list) or not v or not all(isinstance(s, str) for s in v):
        raise BadRequest("states must be a non-empty list of strings")
    try:
        return [state_name(s) for s in v]
    except ValueError:
        bad = next(s for s in v if s not in STATE_NAMES and s != "claimed")
        raise BadRequest(f"unknown state {bad!r}", hint=f"States: {', '.join(STATE_NAMES)}.") from None


def whole(v: Any, name: str, lo: int, hi: int) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
        raise BadRequest(f"{name} must be a whole number from {lo} to {hi}")
    return v


def flag(v: Any, name: str) -> bool:
    if not isinstance(v, bool):
        raise BadRequest(f"{name} must be true or false")
    return v


def jobs_of(a: dict[str, Any]) -> list[dict[str, Any]]:
    """The request's jobs, each with the request's ``common`` fields under it."""
    jobs, common = a.get("jobs"), a.get("common") or {}
    if not isinstance(jobs, list) or not jobs:
        raise BadRequest("jobs must be a non-empty list of job objects")
    if not isinstance(common, dict):
        raise BadRequest("common must be an object")
    if not all(isinstance(j, dict) for j in jobs):
        raise BadRequest("each job must be an object")
    return [{**common, **j} for j in jobs]


def batch_token(v: Any) -> str:
    if not isinstance(v, str) or not 1 <= len(v) <= 64 or not set(v) <= _TOKEN_CHARS:
        raise BadRequest("batch must be a token of 1 to 64 letters, digits, '_' or '-'")
    return v


MAX_BATCH_NAME = 200


def batch_name(v: Any, what: str = "batch name") -> str:
    """A batch's name (`add --batch NAME`): printable text that is not all
    digits (digits name a batch by its id: rules.batch_ref)."""
    if not isinstance(v, str) or not 1 <= len(v) <= MAX_BATCH_NAME or not v.isprintable() or v != v.strip():
        raise BadRequest(f"a {what} is 1 to {MAX_BATCH_NAME} printable characters, without blanks at its ends")
    if v.isascii() and v.isdigit():  # as rules.batch_ref reads a reference
        raise BadRequest(f"a {what} cannot be all digits: `--batch {v}` means the batch with id {v}",
                         hint="Give it a word, e.g. --batch run-" + v + ".")
    return v


def handle_arg(v: Any) -> Handle | None:
    """``handle`` of a commit: {"name": str or null} makes its jobs a batch with a handle."""
    if v is None:
        return None
    if not isinstance(v, dict) or set(v) - {"name"}:
        raise BadRequest('handle must be {"name": NAME or null}')
    return Handle(None if v.get("name") is None else batch_name(v["name"]))


def batch_ref_arg(v: Any) -> str:
    """A batch named by a client: its id (digits, or a number) or its name."""
    if isinstance(v, int) and not isinstance(v, bool) and v > 0:
        return str(v)
    if isinstance(v, str) and v.isascii() and v.isdigit():
        return v
    return batch_name(v, "batch")


def host_arg(v: Any) -> dict[str, str]:
    """``host`` of a listing: only jobs that run, ran or are placed there."""
    if v is None:
        return {}
    if not isinstance(v, str) or not v:
        raise BadRequest("host must be a non-empty string")
    return {"host": v}


def lane_name(v: Any) -> str | None:
    if v is not None and (not isinstance(v, str) or not v):
        raise BadRequest("lane must be a non-empty string")
    return v

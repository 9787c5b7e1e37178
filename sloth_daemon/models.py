"""The queue's value types: job states, jobs and events."""

from __future__ import annotations

import enum
import json
from dataclasses import asdict, dataclass, field
from typing import Any

from sloth_daemon.text import mask_url


class JobState(str, enum.Enum):
    """A job's state, spelled the same in storage, on the wire and to users.

    ``blocked``: waiting for the jobs it was added ``--after``; out of every
    claim index until its last prerequisite ends. ``running``: leased to a
    worker (schema v1-v3 spelled it ``claimed``; ``JobState("claimed")`` and
    ``JobState.CLAIMED`` still mean running, so old scripts' filters work).
    ``held``: kept from being claimed until `sloth release` (`sloth hold`,
    `add --hold`); like ``blocked``, in no claim index. Released, it is
    ``blocked`` or ``queued`` as its prerequisites say.
    """

    BLOCKED = "blocked"
    QUEUED = "queued"
    HELD = "held"
    RUNNING = "running"
    CLAIMED = "running"  # an alias of RUNNING (Enum: same value, same member)
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def finished(self) -> bool:
        return self in (JobState.DONE, JobState.FAILED, JobState.CANCELLED)

    @classmethod
    def _missing_(cls, value: object) -> "JobState | None":
        return cls.RUNNING if value == "claimed" else None

    def __str__(self) -> str:  # so f"{state}" prints "queued", on 3.10 and 3.11+
        return self.value


STATE_NAMES = tuple(s.value for s in JobState)  # blocked, queued, held, running, done, failed, cancelled
ACTIVE_STATES = (JobState.BLOCKED.value, JobState.QUEUED.value, JobState.HELD.value, JobState.RUNNING.value)
WAITING_STATES = (JobState.BLOCKED.value, JobState.QUEUED.value, JobState.HELD.value)  # not started: editable
FINISHED_STATES = (JobState.DONE.value, JobState.FAILED.value, JobState.CANCELLED.value)


def state_name(text: str) -> str:
    """The state a filter names (``claimed`` is read as ``running``); ValueError if none."""
    return JobState(text).value


# Exit codes not retried unless a job says otherwise: the shell's "found but
# not executable" (126) and "command not found" (127). Retrying a typo three
# times with backoff only delays the bad news.
NO_RETRY_EXIT = (126, 127)


@dataclass(frozen=True)
class Job:
    id: int
    command: list[str]
    state: JobState
    attempts: int
    max_attempts: int
    lease_until: float | None
    not_before: float
    token: str | None
    worker: str | None
    message: str
    created_at: float
    updated_at: float
    lane: str = "default"
    priority: int = 0
    lease_s: float = 60.0
    timeout_s: float | None = None
    key: str | None = None
    label: str | None = None
    shell: bool = False
    cwd: str | None = None
    env: dict[str, str] | None = field(default=None, repr=False)
    runner: dict[str, Any] | None = None
    exit_code: int | None = None
    finished_at: float | None = None
    tries: int = 0  # runs that count against max_attempts (attempts counts every run)
    refunds: int = 0  # crashes of sloth and fences forgiven since the last retry (bounded)
    after: list[int] = field(default_factory=list)  # runs once these are done ...
    after_any: list[int] = field(default_factory=list)  # ... and these have ended at all
    retry_exit: list[int] | None = None  # only these exit codes are retried (None: any)
    no_retry_exit: list[int] = field(default_factory=lambda: list(NO_RETRY_EXIT))
    place: str = ""  # where it may run: "" anywhere, else a host's or a tag's name
    keep_awake: bool = False  # its run holds a sleep inhibitor (keeper/keep_awake.py)
    limits: dict[str, Any] | None = None  # {"mem": bytes, "cpus": n, "nice": n, "io": class}
    paused: bool = False  # its running run is paused on request (`sloth pause --job`)
    gate: dict[str, Any] | None = None  # when / on_lost / needs / slots (checks.gate_json); None: none
    tokens: dict[str, list[str]] | None = None  # the resource tokens its current run holds (on its machine)
    wait_reason: str | None = None  # why a queued job with a gate does not start ("waiting for mains power")
    progress: dict[str, Any] | None = None  # its run's latest {"fraction", "source", "eta_s", "at"} (docs/progress.md)
    tell: list[dict[str, Any]] | None = None  # who is told of its runs (checks.tell_json); shown masked
    batch: dict[str, Any] | None = None  # {"id", "name"}: the batch with a handle it was queued in (issue 33)
    member: dict[str, Any] | None = None  # an array member's {"index", "value", "args"} (its SLOTH_ARRAY_* variables)
    rules: dict[str, Any] | None = None  # watchdogs and retry rules (checks.rules_json; docs/watchdogs.md)

    @classmethod
    def from_row(cls, row: Any, *, env: dict[str, str] | None = None) -> "Job":
        """``env``: the environment the queue resolved from ``env_id`` (see
        Queue._job); otherwise the row's own inline ``env`` column is used."""
        # zip, not dict(row): a sqlite3.Row looks each name up by a scan of its columns
        d = dict(row) if isinstance(row, dict) else dict(zip(row.keys(), row, strict=True))
        loads, get, pop = json.loads, d.get, d.pop
        pop("env_id", None)
        state = d["state"] = _STATES[d["state"]] if d["state"] in _STATES else JobState(d["state"])
        d["command"] = loads(d["command"])
        d["env"] = env if env is not None else (loads(d["env"]) if d["env"] else None)
        d["runner"] = loads(d["runner"]) if d["runner"] else None
        d["shell"] = bool(d["shell"])
        d["lease_s"] = float(d["lease_s"])  # a REAL; a claim's RETURNING gives back the int it was bound as
        prereqs = pop("prereqs", None)
        if prereqs and prereqs != "{}":
            p = loads(prereqs)
            d["after"], d["after_any"] = p.get("after", []), p.get("after_any", [])
        else:
            d["after"], d["after_any"] = [], []
        for k in ("retry_exit", "gate", "tokens", "tell", "limits", "member", "rules"):
            v = get(k)
            d[k] = loads(v) if v else None
        nre = get("no_retry_exit")
        d["no_retry_exit"] = list(NO_RETRY_EXIT) if nre is None else loads(nre)
        paused_run = pop("paused_run", None)
        d["paused"] = paused_run is not None and paused_run == d["token"] and state is JobState.RUNNING
        d["keep_awake"] = bool(get("keep_awake"))
        progress = get("progress")
        d["progress"] = shown_progress(progress, state, d["attempts"]) if progress else None
        pop("key_behind", None)  # the job it was added behind (--on-dup): its after_any says so
        bid, bname = pop("batch_id", None), pop("batch_name", None)
        d["batch"] = None if bid is None else {"id": bid, "name": bname}
        if isinstance(d["cwd"], bytes):  # a path that is not UTF-8, kept as its bytes
            d["cwd"] = d["cwd"].decode("utf-8", "surrogateescape")
        if d.keys() != _JOB_FIELD_SET:  # a row of another shape: the dataclass says what is missing or extra
            return cls(**d)
        # Every field, checked above: filled as __init__ would, without its
        # frozen __setattr__ per field (a claim and an outcome build one each)
        job = object.__new__(cls)
        job.__dict__.update(d)
        return job

    def retries_exit(self, code: int) -> bool:
        """Whether a run that exited with ``code`` (not 0, not a signal) may be
        tried again, by the job's exit-code rules."""
        if code in self.no_retry_exit:
            return False
        return self.retry_exit is None or code in self.retry_exit

    def to_dict(self, *, with_env: bool = False) -> dict[str, Any]:
        """What asdict gives (lists and dicts copied), several times faster:
        a listing of a million jobs makes a million of these."""
        d = {f: _copied(getattr(self, f)) for f in _JOB_FIELDS if with_env or f != "env"}
        d["state"] = self.state.value
        if self.tell:  # a URL's path and query are its token: never shown (text.mask_url)
            d["tell"] = [mask_channel(ch) for ch in self.tell]
        return d


def mask_channel(ch: dict[str, Any]) -> dict[str, Any]:
    """A channel as it may be shown: its URL masked (text.mask_url)."""
    return {**ch, "url": mask_url(ch["url"])} if "url" in ch else dict(ch)


_JOB_FIELDS = tuple(Job.__dataclass_fields__)
_JOB_FIELD_SET = frozenset(_JOB_FIELDS)
_STATES = {s.value: s for s in JobState}  # a row's state text -> its member, without Enum's call


def shown_progress(stored: Any, state: JobState, attempts: int) -> dict[str, Any] | None:
    """A row's progress as its Job carries it: only while the job runs the
    attempt it was said of (a new attempt never shows the last one's)."""
    if not stored or state is not JobState.RUNNING:
        return None
    try:
        p = json.loads(stored) if isinstance(stored, str) else dict(stored)
    except (ValueError, TypeError):
        return None
    if not isinstance(p, dict) or p.pop("attempt", None) != attempts:
        return None
    return p


def _copied(v: Any) -> Any:
    """A copy of a job's value as asdict makes it: its lists and dicts new,
    what is in them (text, numbers) shared."""
    if type(v) is list:
        return [_copied(x) for x in v]
    if type(v) is dict:
        return {k: _copied(x) for k, x in v.items()}
    return v


@dataclass(frozen=True)
class Event:
    job_id: int
    at: float
    kind: str
    attempt: int
    message: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Batch:
    """What one request on many jobs did: the jobs it changed (or, for a
    restart, made) and the ones it left alone, each with why."""

    jobs: list[Job]
    skipped: list[tuple[int, str]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"jobs": [j.to_dict() for j in self.jobs],
                "skipped": [{"id": i, "why": why} for i, why in self.skipped]}


@dataclass(frozen=True)
class Listing:
    """A page of ``sloth ls``: running jobs first, then queued in the order
    they will run, then blocked, then finished (most recent first).
    ``total``: how many jobs the selection holds (so a page that is not all
    of them says so); ``counts``: jobs per state in the selection's lane."""

    jobs: list[Job]
    total: int
    counts: dict[str, int]
    offset: int = 0
    lanes: dict[str, dict[str, int]] = field(default_factory=dict)  # lane -> active jobs per state

    def to_dict(self) -> dict[str, Any]:
        return {"jobs": [j.to_dict() for j in self.jobs], "total": self.total, "counts": self.counts,
                "offset": self.offset, "left_out": self.total - self.offset - len(self.jobs),
                "lanes": self.lanes}

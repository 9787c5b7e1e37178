"""The queue's value types: job states, jobs and events."""

from __future__ import annotations

import enum
import json
from dataclasses import asdict, dataclass, field
from typing import Any


class JobState(str, enum.Enum):
    QUEUED = "queued"
    CLAIMED = "claimed"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def finished(self) -> bool:
        return self in (JobState.DONE, JobState.FAILED, JobState.CANCELLED)

    def __str__(self) -> str:  # so f"{state}" prints "queued", on 3.10 and 3.11+
        return self.value


ACTIVE_STATES = (JobState.QUEUED.value, JobState.CLAIMED.value)
FINISHED_STATES = (JobState.DONE.value, JobState.FAILED.value, JobState.CANCELLED.value)


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

    @classmethod
    def from_row(cls, row: Any, *, env: dict[str, str] | None = None) -> "Job":
        """``env``: the environment the queue resolved from ``env_id`` (see
        Queue._job); otherwise the row's own inline ``env`` column is used."""
        d = dict(row)
        d.pop("env_id", None)
        d["command"] = json.loads(d["command"])
        d["env"] = env if env is not None else (json.loads(d["env"]) if d["env"] else None)
        d["runner"] = json.loads(d["runner"]) if d["runner"] else None
        d["state"] = JobState(d["state"])
        d["shell"] = bool(d["shell"])
        if isinstance(d["cwd"], bytes):  # a path that is not UTF-8, kept as its bytes
            d["cwd"] = d["cwd"].decode("utf-8", "surrogateescape")
        return cls(**d)

    def to_dict(self, *, with_env: bool = False) -> dict[str, Any]:
        d = asdict(self)
        d["state"] = self.state.value
        if not with_env:
            d.pop("env")
        return d


@dataclass(frozen=True)
class Event:
    job_id: int
    at: float
    kind: str
    attempt: int
    message: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

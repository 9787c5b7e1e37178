"""A schedule as asked for, validated: :class:`Recipe`.

Stored as JSON in the schedules table (backends/schedule_rules.py); the
job it queues is the add op's job object (checked as an add would be),
less the fields each occurrence sets itself (key, not_before, after).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Mapping

from sloth_daemon.checks import merged_rules, number, text
from sloth_daemon.errors import BadRequest, FieldError

MISSED = ("once", "skip", "all")
OVERLAP = ("skip", "queue", "parallel", "replace")
MIN_EVERY_S = 1.0
MAX_EVERY_S = 366 * 86400.0
MAX_JITTER_S = 7 * 86400.0
NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
# The fields an occurrence sets itself: a recipe's job may not.
OCCURRENCE_FIELDS = ("key", "not_before", "after", "after_any", "after_previous")
FIELDS = frozenset({"every_s", "cron", "tz", "missed", "overlap", "jitter_s", "job", "expect_within_s"})
MIN_EXPECT_S, MAX_EXPECT_S = 60.0, 366 * 86400.0  # the dead-man switch's window (daemon/telling/deadman.py)


@dataclass(frozen=True)
class Recipe:
    """``every_s`` or ``cron`` (exactly one); ``tz``: a zoneinfo name, or
    None for the daemon's local time; ``machine``: where it was made (its
    jitter's seed); ``anchor``: an interval's slots are anchor + k * every_s."""

    job: dict[str, Any]
    every_s: int | None = None
    cron: str | None = None
    tz: str | None = None
    missed: str = "once"
    overlap: str = "skip"
    jitter_s: float = 0.0
    machine: str = ""
    anchor: int = 0
    expect_within_s: float | None = None  # a success is expected within this long, else `missed` is told
    expect_since: int = 0  # when expect_within_s was set (its first window starts there)
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("extra")
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Recipe":
        known = set(cls.__dataclass_fields__) - {"extra"}
        return cls(**{k: v for k, v in d.items() if k in known})

    def merged(self, changes: Mapping[str, Any]) -> dict[str, Any]:
        """The request fields of this recipe with ``changes`` over them (an edit)."""
        d = {k: getattr(self, k) for k in FIELDS}
        if "every_s" in changes or "cron" in changes:  # one replaces the other
            d["every_s"] = d["cron"] = None
        if isinstance(changes.get("job"), Mapping):
            new = dict(changes["job"])
            if isinstance(new.get("rules"), Mapping) and isinstance(self.job.get("rules"), Mapping):
                new["rules"] = merged_rules(self.job["rules"], new["rules"])  # `edit --stall 5m` keeps its --fail-on
            changes = {**changes, "job": {**self.job, **new}}
        return {**d, **changes}


def name(v: Any) -> str:
    """A schedule's name: 1-64 of letters, digits, '.', '_', '-' (not first)."""
    s = text(v, "name", None, nonempty=True)
    if s is None or not NAME_RE.fullmatch(s):
        raise FieldError("name", f"must be 1-64 letters, digits, '.', '_' or '-', got {v!r}",
                         hint="e.g. nightly-backup")
    return s


def parse(a: Mapping[str, Any], *, machine: str, anchor: int) -> Recipe:
    """A recipe from the request's fields (FIELDS); raises BadRequest. The
    cron expression and the zone are checked by slots.py (``check``)."""
    unknown = sorted(set(a) - FIELDS)
    if unknown:
        raise BadRequest(f"unknown schedule field(s): {', '.join(unknown)}",
                         hint=f"Known: {', '.join(sorted(FIELDS))}.")
    every, cron = a.get("every_s"), a.get("cron")
    if (every is None) == (cron is None):
        raise BadRequest("a schedule needs exactly one of --every DURATION or --cron \"EXPR\"",
                         hint='e.g. --every 1h, or --cron "0 3 * * *" (03:00 every day).')
    return Recipe(job=_job(a.get("job")), every_s=_every(every), cron=_cron_text(cron),
                  tz=text(a.get("tz"), "tz", None, nonempty=True), missed=_choice(a, "missed", MISSED),
                  overlap=_choice(a, "overlap", OVERLAP), jitter_s=_jitter(a.get("jitter_s")),
                  machine=machine, anchor=int(anchor),
                  expect_within_s=number(a.get("expect_within_s"), "expect_within_s", None, lo=MIN_EXPECT_S,
                                         hi=MAX_EXPECT_S))


def _every(v: Any) -> int | None:
    f = number(v, "every_s", None, lo=MIN_EVERY_S, hi=MAX_EVERY_S)
    if f is not None and f != int(f):
        raise FieldError("every_s", f"must be whole seconds, got {v!r}")
    return None if f is None else int(f)


def _cron_text(v: Any) -> str | None:
    s = text(v, "cron", None, nonempty=True)
    if s is not None and len(s) > 200:
        raise FieldError("cron", "is longer than 200 characters")
    return None if s is None else " ".join(s.split())


def _jitter(v: Any) -> float:
    return float(number(v, "jitter_s", 0.0, lo=0.0, hi=MAX_JITTER_S))


def _choice(a: Mapping[str, Any], key: str, allowed: tuple[str, ...]) -> str:
    v = a.get(key, allowed[0])
    if v not in allowed:
        raise FieldError(key, f"must be one of {', '.join(allowed)}, got {v!r}")
    return str(v)


def _job(v: Any) -> dict[str, Any]:
    if not isinstance(v, Mapping) or "command" not in v:
        raise FieldError("job", "must be a job object with a command (as the add op takes)")
    set_here = sorted(k for k in OCCURRENCE_FIELDS if k in v)
    if set_here:
        raise FieldError("job", f"cannot set {', '.join(set_here)}: each occurrence sets its own",
                         hint="A schedule's jobs are keyed by their slot and start at it (plus --jitter).")
    return dict(v)


def edited(old: Recipe, changes: Mapping[str, Any]) -> Recipe:
    """``old`` with ``changes`` (request fields) applied, checked whole."""
    new = parse(old.merged(changes), machine=old.machine, anchor=old.anchor)
    return replace(new, anchor=old.anchor, expect_since=old.expect_since)

"""A job as it is asked for, validated: :class:`JobSpec`.

The queue stores specs and makes transitions; what a valid job is lives
here and in checks.py (the checks every number and string crossing into
the queue goes through, and which field gets which), so the SQLite and any
other backend refuse exactly the same input, and so does `sloth add`
before it sends anything. Validation runs per job of a batch of tens of
thousands, so it is plain loops and a cache of serialised environments,
not a schema library.
"""

from __future__ import annotations

from typing import Any, Mapping, NamedTuple

from sloth_daemon.checks import (  # noqa: F401 - the checks, where the queue has always found them
    DEFAULT_LEASE_S, DEFAULT_MAX_ATTEMPTS, FIELDS, MAX_PREREQS, PREVIOUS, command_json, duration, env_json, exit_codes,
    fields, host_name, ids, integer, number, path_text, place_name, rules_json, text,
)
from sloth_daemon.checks import TELL_FIELDS, tell_json

# id(env) -> (env, its JSON): a batch usually shares one environment object.
EnvCache = dict[int, tuple[Any, str]]


class Defaults(NamedTuple):
    """What a spec that leaves a field out gets (from the daemon's settings)."""

    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    lease_s: float = DEFAULT_LEASE_S
    place: str = ""  # anywhere; a daemon on a shared queue: its own host


class JobSpec(NamedTuple):
    """One validated job, ready to insert. ``command_json`` and ``env_json``
    are the stored text forms (the environment is stored once per distinct
    text, see Queue). A NamedTuple: made per job of a batch, it must be cheap."""

    command_json: str
    max_attempts: int
    lease_s: float
    not_before: float | None  # None: due now
    priority: int
    lane: str
    key: str | None
    cwd: str | None
    env_json: str | None
    timeout_s: float | None
    label: str | None
    shell: bool
    place: str = ""  # where it may run: "" anywhere, else a host or a tag (see place_name)
    after: tuple[int, ...] = ()  # ids that must end done
    after_any: tuple[int, ...] = ()  # ids that must end, whatever the result
    after_previous: str | None = None  # "after" | "after_any": on the batch's previous job
    retry_exit_json: str | None = None
    no_retry_exit_json: str | None = None
    hold: bool = False  # queued held: kept from being claimed until released (`add --hold`)
    keep_awake: bool = False  # hold a sleep inhibitor while it runs (keeper/keep_awake.py)
    limits_json: str | None = None  # resource limits, checks.limits_json
    gate_json: str | None = None  # conditions, needs, slots (checks.gate_json): None, none of them
    member_json: str | None = None  # an array member's values (checks.member_json)
    on_dup: str = "keep"  # what the add does when an unfinished job has its key (checks.on_dup)
    # set by name (parse's _replace), never by position: checks.fields' tuple ends before it
    tell_json: str | None = None  # who is told of its runs (checks.tell_json, docs/telling.md): None, no one
    rules_json: str | None = None  # watchdogs and retry rules (checks.rules_json): None, none of them

    @property
    def waits(self) -> bool:
        return bool(self.after or self.after_any or self.after_previous)

    @classmethod
    def parse(cls, s: Mapping[str, Any], defaults: Defaults, env_cache: EnvCache | None = None) -> "JobSpec":
        """Validate one job object (as sent by a client). Raises BadRequest."""
        spec = cls(*fields(s, defaults.max_attempts, defaults.lease_s, env_cache, defaults.place))
        if not TELL_FIELDS.isdisjoint(s):
            spec = spec._replace(tell_json=tell_json(s))
        rules = s.get("rules")
        return spec if rules is None else spec._replace(rules_json=rules_json(rules))

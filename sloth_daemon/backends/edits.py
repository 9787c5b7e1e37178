"""What both queue engines decide alike about the queue edits (issue 22):
`sloth edit` (a waiting job's command, lane, priority, label, start time
and prerequisites), `sloth bump` (to the front of its lane) and `sloth
hold` / `sloth release`. No SQL here: backends/sqlite/edits.py and
backends/postgres/edits.py read and write, and ask these what to do.

Which jobs: only jobs that have not started -- ``queued``, ``blocked`` or
``held`` (models.WAITING_STATES). A running or finished job is refused
with the hint that `sloth restart` makes a new job.

The claim order is priority DESC, not_before, id (backends/sqlite/pick.py,
backends/postgres/pick.py). The bump rule, in that order: the job's
priority becomes one above the highest of the other waiting jobs
(queued, held or blocked) of its lane, unless it is above them already;
a delayed job is made due now (a bump means "this one next"). Bumping
several, the first named ends first. Nothing else in the claim changes,
so a claim costs what it did.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from sloth_daemon.checks import (
    ANYWHERE, INT64_MAX, LIMIT_NAMES, MAX_PREREQS, command_json, ids, integer, merged_rules, number, text,
)
from sloth_daemon.durations import MAX_TIME
from sloth_daemon.errors import BadRequest, FieldError, IllegalTransition
from sloth_daemon.models import FINISHED_STATES, WAITING_STATES, Job, JobState
from sloth_daemon.spec import Defaults, JobSpec

# The jobs columns the settings are stored in (an edit writes them back as they were unless changed).
SETTING_COLUMNS = ("max_attempts", "lease_s", "timeout_s", "cwd", "retry_exit", "no_retry_exit", "place",
                   "keep_awake", "limits", "gate", "rules")

__all__ = ["EDITABLE", "EXPECTABLE", "Edited", "Plan", "bump_priority", "changes_of", "check_expect", "cycle_error",
           "describe",
           "not_editable", "plan_edit", "stale"]

# The settings `sloth add` gives a job that an edit may change as well (their
# names in a job object, checks.FIELDS), each checked as add checks it: the
# job's settings with the edit's over them are parsed as one JobSpec.
GATE_KEYS = ("when", "on_lost", "needs", "slots")
SETTINGS = frozenset({"max_attempts", "lease_s", "timeout_s", "cwd", "retry_exit", "no_retry_exit", "place",
                      "keep_awake", "limits", "rules", *GATE_KEYS})
EDITABLE = frozenset({"command", "shell", "lane", "priority", "label", "not_before", "after", "after_any",
                      *SETTINGS})
NEED_DONE, NEED_END = "done", "end"


@dataclass(frozen=True)
class Edited:
    """What an edit did: the job as it is now, and each change in words
    ("priority 0 -> 5"); no words when the edit changed nothing."""

    job: Job
    changes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"job": self.job.to_dict(), "changes": self.changes, "changed": bool(self.changes)}


def changes_of(changes: Any) -> dict[str, Any]:
    """The edit request's fields, validated (the checks `sloth add` runs):
    command (argv) with shell, lane, priority, label ("" clears it),
    not_before (absolute time), after / after_any (ids: the new
    prerequisites, replacing the old). Raises BadRequest."""
    if not isinstance(changes, Mapping):
        raise BadRequest("changes must be an object of the fields to change")
    unknown = set(changes) - EDITABLE
    if unknown:
        raise BadRequest(f"cannot edit {', '.join(sorted(unknown))}",
                         hint=f"Editable: {', '.join(sorted(EDITABLE))}.")
    if not changes:
        raise BadRequest("nothing to change",
                         hint="Give --command, --lane, --priority, --label, --delay/--at, --after or an option "
                              "of `sloth add` (--timeout, --when, ...).")
    out: dict[str, Any] = {}
    if "command" in changes:
        command_json(changes["command"])
        out["command"] = list(changes["command"])
    if "shell" in changes:
        if not isinstance(changes["shell"], bool):
            raise FieldError("shell", "must be true or false")
        if "command" not in changes:
            raise BadRequest("shell goes with command: it says how the new command runs")
        out["shell"] = changes["shell"]
    if "lane" in changes:
        out["lane"] = text(changes["lane"], "lane", None, nonempty=True)
    if "priority" in changes:
        if changes["priority"] is None:
            raise FieldError("priority", "must be an integer, got None")
        out["priority"] = integer(changes["priority"], "priority", 0)
    if "label" in changes:
        out["label"] = text(changes["label"], "label", None) or None
    if "not_before" in changes:
        out["not_before"] = number(changes["not_before"], "not_before", 0.0, lo=0, hi=MAX_TIME)
    out.update({k: changes[k] for k in SETTINGS & set(changes)})  # checked with the job's own (settings_spec)
    if "after" in changes or "after_any" in changes:
        a, b = ids(changes.get("after"), "after"), ids(changes.get("after_any"), "after_any")
        both = set(a) & set(b)
        if both:
            raise BadRequest(f"job {min(both)} is in both after and after_any; name it in one")
        if len(a) + len(b) > 2 * MAX_PREREQS:
            raise FieldError("after", f"a job may wait for at most {MAX_PREREQS} jobs through each of after, after_any")
        out["wants"] = [(i, NEED_DONE) for i in a] + [(i, NEED_END) for i in b]
    return out


def settings_of(job: Job) -> dict[str, Any]:
    """A job's settings as a job object names them (what JobSpec.parse reads;
    limits without the mechanisms the daemon chose for them)."""
    gate = job.gate or {}
    return {"max_attempts": job.max_attempts, "lease_s": job.lease_s, "timeout_s": job.timeout_s, "cwd": job.cwd,
            "retry_exit": job.retry_exit, "no_retry_exit": job.no_retry_exit, "place": job.place or ANYWHERE,
            "keep_awake": job.keep_awake, "limits": _own_limits(job.limits), "rules": job.rules,
            **{k: gate.get(k) for k in GATE_KEYS}}


def merged_settings(job: Job, changes: Mapping[str, Any]) -> dict[str, Any]:
    """The job's settings with the edit's over them: each limit on its own
    (``--mem`` keeps ``--nice``), unless they come as the daemon made them
    (with ``via``: holding.held_here's, whole); each rule on its own
    (``--stall`` keeps ``--fail-on``); every other one whole."""
    out = settings_of(job)
    for k in SETTINGS & set(changes):
        v = changes[k]
        if k == "limits" and isinstance(v, Mapping) and out["limits"] and "via" not in v:
            v = {**out["limits"], **v}
        if k == "rules" and isinstance(v, Mapping) and out["rules"]:
            v = merged_rules(out["rules"], v)
        out[k] = v
    return out


def settings_spec(job: Job, changes: Mapping[str, Any], lane: str | None = None) -> JobSpec:
    """The job as it would be with ``changes``, checked as `sloth add`
    checks a new job (JobSpec.parse: bounds, conditions, needs, limits).
    Raises BadRequest (FieldError) naming the setting."""
    new = merged_settings(job, changes)
    new["limits"] = _own_limits(new["limits"]) if isinstance(new["limits"], Mapping) else new["limits"]
    obj = {"command": job.command, "lane": lane or job.lane, **{k: v for k, v in new.items() if v is not None}}
    return JobSpec.parse(obj, Defaults(place=""))


def settings_columns(job: Job, changes: Mapping[str, Any]) -> dict[str, Any]:
    """The stored values of the settings ``changes`` names (cwd as text: the
    engine stores it its way); limits as the daemon made them (with
    ``via``) are stored whole."""
    spec = settings_spec(job, changes)
    given = changes.get("limits")
    final_limits = given if isinstance(given, Mapping) and "via" in given else None
    cols = {"max_attempts": spec.max_attempts, "lease_s": spec.lease_s, "timeout_s": spec.timeout_s,
            "cwd": spec.cwd, "retry_exit": spec.retry_exit_json, "no_retry_exit": spec.no_retry_exit_json,
            "place": spec.place, "keep_awake": spec.keep_awake,
            "limits": _dumps(final_limits) if final_limits is not None else spec.limits_json, "gate": spec.gate_json,
            "rules": spec.rules_json}
    named = {("gate" if k in GATE_KEYS else k) for k in SETTINGS & set(changes)}
    return {k: v for k, v in cols.items() if k in named}


def _own_limits(limits: Mapping[str, Any] | None) -> dict[str, Any] | None:
    return {k: v for k, v in limits.items() if k in LIMIT_NAMES} or None if limits else None


def _dumps(v: Any) -> str | None:
    import json

    return json.dumps(v, sort_keys=True) if v else None


def setting_words(job: Job, changes: Mapping[str, Any]) -> list[str]:
    """"timeout (none) -> 2h", ...: each setting the edit changes, as a person gave it."""
    old, new = settings_of(job), merged_settings(job, changes)
    new["limits"] = _own_limits(new["limits"]) if isinstance(new["limits"], Mapping) else new["limits"]
    out = [f"{_OPTION.get(k, k)} {_setting(old[k])} -> {_setting(new[k])}"
           for k in sorted(SETTINGS & set(changes) - {"rules"}) if _setting(old[k]) != _setting(new[k])]
    if "rules" in changes:  # each rule as its option: "stall 10m -> 20m"
        was, now = old["rules"] or {}, new["rules"] or {}
        out += [f"{_RULE_OPTION.get(r, r)} {_setting(was.get(r))} -> {_setting(now.get(r))}"
                for r in sorted(set(was) | set(now)) if _setting(was.get(r)) != _setting(now.get(r))]
    return out


_OPTION = {"max_attempts": "max-attempts", "lease_s": "lease", "timeout_s": "timeout", "retry_exit": "retry-exit",
           "no_retry_exit": "no-retry-exit", "keep_awake": "keep-awake", "on_lost": "on-lost"}
_RULE_OPTION = {"stall_s": "stall", "fail_on": "fail-on", "retry_on": "retry-on", "no_retry_on": "no-retry-on",
                "backoff_s": "backoff", "backoff_cap_s": "backoff cap"}


def _setting(v: Any) -> str:
    if v is None or v == [] or v == {}:
        return "(none)"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        from sloth_daemon.durations import format_duration

        return format_duration(v)
    if isinstance(v, (list, tuple)):
        return ",".join(map(str, v))
    if isinstance(v, Mapping):
        return ",".join(f"{k}={x}" for k, x in sorted(v.items()))
    return str(v)


def not_editable(job_id: int, state: str, verb: str = "edited") -> IllegalTransition:
    """A job that has started (or ended) is not edited, bumped or held."""
    hint = (f"It runs already: `sloth kill {job_id}` stops it; `sloth restart {job_id}` then queues it again "
            "as a new job (change that one)." if state == JobState.RUNNING.value else
            f"`sloth restart {job_id}` queues it again as a new job, which you can change.")
    return IllegalTransition(f"job {job_id} is {state}; only queued, blocked or held jobs can be {verb}", hint=hint)


EXPECTABLE = frozenset({"state", "attempts", "updated_at", "command", "shell", "lane", "priority", "label",
                        "not_before", "after", "after_any"})


def check_expect(job: Job, expect: Any) -> None:
    """Compare-and-set: ``expect`` holds fields of the job as the client read
    it (its JSON: state, attempts, updated_at, the editable fields); if any
    differs now, the job was written since (claimed, retried, edited) and
    the edit is refused. Raises BadRequest for a malformed ``expect``."""
    if expect is None:
        return
    if not isinstance(expect, Mapping) or not set(expect) <= EXPECTABLE:
        raise BadRequest(f"expect must be an object of some of: {', '.join(sorted(EXPECTABLE))}")
    now = job.to_dict()
    if any(now[k] != v for k, v in expect.items()):
        raise stale(job.id, job.state.value)


def stale(job_id: int, state: str) -> IllegalTransition:
    """An edit of a job that changed since the client read it (compare-and-set)."""
    return IllegalTransition(f"job {job_id} changed while it was being edited (it is {state} now); nothing was edited",
                             hint=f"Look at it (`sloth show {job_id}`) and edit it again.")


def cycle_error(job_id: int, other: int) -> BadRequest:
    return BadRequest(f"job {job_id} cannot wait for job {other}: job {other} waits for job {job_id}"
                      " (directly or down its chain), so neither would ever run")


@dataclass
class Plan:
    """The new values of an edited row (all of them, changed or not), the
    words of what changed, and whether its prerequisites are replaced."""

    values: dict[str, Any]
    words: list[str]
    wants: list[tuple[int, str]] | None


def plan_edit(row: Any, old_wants: list[tuple[int, str]], changes: dict[str, Any], now: float,
              job: Job | None = None) -> Plan:
    """The row's new values under ``changes`` (changes_of's) and the words of
    what differs; its state is decided by the engine once it has read the
    new prerequisites' states (see new_state). ``job``: the row as a Job
    (needed when the edit changes settings)."""
    import json

    old_cmd = json.loads(row["command"])
    v = {"command": old_cmd, "shell": bool(row["shell"]), "lane": row["lane"], "priority": row["priority"],
         "label": row["label"], "not_before": row["not_before"],
         **{k: row[k] for k in SETTING_COLUMNS}, "wait_reason": row["wait_reason"]}
    words: list[str] = []
    if job is not None and not SETTINGS.isdisjoint(changes):
        words += setting_words(job, changes)
        if words:
            cols = settings_columns(job, changes)
            v.update(cols)
            if "gate" in cols:
                v["wait_reason"] = None  # said again for the new gate by the next claim's look
    elif not SETTINGS.isdisjoint(changes):
        raise BadRequest("an edit of a job's settings needs the job (plan_edit's job)")
    shell = changes.get("shell", v["shell"])
    if "command" in changes and (changes["command"] != old_cmd or shell != v["shell"]):
        words.append(f"command {_cmd(old_cmd, v['shell'])} -> {_cmd(changes['command'], shell)}")
        v["command"], v["shell"] = changes["command"], shell
    for name in ("lane", "priority", "label"):
        if name in changes and changes[name] != v[name]:
            words.append(f"{name} {_show(v[name])} -> {_show(changes[name])}")
            v[name] = changes[name]
    if "not_before" in changes:
        new = max(changes["not_before"], 0.0)
        if _when(new, now) != _when(v["not_before"], now):
            words.append(f"start {_when(v['not_before'], now)} -> {_when(new, now)}")
            v["not_before"] = new
    wants = changes.get("wants")
    behind = row["key_behind"]  # the key's turn (--on-dup append/replace): kept whatever the edit names
    if wants is not None and behind is not None and not any(pid == behind for pid, _ in wants):
        wants = [*wants, (behind, NEED_END)]
    if wants is not None and sorted(wants) != sorted(old_wants):
        words.append(f"after {_wants(old_wants)} -> {_wants(wants)}")
    else:
        wants = None
    return Plan(v, words, wants)


def new_state(row_state: str, wants: list[tuple[int, str]], state_of: Callable[[int], str],
              job_id: int) -> str:
    """The state of an edited job whose prerequisites are now ``wants``:
    held stays held; else blocked while one is unfinished, queued when none
    is. Refused (nothing changed) when one it needs done already failed or
    was cancelled: the edit would cancel it. ``state_of`` raises JobNotFound."""
    waiting = False
    for pid, need in wants:
        if pid == job_id:
            raise BadRequest(f"job {job_id} cannot wait for itself")
        s = state_of(pid)
        if need == NEED_DONE and s in FINISHED_STATES and s != "done":
            raise IllegalTransition(f"job {pid} {s}; job {job_id} --after it would never run, so nothing was edited",
                                    hint=f"Use --after-any {pid} to run it whatever job {pid}'s result.")
        waiting = waiting or s not in FINISHED_STATES
    if row_state == JobState.HELD.value:
        return row_state
    return JobState.BLOCKED.value if waiting else JobState.QUEUED.value


def bump_priority(own: int, top: int | None) -> int:
    """The priority that puts a job before the other waiting jobs of its
    lane (their highest: ``top``, None if none): one above them, or its own
    if it is above them already."""
    if top is None or own > top:
        return own
    if top >= INT64_MAX:
        raise IllegalTransition("the lane's top priority is the largest there is; nothing can go before it",
                                hint="Lower that job's priority with `sloth edit ID --priority N`.")
    return top + 1


def bump_words(lane: str, old: int, new: int, delayed: bool) -> str:
    out = f"bumped to the front of lane {lane}"
    out += f": priority {old} -> {new}" if new != old else " (it was first already)"
    return out + ("; no longer delayed: due now" if delayed else "")


def held_words() -> str:
    return "held by user: not claimed until `sloth release`"


def never_words(why: str) -> str:
    return f"held: {why}; `sloth release` once it can (or cancel it)"


def released_words(state: str, waits: int | None) -> str:
    return "released by user; " + ("queued" if state == JobState.QUEUED.value else f"waits for job {waits}")


def waiting(state: str) -> bool:
    return state in WAITING_STATES


def _cmd(argv: list[str], shell: bool) -> str:
    from sloth_daemon.text import shell_command

    shown = argv[2] if shell and len(argv) == 3 else shell_command(*argv)
    return repr(shown if len(shown) <= 60 else shown[:57] + "...")


def _show(v: Any) -> str:
    return "(none)" if v is None else str(v)


def _when(t: float, now: float) -> str:
    if t <= now:
        return "now"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))


def _wants(wants: list[tuple[int, str]]) -> str:
    if not wants:
        return "(nothing)"
    return ",".join(f"{i}" if n == NEED_DONE else f"{i}(any)" for i, n in sorted(wants))


def describe(words: list[str]) -> str:
    """The ``edited`` event's message."""
    return "edited: " + ", ".join(words)

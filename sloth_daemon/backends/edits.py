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

from sloth_daemon.checks import INT64_MAX, MAX_PREREQS, command_json, ids, integer, number, text
from sloth_daemon.durations import MAX_TIME
from sloth_daemon.errors import BadRequest, FieldError, IllegalTransition
from sloth_daemon.models import FINISHED_STATES, WAITING_STATES, Job, JobState

__all__ = ["EDITABLE", "EXPECTABLE", "Edited", "Plan", "bump_priority", "changes_of", "check_expect", "cycle_error",
           "describe",
           "not_editable", "plan_edit", "stale"]

EDITABLE = frozenset({"command", "shell", "lane", "priority", "label", "not_before", "after", "after_any"})
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
                         hint="Give --command, --lane, --priority, --label, --delay/--at or --after.")
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
    if "after" in changes or "after_any" in changes:
        a, b = ids(changes.get("after"), "after"), ids(changes.get("after_any"), "after_any")
        both = set(a) & set(b)
        if both:
            raise BadRequest(f"job {min(both)} is in both after and after_any; name it in one")
        if len(a) + len(b) > 2 * MAX_PREREQS:
            raise FieldError("after", f"a job may wait for at most {MAX_PREREQS} jobs through each of after, after_any")
        out["wants"] = [(i, NEED_DONE) for i in a] + [(i, NEED_END) for i in b]
    return out


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


def plan_edit(row: Any, old_wants: list[tuple[int, str]], changes: dict[str, Any], now: float) -> Plan:
    """The row's new values under ``changes`` (changes_of's) and the words of
    what differs; its state is decided by the engine once it has read the
    new prerequisites' states (see new_state)."""
    import json

    old_cmd = json.loads(row["command"])
    v = {"command": old_cmd, "shell": bool(row["shell"]), "lane": row["lane"], "priority": row["priority"],
         "label": row["label"], "not_before": row["not_before"]}
    words: list[str] = []
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

"""What both queue engines decide alike; no SQL here.

backends/sqlite and backends/postgres each speak their own SQL, and neither
imports the other: what they decide the same way is written once, here --
the defaults of a queue, one job added as a batch of one, a batch validated
whole and its ids kept as runs, how a new job that waits for others starts,
who holds a lease, the backoff of a failed try and the tries a crash or a
fence gives back, the states a request may name and why it refuses a job,
how the counts of a read are told, how a listing is cut into sections and
pages, and the words of the history. Plain values and functions: no state,
no classes; each engine passes in what it read with its own SQL.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Callable, Collection, Iterable, Mapping, Sequence

from sloth_daemon.checks import DEFAULT_LEASE_S, DEFAULT_MAX_ATTEMPTS
from sloth_daemon.errors import BadRequest, BatchNotFound, IllegalTransition, LeaseLost
from sloth_daemon.models import FINISHED_STATES, STATE_NAMES, Batch, JobState, Listing, state_name
from sloth_daemon.spec import Defaults, EnvCache, JobSpec
from sloth_daemon.text import whole_number

if TYPE_CHECKING:
    from sloth_daemon.models import Job

__all__ = [
    "ACTIVE_BATCHES", "BATCH_RECORD_S", "CHUNK", "DEFAULT_BACKOFF_CAP_S", "DEFAULT_LEASE_S", "DEFAULT_MAX_ATTEMPTS",
    "MACHINE_EVENTS_KEPT", "MAX_CRASH_REFUNDS", "NEED_DONE", "NEED_END", "WORKER_PREFIX",
    "JobRow", "abandon_note", "backoff_s", "ended_text", "enqueue_one", "give_up_message", "holds", "tokens_text",
    "job_backoff_s", "with_rule",
    "host_prefix", "id_runs", "initial_state", "job_states", "key_taken", "lane_counts", "listed_states",
    "listing", "may_refund", "never_ran", "not_cancellable", "not_held", "not_restartable", "not_retriable", "not_run",
    "KEY_EVENT", "REPLACED", "KeyPlan", "batch_ref", "batch_summary", "key_plan", "new_token",
    "pages", "parse_specs", "prereqs_json", "refund_note", "retried_why", "retry_each", "retry_message", "retry_wanted",
    "RESTART_COPIES", "RESTART_FRESH", "restart_columns",
    "run_ids", "scan_head", "sha256_hex", "sections", "state_counts", "waits_for", "wanted_states",
]

def sha256_hex(text: str) -> str:
    """SHA-256 of ``text`` (UTF-8), hex: a stored environment's key
    (``envs.hash``), a schedule's jitter. CPython's own SHA-256 where it has
    one, not hashlib's OpenSSL: loading libcrypto for this alone cost the
    daemon ~3.5 MB resident (docs/idle.md)."""
    try:
        from _sha256 import sha256  # type: ignore[import-not-found]  # 3.11
    except ImportError:
        try:
            from _sha2 import sha256  # type: ignore[import-not-found]  # 3.12+
        except ImportError:  # a build without them: hashlib's
            from hashlib import sha256
    return str(sha256(text.encode("utf-8", "surrogatepass")).hexdigest())


DEFAULT_BACKOFF_CAP_S = 300.0  # the longest wait before a failed try is due again
CHUNK = 500  # jobs per read of a scan (and per event on the socket)
BATCH_RECORD_S = 86400.0  # how long a batch record is kept: long enough to ask after any crash and restart
WORKER_PREFIX = "sloth-daemon:"  # runs.worker_name: sloth-daemon:HOST:PID:INSTANCE
# A run cut short by a crash of sloth itself (the keeper gone too: a reboot,
# a power cut) does not count against max_attempts -- but only this many
# times between user retries, so a job that brings sloth down cannot loop.
MAX_CRASH_REFUNDS = 3
NEED_DONE, NEED_END = "done", "end"  # deps.need: --after, --after-any
# The machine's events (contract.Meta.machine_up, machine_slept) kept per
# host whatever the retention: a laptop that sleeps 50 times a day keeps 20 days.
MACHINE_EVENTS_KEPT = 1000
# A row of the jobs table, read by column name: an sqlite3.Row or psycopg's dict row.
JobRow = Any


# ---------------------------------------------------------------- adding jobs
def enqueue_one(
    enqueue_many: Callable[[list[dict[str, Any]]], list[int]],
    command: Sequence[str],
    *,
    max_attempts: int | None = None,
    lease_s: float | None = None,
    not_before: float | None = None,
    priority: int = 0,
    lane: str = "default",
    key: str | None = None,
    cwd: str | None = None,
    env: dict[str, str] | None = None,
    timeout_s: float | None = None,
    label: str | None = None,
    shell: bool = False,
) -> int:
    """Add a job in state ``queued`` and return its id: a batch of one
    through ``enqueue_many`` (each queue's ``enqueue`` is this, bound to its own).

    With ``key``: if an unfinished (blocked, queued or running) job has the
    same key, return its id and add nothing. Raises BadRequest for invalid fields.
    """
    return enqueue_many([dict(
        command=command, max_attempts=max_attempts, lease_s=lease_s, not_before=not_before,
        priority=priority, lane=lane, key=key, cwd=cwd, env=env, timeout_s=timeout_s,
        label=label, shell=shell)])[0]


def parse_specs(specs: Iterable[Mapping[str, Any] | JobSpec], max_attempts: int, lease_s: float) -> list[JobSpec]:
    """A batch validated whole before anything is written: each spec (a job
    object, or a JobSpec already validated) with the queue's defaults for the
    fields it leaves out. Raises BadRequest."""
    cache: EnvCache = {}
    defaults = Defaults(max_attempts, lease_s)
    rows = [s if isinstance(s, JobSpec) else JobSpec.parse(s, defaults, cache) for s in specs]
    if rows and rows[0].after_previous:
        raise BadRequest("after_previous on the first job of a batch: it has no previous job")
    return rows


def id_runs(ids: list[int]) -> list[list[int]]:
    """[3, 4, 5, 9] -> [[3, 5], [9, 9]]: a batch's ids are mostly consecutive."""
    out: list[list[int]] = []
    for i in ids:
        if out and i == out[-1][1] + 1:
            out[-1][1] = i
        else:
            out.append([i, i])
    return out


def run_ids(runs: Iterable[Sequence[int]]) -> list[int]:
    """The ids again from their runs (id_runs undone)."""
    return [i for a, b in runs for i in range(a, b + 1)]


# ---------------------------------------------------------------- batches with a handle (issue 33)
ACTIVE_BATCHES = 20  # the newest batches with unfinished jobs that `status` lists


def new_token() -> str:
    """A batch record's token when no client gave one (a library's enqueue_many with a handle)."""
    import os

    return os.urandom(8).hex()


MAX_CLAIM_MANY = 10_000


def claim_count(n: object) -> int:
    """claim_many's ``n``: a whole number 0..MAX_CLAIM_MANY, else BadRequest."""
    if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= MAX_CLAIM_MANY:
        raise BadRequest(f"n must be a whole number from 0 to {MAX_CLAIM_MANY}, got {n!r}")
    return n


def batch_ref(ref: str) -> tuple[bool, int | str]:
    """How `--batch REF` names a batch: all digits, its id; else a name, the
    newest batch of that name. Returns (by id, id or name)."""
    if not isinstance(ref, str) or not ref.strip():
        raise BadRequest("batch must be a batch id or name")
    if not (ref.isascii() and ref.isdigit()):
        return False, ref
    n = whole_number(ref)
    if n is None:  # more digits than any id has
        raise BatchNotFound(ref)
    return True, n


def batch_summary(bid: int, name: str | None, at: float, counts: Iterable[tuple[str, int]],
                  same_name: int = 0) -> dict[str, Any]:
    """One batch as the ops answer it: id, name, at, total, counts by state
    (only the states it has), and ``same_name``: how many batches have its name."""
    n = {state: int(k) for state, k in counts if k}
    return {"id": bid, "name": name, "at": at, "total": sum(n.values()), "counts": n,
            **({"same_name": same_name} if same_name > 1 else {})}


# ---------------------------------------------------------------- dependencies
def waits_for(spec: JobSpec, previous: int | None) -> list[tuple[int, str]]:
    """(id, need) of each job ``spec`` waits for; ``previous``: the id of
    the job before it in its batch (what ``after_previous`` names)."""
    wanted = [(i, NEED_DONE) for i in spec.after] + [(i, NEED_END) for i in spec.after_any]
    if spec.after_previous and previous is not None:
        wanted.append((previous, NEED_DONE if spec.after_previous == "after" else NEED_END))
    return wanted


def prereqs_json(wanted: Iterable[tuple[int, str]]) -> str | None:
    """The ``jobs.prereqs`` text of a job that waits for ``wanted`` (id,
    need): what it was added after, for display."""
    wanted = list(wanted)
    a, b = [i for i, n in wanted if n == NEED_DONE], [i for i, n in wanted if n == NEED_END]
    if not a and not b:
        return None
    return json.dumps({"after": a, "after_any": b})


def initial_state(wanted: list[tuple[int, str]], state_of: Callable[[int], str]) -> tuple[str, str]:
    """(state, why) for a new job that waits for ``wanted`` (id, need):
    ``cancelled`` if one it needs done already ended otherwise, ``blocked``
    while any is unfinished, else ``queued``. ``state_of``: a prerequisite's
    state (asked in order, and no further once the answer is ``cancelled``;
    it raises JobNotFound)."""
    blocked = None
    for pid, need in wanted:
        state = state_of(pid)
        if need == NEED_DONE and state in FINISHED_STATES and state != "done":
            return "cancelled", not_run(pid, state)
        if state not in FINISHED_STATES and blocked is None:
            blocked = pid
    if blocked is not None:
        return "blocked", f"waits for job {blocked}"
    return "queued", ""


HELD_AT_ADD = "added held: not claimed until `sloth release`"  # the event of a job added --hold


def not_run(pid: int, state: str) -> str:
    """Why a job that needed job ``pid`` done is cancelled."""
    return f"not run: job {pid}, which it runs after, {ended_text(state)}"


def ended_text(state: str) -> str:
    """How a prerequisite's end reads in a history: "is done", "failed"..."""
    return {"done": "is done", "failed": "failed", "cancelled": "was cancelled"}.get(state, f"is {state}")


# ---------------------------------------------------------------- leases
def holds(row: JobRow, token: object) -> bool:
    """Whether ``token`` holds the lease of the job in ``row``."""
    return row["state"] == JobState.RUNNING.value and row["token"] is not None and row["token"] == token


def not_held(row: JobRow, token: object) -> Exception:
    """Why ``token`` does not hold the job's lease: never claimed at all
    (IllegalTransition), or the lease moved on (LeaseLost)."""
    job_id = row["id"]
    if row["state"] == JobState.QUEUED.value and row["token"] is None and row["attempts"] == 0:
        return IllegalTransition(f"job {job_id} is queued, not claimed by anyone")
    return LeaseLost(f"job {job_id}: token {str(token)[:16]!r} no longer holds the lease "
                     f"(job is {row['state']}, attempt {row['attempts']})")


def backoff_s(tries: int, cap_s: float) -> float:
    """The wait before a failed try is due again: doubles with each try, up to ``cap_s``."""
    return min(2.0 ** min(tries, 1000), cap_s)  # 2.0**1024 overflows


def job_backoff_s(row: JobRow, cap_s: float) -> float:
    """backoff_s for the job in ``row``, by its own ``--backoff BASE..CAP``
    where it has one (rules.backoff_s, rules.backoff_cap_s: the first retry
    waits BASE, each next twice as long, never past CAP), else the queue's:
    2 s doubling up to ``cap_s``. A BASE alone caps at ``cap_s`` or at BASE
    if it is longer: it is the least wait asked (`--backoff 10m` under the
    default 5 min cap waits 10 min each time, as `show` says, not 5)."""
    own = json.loads(row["rules"]) if row["rules"] else {}
    base = own.get("backoff_s")
    cap = own.get("backoff_cap_s", cap_s if base is None else max(cap_s, base))
    if base is None:
        return backoff_s(row["tries"], cap)
    return min(base * 2.0 ** min(max(row["tries"] - 1, 0), 1000), cap)  # inf past a float's range: the cap


def retry_message(message: str, row: JobRow, delay_s: float) -> str:
    """The history's words for a failed try that will be retried."""
    return _join(message, f"retry {row['tries'] + 1}/{row['max_attempts']} in {delay_s:g}s")


def with_rule(message: str, rule: str) -> str:
    """A failed try's history: how it ended, then the retry rule that decided (outcomes.retry_verdict)."""
    return _join(message, rule) if rule else message


def give_up_message(message: str, retry: bool) -> str:
    """The history's words for a failed try that ends the job."""
    if not retry and "not retried" in message:  # the rule that decided says so already (outcomes.retry_verdict)
        return message
    return _join(message, "no attempts left" if retry else "not retried")


def may_refund(row: JobRow) -> bool:
    """Whether a run cut short by sloth (a crash, a fence) may give its try
    back: MAX_CRASH_REFUNDS times between user retries, one count for both."""
    return bool(row["refunds"] < MAX_CRASH_REFUNDS and row["tries"] > 0)


def refund_note(row: JobRow, given: bool) -> str:
    """What the history says of a fence's try (given back or counted)."""
    if given:
        return f"; not counted as a try ({row['refunds'] + 1} of {MAX_CRASH_REFUNDS} forgiven)"
    return f"; counted as a try ({MAX_CRASH_REFUNDS} crashes or fences already forgiven)"


def abandon_note(refund: bool, given: bool, row: JobRow) -> str:
    """What the history says of an abandoned lease's try, when a refund was asked."""
    if not refund:
        return ""
    if given:
        return f"; not counted as a try ({row['refunds'] + 1} of {MAX_CRASH_REFUNDS} forgiven)"
    return f"; counted as a try ({MAX_CRASH_REFUNDS} crashes already forgiven)"


def _join(a: str, b: str) -> str:
    return f"{a}; {b}" if a else b


# ---------------------------------------------------------------- requests
def wanted_states(states: Sequence[str] | None, allowed: Sequence[str], action: str) -> list[str] | None:
    """Validated state names (``claimed`` read as ``running``) among
    ``allowed`` for ``action``; None when none are named."""
    if states is None:
        return None
    out = []
    for s in states:
        try:
            name = state_name(s)
        except ValueError:
            raise BadRequest(f"unknown state {s!r}", hint=f"States: {', '.join(allowed)}.") from None
        if name not in allowed:
            raise BadRequest(f"cannot {action} {name} jobs", hint=f"States to {action}: {', '.join(allowed)}.")
        out.append(name)
    return out


def never_ran(job: "Job") -> IllegalTransition:
    """Why a job that has no attempt has no log: not started yet, held (a
    follow would wait for a release), or ended (cancelled, or failed as a
    prerequisite did) before it ever started. A wrong state: exit 6."""
    if job.state.finished:
        return IllegalTransition(f"job {job.id} was {job.state.value} before it started, so it has no log",
                                 hint=f"`sloth show {job.id}` says why; `sloth restart {job.id}` queues it again.")
    if job.state is JobState.HELD:
        return IllegalTransition(f"job {job.id} is held: it has not started, so it has no log",
                                 hint=f"`sloth release {job.id}` lets it run.")
    return IllegalTransition(f"job {job.id} has not started yet, so it has no log",
                             hint=f"Follow it with `sloth logs -f {job.id}` to see its output once it starts.")


def not_cancellable(job_id: int, state: str) -> IllegalTransition:
    return IllegalTransition(f"job {job_id} is {state}; only blocked, queued, held or running jobs can be cancelled")


def not_retriable(job_id: int, state: str) -> IllegalTransition:
    """Its message says what to do instead (a batch's skipped jobs carry only
    the message): a done job is run again by `sloth restart ID`."""
    instead = (f"`sloth restart {job_id}` runs it again as a new job" if state == JobState.DONE.value else
               "it will run anyway")
    return IllegalTransition(f"job {job_id} is {state}; only failed or cancelled jobs can be retried ({instead})",
                             hint=f"`sloth restart {job_id}` queues a finished job again as a new job.")


def key_taken(other: object, key: str) -> IllegalTransition:
    """A retry refused: job ``other``, still active, has the same key."""
    return IllegalTransition(f"job {other} with the same key {key!r} is still active",
                             hint=f"Wait for job {other} or cancel it first.")


class KeyPlan:
    """What an add with a key does when unfinished jobs have it (issue 33,
    `--on-dup`): ``kept`` (keep: that job's id instead of a new one),
    ``cancel`` (replace: the waiting ones, cancelled in the same
    transaction), ``behind`` (the job the new one is queued after, with an
    after-any edge: append's last one; replace's running one, which the
    daemon ends first) and ``note`` (the new job's ``key`` event, what the
    client says on stderr)."""

    __slots__ = ("kept", "cancel", "behind", "note")

    def __init__(self, kept: int | None = None, cancel: Sequence[int] = (), behind: int | None = None,
                 note: str = "") -> None:
        self.kept, self.cancel, self.behind, self.note = kept, list(cancel), behind, note


KEY_EVENT = "key"  # the new job's event that says what its key's policy did
REPLACED = "replaced: a newer job with key {key!r} was added (--on-dup replace)"


def key_plan(key: str, on_dup: str, active: Sequence[tuple[int, str]]) -> KeyPlan:
    """The plan for a new job with ``key`` given the unfinished jobs that
    have it, ``active`` ((id, state), oldest first; [] for none). Raises
    IllegalTransition for ``fail`` (nothing is queued). A running job is
    never cancelled here: its tree must end first (the daemon's part), and
    until then the new job waits behind it, so two never run side by side."""
    if not active:
        return KeyPlan()
    head, tail = active[0], active[-1]
    if on_dup == "keep":
        return KeyPlan(kept=head[0])
    if on_dup == "fail":
        raise IllegalTransition(f"job {head[0]} has key {key!r} and is {head[1]} (--on-dup fail)",
                                hint=f"`sloth show {head[0]}`; --on-dup keep, replace or append decide otherwise.")
    if on_dup == "append":
        return KeyPlan(behind=tail[0], note=f"added after job {tail[0]} ({tail[1]}), which has key {key!r}: "
                                            "runs once it has ended (--on-dup append)")
    running = [i for i, st in active if st == "running"]
    waiting = [i for i, st in active if st != "running"]
    said = [f"cancelled job{'s' if len(waiting) > 1 else ''} {', '.join(map(str, waiting))}"] if waiting else []
    if running:
        said.append(f"job {running[-1]} runs: it is ended first, and this one runs once it has")
    return KeyPlan(cancel=waiting, behind=running[-1] if running else None,
                   note=f"replaces the job(s) with key {key!r}: {'; '.join(said)} (--on-dup replace)")


def retried_why(waits: int | None) -> str:
    """The ``retried`` event's words: queued, or blocked on job ``waits``."""
    return "back to queued by user" if waits is None else f"retried by user; waits for job {waits}"


def retry_wanted(ids: Sequence[int] | None, states: Sequence[str] | None) -> list[str] | None:
    """The states retry_many takes: those named (failed or cancelled), by
    default (neither ids nor states) the failed jobs."""
    wanted = wanted_states(states, (JobState.FAILED.value, JobState.CANCELLED.value), "retry")
    return [JobState.FAILED.value] if ids is None and states is None else wanted


def retry_each(rows: Iterable[JobRow], busy: Collection[int], retry: Callable[[JobRow], Job]) -> Batch:
    """retry_many's answer: each of ``rows`` retried by ``retry``, or
    skipped with why (``busy``: still being stopped; or refused)."""
    out = Batch([])
    for row in rows:
        if row["id"] in busy:
            out.skipped.append((row["id"], f"job {row['id']} is still being stopped"))
            continue
        try:
            out.jobs.append(retry(row))
        except IllegalTransition as e:
            out.skipped.append((row["id"], e.message))
    return out


def not_restartable(job_id: int, state: str) -> str:
    return f"job {job_id} is {state}; only finished jobs can be restarted"


# A restart is the job again: it copies each column that says what the job is
# (an array member's values: its $SLOTH_ARRAY_*; where it may run; who is
# told; its watchdogs and retry rules) and starts afresh each one that says
# how a run went or where it was queued (a restarted job is outside its
# batch, docs/batches.md; it waits behind no one). Every column of ``jobs``
# is in one of the two (tests/unit/backends/test_job_copies.py), so a new
# column is decided here once, for both engines.
RESTART_COPIES = ("command", "lane", "priority", "max_attempts", "lease_s", "timeout_s", "key", "cwd", "env_id",
                  "label", "shell", "retry_exit", "no_retry_exit", "place", "keep_awake", "limits", "gate", "tell",
                  "rules", "member")
RESTART_FRESH = ("id", "state", "attempts", "not_before", "lease_until", "token", "worker", "message", "created_at",
                 "updated_at", "runner", "exit_code", "finished_at", "tries", "refunds", "prereqs", "paused_run",
                 "tokens", "wait_reason", "progress", "batch_id", "batch_name", "key_behind",
                 "origin", "waited_on")  # PostgreSQL's own: the daemon that made it (set by default); waited on


def restart_columns(*own: str) -> str:
    """The copied columns as SQL text (``own``: an engine's columns of its own, first)."""
    return ", ".join((*own, *RESTART_COPIES))


# ---------------------------------------------------------------- reads
def job_states(state: str | JobState | None, states: Sequence[str] | None) -> list[str]:
    """The states ``jobs()`` filters on (``states``, else ``state``, else
    none: all). Raises ValueError for an unknown state."""
    wanted = list(states or ([] if state is None else [state]))
    for s in wanted:
        JobState(s)  # raises ValueError for an unknown state
    return [JobState(s).value for s in wanted]


def state_counts(rows: Iterable[tuple[str, int]]) -> dict[str, int]:
    """Jobs per state from (state, n) rows, every state named (0 for none)."""
    out = dict.fromkeys(STATE_NAMES, 0)
    for state, n in rows:
        out[state] = n
    return out


def tokens_text(tokens: Mapping[str, Sequence[str]]) -> str:
    """``{"gpu": ["1"], "licence": ["0", "2"]}`` -> ``gpu 1, licence 0,2`` (a claim's event);
    a share of a token (``"1@500"``, daemon/resources.py) -> ``gpu 1 (0.5 share)``."""
    def one(t: str) -> str:
        tok, sep, milli = t.rpartition("@")
        return f"{tok} ({int(milli) / 1000:g} share)" if sep and milli.isdigit() else t

    return ", ".join(f"{name} {','.join(map(one, toks))}" for name, toks in sorted(tokens.items()))


def lane_counts(rows: Iterable[tuple[str, str, int]]) -> dict[str, dict[str, int]]:
    """lane -> {blocked, queued, running: n} from (lane, state, n) rows."""
    out: dict[str, dict[str, int]] = {}
    for lane, state, n in rows:
        counts = out.setdefault(lane, {"blocked": 0, "queued": 0, "held": 0, "running": 0})
        counts[state] += n  # queued comes in two parts: without and with a gate
    return out


# ---------------------------------------------------------------- listings
def listed_states(states: Sequence[str] | None) -> set[str]:
    """The states a listing shows: those named (``claimed`` read as
    ``running``), or all. Raises ValueError for an unknown state."""
    return set(STATE_NAMES) if not states else {state_name(s) for s in states}


def host_prefix(host: str) -> str:
    """What the worker name of every daemon of ``host`` starts with."""
    return f"{WORKER_PREFIX}{host}:"


def listing(jobs: list[Job], counts: dict[str, int], wanted: set[str], offset: int,
            lanes: dict[str, dict[str, int]], lane: str | None) -> Listing:
    """A page of a listing: its jobs, the selection's total, the counts, and
    the lanes (the selection's lane, or all)."""
    return Listing(jobs, sum(counts[s] for s in wanted), counts, offset, _lanes_shown(lanes, lane))


def scan_head(counts: dict[str, int], wanted: set[str], offset: int,
              lanes: dict[str, dict[str, int]], lane: str | None) -> dict[str, Any]:
    """What a scan says before its first chunk (a listing's figures, no jobs)."""
    return {"counts": counts, "total": sum(counts[s] for s in wanted), "offset": offset,
            "lanes": _lanes_shown(lanes, lane)}


def _lanes_shown(lanes: dict[str, dict[str, int]], lane: str | None) -> dict[str, dict[str, int]]:
    return lanes if lane is None else {lane: lanes.get(lane, {})}


def sections(wanted: set[str], counts: dict[str, int],
             finished_limit: int | None) -> list[tuple[str, int, list[str]]]:
    """(section, rows in it, states) for the non-empty sections wanted, in
    the order ``sloth ls`` shows them: running, queued, held, blocked, finished."""
    out: list[tuple[str, int, list[str]]] = [
        (s, counts[s], [s]) for s in ("running", "queued", "held", "blocked") if s in wanted and counts[s]]
    done = [s for s in FINISHED_STATES if s in wanted]
    n = sum(counts[s] for s in done)
    if finished_limit is not None:
        n = min(n, finished_limit)
    if n:
        out.append(("finished", n, done))
    return out


def pages(sections: list[tuple[str, int, list[str]]], offset: int,
          limit: int | None) -> list[tuple[str, list[str], int, int]]:
    """(section, states, rows to take, rows to skip) for a page from
    ``offset`` of at most ``limit`` rows across the sections in order."""
    out = []
    skip, room = offset, (limit if limit is not None else -1)
    for name, size, members in sections:
        if room == 0:
            break
        if skip >= size:
            skip -= size
            continue
        take = size - skip if room < 0 else min(room, size - skip)
        out.append((name, members, take, skip))
        room, skip = (room - take if room > 0 else room), 0
    return out

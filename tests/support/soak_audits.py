"""The chaos soak's audits of round 3's machinery, as pure functions of what
the soak gathered: the queue file's rows (events, schedules and their slot
rows, jobs), the probes' records and what the soak was answered. Each returns
the violations it finds, one sentence each; an empty list is a pass.
tests/unit/test_soak_audits.py feeds each one a doctored input and shows it
failing, so none of them can only pass.

* ``history``: every run's history complete and in order.
* ``schedule_slots``: one job per slot, and no slot missing over the span,
  allowing for the documented catch-up rule (docs/schedules.md).
* ``edits``: no edit lost (an edit acknowledged is visible in the row, its
  history and the command that ran), no held job started while held.
* ``acks``: a pause or resume answered done is in the history; a manual
  `schedule run` answered ok queued a job.
* ``stopped``: no process tree left SIGSTOPped after its job's run ended.
* ``collisions``: a resource token or a lane slot held by two live runs at
  once (the probes' flocks, tests/support/probe_job.py).
* ``outbox``: every message a transition caused (docs/telling.md) is there,
  and delivered once (the receiver drops a repeat by key: it took each key
  it shows) or still pending; none lost, none failed.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

# A run's events once it is claimed; the rest (edited, bumped, held,
# released, retried, cancelled while waiting, ...) are the job's.
RUN_KINDS = frozenset({"started", "adopted", "paused", "continued", "done", "failed", "fenced", "interrupted",
                       "abandoned", "ended", "condition_lost", "resumed", "lease_expired"})
CLAIMS = frozenset({"claimed", "reclaimed"})
# What only a run whose process started can have: each needs its `started` before it.
AFTER_START = frozenset({"paused", "continued", "done"})


@dataclass(frozen=True)
class Ev:
    """One history event, in the queue's order (its id)."""

    id: int
    job: int
    kind: str
    attempt: int
    message: str = ""


def history(events: Iterable[Ev], ran: Mapping[int, Iterable[int]] | None = None,
            excused: Iterable[tuple[int, int]] = ()) -> list[str]:
    """Every run's history complete and in order. Per job and attempt (in
    event-id order): a run's events come after its claim; `started` at most
    once, before any `paused`, `continued` or `done`; pauses and
    continues alternate; no run ends `done` without `started` (an adopted
    run too); claims come in attempt order. ``ran``: job -> attempts whose
    probe really started; each must have `started` unless ``excused``
    ((job, attempt): a reboot lost what the keeper knew)."""
    out: list[str] = []
    by_job: dict[int, list[Ev]] = defaultdict(list)
    for e in sorted(events, key=lambda e: e.id):
        by_job[e.job].append(e)
    skip = set(excused)
    for job, evs in sorted(by_job.items()):
        seq = " ".join(f"{e.kind}:{e.attempt}" for e in evs)
        claimed: set[int] = set()
        started: set[int] = set()
        paused: dict[int, bool] = defaultdict(bool)
        last_claim = 0
        said: set[int] = set()  # attempts already found without `started`
        for e in evs:
            a = e.attempt
            if e.kind in CLAIMS:
                if a <= last_claim:
                    out.append(f"job {job}: attempt {a} claimed after attempt {last_claim} ({seq})")
                last_claim = max(last_claim, a)
                claimed.add(a)
                continue
            if e.kind not in RUN_KINDS:
                continue
            if a not in claimed:
                out.append(f"job {job}: {e.kind} of attempt {a} before its claim ({seq})")
            if e.kind == "started":
                if a in started:
                    out.append(f"job {job}: attempt {a} started twice ({seq})")
                started.add(a)
            elif e.kind in AFTER_START and a not in started and (job, a) not in skip:
                out.append(f"job {job}: {e.kind} of attempt {a} with no `started` before it ({seq})")
                said.add(a)
            if e.kind == "paused":
                if paused[a]:
                    out.append(f"job {job}: attempt {a} paused twice without a continue ({seq})")
                paused[a] = True
            elif e.kind == "continued":
                if not paused[a]:
                    out.append(f"job {job}: attempt {a} continued without a pause ({seq})")
                paused[a] = False
        for a in sorted(set((ran or {}).get(job, ()))):
            if a not in started and a not in said and (job, a) not in skip:
                out.append(f"job {job}: attempt {a} ran (its probe started) with no `started` event ({seq})")
    for job in sorted(set(ran or {}) - set(by_job)):
        out.append(f"job {job}: ran, and has no history at all")
    return out


_COALESCED = re.compile(r"(\d+) (?:earlier slot\(s\) missed too|older slot\(s\) dropped beyond the cap)")


def coalesced(note: str) -> int:
    """How many slots before its own a slot row stands for (its note: the
    catch-up's "N earlier slot(s) missed too", `--missed all`'s "N older
    slot(s) dropped beyond the cap")."""
    return sum(int(n) for n in _COALESCED.findall(note or ""))


@dataclass
class ScheduleSeen:
    """One `--every` schedule as the queue file holds it at the end."""

    name: str
    every_s: int
    anchor: int
    next_slot: int
    rows: list[dict[str, Any]]  # schedule_runs: slot, manual, job_id, note
    paused_at: float  # the daemon's wall clock when the soak paused it


def schedule_slots(s: ScheduleSeen, jobs_by_key: Mapping[str, Sequence[int]], slack_s: float = 10.0) -> list[str]:
    """One job per slot and none missing. Every slot anchor + k*every
    (k >= 1) before ``next_slot`` is a row of its own, or one of the slots
    the next row's note says it stands for (catch-up, cap); ``next_slot``
    is the slot after the last row, and the daemon had handled the slots
    due by ``slack_s`` before it was paused. A row's job has the slot's key
    and is the only job with it; no job has a slot key without a row."""
    out: list[str] = []
    e = s.every_s
    rows = sorted((r for r in s.rows if not r.get("manual")), key=lambda r: r["slot"])
    prev = s.anchor
    for r in rows:
        slot = r["slot"]
        if (slot - s.anchor) % e or slot <= s.anchor:
            out.append(f"schedule {s.name}: slot {slot} is not anchor {s.anchor} + k * {e}")
            prev = slot
            continue
        gap = (slot - prev) // e - 1
        if gap != coalesced(r.get("note", "")):
            out.append(f"schedule {s.name}: {gap} slot(s) missing before slot {slot} (from {prev + e}); its row "
                       f"stands for {coalesced(r.get('note', ''))} ({r.get('note')!r})")
        prev = slot
    if rows and s.next_slot != prev + e:
        out.append(f"schedule {s.name}: progress at {s.next_slot}, the last slot handled {prev}: "
                   f"{(s.next_slot - prev) // e - 1} slot(s) skipped with no row")
    if s.next_slot + slack_s < s.paused_at:
        out.append(f"schedule {s.name}: next slot {s.next_slot} is {s.paused_at - s.next_slot:.0f} s behind the "
                   f"daemon's clock when it was paused: slots due were never handled")
    slots_keyed = set()
    for r in s.rows:
        key = f"schedule:{s.name}:{r['slot']}"
        if r.get("manual"):
            continue
        slots_keyed.add(key)
        got = list(jobs_by_key.get(key, ()))
        if r.get("job_id") is None:
            if got:
                out.append(f"schedule {s.name}: slot {r['slot']} recorded not run, yet jobs {got} have its key")
        elif got != [r["job_id"]]:
            out.append(f"schedule {s.name}: slot {r['slot']} names job {r['job_id']}, jobs with its key: {got}")
    for key, ids in sorted(jobs_by_key.items()):
        if key.startswith(f"schedule:{s.name}:") and key not in slots_keyed and not key.endswith(":run"):
            out.append(f"schedule {s.name}: jobs {list(ids)} have key {key} and no slot row")
    return out


@dataclass
class EditTarget:
    """A job the soak edited, held, released and bumped, and what it was
    answered. ``label``/``priority``/``mark``: the last acknowledged value
    (None: never set); ``edits``: acknowledged edits that changed
    something; ``held``: (answered held at, release asked at) in
    CLOCK_BOOTTIME; ``unsure``: a request that got no answer (may or may
    not have been applied)."""

    id: int
    label: str | None = None
    priority: int | None = None
    mark: str | None = None
    edits: int = 0
    held: list[tuple[float, float]] = field(default_factory=list)
    unsure: bool = False


FORK_TICK_S = 0.01  # a probe's fork time (probe_job.py: forked_at) is /proc's, in 10 ms ticks rounded down


def edits(targets: Iterable[EditTarget], rows: Mapping[int, Mapping[str, Any]], events: Iterable[Ev],
          marks: Mapping[int, list[str]], spawned: Mapping[int, list[float]]) -> list[str]:
    """No edit lost: the row carries the last label, priority and command
    acknowledged, the history has an `edited` event for each acknowledged
    change, and the run that did the work ran the last command (its mark).
    No held job started between its hold's answer and its release."""
    out: list[str] = []
    edited: dict[int, int] = defaultdict(int)
    for e in events:
        if e.kind == "edited":
            edited[e.job] += 1
    for t in targets:
        row = rows.get(t.id)
        if row is None:
            out.append(f"edited job {t.id} is gone")
            continue
        for a, b in t.held:
            late = [s for s in spawned.get(t.id, ()) if a < s and s + FORK_TICK_S <= b]  # the fork: in [s, s + tick)
            if late:
                out.append(f"job {t.id}: held (answered at {a:.2f}), started at {late[0]:.2f} before its release "
                           f"({b:.2f})")
        if t.unsure:
            continue
        if t.label is not None and row.get("label") != t.label:
            out.append(f"job {t.id}: label {t.label!r} acknowledged, the row has {row.get('label')!r}")
        if t.priority is not None and row.get("priority") != t.priority:
            out.append(f"job {t.id}: priority {t.priority} acknowledged, the row has {row.get('priority')}")
        if t.mark is not None:
            if t.mark not in (row.get("command") or []):
                out.append(f"job {t.id}: command with mark {t.mark} acknowledged, the row runs {row.get('command')}")
            ran = marks.get(t.id, [])
            if row.get("state") == "done" and ran and ran[-1] != t.mark:
                out.append(f"job {t.id}: ran the command marked {ran[-1]}, the last acknowledged is {t.mark}")
        if edited[t.id] < t.edits:
            out.append(f"job {t.id}: {t.edits} edit(s) acknowledged, {edited[t.id]} `edited` event(s)")
    return out


def acks(answered: Iterable[tuple[int, str]], events: Iterable[Ev]) -> list[str]:
    """Each (job, kind) the daemon answered done (a job "paused": kind
    `paused`; "resumed": `continued`) has at least as many such events in
    the history as it was answered."""
    want: dict[tuple[int, str], int] = defaultdict(int)
    for job, kind in answered:
        want[(job, kind)] += 1
    have: dict[tuple[int, str], int] = defaultdict(int)
    for e in events:
        have[(e.job, e.kind)] += 1
    return [f"job {job}: answered {kind} {n} time(s), {have[(job, kind)]} `{kind}` event(s)"
            for (job, kind), n in sorted(want.items()) if have[(job, kind)] < n]


@dataclass(frozen=True)
class StoppedSeen:
    """A job process seen stopped (state T) twice, ``apart_s`` apart, and
    the daemon's word on its job in between: state and current token."""

    pid: int
    job: int
    token: str
    job_state: str
    job_token: str | None
    apart_s: float


def stopped(seen: Iterable[StoppedSeen], grace_s: float = 2.0) -> list[str]:
    """No tree left SIGSTOPped after its run ended: a process stopped for
    ``grace_s`` or more whose job is no longer running that run."""
    return [f"pid {s.pid} of job {s.job} (run {s.token}) left stopped {s.apart_s:.1f} s while the job is "
            f"{s.job_state}{'' if s.job_state != 'running' else f' as run {s.job_token}'}"
            for s in seen
            if s.apart_s >= grace_s and not (s.job_state == "running" and s.job_token == s.token)]


def collisions(lines: Iterable[Sequence[str]], what: str) -> list[str]:
    """The probes' flock collisions (token_collisions, slot_collisions)."""
    return [f"{what} held twice: job {ln[0]} attempt {ln[1]} (pid {ln[3]}) found {ln[4]} taken by a live run"
            for ln in lines if len(ln) >= 5]


def outbox(messages: Iterable[Mapping[str, Any]], ended: Iterable[tuple[int, int, str]],
           received: Iterable[str]) -> list[str]:
    """``messages``: the outbox's rows (key, state); ``ended``: (job, attempt,
    state) of each finished job that pings; ``received``: the keys the
    receiver took (each once: it drops a repeat). A sent message the
    receiver never took was lost; a job's end with no message was never
    written; a failed one gave up."""
    out: list[str] = []
    got = set(received)
    rows = {m["key"]: m["state"] for m in messages}
    for key, state in sorted(rows.items()):
        if state == "sent" and key not in got:
            out.append(f"message {key} marked sent, never received")
        elif state == "failed":
            out.append(f"message {key} failed")
    for job, attempt, state in ended:
        if state in ("done", "failed") and f"job:{job}:{attempt}:{state}" not in rows:
            out.append(f"job {job} ended {state} (attempt {attempt}) with no message in the outbox")
    out += [f"received {k} that no message is" for k in sorted(got - set(rows))]
    return out

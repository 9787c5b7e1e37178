"""A schedule's dead-man switch (`schedule add --expect-within 26h`,
docs/telling.md): when none of its occurrences has succeeded within the
window -- the laptop slept, its conditions never held, the daemon was
stopped, each run failed -- one ``missed`` message per window goes through
the schedule's channels (its job's ping, webhooks, mail) and a desktop
notification, saying why ("no success since 03:30: job 12 waits: waiting
for mains power"); `schedule ls` shows it overdue.

A window starts at the latest success (or when the expectation was set)
and lasts ``expect_within_s``; the k-th window that passes with no success
is told once, whichever machine or daemon sees it first: its message's key
is ``schedule:<name>:<deadline>:missed`` (Outbox.add adds a key once), and
the latest deadline told is kept in the queue's meta (``deadman_told:<name>``):
a message pruned (KEEP_SENT_S, KEEP_FAILED_S) or dropped takes its key
with it, and the next daemon would tell that window again. The
check runs at the earliest deadline of all (one timer, at most CHECK_MAX_S
apart so a resume or a clock step is seen), never in a poll."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Callable, Mapping, Protocol

from sloth_daemon.backends.contract import Outbox, ScheduleReads
from sloth_daemon.checks import tell_json
from sloth_daemon.errors import BadRequest, JobNotFound, SlothError
from sloth_daemon.models import Job

log = logging.getLogger("sloth.schedules")
CHECK_MAX_S = 600.0
TOLD = "deadman_told:"  # + a schedule's name: the meta key of the latest deadline told


class Memo(Protocol):
    """The queue's meta (contract.Reads.get_meta, contract.Meta.set_meta)."""

    def get_meta(self, key: str, default: Any = None) -> Any: ...

    def set_meta(self, key: str, value: Any) -> None: ...


def window(rec: Mapping[str, Any], last_ok: float | None, now: float) -> tuple[float, float] | None:
    """(the window's start, the deadline it passed) if the schedule is
    overdue at ``now``, else None; the deadline is the latest one passed."""
    recipe = rec["recipe"]
    w = recipe.get("expect_within_s")
    if not w:
        return None
    base = max(last_ok or 0.0, float(recipe.get("expect_since") or rec["created_at"]))
    if now < base + w:
        return None
    k = int((now - base) // w)
    return base, base + k * w


def next_deadline(rec: Mapping[str, Any], last_ok: float | None, now: float) -> float | None:
    recipe = rec["recipe"]
    w = recipe.get("expect_within_s")
    if not w:
        return None
    base = max(last_ok or 0.0, float(recipe.get("expect_since") or rec["created_at"]))
    return base + (int((now - base) // w) + 1) * w if now >= base else base + w


class DeadMan:
    """Checks the schedules ``store`` keeps (see the module docstring):
    ``outbox`` takes the missed messages, ``job(id)`` reads a schedule's
    last job (why it did not succeed), ``notify(title, body)`` shows a
    desktop notification, ``now`` the queue's wall time. Its own state: the
    windows told by desktop alone (no channel), and its timer; ``memo``
    (the queue's meta) keeps each schedule's latest deadline told."""

    def __init__(self, store: ScheduleReads, outbox: Outbox, memo: Memo, *, job: Callable[[int], Job],
                 notify: Callable[[str, str], None], now: Callable[[], float]) -> None:
        self.store, self.outbox, self.memo, self.job, self.notify, self.now = store, outbox, memo, job, notify, now
        self._told: set[str] = set()
        self.missed = 0  # windows told (status, metrics)
        self.next_at: float | None = None  # the next deadline (wall clock; None: none), for a dormant daemon's wake

    def check(self) -> float | None:
        """Tell every window passed with no success; returns when to look next."""
        now = self.now()
        soonest: float | None = None
        for rec in self.store.all():
            if rec["paused"] or not rec["recipe"].get("expect_within_s"):
                continue  # a paused schedule is expected to run no more
            last_ok = self.store.last_success(rec["name"])
            passed = window(rec, last_ok, now)
            if passed is not None:
                self._tell(rec, last_ok, passed)
            nxt = next_deadline(rec, last_ok, now)
            if nxt is not None:
                soonest = nxt if soonest is None else min(soonest, nxt)
        return soonest

    def _tell(self, rec: Mapping[str, Any], last_ok: float | None, passed: tuple[float, float]) -> None:
        name, (base, deadline) = rec["name"], passed
        key = f"schedule:{name}:{int(deadline)}:missed"
        if key in self._told:
            return
        told = self.memo.get_meta(TOLD + name)
        if isinstance(told, (int, float)) and told >= int(deadline):  # by an earlier daemon, or another machine
            self._told.add(key)
            return
        why = self.why(rec, last_ok, base)
        try:
            channels = _channels(rec["recipe"].get("job") or {})
        except BadRequest:
            channels = []
        added = self.outbox.add(key, "missed", channels, schedule=name, note=why)
        self.memo.set_meta(TOLD + name, int(deadline))
        self._told.add(key)
        if added or not channels:
            self.missed += 1
            log.warning("schedule %s missed its window: %s", name, why)
            self.notify(f"sloth: schedule {name} missed", why)

    def why(self, rec: Mapping[str, Any], last_ok: float | None, base: float) -> str:
        """Why no occurrence succeeded, from what `schedule show` knows: its
        pause, its last job's state and why it waits."""
        head = f"no success since {_local(last_ok)}" if last_ok else f"no success since {_local(base)} (set up then)"
        if rec["paused"]:
            return f"{head}: the schedule is paused"
        last = rec.get("last_job")
        if last is None or (rec.get("last_slot") or 0) < base - 1:
            return f"{head}: no occurrence was queued since (the daemon was stopped, or the machine asleep)"
        try:
            job = self.job(int(last))
        except JobNotFound:
            return f"{head}: its last job {last} is gone (pruned)"
        state = job.state.value
        if state == "queued":
            return f"{head}: job {job.id} waits" + (f": {job.wait_reason}" if job.wait_reason else " for a free slot")
        if state in ("failed", "cancelled"):
            return f"{head}: the last run (job {job.id}) {state}" + (f": {job.message}" if job.message else "")
        return f"{head}: job {job.id} is {state}"

    async def run(self) -> None:
        """Check at each deadline (one timer) until cancelled."""
        while True:
            try:
                nxt = self.check()
                self.next_at = nxt
            except SlothError as e:
                log.warning("schedules' dead-man check: %s", e.message)
                nxt = None
                self.next_at = self.now() + CHECK_MAX_S  # looked at again then, dormant or not
            wait = CHECK_MAX_S if nxt is None else min(max(nxt - self.now(), 1.0), CHECK_MAX_S)
            await asyncio.sleep(wait)


def _channels(job: Mapping[str, Any]) -> list[dict[str, Any]]:
    import json

    text = tell_json(job)
    return json.loads(text) if text else []


def _local(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(t))

"""The scheduler the daemon composes: the schedules it knows, one timer for
the earliest slot of all, and each firing written with its jobs in one
transaction (backends/schedule_rules.py).

Idle, it costs nothing: no poll, no timer per schedule -- one asyncio timer
set for the earliest slot (a heap of (slot, name, version), stale entries
dropped as they surface). A change (add, edit, pause, resume, rm, a firing)
re-arms it; so does the daemon's clock watch after a resume or a clock
step (``clock_jumped``): the timer runs on the monotonic clock, which a
suspend stops, while slots are wall time.
"""

from __future__ import annotations

import asyncio
import heapq
import logging
import time
from dataclasses import replace
from typing import Any, Callable, Mapping

from sloth_daemon.backends import schedule_rules as sr
from sloth_daemon.daemon.schedules import policy, slots
from sloth_daemon.daemon.schedules import recipe as recipes
from sloth_daemon.daemon.schedules.recipe import Recipe
from sloth_daemon.errors import BadRequest, IllegalTransition, ScheduleNotFound, SlothError
from sloth_daemon.spec import JobSpec

log = logging.getLogger("sloth.schedules")
RETRY_S = 5  # a firing the database refused is tried again this much later
MAX_TRIES = 3  # plans remade when another firer moved the schedule first
TURN = 64  # schedules fired per turn of the event loop at most ...
TURN_S = 0.02  # ... and for this long at most (then the socket, heartbeats; the rest at once after)


class Ports:
    """What the scheduler asks of the daemon: ``now`` (the queue's wall
    time), ``active(job_id)`` (queued, blocked or running?), ``job(d)`` (a
    job object checked and placed as an add would be, as a JobSpec),
    ``queued()`` (wake the worker), ``cancel(job_id, why)`` (end a replaced
    run: recorded cancelled, with why, once its process has ended)."""

    def __init__(self, *, now: Callable[[], float], active: Callable[[int], bool],
                 job: Callable[[Mapping[str, Any]], JobSpec], place: Callable[[dict[str, Any]], dict[str, Any]],
                 queued: Callable[[], None], cancel: Callable[[int, str], None]) -> None:
        self.now, self.active, self.job, self.place = now, active, job, place
        self.queued, self.cancel = queued, cancel


class Scheduler:
    """Owns ``known`` (name -> the schedule's row as last read or written),
    the heap of due times and the timer; ``store`` is the queue's schedules
    (sqlite/schedules.py or postgres/schedules.py), ``machine`` this
    machine's id (the jitter's seed of the schedules made here)."""

    def __init__(self, store: Any, ports: Ports, *, machine: str, fixed_zone: bool = False) -> None:
        self.store, self.ports, self.machine = store, ports, machine
        # a shared queue: a schedule made without --tz gets this machine's zone, so every machine
        # computes the same slots (without, "local time" follows this machine's zone as it changes)
        self.fixed_zone = fixed_zone
        self._zone: tuple[Any, ...] | None = None  # slots.local_key() at the last zone_check
        self.known: dict[str, dict[str, Any]] = {}
        self._heap: list[tuple[int, str, int]] = []
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at: int | None = None
        self.fired = 0  # firings written (status)
        self._stamp: Any = None  # store.stamp() at the last reload
        self._seen = 0  # the latest now a tick or a jump saw (a clock stepped back is below it)

    # ------------------------------------------------------------ the timer
    def load(self) -> None:
        """Every schedule from the queue (at start, and when another machine changed them)."""
        self.known = {r["name"]: r for r in self.store.all()}
        self._zone = slots.local_key()
        self._heap = [(r["next_slot"], n, r["version"]) for n, r in self.known.items() if not r["paused"]]
        heapq.heapify(self._heap)
        self.arm(force=True)

    def reload(self) -> None:
        """Read them all again if any changed (a shared queue's poll: another machine's add or firing)."""
        try:
            stamp = self.store.stamp()
            if stamp != self._stamp:
                self.load()
                self._stamp = stamp
        except SlothError as e:
            log.warning("schedules: cannot re-read them now: %s", e.message)

    def earliest(self) -> int | None:
        """The earliest due time of all (stale heap entries dropped)."""
        while self._heap:
            at, name, version = self._heap[0]
            rec = self.known.get(name)
            if rec is not None and rec["version"] == version and not rec["paused"]:
                return at
            heapq.heappop(self._heap)
        return None

    def arm(self, *, force: bool = False) -> None:
        """Set the one timer for the earliest due time (if it changed)."""
        at = self.earliest()
        if at == self._timer_at and not force:
            return
        if self._timer is not None:
            self._timer.cancel()
        self._timer, self._timer_at = None, at
        if at is None:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # driven by hand (tests): tick() is called
            return
        self._timer = loop.call_later(max(0.0, at - self.ports.now()), self._on_timer)

    def clock_jumped(self) -> None:
        """A resume or a clock step: the due times stay, the delay to them
        changed. A clock stepped back behind what was handled (set years
        ahead, then put right) brings each schedule's progress back to its
        next slot from now, so it does not fall silent until the wrong
        date: a slot handled already keeps its row, and makes no second job."""
        now = int(self.ports.now())
        if now < self._seen - 1:
            self._reslot(now, "brought back to the clock", lambda r, rec, nxt: nxt < rec["next_slot"])
        self._seen = now
        self.arm(force=True)

    def saw(self) -> dict[str, Any]:
        """The latest time a tick or a jump saw, and the local zone: handed
        to the process that renews this one (renewal.py), for ``carry``."""
        return {"seen": self._seen, "zone": self._zone}

    def carry(self, saw: dict[str, Any]) -> None:
        """What the process this one renewed (or the dormant one before it)
        saw: a clock set back or a zone changed since is seen as if this
        process had been running all along."""
        zone = saw.get("zone")
        if isinstance(zone, list) and len(zone) == 3:  # JSON's lists: local_key()'s tuples again
            self._zone = (zone[0], zone[1], None if zone[2] is None else tuple(zone[2]))
            self.zone_check()
        if isinstance(saw.get("seen"), int):
            self._seen = max(self._seen, saw["seen"])
            self.clock_jumped()

    def zone_check(self) -> None:
        """At each clock check: if the local zone changed (/etc/localtime,
        $TZ: slots.local_key), the schedules on local time move to their
        next slot in the new zone, as systemd's timers do (a slot the change
        skipped over is not caught up)."""
        key = slots.local_key()
        if key == self._zone:
            return
        if self._zone is not None:  # None: not loaded yet
            log.info("schedules: the local time zone changed; local-time schedules follow it")
            self._reslot(int(self.ports.now()), "moved to the new local zone",
                         lambda r, rec, nxt: r.cron is not None and r.tz is None)
            self.arm(force=True)
        self._zone = key

    def _reslot(self, now: int, why: str, wanted: Callable[[Recipe, dict[str, Any], int], bool]) -> None:
        """Each schedule ``wanted`` (its recipe, row and next slot from now) moves to that slot."""
        for name, rec in list(self.known.items()):
            if rec["paused"]:
                continue
            r = Recipe.from_dict(rec["recipe"])
            nxt = slots.next_after(r, now)
            if nxt is None or nxt == rec["next_slot"] or not wanted(r, rec, nxt):
                continue
            try:
                changed = self.store.change(name, version=rec["version"], next_slot=nxt)
            except SlothError as e:
                log.warning("schedule %s: not %s: %s", name, why, e.message)
                continue
            if changed is not None:
                self._remember(changed)

    def _on_timer(self) -> None:
        self._timer = self._timer_at = None
        try:
            self.tick(most=TURN, budget_s=TURN_S)
        except Exception:  # a bug must not stop every schedule
            log.exception("schedules: a tick failed")
            self._retry_all()

    def tick(self, now: float | None = None, *, most: int | None = None, budget_s: float | None = None) -> int:
        """Fire the schedules due by ``now`` (at most ``most`` of them, for
        ``budget_s`` at most: the timer's turn, so that 10,000 due at
        midnight, or 1,000 after a year away, never hold the event loop --
        heartbeats, the socket -- for long; the rest in the next turn, at
        once); returns how many fired."""
        t = int(self.ports.now() if now is None else now)
        self._seen = max(self._seen, t)
        n = seen = 0
        end = None if budget_s is None else time.monotonic() + budget_s
        while (at := self.earliest()) is not None and at <= t and (most is None or seen < most) \
                and (end is None or time.monotonic() < end):
            _, name, _ = heapq.heappop(self._heap)
            n += self._fire(name, t)
            seen += 1
        self.arm()
        return n

    def _push(self, rec: dict[str, Any], at: int | None = None) -> None:
        if not rec["paused"]:
            heapq.heappush(self._heap, (rec["next_slot"] if at is None else at, rec["name"], rec["version"]))

    def _retry_all(self) -> None:
        t = int(self.ports.now()) + RETRY_S
        for rec in self.known.values():
            self._push(rec, max(rec["next_slot"], t))
        self.arm(force=True)

    # ------------------------------------------------------------- firing
    def _fire(self, name: str, now: int) -> int:
        """Plan and write one schedule's due slots (again if another firer
        moved it first). Returns 1 if this firing was written."""
        rec = self.known[name]
        try:
            for _ in range(MAX_TRIES):
                p = policy.plan(Recipe.from_dict(rec["recipe"]), rec["next_slot"], now)
                if p is None:
                    break
                firing, cancel = self._firing(rec, p, now)
                results = self.store.fire(name, firing)
                rec = self._remember(self.store.get(name))
                if results is not None:
                    return self._after(name, results, cancel)
        except ScheduleNotFound:
            self.known.pop(name, None)
            return 0
        except SlothError as e:  # the database refused (locked, full): again soon
            log.warning("schedule %s: cannot fire now: %s", name, e.message)
            self._push(rec, now + RETRY_S)
            return 0
        self._push(rec)
        return 0

    def _remember(self, rec: dict[str, Any]) -> dict[str, Any]:
        """Keep ``rec``; a new version of it (a run by hand, a firing, an
        edit, another daemon's change) is also its next slot in the heap:
        the entry of the version before is stale now (earliest drops it),
        and without this one the schedule would never fire again here."""
        old = self.known.get(rec["name"])
        self.known[rec["name"]] = rec
        if old is None or old["version"] != rec["version"]:
            self._push(rec)
        return rec

    def _after(self, name: str, results: list[dict[str, Any]], cancel: list[int]) -> int:
        self.fired += 1
        queued = [r["job_id"] for r in results if r.get("job_id") and not r.get("taken")]
        if queued:
            log.info("schedule %s: queued job(s) %s", name, ", ".join(map(str, queued)))
            self.ports.queued()
        for job_id in cancel:
            self.ports.cancel(job_id, f"replaced by the next occurrence of schedule {name}")
        return 1

    def _firing(self, rec: dict[str, Any], p: policy.Plan, now: int) -> tuple[sr.Firing, list[int]]:
        """The occurrences of plan ``p`` by the overlap rule, and the jobs to end (replace)."""
        r = Recipe.from_dict(rec["recipe"])
        prev = rec["last_job"]
        active = prev is not None and self.ports.active(prev)
        occurrences, cancel = [], []
        todo = p.queue[-1:] if r.overlap == "replace" else p.queue
        for i, slot in enumerate(todo):
            what = policy.overlap(r.overlap, active)
            note = p.note if i == 0 else ""
            if what == policy.SKIP:
                occurrences.append(sr.Occurrence(slot, None, _join(note, f"not run: job {prev} was still queued"
                                                                         " or running (--overlap skip)")))
                continue
            try:
                spec = self._spec(rec["name"], r, slot, now, what != policy.QUEUE)
            except BadRequest as e:  # a recipe that no longer makes a valid job (a lane's rules): said, not retried
                occurrences.append(sr.Occurrence(slot, None, _join(note, f"not queued: {e.message}")))
                continue
            occurrences.append(sr.Occurrence(slot, spec, note))
            if what == policy.REPLACE and prev is not None:
                cancel.append(prev)
            active = True
        if p.skipped is not None:
            occurrences.append(sr.Occurrence(p.skipped, None, p.note))
        return sr.Firing(rec["version"], occurrences, p.next_slot, p.missed, p.dropped), cancel

    def _spec(self, name: str, r: Recipe, slot: int | str, now: int, chained: bool, *,
              jitter: bool = True) -> JobSpec:
        """The job of one occurrence; ``jitter``: delayed by the machine's
        offset (a slot's), or not (`schedule run`: now, as asked)."""
        job: dict[str, Any] = {**r.job, "key": sr.slot_key(name, slot)}
        offset = policy.jitter_s(name, r.machine, r.jitter_s) if jitter else 0
        if offset:
            job["not_before"] = now + offset
        if chained:
            job["after_previous"] = "after_any"
        job.setdefault("label", f"{name}")
        return self.ports.job(job)

    # --------------------------------------------------------------- asks
    def add(self, name: str, fields: Mapping[str, Any]) -> dict[str, Any]:
        """A new schedule; IllegalTransition if the name is taken, BadRequest if a field is bad."""
        now = int(self.ports.now())
        r = self._checked(self._zoned(recipes.parse(fields, machine=self.machine, anchor=now)))
        r = replace(r, expect_since=now) if r.expect_within_s else r  # the dead-man's first window starts now
        first = slots.next_after(r, now)
        rec = self._remember(self.store.add(recipes.name(name), r.to_dict(), first))
        self.arm()
        return rec

    def _zoned(self, r: Recipe) -> Recipe:
        """On a shared queue, a cron schedule without --tz is in this machine's zone, by name."""
        if not self.fixed_zone or r.tz is not None or r.cron is None:
            return r
        name = slots.local_name()
        if name is None:
            raise BadRequest("this machine's time zone has no name (its zone file is a copy), and a schedule on "
                             "a shared queue must say its zone for every machine",
                             hint='Give it: --tz Europe/Berlin (or set $TZ for the daemon).')
        return replace(r, tz=name)

    def _checked(self, r: Recipe) -> Recipe:
        slots.check(r)
        job = self.ports.place(dict(r.job))
        probe = Recipe(**{**r.to_dict(), "job": job})
        self._spec("probe", probe, 0, 0, False)  # the job as an add would check it
        return probe

    def edit(self, name: str, fields: Mapping[str, Any]) -> dict[str, Any]:
        rec = self.get(name)
        old = Recipe.from_dict(rec["recipe"])
        new = self._checked(self._zoned(recipes.edited(old, fields)))
        if new.expect_within_s != old.expect_within_s:  # a new dead-man window starts now
            new = replace(new, expect_since=int(self.ports.now()))
        timing = (new.every_s, new.cron, new.tz) != (old.every_s, old.cron, old.tz)
        nxt = slots.next_after(new, int(self.ports.now())) if timing else None
        return self._changed(name, self.store.change(name, version=rec["version"], recipe=new.to_dict(),
                                                     next_slot=nxt))

    def pause(self, name: str) -> dict[str, Any]:
        return self._changed(name, self.store.change(name, paused=True))

    def resume(self, name: str) -> dict[str, Any]:
        """Paused no more; slots that fell while it was paused are not caught up,
        so a dead-man's window starts again now (as at add): none of them could succeed."""
        rec = self.get(name)
        r, now = Recipe.from_dict(rec["recipe"]), int(self.ports.now())
        fresh = replace(r, expect_since=now).to_dict() if r.expect_within_s and rec["paused"] else None
        return self._changed(name, self.store.change(name, paused=False, next_slot=slots.next_after(r, now),
                                                     recipe=fresh, version=rec["version"] if fresh else None))

    def remove(self, name: str) -> None:
        self.store.remove(name)
        self.known.pop(name, None)
        self.arm()

    def run_now(self, name: str) -> dict[str, Any]:
        """One occurrence now (outside the slots); while it is queued or
        running another run_now answers with it (``deduped``)."""
        rec = self.get(name)
        now = int(self.ports.now())
        spec = self._spec(name, Recipe.from_dict(rec["recipe"]), sr.MANUAL, now, False, jitter=False)
        results = self.store.fire(name, sr.Firing(None, [sr.Occurrence(now, spec, "run by hand")]))
        self._remember(self.store.get(name))
        self.arm(force=True)
        self.ports.queued()
        return (results or [{}])[0]

    def get(self, name: str) -> dict[str, Any]:
        return self._remember(self.store.get(name))

    def _changed(self, name: str, rec: dict[str, Any] | None) -> dict[str, Any]:
        if rec is None:
            raise IllegalTransition(f"schedule {name!r} changed meanwhile; nothing changed",
                                    hint="Look again with `sloth schedule show NAME`, then retry.")
        self._remember(rec)
        self.arm()
        return rec

    def status(self) -> dict[str, Any]:
        return {"schedules": len(self.known), "next_slot": self.earliest(), "fired": self.fired}


def machine_id() -> str:
    """This machine's id (/etc/machine-id; else its host name): the jitter's seed."""
    for path in ("/etc/machine-id", "/var/lib/dbus/machine-id"):
        try:
            with open(path) as f:
                text = f.read().strip()
        except OSError:
            continue
        if text:
            return text
    import socket

    return socket.gethostname()


def _join(a: str, b: str) -> str:
    return f"{a}; {b}" if a and b else a or b

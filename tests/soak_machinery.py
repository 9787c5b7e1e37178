"""The chaos soak's actors for round 3's machinery (issue 28), composed by
tests/chaos_soak.py's Soak, which it names (``soak``) for its daemon, its
records and its chaos windows:

* schedules firing every few seconds (``--every 2s`` beside, ``3s`` skipping
  an overlap, ``5s --missed all``) through every kill -9, stop and clock
  jump; a manual ``schedule run`` twice in a row (``schedrun``);
* pauses and resumes of running jobs (``pausejobs``), the resume a few
  seconds later from a thread of its own;
* edits, holds, releases and bumps of queued jobs of lane ``edits``
  (``edits``), each answer kept;
* the charger plugged in and out every few seconds (a fake
  /sys/class/power_supply in the daemon's private mount namespace) under
  ``--when ac`` jobs of each ``--on-lost`` policy;
* ``--needs gpu=N`` / ``lic=1`` jobs and ``--slots N`` jobs in a 3-slot lane,
  each probe flocking what it was given (tests/support/probe_job.py);
  ``[resources]`` shrunk by a ``daemon reload`` for a few seconds
  (``shrink``), and late in the chaos once for good, below what the queued
  ``gpu=2`` jobs need (each then refused at add or held, with why);
* a watcher of job processes seen stopped (state T).

What they gather is judged by tests/support/soak_audits.py.
"""

from __future__ import annotations

import json
import random
import re
import sqlite3
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psutil

from tests.support import power, soak_audits as audits
from tests.support.receiver import Receiver
from tests.support.soak_audits import EditTarget, Ev, ScheduleSeen, StoppedSeen

if TYPE_CHECKING:
    from tests.chaos_soak import LJob, Soak

FULL = {"gpu": '["0", "1", "2"]', "lic": "2"}
SHRUNK = {"gpu": '["0", "1"]', "lic": "2"}  # every need still possible (gpu=2 at most)
STARVED = {"gpu": '["0"]', "lic": "2"}  # a gpu=2 job can never run (issue 28.2)
# (name, every, missed, overlap, probe hold)
SCHEDULES = (("tick", "2s", "once", "parallel", "0"), ("tock", "3s", "once", "skip", "0.5"),
             ("tack", "5s", "all", "parallel", "0"))
HAND = "hand"  # run by hand only (every 1h): `true`, done within the second it was queued in
MACHINERY = ("pausejobs", "edits", "shrink", "schedrun")
# The audits (soak_audits.py) a violation is filed under; the rest are the soak's core invariants.
AUDITS = ("history", "acks", "schedule_slots", "schedule_run", "edits", "tokens", "slots", "stopped", "outbox")
EDITS_LANE = "edits"
CATCH_UP_S = 20.0  # at the end, how long the daemon may take to handle the slots its clock says are due
JUMP_SEEN_S = 3.0  # after a clock jump, the daemon has seen it (clock_check_s 1 s) and begun its schedules' catch-up
# The daemon's word for needs this machine can never meet (resources.py: Resources.never), at add and
# as a held job's wait_reason: the resource, the need, the tokens it has.
NEVER_HERE = re.compile(r"--needs (\w+)=(\d+): this machine has (\d+) \1 token")


class Machinery:
    """Round 3's actors and what they were answered."""

    def __init__(self, soak: "Soak") -> None:
        self.soak = soak
        self.resources = dict(FULL)
        self.power: Path | None = None
        why = power.can_unshare()
        if why is None and soak.cfg.power:
            self.power = power.fake_power(soak.root / "power", online=True)
        elif soak.cfg.power:
            soak.cfg.log(f"chaos soak: no flapping power ({why})")
        self.flips: list[tuple[float, bool]] = []
        self.answered: list[tuple[int, str]] = []  # (job, "paused" | "continued")
        self.targets: dict[int, EditTarget] = {}
        self.stopped_seen: list[StoppedSeen] = []
        self.schedule_runs_answered: list[Any] = []  # each manual run's answer (its "id")
        self.paused_at: float | None = None
        self.starved = False  # the lasting shrink happened: gpu=2 jobs waiting then end held with why
        self.threads: list[threading.Thread] = []
        self.stop = threading.Event()
        self.receiver = Receiver()  # the "tick" schedule's jobs ping it (the outbox audit)

    # ---------------------------------------------------------------- setup
    @property
    def wrap(self) -> list[str] | None:
        return power.over_power(self.power) if self.power is not None else None

    def config(self) -> str:
        """The daemon's [resources] as they are now."""
        return "[resources]\n" + "".join(f"{k} = {v}\n" for k, v in self.resources.items())

    def start(self) -> None:
        """The schedules (through the real CLI), the flapping charger and the stopped-tree watcher."""
        s = self.soak
        for name, every, missed, overlap, hold in SCHEDULES:
            ping = ["--ping", f"{self.receiver.url}/{name}"] if name == "tick" else []
            p = s.cli("schedule", "add", name, "--every", every, "--missed", missed, "--overlap", overlap,
                      "--lane", "sched", *ping, "--json", "--", s.probe_python, s.probe, str(s.rec), "--hold", hold)
            if p is not None and p.returncode != 0:
                s.violation(f"schedule add {name} exited {p.returncode}: {p.stderr.strip()[:300]}", "schedules")
        p = s.cli("schedule", "add", HAND, "--every", "1h", "--lane", "sched", "--", "true")
        if p is not None and p.returncode != 0:
            s.violation(f"schedule add {HAND} exited {p.returncode}: {p.stderr.strip()[:300]}", "schedules")
        for target in ([self.flap] if self.power is not None else []) + [self.watch_stopped]:
            t = threading.Thread(target=target, name=target.__name__, daemon=True)
            t.start()
            self.threads.append(t)

    # ------------------------------------------------------------ the jobs
    def job(self, kind: str, rng: Any, base: list[str]) -> tuple[str, list[str], dict[str, Any], list[str]]:
        """(lane, argv, spec fields, CLI flags) of a machinery kind."""
        hold = f"{rng.uniform(0.2, 2.0):.2f}"
        if kind == "gpu":
            n = rng.choice([1, 1, 1, 2])
            needs = {"gpu": n} if rng.random() < 0.8 else {"gpu": n, "lic": 1}
            return ("gpu", base + ["--res", ",".join(needs), "--hold", hold], {"needs": needs},
                    [f"--needs={k}={v}" for k, v in needs.items()])
        if kind == "wide":
            n = rng.choice([1, 1, 2, 3])
            return ("wide", base + ["--lane-slots", f"wide:3:{n}", "--hold", hold], {"slots": n},
                    [f"--slots={n}"])
        lost = rng.choice(["continue", "stop", "pause"])  # power
        return ("power", base + ["--hold", hold], {"when": ["ac"], "on_lost": lost},
                ["--when=ac", f"--on-lost={lost}"])

    # ------------------------------------------------------------ the power
    def flap(self) -> None:
        """The charger in and out every 1-4 s while the chaos lasts; in at the end."""
        assert self.power is not None
        rng = random.Random(self.soak.seed + 7)
        online = True
        while not self.stop.wait(rng.uniform(1.0, 4.0)):
            online = not online
            power.plug(self.power, online)
            self.flips.append((time.time(), online))
        power.plug(self.power, True)
        self.flips.append((time.time(), True))

    # ------------------------------------------------------- stopped trees
    def watch_stopped(self) -> None:
        """Job processes seen stopped (T): each seen again 2 s later is
        judged against the daemon's word on its job (not while we hold the
        keeper or daemon stopped: then nobody can continue or end it)."""
        first: dict[int, float] = {}
        judged: set[int] = set()
        while not self.soak.abort.wait(0.5):
            if self.soak.frozen:
                first.clear()
                continue
            now = time.monotonic()
            for p in self.soak.h.our_processes():
                try:
                    if p.status() != psutil.STATUS_STOPPED or p.pid in judged:
                        continue
                    env = p.environ()
                except psutil.Error:
                    continue
                if "SLOTH_JOB_ID" not in env:
                    continue
                since = first.setdefault(p.pid, now)
                if now - since < 2.0:
                    continue
                try:
                    job = self.soak.ask("show", timeout_s=5, id=int(env["SLOTH_JOB_ID"]))["job"]
                    still = p.status() == psutil.STATUS_STOPPED
                except Exception:  # the daemon down for now, or the process gone: look again later
                    continue
                if not still or self.soak.frozen:
                    continue
                seen = StoppedSeen(p.pid, int(env["SLOTH_JOB_ID"]), env.get("SLOTH_JOB_TOKEN", "?"),
                                   job["state"], job.get("token"), time.monotonic() - since)
                if audits.stopped([seen]):
                    judged.add(p.pid)  # left stopped: said once
                    self.stopped_seen.append(seen)
                else:
                    first[p.pid] = time.monotonic()  # paused on purpose, its run still going: look again later
                    self.soak.count("stopped_on_purpose_seen")

    # ---------------------------------------------------------------- acts
    def act_pausejobs(self) -> None:
        """Pause a few running jobs; a thread of its own resumes them 0.3-4 s later."""
        s = self.soak
        ids: list[int] = []
        for tries in range(10):  # asked again while the daemon does not answer (a kill -9 or a stop just before)
            if s.abort.is_set():
                return
            if tries:
                s.sleep(1.0)
            try:
                running = [j["id"] for lane in ("slow", "gpu", "wide", "power")
                           for j in s.ask("list", lane=lane, states=["running"], limit=1000)["jobs"]]
            except s.transient as e:
                s.note(f"pausejobs: no list: {e!r}")
                continue
            ids = sorted(s.rng.sample(running, min(len(running), s.rng.randint(1, 4))))
            if not ids:
                s.count("pause_no_target")
                return
            paused = self._pause(ids, resume=False)
            if paused is not None:
                if not paused:  # answered, but each had ended between the list and the pause (skipped)
                    s.count("pause_no_target")
                break
        else:  # the last ask may have landed unanswered: the resume below is asked all the same
            s.count("pause_unanswered")
            if not ids:
                return
        t = threading.Thread(target=self._resume_later, args=(ids, s.rng.uniform(0.3, 4.0)), daemon=True)
        t.start()
        self.threads.append(t)

    def _resume_later(self, ids: list[int], after_s: float) -> None:
        """As a user would: asked again while the daemon does not answer (a kill -9 meanwhile)."""
        self.soak.sleep(after_s)
        for _ in range(5):
            if self._pause(ids, resume=True) is not None or self.soak.abort.is_set():
                return
            self.soak.sleep(1.0)

    def _pause(self, ids: list[int] | None, resume: bool) -> int | None:
        """Pause (resume) ``ids`` (None: every running job): how many were; None if no answer came."""
        s = self.soak
        try:
            args: dict[str, Any] = {"ids": ids} if ids else {}
            res = s.ask("resume_jobs" if resume else "pause_jobs", **args)
        except s.transient as e:
            s.note(f"{'resume' if resume else 'pause'} of {ids} got no answer: {e!r}")
            return None
        kind = "continued" if resume else "paused"
        for j in res["jobs"]:
            self.answered.append((j["id"], kind))
        s.count(f"jobs_{kind}", len(res["jobs"]))
        s.note(f"{kind}: {[j['id'] for j in res['jobs']]} (skipped {res.get('skipped')})")
        return len(res["jobs"])

    def act_edits(self) -> None:
        """A few held jobs in the one-slot lane `edits`; then rounds of
        edit (label, priority, command), bump, hold and release of them."""
        s = self.soak
        batch = s.burst(EDITS_LANE, s.rng.randint(3, 6), holds=("0.2", "0.4"), hold=True)
        for j in batch:
            if j.id is not None:
                self.targets[j.id] = EditTarget(j.id, held=[(_boot(), float("inf"))])
        live = [j.id for j in batch if j.id is not None]
        for n in range(s.rng.randint(4, 10)):
            if not live:
                return
            op = s.rng.choice(["edit", "edit", "edit", "bump", "hold", "release", "release"])
            ids = sorted(s.rng.sample(live, min(len(live), s.rng.randint(1, 2))))
            self._edit_op(op, ids, n)
            s.sleep(s.rng.uniform(0.02, 0.3))
        self._edit_op("release", live, -1)

    def _edit_op(self, op: str, ids: list[int], n: int) -> None:
        s = self.soak
        tag = f"{s.seed}.{len(self.targets)}.{n}"
        if op == "release":
            for i in ids:  # asked now: a start from here on is allowed
                self.targets[i].held = [(a, min(b, _boot())) for a, b in self.targets[i].held]
        try:
            if op == "edit":
                t = self.targets[ids[0]]
                changes: dict[str, Any] = {}
                if s.rng.random() < 0.6:
                    changes["label"] = f"l{tag}"
                if s.rng.random() < 0.5:
                    changes["priority"] = s.rng.randint(-5, 5)
                if s.rng.random() < 0.5 or not changes:
                    changes["command"] = [s.probe_python, s.probe, str(s.rec), "--hold", "0.2", "--mark", f"m{tag}"]
                res = s.ask("edit", id=t.id, changes=changes)
                if res.get("changed"):
                    job = res["job"]
                    t.edits += 1
                    t.label = job.get("label") if "label" in changes else t.label
                    t.priority = job.get("priority") if "priority" in changes else t.priority
                    t.mark = f"m{tag}" if "command" in changes else t.mark
                s.count("edits_acked")
                return
            res = s.ask(op, ids=ids)
        except s.transient as e:
            if getattr(e, "code", None) in ("illegal_transition", "not_found", "bad_request"):
                s.count(f"{op}_refused")  # it started meanwhile: refused, nothing changed
                return
            s.note(f"{op} of {ids} got no answer: {e!r}")
            for i in ids:
                self.targets[i].unsure = True
            return
        s.count(f"{op}_acked", len(res.get("jobs", [])))
        for j in res.get("jobs", []):
            got = self.targets.get(j["id"])
            if got is None:
                continue
            t = got
            if op == "bump":
                t.priority = j["priority"]
            elif op == "hold" and j.get("state") == "held":
                t.held.append((_boot(), float("inf")))

    def release_all(self) -> None:
        """Every held job of lane `edits` released (the end of the chaos)."""
        now = _boot()
        for t in self.targets.values():
            t.held = [(a, min(b, now)) for a, b in t.held]
        try:
            self.soak.ask("release", lane=EDITS_LANE)
        except self.soak.transient as e:
            self.soak.violation(f"release --lane {EDITS_LANE} at the end: {e!r}", "edits")

    def act_shrink(self) -> None:
        """`[resources]` shrunk and reloaded, and after a few seconds put back;
        once late in the chaos, shrunk below what a gpu=2 job needs and left
        so: a gpu=2 job then is refused at add, or held, the daemon saying
        it can never run here (judged by never_here); the rest must run on."""
        s = self.soak
        if self.starved:  # for good: a reload back to more would release what it held
            s.count("shrinks after the lasting one (skipped)")
            return
        lasting = self.starve_due()
        if lasting:  # three gpu=1 runs take every token, a gpu=2 job waits behind them, gpu=1 jobs behind it
            self.queue_gpu([1, 1, 1, 2, 2, 1, 1, 1, 1])
            s.sleep(0.3)
        self.reload(STARVED if lasting else SHRUNK)
        if lasting:
            self.starved = True
            self.queue_gpu([1, 2, 1])  # the gpu=2 one refused at add, saying why; the others added
            self.queue_gpu([2], via_cli=True)  # and by `sloth add`: exit 2, the same words
            return
        s.sleep(s.rng.uniform(2.0, 6.0))
        self.reload(FULL)

    def queue_gpu(self, needs: list[int], via_cli: bool = False) -> None:
        """gpu jobs in one add, in this order (the same priority: first added, first looked at)."""
        from tests.chaos_soak import LJob
        s = self.soak
        first = len(s.jobs)
        batch = [LJob(f"soak-{s.seed}-g{first + i}", "gpu", "gpu",
                      [s.probe_python, s.probe, str(s.rec), "--res", "gpu", "--hold", "1.5" if i < 3 else "0.3"],
                      s.cfg.max_attempts, None, via_cli, extra={"needs": {"gpu": n}}, cli_flags=[f"--needs=gpu={n}"])
                 for i, n in enumerate(needs)]
        s.jobs.extend(batch)
        s.add_batch(batch, s.add_rng)
        s.note(f"gpu jobs needing {needs}: ids {[j.id for j in batch]}")

    def beyond(self, job: "LJob") -> tuple[str, int, int] | None:
        """(resource, need, tokens) of a need of ``job`` beyond the tokens
        last written to [resources] (the lasting shrink's), None: it fits."""
        for name, n in job.extra.get("needs", {}).items():
            have = len(json.loads(self.resources[name])) if self.resources[name].startswith("[") \
                else int(self.resources[name])
            if n > have:
                return name, n, have
        return None

    def never_here(self, said: str, job: "LJob") -> bool:
        """``said`` (an add's refusal, a held job's wait_reason) is the
        daemon's word that this machine can never run ``job``, and it is
        right: the need it names is the job's, beyond the tokens the soak
        gave it (only after the lasting shrink: the short one leaves every
        need possible)."""
        m = NEVER_HERE.search(" ".join(said.split()))  # the CLI's error may be wrapped
        return m is not None and self.beyond(job) == (m[1], int(m[2]), int(m[3]))

    def starve_due(self) -> bool:
        s = self.soak
        return s.cfg.starve and not self.starved and time.monotonic() > s.chaos_started + 0.8 * s.cfg.duration_s

    def reload(self, resources: dict[str, str]) -> None:
        s = self.soak
        self.resources = dict(resources)
        path = s.h.home / "config.toml"
        path.write_text(s.good_config())
        p = s.cli("daemon", "reload", timeout_s=20)
        s.count(f"resource reloads ({resources['gpu']})")
        s.note(f"reload: gpu = {resources['gpu']}")
        if p is not None and p.returncode != 0:
            s.violation(f"reload with gpu = {resources['gpu']} exited {p.returncode}: {p.stderr.strip()[:300]}",
                        "resources")

    def act_schedrun(self) -> None:
        """`schedule run` of a `true` schedule a few times 0.1 s apart: each
        queues a job or names the one still queued, never a silent nothing
        (issue 28.6: a second run in the same second, the first one done)."""
        s = self.soak
        for _ in range(4):
            try:
                res = s.ask("schedule_run", name=HAND)
            except s.transient as e:
                s.note(f"schedule run: {e!r}")
                continue
            self.schedule_runs_answered.append(res.get("id"))
            s.count("schedule_runs")
            s.sleep(0.1)

    # ----------------------------------------------------------- the end
    def finish(self) -> None:
        """The chaos is over: the charger in, every pause resumed, every held job released, schedules paused."""
        self.stop.set()
        s = self.soak
        for t in self.threads:
            if t.name != "watch_stopped":
                t.join(15)
        self._pause(None, resume=True)
        self.release_all()
        jumped = max((b for _, b in s.windows.get("jump", ())), default=0.0)
        s.sleep(jumped + JUMP_SEEN_S - time.time())  # a jump the daemon never saw is no slot it failed to handle
        self.caught_up()
        for name in [n for n, *_ in SCHEDULES] + [HAND]:
            try:
                s.ask("schedule_pause", name=name)
            except s.transient as e:
                s.violation(f"schedule pause {name}: {e!r}", "schedules")
        self.paused_at = time.time() + (s.clock.offset if s.clock is not None else 0.0)

    def caught_up(self) -> None:
        """Until the daemon has handled every slot its clock says is due
        (each schedule's next slot ahead of it), CATCH_UP_S at most: a loaded
        machine's daemon may hear a clock jump a few seconds late, and a slot
        it then handles is no slot missed; one still due after that is (the
        schedule_slots audit says so)."""
        s = self.soak
        end = time.monotonic() + CATCH_UP_S
        while time.monotonic() < end:
            now = time.time() + (s.clock.offset if s.clock is not None else 0.0)
            try:
                listed = s.ask("schedule_ls")["schedules"]
            except s.transient:
                listed = None
            if listed is not None and all(x["paused"] or x["next_slot"] + x["jitter_offset_s"] > now
                                          for x in listed):
                return
            s.sleep(0.2)

    def audit(self, db: Path, per_job_ran: dict[int, set[int]], excused: set[tuple[int, int]],
              fig: dict[str, Any]) -> None:
        """Every audit of soak_audits.py over the queue file and the records."""
        s = self.soak
        c = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
        c.row_factory = sqlite3.Row
        try:
            events = [Ev(r["id"], r["job_id"], r["kind"], r["attempt"], r["message"] or "")
                      for r in c.execute("SELECT id, job_id, kind, attempt, message FROM events")]
            rows = {r["id"]: dict(r) for r in c.execute("SELECT id, state, label, priority, command, key FROM jobs")}
            scheds = [dict(r) for r in c.execute("SELECT * FROM schedules")]
            runs = [dict(r) for r in c.execute("SELECT * FROM schedule_runs")]
            box = [dict(r) for r in c.execute("SELECT key, state FROM outbox")]
            pinging = [(r["id"], r["attempts"], r["state"]) for r in c.execute(
                "SELECT id, attempts, state FROM jobs WHERE tell IS NOT NULL")]
        finally:
            c.close()
        for r in rows.values():
            r["command"] = json.loads(r["command"]) if r["command"] else []
        found: dict[str, list[str]] = {}
        found["history"] = audits.history(events, per_job_ran, excused)
        by_key: dict[str, list[int]] = defaultdict(list)
        for r in rows.values():
            if (r["key"] or "").startswith("schedule:"):
                by_key[r["key"]].append(r["id"])
        slots: list[str] = []
        for sc in scheds:
            recipe = json.loads(sc["recipe"])
            seen = ScheduleSeen(sc["name"], int(recipe["every_s"]), int(recipe["anchor"]), int(sc["next_slot"]),
                                [r for r in runs if r["schedule"] == sc["name"]], self.paused_at or time.time())
            slots += audits.schedule_slots(seen, by_key)
        if len(scheds) != len(SCHEDULES) + 1:
            slots.append(f"{len(scheds)} schedules in the queue, {len(SCHEDULES) + 1} made")
        found["schedule_slots"] = slots
        fig["schedule_jobs"] = sum(len(v) for v in by_key.values())
        fig["schedule_slot_rows"] = len(runs)
        fig["slots_coalesced"] = sum(audits.coalesced(r["note"]) for r in runs)
        not_done = [i for ids in by_key.values() for i in ids if rows[i]["state"] != "done"]
        if not_done:
            slots.append(f"schedule jobs not done: {not_done[:10]}")
        found["schedule_run"] = [f"schedule run answered ok with no job (answer {i!r})"
                                 for i in self.schedule_runs_answered if not isinstance(i, int)]
        marks: dict[int, list[str]] = defaultdict(list)
        for rec in s.read_records("marks", ts=False):
            marks[int(rec[0])].append(rec[3])
        spawned: dict[int, list[float]] = defaultdict(list)
        for rec in s.read_records("spawned"):
            spawned[int(rec[0])].append(float(rec[4]))
        found["edits"] = audits.edits(self.targets.values(), rows, events, marks, spawned)
        found["acks"] = audits.acks(self.answered, events)
        found["stopped"] = audits.stopped(self.stopped_seen)
        with self.receiver.lock:
            took = [e.headers.get("idempotency-key", "") for e in self.receiver.effects]
        found["outbox"] = audits.outbox(box, pinging, [k[k.index("job:"):] for k in took if "job:" in k])
        fig.update(outbox_messages=len(box), outbox_sent_twice=len(self.receiver.requests) - len(took),
                   outbox_pending=sum(m["state"] == "pending" for m in box))
        self.receiver.close()
        found["tokens"] = audits.collisions(s.read_records("token_collisions", ts=False), "a resource token")
        found["slots"] = audits.collisions(s.read_records("slot_collisions", ts=False), "a lane slot")
        left = [p.pid for p in s.h.our_processes() if _stopped(p)]
        if left:
            found["stopped"].append(f"processes still stopped after every job ended: {left}")
        for name, vs in found.items():
            fig[f"audit {name}"] = len(vs)
            for v in vs:
                s.violation(v, name)
        fig.update(edit_targets=len(self.targets), stopped_seen=len(self.stopped_seen),
                   power_flips=len(self.flips) - 1 if self.flips else 0, no_power=self.power is None)


def _stopped(p: psutil.Process) -> bool:
    try:
        return p.status() == psutil.STATUS_STOPPED
    except psutil.Error:
        return False


def _boot() -> float:
    return time.clock_gettime(time.CLOCK_BOOTTIME)


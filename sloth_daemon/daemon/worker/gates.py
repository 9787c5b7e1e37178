"""Gates: which jobs with run conditions, needs or slots may start here now.

A job with a gate (checks.gate_json) is in no claim index: the ordinary
claim never sees it (backends/*/pick.py), so a thousand jobs waiting for
mains power cost a claim nothing. Each claim of a turn, :meth:`Gates.pick`
  1. lists the distinct gates of queued jobs (a skip scan: one seek when
     there are none) and judges each gate's conditions once (Conditions
     keeps what it saw for ``conditions_check_s``);
  2. asks for the head of each (gate, lane) whose conditions hold, and the
     gated jobs whose lease expired, most urgent first;
  3. walks them: a job in a lane reserved by a job before it is skipped; a
     job that needs more slots than its lane has free reserves the lane (no
     other job of the lane starts until it fits: it is not starved by
     one-slot jobs); a job that needs tokens not free reserves what is free
     of them (resources.py, the rule); the first that may start is the pick,
     which the queue claims only if it is at least as urgent as the best
     ungated job (the queue compares, in the claim's transaction);
  4. says why each gate's jobs wait (``wait_reason``: ``ls``, ``show``), one
     UPDATE per gate whose reason changed.
A lane whose config names conditions (``[lanes.NAME] when``) is left out
of every claim while they do not hold.

A condition lost while a job runs: ``--on-lost stop`` ends the run and
requeues it without spending a try (outcomes.py); ``pause`` stops its tree
in the keeper (pausing.py) and continues it once the conditions hold again.
Only a pause the conditions made is continued by them (``cond_paused``, kept
in the queue's meta table across daemon restarts): one a user asked for
stays until the user resumes it. While a condition stays lost, the policy
wins: a run the user resumes by hand is paused again at the next look.

Watching costs nothing while no job waits on a condition and none runs
under one with ``--on-lost stop`` or ``pause``: then :meth:`deadline` is None and the
worker sleeps as before. While some do, the worker wakes every
``conditions_check_s`` (30 s by default; a turn of the daemon's own loop,
no thread per job) and looks again.
"""

from __future__ import annotations

import json
import logging
from typing import Any, Collection, Iterable, Mapping

from sloth_daemon.config import Settings
from sloth_daemon.daemon.conditions import Conditions, Unobservable, kind_of, needs_power
from sloth_daemon.daemon.gpus import GpuProbe, Reading, format_size_short, unfit
from sloth_daemon.daemon.resources import GPU, Resources, Tokens, Unfit, gpu_mem_of, needs_of, split_token
from sloth_daemon.daemon.worker.lanes import Lanes
from sloth_daemon.daemon.worker.lifecycle import Attempt
from sloth_daemon.daemon.worker.runs import Attempts
from sloth_daemon.errors import BadRequest, SlothError
from sloth_daemon.models import Job
from sloth_daemon.protocol import dumps
from sloth_daemon.queue import Queue

log = logging.getLogger("sloth.gates")


class Gates:
    """See the module docstring. State: the reasons told per gate and lane,
    whether anything is watched, the parsed gates. Collaborators: the
    queue, the worker's runs and lanes, the conditions and resources."""

    def __init__(self, queue: Queue, running: Attempts, lanes: Lanes, settings: Settings,
                 conditions: Conditions, resources: Resources, *, places: list[str] | None,
                 host: str | None = None, meta_key: str = "cond_paused", gpus: GpuProbe | None = None) -> None:
        """``host``: on a shared queue, this machine's name (its jobs are
        placed there: only it may run them); None: every job is this machine's."""
        self.queue, self.running, self.lanes, self.settings = queue, running, lanes, settings
        self.conditions, self.resources, self.places, self.host = conditions, resources, places, host
        self.told: dict[str, str | None] = {}  # gate -> the reason its jobs were last told
        self.retell = False  # jobs came (a wake): tell every reason again, for those that came since
        self.watching = False  # a job waits on, or runs under, a condition: look every conditions_check_s
        self.watching_power = False  # ... and one of them is ac or battery (power events: conditions.PowerEvents)
        self.later: float | None = None  # when the first gated job not yet due becomes due (queue clock)
        self.reserved: set[str] = set()  # lanes held for a job waiting for slots (the last pick's)
        self.impossible: set[tuple[str, str]] = set()  # (gate, lane) of the walk's jobs this machine can never run
        # Look for gated jobs whose lease expired (their holder died with its keeper) although no
        # gated job is queued: set at each clock check (every clock_check_s), not at every claim.
        self.look_expired = True
        self._parsed: dict[str, dict[str, Any]] = {}
        self.meta_key = meta_key
        self.cond_paused: set[int] = set(queue.get_meta(meta_key, []))  # jobs whose run a lost condition paused
        self.pausing: set[int] = set()  # a pause or continue asked of the keeper, not yet answered
        self.gpus = gpus or GpuProbe()  # nvidia-smi's reading (daemon/gpus.py)
        self.gpu_waiting = False  # a job waits on what nvidia-smi says: look again now and then (gpuwatch.py)

    def reload(self, settings: Settings, resources: Resources) -> None:
        self.settings, self.resources = settings, resources
        self.conditions.max_age_s = settings.conditions_check_s
        self.conditions.forget()
        self.lanes.held_back = {}  # judged again at the next claim (a lane's `when` may be gone)

    # ------------------------------------------------------------ at add
    def check_spec(self, gate_json: str | None, lane: str, cwd: str | None) -> None:
        """Refuse (BadRequest) a gate this machine can never meet: a
        condition it cannot observe, needs beyond its tokens, more slots
        than the lane has."""
        if gate_json is None:
            return
        gate = self.parse(gate_json)
        self.conditions.observable(gate.get("when", ()), cwd)
        err = self.never(gate, lane)
        if err is not None:
            raise err

    def check_lane(self, lane: str, settings: Settings | None = None) -> None:
        """Refuse (Unobservable, a BadRequest) a lane whose ``when`` (in
        ``settings``, else those in force) this machine cannot observe: its
        jobs would wait for ever. At add, and at a reload (main.py)."""
        when = (settings or self.settings).lane_when.get(lane)
        if not when:
            return
        try:
            self.conditions.observable(when)
        except Unobservable as e:
            raise Unobservable(f"lane {lane!r} ([lanes.{lane}] when in config.toml): {e.message}",
                               hint=e.hint) from None

    def never(self, gate: Mapping[str, Any], lane: str) -> BadRequest | None:
        """Why this machine can never run a job of ``gate`` in ``lane`` as
        its resources and lanes are now (None: it can, once they are free):
        the one rule of add (check_spec), of a reload and `lane set`
        (sweep) and of the claim (a job it holds is never looked at to
        reserve anything)."""
        err = self.resources.never(needs_of(gate)) or self._never_gpu_mem(gate)
        if err is not None:
            return err
        slots, conc = gate.get("slots", 1), self.lanes.concurrency(lane)
        if slots > conc:
            return BadRequest(f"--slots {slots}: it needs {slots} slots and lane {lane!r} runs {conc} job(s) at once,"
                              " so it would never start",
                              hint=f"Give the lane more: `sloth lane set {lane} -c {slots}` (or [lanes] in config).")
        return None

    def _never_gpu_mem(self, gate: Mapping[str, Any]) -> BadRequest | None:
        """``--needs gpu-mem`` where nvidia-smi cannot say it, or more than any GPU here has."""
        want = gpu_mem_of(gate)
        if want is None:
            return None
        if not self.gpus.present():
            return BadRequest("--needs gpu-mem: this machine has no nvidia-smi to say how much GPU memory is free",
                              hint="Leave gpu-mem out (--needs gpu=1 alone), or install the NVIDIA driver's tools.")
        r = self.gpus.reading
        mine = [g for g in r.gpus if any(g.named(t) for t in self.resources.tokens.get(GPU, ()))] if r else []
        if mine and all(g.total is not None and g.total < want for g in mine):
            most = max(g.total or 0 for g in mine)
            return BadRequest(f"--needs gpu-mem={format_size_short(want)}: the largest GPU here has"
                              f" {format_size_short(most)}", hint="Ask for at most that much.")
        return None

    def never_job(self, job: Job) -> str | None:
        """Why this machine can never run ``job`` (None: it can, or another machine may)."""
        if not job.gate or (self.host is not None and job.place != self.host):
            return None
        err = self.never(job.gate, job.lane)
        return None if err is None else err.message

    def sweep(self, lanes: Iterable[str] | None = None) -> list[str]:
        """After a reload or a `lane set` (``lanes``: only these lanes'
        slots changed): hold every queued job of this machine that it can
        never run now and say why of every held one; a held one that can
        run again forgets why. Returns what it said, a line per gate and lane."""
        said = []
        for text in sorted(set(self.queue.gates()) | set(self.queue.held_gates())):
            gate = self.parse(text)
            err = self.resources.never(needs_of(gate)) or self._never_gpu_mem(gate)
            if err is not None:
                said += self._hold(text, None, err.message)
                continue
            if gate.get("slots", 1) <= 1:  # fits every lane: only the resources may have changed
                said += self._hold(text, None, None) if lanes is None else []
                continue
            for lane in sorted(self.lanes.known() if lanes is None else lanes):
                err = self.never(gate, lane)
                said += self._hold(text, lane, None if err is None else err.message)
        return said

    def _hold(self, text: str, lane: str | None, why: str | None) -> list[str]:
        """Hold the jobs of ``text`` (in ``lane``) that only this machine may
        run, saying ``why``; None: forget why of the held ones (they can run)."""
        try:
            ids = self.queue.hold_never(text, why, lane=lane, place=self.host)
        except SlothError as e:
            log.warning("cannot hold jobs that can never run here: %s", e.message)
            return []
        if not ids:
            return []
        shown = ", ".join(map(str, ids[:10])) + (f" and {len(ids) - 10} more" if len(ids) > 10 else "")
        one = len(ids) == 1
        line = (f"held job{'' if one else 's'} {shown}: {why}" if why is not None else
                f"job{'' if one else 's'} {shown} can run now: `sloth release {ids[0]}{'' if one else ' ...'}`")
        log.info("%s", line)
        self.retell = True
        return [line]

    def parse(self, text: str) -> dict[str, Any]:
        hit = self._parsed.get(text)
        if hit is None:
            hit = self._parsed[text] = json.loads(text)
        return hit

    # ------------------------------------------------------------ lanes
    def lanes_waiting(self) -> set[str]:
        """Lanes whose configured conditions do not hold now (left out of claims)."""
        reasons = {}
        for lane, when in self.settings.lane_when.items():
            why = self.conditions.first_reason(when)
            if why is not None:
                reasons[lane] = why
        self.lanes.held_back = reasons  # said as why its jobs wait (Lanes.why)
        return set(reasons)

    # ------------------------------------------------------------- pick
    def pick(self, blocked: Collection[str],
             mine: Collection[int]) -> tuple[tuple[Job, Tokens | None] | None, set[str]]:
        """The gated job that may start now and the tokens it gets (or None),
        and the lanes reserved for gated jobs waiting for slots (not to be
        claimed from)."""
        texts = self.queue.gates()
        watched = bool(self.lanes.held_back) and self.queue.next_due_at(
            sorted(self.lanes.held_back), places=self.places) is not None  # a lane's `when` holds jobs back
        power = watched and any(needs_power(self.settings.lane_when.get(ln, ())) for ln in self.lanes.held_back)
        reasons: dict[str, str | None] = {}
        admitted = []
        for text in texts:
            when = [c for c in self.parse(text).get("when", ()) if kind_of(c) != "disk"]
            watched |= bool(self.parse(text).get("when"))
            power |= needs_power(self.parse(text).get("when", ()))
            reasons[text] = why = self.conditions.first_reason(when)
            if why is None:
                admitted.append(text)
        runs = [r for r in self.running.values() if self._lost_policy(r)]
        self.watching = watched or bool(runs)
        self.watching_power = power or any(needs_power((r.job.gate or {}).get("when", ())) for r in runs)
        if not texts and not self.look_expired:
            self.later, self.reserved = None, set()
            self._tell({})
            return None, set()
        self.look_expired = False
        heads, self.later = self.queue.gated_heads(admitted, exclude_lanes=blocked, exclude_ids=mine,
                                                   places=self.places)
        choice, self.reserved = self._walk(heads, reasons, {t for t in texts if reasons[t] is not None})
        for text, lane in sorted(self.impossible):  # released, or queued while this machine had more
            err = self.never(self.parse(text), lane)
            if err is not None:
                self._hold(text, lane, err.message)
        self.impossible.clear()
        self._tell(reasons)
        return choice, self.reserved

    def _walk(self, heads: Iterable[Job], reasons: dict[str, str | None],
              failed: set[str]) -> tuple[tuple[Job, Tokens | None] | None, set[str]]:
        """Step 3 of the module docstring; ``failed``: gates whose conditions do not hold."""
        free = self.resources.free(self.tokens_in_use())
        idle = {name: dict(toks) for name, toks in free.items()}  # free before any is kept for a job
        used = self.running.slots_in_use()
        self.gpu_waiting = False
        gpu_view = _GpuView(self)
        reserved: set[str] = set()
        for job in heads:
            gate = job.gate or {}
            text = dumps(gate, compact=True)  # as checks.gate_json stored it
            if job.lane in reserved or text in failed:  # failed: an expired lease of a gate that does not hold
                continue
            if self.never(gate, job.lane) is not None:  # it reserves nothing; held if only this machine may run it
                if self.host is None or job.place == self.host:
                    self.impossible.add((text, job.lane))
                continue
            judged = text in reasons  # else an expired lease's gate no queued job has: judged whole here
            why = self.conditions.first_reason([c for c in gate.get("when", ()) if not judged or kind_of(c) == "disk"],
                                               job.cwd)
            if why is not None:
                reasons[text] = why
                continue
            slots, conc = gate.get("slots", 1), self.lanes.concurrency(job.lane)
            if used.get(job.lane, 0) + slots > conc:
                reserved.add(job.lane)
                reasons[text] = (f"waiting for {slots} free slots in lane {job.lane}"
                                 f" ({max(conc - used.get(job.lane, 0), 0)} of {conc} free)")
                continue
            wants = self.resources.wants(gate)
            # nvidia-smi is asked only for a job sloth's own accounting could start now
            could = GPU in wants and self.resources.take(wants, {n: dict(t) for n, t in free.items()}) is not None
            fit, waits = gpu_view.rule(gate) if could else (None, None)
            if waits is not None:  # no reading of the GPUs yet: it reserves nothing (a CPU job behind it runs)
                # a reading being taken: what it said last still stands
                reasons[text] = (self.told.get(text) or waits) if waits == PENDING else waits
                continue
            short = self.resources.shortage(wants, free, idle, fit) if wants else ""
            got = self.resources.take(wants, free, fit) if wants else {}
            if got is None:
                reasons[text] = short
                self.gpu_waiting |= fit is not None
                continue
            if text in reasons:
                reasons[text] = None
            return (job, got or None), reserved
        return None, reserved

    def tokens_in_use(self) -> list[Tokens]:
        """The tokens of every run this worker holds that has not ended."""
        return [r.job.tokens for r in self.running.values() if r.outcome is None and r.job.tokens]

    def gpu_promised(self) -> dict[str, list[tuple[str, int]]]:
        """GPU token -> (run token, gpu-mem asked) of each run holding it (gpus.unfit)."""
        out: dict[str, list[tuple[str, int]]] = {}
        for r in self.running.values():
            mem = gpu_mem_of(r.job.gate) if r.outcome is None and r.job.tokens else None
            for tok, _ in map(split_token, (r.job.tokens or {}).get(GPU, []) if mem else ()):
                out.setdefault(tok, []).append((r.token, mem or 0))
        return out

    def _tell(self, reasons: Mapping[str, str | None]) -> None:
        """Write each gate's reason where it changed (and clear the ones gone)."""
        for text in set(self.told) - set(reasons):
            del self.told[text]
        retell, self.retell = self.retell, False
        for text, why in reasons.items():
            if self.told.get(text, "") == why and not retell:
                continue
            try:
                self.queue.set_waiting(text, why)
                self.told[text] = why
            except SlothError as e:  # said next turn
                log.warning("cannot say why jobs wait: %s", e.message)

    # --------------------------------------------------------- running
    @staticmethod
    def _lost_policy(run: Attempt) -> str | None:
        gate = run.job.gate or {}
        lost = gate.get("on_lost")
        return lost if lost in ("stop", "pause") and gate.get("when") and run.outcome is None else None

    def lost(self) -> list[tuple[Attempt, str, str]]:
        """Runs under ``--on-lost stop`` or ``pause`` whose conditions no
        longer hold (a paused one is not listed again): (run, why, policy)."""
        out = []
        for run in list(self.running.values()):
            policy = self._lost_policy(run)
            if policy is None or run.ending is not None or not run.live or run.job.id in self.pausing \
                    or (policy == "pause" and run.paused):
                continue
            why = self.conditions.first_reason((run.job.gate or {}).get("when", ()), run.job.cwd)
            if why is not None:
                out.append((run, why.removeprefix("waiting for ").removeprefix("waiting: "), policy))
        return out

    def regained(self) -> list[Attempt]:
        """Runs a lost condition paused whose conditions hold again."""
        return [run for run in list(self.running.values())
                if run.job.id in self.cond_paused and run.paused and run.live and run.ending is None
                and run.job.id not in self.pausing
                and self.conditions.first_reason((run.job.gate or {}).get("when", ()), run.job.cwd) is None]

    def paused_by_condition(self, job_id: int, paused: bool) -> None:
        """Remember (or forget) that a lost condition paused this job's run."""
        before = set(self.cond_paused)
        if paused:
            self.cond_paused.add(job_id)
        else:
            self.cond_paused.discard(job_id)
        # forget jobs no longer held here (ended while paused, cancelled)
        self.cond_paused &= set(self.running) | {job_id}
        if self.cond_paused != before:
            try:
                self.queue.set_meta(self.meta_key, sorted(self.cond_paused))
            except SlothError as e:  # the run is paused either way; the next change writes it
                log.warning("cannot record which runs conditions paused: %s", e.message)

    def status(self) -> dict[str, Any]:
        return {"watching": self.watching, "check_s": self.settings.conditions_check_s,
                "waiting": {k: v for k, v in self.told.items() if v}, "lanes": dict(self.lanes.held_back),
                "resources": self.resources.status(self.tokens_in_use()), "looks": self.conditions.looks,
                "gpus": self.gpus.status()}


PENDING = "waiting for nvidia-smi's reading of the GPUs"


class _GpuView:
    """One walk's look at the GPUs: nvidia-smi's reading (taken once, when
    a GPU job first asks) and the rule it gives (gpus.unfit)."""

    def __init__(self, gates: Gates) -> None:
        self.gates = gates
        self.reading: Reading | None = None
        self.looked = False
        self.ours: set[str] | None = None  # the tokens of the runs held (their processes are not outside)

    def rule(self, gate: Mapping[str, Any]) -> tuple[Unfit | None, str | None]:
        """(unfit, None): how GPU tokens are judged for a job of ``gate``; or
        (None, why it waits): the reading is being taken, or it needs
        gpu-mem and nvidia-smi failed. Without nvidia-smi, or when it fails
        and no gpu-mem is asked: sloth's own accounting alone."""
        g = self.gates
        if not self.looked:
            self.looked = True
            self.reading = g.gpus.fresh() if g.gpus.present() else None
            if self.reading is None and g.gpus.present():
                g.gpu_waiting = True
        mem = gpu_mem_of(gate)
        if self.reading is None:
            return (None, PENDING) if g.gpus.present() else (None, None)
        r = self.reading
        if r.error is not None:
            return (None, f"waiting for nvidia-smi (it failed: {r.error})") if mem else (None, None)
        opts = g.settings.resource_opts.get(GPU, {})
        promised = g.gpu_promised() if mem else {}
        outside_max = int(opts.get("outside_max", 0))
        ours = self.ours = self.ours if self.ours is not None else {run.token for run in g.running.values()}
        return (lambda name, tok: None if name != GPU else
                unfit(r, tok, outside_max=outside_max, want_mem=mem, promised=promised, ours=ours)), None


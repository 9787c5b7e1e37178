#!/usr/bin/env python3
"""Chaos soak: the real daemon under kill -9, SIGSTOP, simulated sleep, job
kills and garbage on its socket, while clients keep adding jobs.

    python tests/chaos_soak.py --duration 300 --jobs 3000     # long
    python tests/chaos_soak.py --short                        # CI size (~1 min: every fault once)
    python tests/chaos_soak.py --short --faults cancel,daemonstop   # only these faults

Also importable: ``run_soak(SoakConfig.short())`` returns a ``SoakResult``
whose ``violations`` must be empty (tests/acceptance/test_chaos_short.py).

What runs: the daemon (under the LD_PRELOAD fake clock from the start, so
its wall clock can jump like after a suspend) in a temporary SLOTH_HOME with
short leases. Several client threads enqueue probe jobs (tests/support/
probe_job.py: a non-blocking flock per job, every start and end recorded)
over the socket and through the real ``sloth add --no-start`` CLI, each job
with a unique idempotency key. A mix of kinds:

  quick    exits 0 at once                                   -> done
  slow     holds 1-3 s (past a lease)                         -> done
  flaky    fails until attempt 2 or 3                         -> done
  timeout  holds far past its timeout, max_attempts 2         -> failed
  forker   its work done by a double-forked, setsid grandchild -> done
  short    a lease of its own, the shortest accepted (3-4 s),
           held past it (renewed several times)                -> done

Meanwhile a chaos loop picks at random: kill -9 the daemon and restart it;
SIGSTOP it for 1-4 s (sometimes "sleeping" the clock while it is stopped);
jump its wall clock 10-60 min ahead (a simulated suspend); SIGKILL a running
job process; throw malformed frames at the socket; fill the disk, flood
the socket, hold the queue's write lock, "reboot". And in the middle of a
burst of a few hundred quick jobs added in one request (as `add --file`
does; the keeper holds the next runs of each slot behind the running one):
cancel batches of them a few times in a row (``cancel``), cancel their
whole lane (``cancellane``), `sloth kill` the running ones (``killburst``),
`sloth daemon stop` and start again, a few times, a one-slot lane's burst
(``daemonstop``). SIGSTOP the keeper past its runs' leases while some of
them end by themselves, sometimes the daemon with it (``keeperstop``).
Replace config.toml by a FIFO, a link to /dev/zero, garbage or a huge
number and `sloth daemon reload` (``config``). Ask for a lease too short
to be renewed, at `add` and in config (``leasefloor``: counted; an error
unless --no-lease-floor). Every client call has a timeout: a hang
is a reported failure, never a stuck soak. Clients retry through the
outages; after an ambiguous failure (the request may have been applied
before the daemon died) they look the key up before adding again, so a
retried add never makes a second job.

Round 3's machinery runs through all of it (tests/soak_machinery.py):
schedules firing every 2-5 s (and `schedule run` by hand, ``schedrun``),
running jobs paused and resumed (``pausejobs``), queued ones edited, held,
released and bumped (``edits``), a fake charger plugged in and out every
1-4 s under ``--when ac`` jobs of each ``--on-lost`` policy, ``--needs``
jobs flocking the tokens they were given and ``--slots`` jobs flocking
their lane's slots, and ``[resources]`` shrunk by a reload (``shrink``;
once for good, late, below what a queued gpu=2 job needs: such a job is then
refused at add or held, the daemon saying it can never run here).

Then the daemon is let to finish everything and the invariants are checked:
every job final (done, failed for the timeout kind, cancelled for what we
cancelled or killed), none lost, none duplicated, no two runs of one job at
once (flock collisions, and run intervals from the records), no cancelled
job started after its cancel was answered (cancelled-then-ran), no run that
finished (its probe wrote its end line and exited) run again unless a
reboot lost its end (finished-runs-re-run), attempts/events consistent with
what ran, no daemon re-issuing its own job's lease, no job process left
behind, and no daemon exit other than our kill -9s and stops. And the
audits of tests/support/soak_audits.py, each reported by name: every run's
history complete and in order, one job per schedule slot and none missing,
`schedule run` never a silent nothing, no edit lost and no held job
started, every pause and resume answered in the history, no token or lane
slot held by two live runs, no process tree left stopped after its run
ended. A settle with no progress for ``stall_s`` is a hang (a violation
naming why the waiting jobs wait), not a wait for the settle bound.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import psutil  # noqa: E402

from sloth_daemon import protocol  # noqa: E402
from sloth_daemon.cli.client import Client  # noqa: E402
from sloth_daemon.errors import BadRequest, SlothError  # noqa: E402
from tests.support.faults import (CONFIG_SWAPS, DiskFull, flood, hold_write_lock, restore_config,  # noqa: E402
                                  swap_config)
from tests.support import fakeclock as fc  # noqa: E402
from tests.support.harness import Harness  # noqa: E402
from tests.soak_machinery import MACHINERY, Machinery  # noqa: E402

PROBE = str(REPO / "tests" / "support" / "probe_job.py")
PROBE_SH = str(REPO / "tests" / "support" / "probe_quick.sh")  # the same records in a few ms, for bursts
CHAOS = ("kill9", "reboot", "stop", "jump", "jobkill", "badframes", "diskfull", "flood", "lock",
         "cancel", "cancellane", "killburst", "daemonstop", "keeperstop", "config", "leasefloor") + MACHINERY
# A run that finished and ran again is a failure, except after these: a
# reboot loses what the keeper knew; our own SIGKILL of a job may land
# between its end line and its exit (then it did not finish: it was killed);
# a run still going when its stopped keeper or daemon woke past the lease
# is fenced, and may finish in the moment before the kill lands; and one
# that ended while its keeper was stopped, but (its history says) after
# its trust deadline as far as the kernel can show, is fenced too.
RERUN_ALLOWED = ("reboot", "job kill", "fence after a lapse", "daemon stop as it ended")
ENDING_S = 1.0  # a probe's end line to its exit (the interpreter's teardown), on a loaded machine
LAPSE_GRACE_S = 2.0  # after a stop window: the kill's grace and the woken keeper's first pass
LAPSED = "after its trust deadline"  # in a fenced event: the run's end came (or cannot be shown before) too late
# The chaos windows a finished run's re-run is put down to, when its history names none.
FAULT_CAUSES = {"daemonstop": "daemon stop", "keeperstop": "keeper stop", "kill9": "kill -9",
                "stop": "daemon SIGSTOP", "disk": "full disk", "lock": "foreign lock", "flood": "flood",
                "config": "config swap"}
DAEMON_END_RC = {"kill -9": -signal.SIGKILL, "stop": 0, "idle exit": 0}  # how a daemon ended -> how it must end
# Errors a malformed frame may get back (never "internal error ...").
TYPED_ERRORS = {"protocol", "bad_request", "not_found"}
# Refusals a client meets and tries again after: the daemon down, cut off,
# busy (a flood), or its storage refusing for now (a full disk, a foreign
# lock). Every add is all or none, so trying again never queues twice.
PASSING = {"daemon_not_running", "protocol", "error", "connection_lost", "busy", "not_answering", "storage",
           "storage_busy"}
TRANSIENT = (SlothError, OSError, socket.timeout, ValueError)  # daemon down, reset, cut-off reply


@dataclass
class SoakConfig:
    duration_s: float = 300.0  # the chaos phase
    jobs: int = 3000
    clients: int = 6
    cli_share: float = 0.08  # jobs added through the real `sloth add` CLI
    enqueue_share: float = 0.75  # adds are spread over this share of the chaos phase
    settle_s: float = 600.0  # bound on the wait for everything to finish afterwards
    seed: int | None = None
    mix: dict[str, float] = field(default_factory=lambda: {
        "quick": 0.40, "slow": 0.10, "flaky": 0.17, "timeout": 0.08, "forker": 0.05, "short": 0.05,
        "gpu": 0.06, "wide": 0.05, "power": 0.04})
    slow_hold_s: tuple[float, float] = (1.0, 3.0)
    stop_s: tuple[float, float] = (1.0, 4.0)
    jump_s: tuple[float, float] = (600.0, 3600.0)
    chaos_gap_s: tuple[float, float] = (0.5, 2.5)
    weights: dict[str, float] = field(default_factory=lambda: {
        "kill9": 2, "reboot": 0.5, "stop": 1, "jump": 1, "jobkill": 3, "badframes": 2,
        "diskfull": 1, "flood": 1, "lock": 1, "cancel": 1.5, "cancellane": 0.5, "killburst": 1,
        "daemonstop": 1, "keeperstop": 1, "config": 1, "leasefloor": 0.3,
        "pausejobs": 3, "edits": 1.5, "shrink": 0.7, "schedrun": 0.5})
    faults: tuple[str, ...] | None = None  # the chaos kinds thrown (None: all of CHAOS)
    fault_s: tuple[float, float] = (1.0, 3.0)  # how long a full disk, a flood or a foreign lock lasts
    burst_n: tuple[int, int] = (200, 500)  # quick jobs in one add, for the mid-burst faults
    keeper_stop_s: tuple[float, float] = (4.5, 8.0)  # a SIGSTOPped keeper: well past its runs' 3 s leases
    short_leases: tuple[float, ...] = (3.0, 4.0)  # the "short" kind's own: the shortest accepted (20.4's floor)
    too_short_lease_s: float = 1.0  # a lease that cannot be renewed safely (issue 20.4)
    require_lease_floor: bool = True  # a too-short lease accepted is an error, not just counted
    max_attempts: int = 30  # for the kinds that must end done: room for the chaos
    lanes: dict[str, int] = field(default_factory=lambda: {"default": 4, "slow": 6, "burst": 3, "single": 1,
                                                            "gpu": 4, "wide": 3, "power": 3, "sched": 4,
                                                            "edits": 1})
    power: bool = True  # flap a fake charger (needs a private mount namespace)
    starve: bool = True  # late in the chaos, shrink gpu below a gpu=2 job's need for good (issue 28.2)
    stall_s: float = 60.0  # the settle gives up (a violation) after this long with no progress
    idle_exit_s: float = 0.0  # the daemon's idle_exit_s (docs/idle.md); 0: off, as by default
    dormant_after_s: float | None = None  # the daemon's dormant_after_s (docs/idle.md); None: the default
    keep_home: bool = False
    log: Callable[[str], None] = print

    @classmethod
    def short(cls, **kw: Any) -> "SoakConfig":
        base: dict[str, Any] = dict(
            duration_s=15.0, jobs=300, clients=4, settle_s=60.0, chaos_gap_s=(0.2, 0.8),
            slow_hold_s=(1.0, 2.0), stop_s=(1.0, 2.5), burst_n=(60, 150), keeper_stop_s=(4.5, 5.5),
            mix={"quick": 0.44, "slow": 0.07, "flaky": 0.19, "timeout": 0.07, "forker": 0.04, "short": 0.04,
                 "gpu": 0.06, "wide": 0.05, "power": 0.04},
            stall_s=25.0,
        )
        base.update(kw)
        return cls(**base)

    def daemon_config(self) -> str:
        lanes = "".join(f"{k} = {v}\n" for k, v in self.lanes.items())
        return ('lease_s = "3s"\nclock_check_s = "1s"\nkill_grace_s = "1s"\nconditions_check_s = "1s"\n'
                f'backoff_cap_s = "4s"\nmax_attempts = 3\nidle_exit_s = {self.idle_exit_s}\n'
                + (f"dormant_after_s = {self.dormant_after_s}\n" if self.dormant_after_s is not None else "")
                + f'[lanes]\n{lanes}')


@dataclass
class LJob:
    """One logical job: what a client means to add exactly once."""

    key: str
    kind: str
    lane: str
    argv: list[str]
    max_attempts: int
    timeout_s: float | None
    via_cli: bool
    lease_s: float | None = None  # its own lease (the "short" kind), else the config's
    id: int | None = None
    found_by_lookup: bool = False
    cancelled_at: float | None = None  # when a cancel or kill of it was answered "cancelled"
    cancelled_boot: float | None = None  # the same moment in CLOCK_BOOTTIME (probe_job.py's "spawned")
    cancelled_by: str = ""
    cancel_unsure: bool = False  # a cancel that may have been applied got no answer
    refused: str = ""  # its add was refused, rightly: the machine can never run it (the lasting shrink)
    extra: dict[str, Any] = field(default_factory=dict)  # gates, hold: spec fields of the machinery kinds
    cli_flags: list[str] = field(default_factory=list)  # the same as `sloth add` options

    def spec(self) -> dict[str, Any]:
        s: dict[str, Any] = {"command": self.argv, "key": self.key, "lane": self.lane,
                             "max_attempts": self.max_attempts, **self.extra}
        if self.timeout_s:
            s["timeout_s"] = self.timeout_s
        if self.lease_s:
            s["lease_s"] = self.lease_s
        return s

    @property
    def expected(self) -> str:
        if self.cancelled_at is not None:
            return "cancelled"
        return "failed" if self.kind == "timeout" else "done"


@dataclass
class SoakResult:
    figures: dict[str, Any]
    violations: list[str]
    warnings: list[str]
    home: Path
    log_tail: str = ""
    by_audit: dict[str, list[str]] = field(default_factory=dict)  # "core", or a soak_audits.py audit

    def report(self) -> str:
        f = self.figures
        lines = [
            f"chaos soak (seed {f.get('seed')}): {f.get('jobs', 0)} jobs "
            f"({f.get('jobs_via_cli', 0)} via the CLI, {f.get('clients', 0)} clients) | "
            f"chaos {f.get('chaos_s', 0):.1f} s + settle {f.get('settle_s', 0):.1f} s "
            f"= wall {f.get('wall_s', 0):.1f} s",
            f"  chaos: kill -9 + restart {f.get('kills', 0)} | reboots {f.get('reboots', 0)} | "
            f"SIGSTOP/CONT {f.get('stops', 0)} "
            f"(clock jumps while stopped {f.get('jumps_while_stopped', 0)}) | sleeps (clock jumps) "
            f"{f.get('sleeps', 0)} (+{f.get('slept_s', 0) / 3600:.1f} h in all) | job kills "
            f"{f.get('job_kills', 0)} | bad frames {f.get('bad_frames', 0)}",
            f"  clients: add retries {f.get('add_retries', 0)} | ambiguous adds found applied "
            f"{f.get('found_by_lookup', 0)} | key lookups {f.get('lookups', 0)} | why: "
            + ("; ".join(f"{k[14:]} x{v}" for k, v in sorted(
                ((k, v) for k, v in f.items() if k.startswith("retry reason: ")),
                key=lambda kv: -kv[1])[:3]) or "-"),
            f"  final: {f.get('states', {})} | by kind {f.get('final_by_kind', {})}",
            f"  runs: probe starts {f.get('starts', 0)} | attempts {f.get('attempts', 0)} | "
            f"reclaimed {f.get('reclaimed', 0)} (by their own daemon {f.get('self_reclaims', 0)}) | resumed {f.get('resumed', 0)} | "
            f"timed out {f.get('timed_out', 0)} | killed attempts {f.get('killed_attempts', 0)} | "
            f"starts missing from the history {f.get('unrecorded_starts', 0)}",
            f"  edges: full disk {f.get('disk_windows', 0)} | connection floods {f.get('flood_windows', 0)} "
            f"(up to {f.get('flood_max', 0)} held) | foreign write locks {f.get('lock_windows', 0)}",
            f"  bursts {f.get('bursts', 0)} ({f.get('burst_jobs', 0)} jobs): cancel rounds "
            f"{f.get('cancel_rounds', 0)} ({f.get('cancelled_by_cancel', 0)} cancelled) | lane cancels "
            f"{f.get('lane_cancels', 0)} ({f.get('cancelled_by_lane', 0)}) | sloth kill {f.get('kill_rounds', 0)} "
            f"({f.get('cancelled_by_kill', 0)} killed) | unanswered cancels {f.get('cancels_unsure', 0)} | "
            f"sloth daemon stop + start {f.get('daemon_stops', 0)}",
            f"  keeper SIGSTOP past the lease {f.get('keeper_stops', 0)} (the daemon stopped too "
            f"{f.get('keeper_stops_with_daemon', 0)}; runs that ended while it was stopped "
            f"{f.get('ended_while_keeper_stopped', 0)}) | config swaps: "
            + (", ".join(f"{k[12:]} x{v}" for k, v in sorted(f.items()) if k.startswith("config swap ")) or "-")
            + " | too-short lease: " + (", ".join(f"{k[12:]} x{v}" for k, v in sorted(f.items())
                                                  if k.startswith("lease floor ")) or "-"),
            "  finished runs re-run, by cause: " + (", ".join(
                f"{c} {n}" for c, n in sorted(f.get("reruns_by_cause", {}).items())) or "none")
            + f" (only {', '.join(RERUN_ALLOWED)} may)",
            (f"  idle exit after the settle: {f['idle_exit_after_s']} s\n" if "idle_exit_after_s" in f else "")
            + (f"  dormant spells {f['dormant_spells']}, wakes {f['dormant_wakes']}\n" if "dormant_spells" in f else "")
            + f"  daemon starts: {f.get('daemon_starts', 0)}, spawn -> answering median "
            f"{f.get('ready_median_s', 0):.2f} s, max {f.get('ready_max_s', 0):.2f} s",
            f"  invariants: lost {f.get('lost', '?')} | duplicates {f.get('duplicates', '?')} | "
            f"overlaps {f.get('overlaps', '?')} | cancelled-then-ran {f.get('cancelled_then_ran', '?')} | "
            f"finished-runs-re-run {f.get('finished_reruns', '?')} (+{f.get('finished_reruns_allowed', '?')} "
            f"allowed: {', '.join(RERUN_ALLOWED)}) | collisions {f.get('collisions', '?')} | "
            f"orphans {f.get('orphans', '?')} | unexpected daemon exits "
            f"{f.get('unexpected_exits', '?')} | not final {f.get('not_final', '?')}",
            f"  machinery: power flips {f.get('power_flips', 0)} | jobs paused {f.get('jobs_paused', 0)}, "
            f"continued {f.get('jobs_continued', 0)} | edit targets {f.get('edit_targets', 0)} (edits "
            f"{f.get('edits_acked', 0)}, bumps {f.get('bump_acked', 0)}, holds {f.get('hold_acked', 0)}, "
            f"releases {f.get('release_acked', 0)}, refused {f.get('edit_refused', 0)}) | resource reloads "
            + (", ".join(f"{k[18:-1]} x{v}" for k, v in sorted(f.items()) if k.startswith("resource reloads (")) or "-")
            + f" (then gpu=2 refused at add {f.get('adds refused: can never run here', 0)}, held with why "
            f"{f.get('held: can never run here', 0)})"
            + f" | schedule jobs {f.get('schedule_jobs', 0)} ({f.get('schedule_slot_rows', 0)} slot rows, "
            f"{f.get('slots_coalesced', 0)} slots coalesced), manual runs {f.get('schedule_runs', 0)}",
            "  audits: " + " | ".join(f"{k[6:]} {v}" for k, v in sorted(f.items()) if k.startswith("audit ")),
        ]
        for w in self.warnings[:20]:
            lines.append(f"  warning: {w}")
        if self.violations:
            lines.append(f"  VIOLATIONS ({len(self.violations)}):")
            lines += [f"    - {v}" for v in self.violations[:50]]
            if self.log_tail:
                lines.append("  daemon log tail:\n" + self.log_tail)
        else:
            lines.append("  all invariants hold")
        return "\n".join(lines)


class Soak:
    def __init__(self, cfg: SoakConfig) -> None:
        self.cfg = cfg
        self.seed = cfg.seed if cfg.seed is not None else random.SystemRandom().randrange(1, 2**31)
        self.rng = random.Random(self.seed)  # the job mix and the chaos schedule
        self.client_rngs = [random.Random(self.seed * 1000 + k) for k in range(cfg.clients)]
        self.root = Path(tempfile.mkdtemp(prefix="slc-"))  # short: socket paths are limited
        self.rec = self.root / "rec"
        self.rec.mkdir()
        self.clock: fc.FakeClock | None = None
        try:
            so = fc.build(self.root / "so")
            self.clock = fc.FakeClock(so, self.root / "offset")
        except RuntimeError as e:  # no C compiler: run without simulated sleeps
            cfg.log(f"chaos soak: no clock jumps ({e})")
        self.disk = DiskFull.mount(self.root / "h")  # the daemon's home on a tmpfs we can fill
        if self.disk is None:
            cfg.log("chaos soak: no full-disk windows (mounting a tmpfs was refused)")
        self.windows: dict[str, list[tuple[float, float]]] = defaultdict(list)  # fault -> (from, to)
        self.probe, self.probe_python, self.transient = PROBE, sys.executable, TRANSIENT
        self.chaos_started = time.monotonic()
        self.machinery = Machinery(self)
        self.h = Harness(self.root / "h", config=self.good_config(),
                         extra_env=self.clock.env() if self.clock else None)
        self.violations: list[str] = []
        self.by_audit: dict[str, list[str]] = defaultdict(list)
        self.warnings: list[str] = []
        self.lock = threading.Lock()
        self.abort = threading.Event()
        self.daemons: list[dict[str, Any]] = []  # every daemon we started and how it ended
        self.n: Counter[str] = Counter()
        self.killed_jobs: list[tuple[str, str, str]] = []  # (job, attempt, token)
        self.jobs: list[LJob] = []
        self.by_id: dict[int, LJob] = {}  # filled as the chaos loop needs it (see ljob)
        self.frozen: set[int] = set()  # pids we SIGSTOPped: SIGCONT on the way out, whatever happens
        self.add_rng = random.Random(self.seed + 1)  # the chaos loop's own adds' retry pauses
        self.timeline = open(self.root / "chaos.log", "a", buffering=1)  # what the chaos did, when

    def note(self, what: str) -> None:
        self.timeline.write(f"{time.time():.3f} {what}\n")

    # ---------------------------------------------------------------- util
    def good_config(self) -> str:
        """config.toml as it is meant to be now (the resources as last reloaded)."""
        return self.cfg.daemon_config() + self.machinery.config()

    def read_records(self, name: str, ts: bool = True) -> list[list[str]]:
        return read_records(self.rec / name, ts)

    def violation(self, msg: str, audit: str = "core") -> None:
        with self.lock:
            self.violations.append(msg)
            self.by_audit[audit].append(msg)
        self.cfg.log(f"VIOLATION ({audit}): {msg}")

    def count(self, what: str, k: int = 1) -> None:
        with self.lock:
            self.n[what] += k

    def sleep(self, s: float) -> None:
        self.abort.wait(max(0.0, s))

    # ---------------------------------------------------------------- jobs
    def make_jobs(self) -> None:
        cfg, rng = self.cfg, self.rng
        kinds = list(cfg.mix)
        weights = [cfg.mix[k] for k in kinds]
        for i in range(cfg.jobs):
            kind = rng.choices(kinds, weights)[0]
            lease_s: float | None = None
            argv = [sys.executable, PROBE, str(self.rec)]
            lane, timeout_s, max_attempts = "default", None, cfg.max_attempts
            if kind == "quick":
                argv += ["--hold", rng.choice(["0", "0", "0.05", "0.2"])]
            elif kind == "slow":
                lane = "slow"
                argv += ["--hold", f"{rng.uniform(*cfg.slow_hold_s):.2f}"]
            elif kind == "flaky":
                argv += ["--fail-until", rng.choice(["2", "3"]), "--hold", "0.1"]
            elif kind == "forker":  # its work done by a double-forked, setsid grandchild
                argv += ["--detach", "1", "--hold", rng.choice(["0.1", "0.5", "1.0", "4.0"])]
            elif kind == "short":  # held past its own short lease: renewed a few times, then done
                lease_s = rng.choice(cfg.short_leases)
                argv += ["--hold", f"{rng.uniform(0.2, 2.5 * lease_s):.2f}"]
            elif kind in ("gpu", "wide", "power"):
                lane, argv, extra, flags = self.machinery.job(kind, rng, argv)
                self.jobs.append(LJob(f"soak-{self.seed}-{i}", kind, lane, argv, max_attempts, None,
                                      rng.random() < cfg.cli_share, extra=extra, cli_flags=flags))
                continue
            else:  # timeout: always killed by its timeout (or the chaos): ends failed
                lane, timeout_s, max_attempts = "slow", rng.choice([0.5, 1.0]), 2
                argv += ["--hold", "60"]
            self.jobs.append(LJob(f"soak-{self.seed}-{i}", kind, lane, argv, max_attempts,
                                  timeout_s, rng.random() < cfg.cli_share, lease_s))

    # -------------------------------------------------------------- daemon
    def start_daemon(self, why: str) -> None:
        t0 = time.monotonic()
        try:
            p = self.h.start(wrap=self.machinery.wrap)
        except AssertionError as e:  # it exited or never answered
            self.violation(f"daemon failed to start ({why}): {str(e)[:300]}")
            p = self.h.daemon
            if p is not None:
                self.daemons.append({"proc": p, "why": why, "ended_by": None})
            raise
        self.daemons.append({"proc": p, "why": why, "ended_by": None,
                             "ready_s": time.monotonic() - t0})

    def check_daemon(self) -> None:
        p = self.h.daemon
        if p is not None and p.poll() is not None:
            self.violation(f"daemon pid {p.pid} exited on its own with {p.returncode}")
            self.start_daemon("after an unexpected exit")

    # --------------------------------------------------------------- chaos
    def act_kill9(self) -> None:
        d = self.daemons[-1]
        p = d["proc"]
        d["ended_by"] = "kill -9"
        self.note(f"kill -9 daemon {p.pid}")
        p.kill()
        rc = p.wait(15)
        if rc != -signal.SIGKILL:
            self.violation(f"daemon pid {p.pid} ended with {rc} on kill -9")
        self.count("kills")
        down = self.rng.uniform(0.0, 1.0)
        self.sleep(down)  # clients meet a dead socket meanwhile
        t0 = time.time() - down
        self.start_daemon("restart after kill -9")
        self.windows["kill9"].append((t0, time.time()))
        self.note(f"restarted: daemon {self.h.daemon.pid} (down {down:.2f} s, then "
                  f"{self.daemons[-1]['ready_s']:.2f} s from spawn to answering)")

    def act_reboot(self) -> None:
        """What a reboot or a power cut leaves: nothing of sloth running, the
        daemon, its keeper and every job process killed at once."""
        d = self.daemons[-1]
        d["ended_by"] = "kill -9"
        t0 = time.time()
        procs = [p for p in self.h.our_processes() if p.pid != d["proc"].pid and _sloth_or_job(p)]
        self.note(f"reboot: kill -9 of daemon {d['proc'].pid} and {len(procs)} keeper/job process(es)")
        d["proc"].kill()  # through Popen: it is our child, its status is ours to reap
        for p in procs:
            try:
                p.kill()
            except psutil.Error:
                pass
        d["proc"].wait(15)
        psutil.wait_procs(procs, timeout=10)
        self.count("reboots")
        self.start_daemon("restart after a reboot")
        self.windows["reboot"].append((t0, time.time()))

    def act_stop(self) -> None:
        p = self.daemons[-1]["proc"]
        t = self.rng.uniform(*self.cfg.stop_s)
        self.note(f"SIGSTOP daemon {p.pid} for {t:.2f} s")
        t0 = time.time()
        p.send_signal(signal.SIGSTOP)
        self.count("stops")
        if self.clock is not None and self.rng.random() < 0.3:
            self.sleep(t / 2)
            self.act_jump()  # the laptop slept while the daemon was stopped
            self.count("jumps_while_stopped")
            self.sleep(t / 2)
        else:
            self.sleep(t)
        p.send_signal(signal.SIGCONT)
        self.windows["stop"].append((t0, time.time()))
        self.note(f"SIGCONT daemon {p.pid}")

    def act_jump(self) -> None:
        if self.clock is None:
            return
        s = self.rng.uniform(*self.cfg.jump_s)
        self.clock.jump(s)
        self.windows["jump"].append((time.time(), time.time()))
        self.note(f"clock jump +{s:.0f} s")
        self.count("sleeps")
        self.count("slept_s", int(s))

    def act_jobkill(self) -> None:
        starts = read_records(self.rec / "starts")[-64:]  # the running ones are recent
        self.rng.shuffle(starts)
        forkers = {str(j.id) for j in self.jobs if j.kind == "forker"}
        if self.rng.random() < 0.5:  # often a forker: its grandchild must not outlive it into a retry
            starts.sort(key=lambda r: r[0] not in forkers)
        for job, attempt, token, pid, _ in starts:
            try:
                p = psutil.Process(int(pid))
                if (p.status() == psutil.STATUS_ZOMBIE or PROBE not in p.cmdline()
                        or p.environ().get("SLOTH_JOB_TOKEN") != token):
                    continue
                p.kill()  # psutil checks the pid was not reused since Process()
            except psutil.Error:
                continue
            self.killed_jobs.append((job, attempt, token))
            self.note(f"SIGKILL job {job} attempt {attempt} pid {pid}")
            self.count("job_kills")
            return
        self.count("job_kill_no_target")

    def _window(self, fault: str, act: Callable[[Callable[[], None]], Any]) -> Any:
        """Run fault ``act(hold)``; ``hold()`` keeps it up for a while. The
        window is kept, to classify runs that ended in it."""
        t = self.rng.uniform(*self.cfg.fault_s)
        t0 = time.time()
        try:
            return act(lambda: self.sleep(t))
        finally:
            self.windows[fault].append((t0, time.time()))
            self.count(f"{fault}_windows")

    def act_diskfull(self) -> None:
        if self.disk is None:
            return
        disk = self.disk

        def full(hold: Callable[[], None]) -> None:
            n = disk.fill()
            self.note(f"disk full ({n} bytes taken)")
            try:
                hold()
            finally:
                disk.free()
                self.note("disk freed")
        self._window("disk", full)

    def act_flood(self) -> None:
        n = self._window("flood", lambda hold: flood(self.h.socket, 600, hold))
        self.note(f"flood: {n} idle connections held, then closed")
        with self.lock:
            self.n["flood_max"] = max(self.n["flood_max"], n)

    def act_lock(self) -> None:
        got = self._window("lock", lambda hold: hold_write_lock(self.h.home / "queue.db", hold))
        self.note(f"foreign write lock {'held' if got else 'not had'}")

    # ------------------------------------------- faults in the middle of bursts
    def ask(self, op: str, timeout_s: float = 15, **args: Any) -> Any:
        """One request with a bound: a daemon that does not answer raises, never hangs the soak."""
        with Client(self.h.socket, timeout_s=timeout_s) as c:
            return c.call(op, **args)

    def cli(self, *argv: str, timeout_s: float = 30) -> Any:
        """The real CLI with a bound; None (and a violation) if it hung."""
        try:
            return self.h.cli(*argv, timeout_s=timeout_s)
        except subprocess.TimeoutExpired:
            self.violation(f"`sloth {' '.join(argv)}` did not return in {timeout_s:g} s")
            return None

    def ljob(self, job_id: int) -> LJob | None:
        if job_id not in self.by_id:
            self.by_id.update((j.id, j) for j in self.jobs if j.id is not None)
        return self.by_id.get(job_id)

    def burst(self, lane: str, n: int, holds: tuple[str, ...] = (), hold: bool = False) -> list[LJob]:
        """``n`` jobs in one add request (what `add --file` sends) in
        ``lane``, the quickest probe (a few ms) unless ``holds`` are given:
        the keeper holds the next runs of each slot behind the running one,
        and the fault that follows lands among them."""
        first = len(self.jobs)
        quick = ["bash", PROBE_SH, str(self.rec)]
        batch = [LJob(f"soak-{self.seed}-b{first + i}", "burst", lane,
                      [sys.executable, PROBE, str(self.rec), "--hold", self.rng.choice(holds)] if holds else quick,
                      self.cfg.max_attempts, None, False, extra={"hold": True} if hold else {})
                 for i in range(n)]
        self.jobs.extend(batch)
        self.add_batch(batch, self.add_rng)
        self.count("bursts")
        self.count("burst_jobs", n)
        self.note(f"burst: {n} jobs in lane {lane}, ids {batch[0].id}..{batch[-1].id}")
        return batch

    def lane_ids(self, lane: str, *states: str) -> list[int]:
        return sorted(j["id"] for j in self.ask("list", lane=lane, states=list(states), limit=100_000)["jobs"])

    def mark_cancelled(self, jobs: list[dict[str, Any]], by: str) -> None:
        """What a cancel or kill answered it cancelled: from now on none may start."""
        t, boot = time.time(), time.clock_gettime(time.CLOCK_BOOTTIME)
        for j in jobs:
            lj = self.ljob(j["id"])
            if lj is not None and j.get("state") == "cancelled":
                lj.cancelled_at, lj.cancelled_boot, lj.cancelled_by = t, boot, by
        self.count(f"cancelled_by_{by}", len(jobs))
        self.note(f"{by}: {len(jobs)} cancelled ({[j['id'] for j in jobs][:8]}...)")

    def unsure(self, ids: list[int]) -> None:
        """A cancel that may have been applied got no answer: these may end cancelled or not."""
        self.count("cancels_unsure")
        for i in ids:
            if (lj := self.ljob(i)) is not None:
                lj.cancel_unsure = True

    def act_cancel(self) -> None:
        """Cancel batches of a burst's next jobs a few times in a row while it
        runs; the first of them are claimed and held in the keeper (20.1)."""
        self.burst("burst", self.rng.randint(*self.cfg.burst_n))
        self.sleep(self.rng.uniform(0.1, 0.5))
        for _ in range(self.rng.randint(2, 4)):
            try:
                claimed = self.lane_ids("burst", "running")
                active = sorted(claimed + self.lane_ids("burst", "queued"))
            except TRANSIENT as e:
                self.violation(f"list during a burst: {e!r}")
                return
            # From among the claimed (running, or held behind a running one) into the queued.
            i = self.rng.randint(0, max(0, len(claimed) - 1))
            ids = active[i:i + self.rng.randint(5, 40)]
            if not ids:
                return
            try:
                res = self.ask("cancel", ids=ids)
            except TRANSIENT as e:
                self.note(f"cancel of {len(ids)} got no answer: {e!r}")
                self.unsure(ids)
                continue
            self.count("cancel_rounds")
            self.mark_cancelled(res["jobs"], "cancel")
            self.sleep(self.rng.uniform(0.02, 0.3))

    def act_cancellane(self) -> None:
        """`sloth cancel --lane` of a lane in the middle of its burst."""
        self.burst("burst", 4 * self.rng.randint(*self.cfg.burst_n))  # the CLI takes a while to start
        p = self.cli("cancel", "--lane", "burst", "--json")
        if p is None or p.returncode not in (0, 6):  # 6: some were left alone (they had ended)
            if p is not None:
                self.violation(f"sloth cancel --lane exited {p.returncode}: {p.stderr.strip()[:300]}")
            self.unsure([j.id for j in self.jobs if j.lane == "burst" and j.id is not None])
            return
        self.count("lane_cancels")
        self.mark_cancelled(json.loads(p.stdout)["jobs"], "lane")

    def act_killburst(self) -> None:
        """`sloth kill` of a burst's running jobs: the running ones and those
        held behind them (claimed, so "running" to the queue)."""
        self.burst("burst", self.rng.randint(*self.cfg.burst_n))
        self.sleep(self.rng.uniform(0.1, 0.5))
        for _ in range(self.rng.randint(2, 4)):
            try:
                running = self.lane_ids("burst", "running")
            except TRANSIENT as e:
                self.violation(f"list during a burst: {e!r}")
                return
            ids = sorted(self.rng.sample(running, min(len(running), self.rng.randint(1, 8))))
            if not ids:
                return
            now = self.rng.random() < 0.5
            if self.rng.random() < 0.2:  # the real CLI now and then (slower: most will have ended)
                p = self.cli("kill", *map(str, ids), *(["--now"] if now else []), "--json")
                ok = p is not None and p.returncode in (0, 6)
                if p is not None and not ok:
                    self.violation(f"sloth kill exited {p.returncode}: {p.stderr.strip()[:300]}")
                res = json.loads(p.stdout) if ok else None
            else:
                try:
                    res = self.ask("kill", ids=ids, now=now)
                except TRANSIENT as e:
                    self.note(f"kill of {len(ids)} got no answer: {e!r}")
                    res = None
            if res is None:
                self.unsure(ids)
                continue
            self.count("kill_rounds")
            self.mark_cancelled(res["jobs"], "kill")
            self.sleep(self.rng.uniform(0.02, 0.2))

    def act_daemonstop(self) -> None:
        """`sloth daemon stop` (not a kill) and start again, a few times, in
        the middle of a one-slot lane's burst (20.2)."""
        self.burst("single", 4 * self.rng.randint(*self.cfg.burst_n))
        for _ in range(self.rng.randint(1, 3)):
            self.sleep(self.rng.uniform(0.05, 0.4))
            t0 = time.time()
            self.stop_daemon()
            self.sleep(self.rng.uniform(0.0, 0.5))
            self.start_daemon("start after sloth daemon stop")
            self.windows["daemonstop"].append((t0, time.time()))
            self.count("daemon_stops")

    def stop_daemon(self) -> None:
        d = self.daemons[-1]
        p = d["proc"]
        d["ended_by"] = "stop"
        self.note(f"sloth daemon stop ({p.pid})")
        cp = self.cli("daemon", "stop", "--timeout", "30s", timeout_s=60)
        if cp is not None and cp.returncode != 0:
            self.violation(f"sloth daemon stop exited {cp.returncode}: {cp.stderr.strip()[:300]}")
        try:
            rc = p.wait(30 if cp is not None else 1)
        except subprocess.TimeoutExpired:
            self.violation(f"daemon {p.pid} still running after `sloth daemon stop`: kill -9")
            d["ended_by"] = "kill -9"
            p.kill()
            rc = p.wait(15)
        if rc != DAEMON_END_RC[d["ended_by"]]:
            self.violation(f"daemon {p.pid} ended with {rc} on `sloth daemon stop`")

    def act_keeperstop(self) -> None:
        """SIGSTOP the keeper past its runs' leases while some of them end by
        themselves, sometimes the daemon with it; then SIGCONT (20.3)."""
        try:
            pid = self.ask("status")["keeper"]["pid"]
            keeper = psutil.Process(int(pid))
            if "sloth_daemon.keeper" not in " ".join(keeper.cmdline()):
                return
        except (TypeError, psutil.Error, *TRANSIENT):
            self.count("keeper_stop_no_keeper")
            return
        enders = self.burst("burst", self.rng.randint(2, 5), holds=("0.3", "0.8", "1.2"))
        tokens = self.started_tokens({str(j.id) for j in enders}, wait_s=3.0)
        t = self.rng.uniform(*self.cfg.keeper_stop_s)
        daemon = self.h.daemon if self.rng.random() < 0.25 else None
        t0 = time.time()
        self.note(f"SIGSTOP keeper {keeper.pid} for {t:.2f} s (daemon too: {daemon is not None}); "
                  f"{len(tokens)} of its runs started")
        for proc in (keeper, daemon):
            if proc is not None:
                self.frozen.add(proc.pid)
                proc.send_signal(signal.SIGSTOP)
        self.sleep(t)
        for proc in (daemon, keeper):
            if proc is not None:
                proc.send_signal(signal.SIGCONT)
                self.frozen.discard(proc.pid)
        self.windows["keeperstop"].append((t0, time.time()))
        self.note(f"SIGCONT keeper {keeper.pid}")
        ended = {r[2] for r in read_records(self.rec / "ends") if t0 < float(r[4]) < t0 + t}
        self.count("ended_while_keeper_stopped", len(ended & tokens))
        self.count("keeper_stops")
        self.count("keeper_stops_with_daemon", daemon is not None)

    def started_tokens(self, jobs: set[str], wait_s: float) -> set[str]:
        """The tokens of runs of ``jobs`` that have started, once one has (``wait_s`` at most)."""
        deadline = time.monotonic() + wait_s
        while True:
            got = {r[2] for r in read_records(self.rec / "starts") if r[0] in jobs}
            if got or time.monotonic() > deadline:
                return got
            self.sleep(0.05)

    # ------------------------------------------------------ replaced config files
    def act_config(self) -> None:
        """Replace config.toml by a FIFO, a link to /dev/zero, garbage or a
        huge number, and `sloth daemon reload`: each is refused with a clear
        error, the daemon keeps serving (20.5, 20.11); then the good file back."""
        path, good = self.h.home / "config.toml", self.good_config()
        t0 = time.time()
        for what in self.rng.sample(CONFIG_SWAPS, self.rng.randint(1, 2)):
            swap_config(path, what, good, self.rng)
            self.note(f"config.toml replaced: {what}")
            p = self.cli("daemon", "reload", "--json", timeout_s=10)
            outcome = "hung" if p is None else "accepted" if p.returncode == 0 else "refused"
            self.count(f"config swap {what}: {outcome}")
            if p is not None:
                self.plain_error(f"reload of a config that is {what}", p)
            if outcome == "accepted":
                self.violation(f"`sloth daemon reload` accepted a config that is {what}")
                if what == "huge-lane":  # 20.11: then `lane set` fails with an internal error
                    lp = self.cli("lane", "set", "huge", "-c", "5")
                    if lp is not None:
                        self.plain_error("lane set after a huge lane was accepted", lp)
            cp = self.cli("config", timeout_s=10)  # the client reads the file too
            if cp is not None:
                self.plain_error(f"`sloth config` with a config that is {what}", cp)
            if outcome == "refused":
                self.h.daemon.send_signal(signal.SIGHUP)  # systemctl reload: refused the same way, in the log
                self.settings_kept(what)
            restore_config(path, good)
            self.must_serve(f"after a reload of a config that is {what}")
        p = self.cli("daemon", "reload", timeout_s=20)
        if p is not None and p.returncode != 0:
            self.violation(f"reload of the good config back exited {p.returncode}: {p.stderr.strip()[:300]}")
        self.windows["config"].append((t0, time.time()))
        self.count("config_swaps")

    def settings_kept(self, what: str) -> None:
        """A refused reload (and SIGHUP) leaves the settings in force as they were."""
        try:
            got = self.ask("config", timeout_s=5)["settings"]["max_attempts"]["value"]
        except TRANSIENT:
            return  # must_serve says so
        if got != 3:
            self.violation(f"a refused reload of a config that is {what} changed max_attempts to {got}")

    def plain_error(self, what: str, p: Any) -> None:
        """A refusal must be a clear error: no traceback, no internal error."""
        out = p.stdout + p.stderr
        if "Traceback" in out or "internal error" in out:
            self.violation(f"{what}: exit {p.returncode}: {out.strip()[-400:]}")

    def must_serve(self, when: str) -> None:
        """The daemon answers at once, or it hung: a failure, and a kill -9 to go on."""
        try:
            self.ask("ping", timeout_s=5)
            return
        except TRANSIENT as e:
            self.violation(f"the daemon does not answer {when}: {e!r}")
        d = self.daemons[-1]
        d["ended_by"] = "kill -9"
        d["proc"].kill()
        d["proc"].wait(15)
        self.count("hung_daemons_killed")
        self.start_daemon(f"restart after it hung {when}")

    def act_leasefloor(self) -> None:
        """Ask for a lease too short to be renewed safely (20.4): at `add`
        (the CLI and the socket) and in the config file (`sloth config`
        reads it). Refused with the minimum in the message once fixed;
        today accepted: counted either way (an error with
        require_lease_floor). An accepted job is due in a year, and cancelled."""
        short = f"{self.cfg.too_short_lease_s:g}s"
        key = f"soak-{self.seed}-floor{len(self.jobs)}"
        p = self.cli("add", "--no-start", "--json", "--key", key, "--lease", short, "--delay", "8760h",
                     "--", "true")
        if p is not None:
            self.lease_floor("add --lease", p.returncode == 0, p.stdout + p.stderr,
                             int(json.loads(p.stdout)["ids"][0]) if p.returncode == 0 else None, key)
        key = f"soak-{self.seed}-floor{len(self.jobs)}s"
        spec = {"command": ["true"], "key": key, "lease_s": self.cfg.too_short_lease_s / 2,
                "not_before": time.time() + 365 * 86400}
        try:
            ids = self.h.add_many([spec])
            self.lease_floor("socket add", True, "", ids[0], key)
        except SlothError as e:
            self.lease_floor("socket add", False, f"{e.code}: {e.message}", None, key)
        except TRANSIENT as e:
            self.note(f"lease floor: socket add got no answer: {e!r}")
        path, good = self.h.home / "config.toml", self.good_config()
        swap_config(path, f"lease={short}", good, self.rng)
        try:
            p = self.cli("config", "--json")
        finally:
            restore_config(path, good)
        if p is not None:
            self.lease_floor("config file", p.returncode == 0, p.stdout + p.stderr, None, "")

    def lease_floor(self, where: str, accepted: bool, out: str, job_id: int | None, key: str) -> None:
        self.count(f"lease floor {where}: {'accepted' if accepted else 'refused'}")
        if "Traceback" in out or "internal error" in out:
            self.violation(f"a too-short lease at {where}: {out.strip()[-300:]}")
        if accepted and self.cfg.require_lease_floor:
            self.violation(f"a lease of {self.cfg.too_short_lease_s:g} s or less was accepted at {where}")
        elif accepted:
            with self.lock:
                if not any("too-short lease" in w for w in self.warnings):
                    self.warnings.append(f"a too-short lease was accepted ({where}); see 'too-short lease' above")
        if job_id is None:
            return
        lj = LJob(key, "floor", "default", ["true"], 1, None, False, id=job_id)
        self.jobs.append(lj)
        try:
            self.mark_cancelled(self.ask("cancel", ids=[job_id])["jobs"], "floor")
        except TRANSIENT:
            self.unsure([job_id])

    def act_badframes(self) -> None:
        for _ in range(self.rng.randint(1, 3)):
            name, frames, expect = self.rng.choice(BAD_FRAMES)
            self.note(f"bad frame: {name}")
            try:
                self.send_bad(name, frames, expect)
            except TRANSIENT as e:
                self.violation(f"bad frame {name!r}: no proper answer from a running daemon: {e!r}")
            self.count("bad_frames")
            if self.h.daemon is not None and self.h.daemon.poll() is not None:
                self.violation(f"daemon died after bad frame {name!r}")

    def send_bad(self, name: str, frames: list[bytes], expect: str) -> None:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(15)
        try:
            s.connect(str(self.h.socket))
            for fr in frames:
                try:
                    s.sendall(fr)
                except (BrokenPipeError, ConnectionResetError):
                    if expect != "error+close":
                        raise
                    break  # the daemon answered the over-size frame and hung up: read it
            if expect == "nothing":  # half a frame, then gone
                return
            buf = b""
            answers: list[dict[str, Any]] = []
            want = 2 if expect == "error+pong" else 1
            while len(answers) < want:
                try:
                    chunk = s.recv(65536)
                except ConnectionResetError:
                    chunk = b""
                if not chunk:
                    break
                buf += chunk
                while b"\n" in buf:
                    line, _, buf = buf.partition(b"\n")
                    answers.append(json.loads(line))
            if len(answers) < want:
                raise ValueError(f"connection closed after {len(answers)} answer(s)")
            err = answers[0]
            if err.get("ok") is not False or err.get("error", {}).get("code") not in TYPED_ERRORS \
                    or str(err.get("error", {}).get("message", "")).startswith("internal error"):
                self.violation(f"bad frame {name!r} got {str(err)[:200]}")
            if expect == "error+pong" and not answers[1].get("ok"):
                self.violation(f"after bad frame {name!r} a ping on the same connection got {answers[1]}")
            if expect == "error+close":
                s.settimeout(5)
                try:
                    rest = s.recv(65536)
                except ConnectionResetError:
                    rest = b""
                if rest:
                    self.violation(f"over-size frame {name!r}: connection not closed")
        finally:
            s.close()

    def chaos_loop(self, until: float) -> None:
        kinds = [k for k in (self.cfg.faults or CHAOS) if k != "jump" or self.clock is not None]
        first = kinds[:]
        self.rng.shuffle(first)  # every kind at least once, early
        weights = [self.cfg.weights[k] for k in kinds]
        while (first or time.monotonic() < until) and not self.abort.is_set():  # every kind once, however long
            self.sleep(self.rng.uniform(*self.cfg.chaos_gap_s))
            if time.monotonic() >= until and not first:
                break
            self.check_daemon()
            if self.machinery.starve_due() and "shrink" in kinds:
                act = "shrink"  # the lasting shrink, late in the chaos, always (every kind still once)
            else:
                act = first.pop() if first else self.rng.choices(kinds, weights)[0]
            getattr(self.machinery if act in MACHINERY else self, f"act_{act}")()

    # -------------------------------------------------------------- clients
    def client_loop(self, k: int, jobs: list[LJob], window_s: float) -> None:
        rng = self.client_rngs[k]
        try:
            batches: list[list[LJob]] = []
            i = 0
            while i < len(jobs):
                if jobs[i].via_cli:
                    batches.append([jobs[i]])
                    i += 1
                    continue
                n = rng.randint(1, 5)
                b = []
                while i < len(jobs) and len(b) < n and not jobs[i].via_cli:
                    b.append(jobs[i])
                    i += 1
                batches.append(b)
            t0 = time.monotonic()
            for bi, batch in enumerate(batches):
                if self.abort.is_set():
                    return
                self.sleep(t0 + window_s * bi / len(batches) - time.monotonic())
                self.add_batch(batch, rng)
        except Exception:
            self.violation(f"client thread crashed:\n{traceback.format_exc()}")

    def add_batch(self, batch: list[LJob], rng: random.Random) -> None:
        pending = list(batch)
        pause = 0.05
        suspect = False  # a previous try may have been applied
        deadline = time.monotonic() + self.cfg.duration_s + self.cfg.settle_s
        while pending and not self.abort.is_set():
            if time.monotonic() > deadline:
                self.violation(f"could not enqueue {[j.key for j in pending]} before the deadline")
                return
            try:
                if suspect:
                    found = self.lookup([j.lane for j in pending])
                    for j in pending:
                        if j.key in found:
                            j.id, j.found_by_lookup = found[j.key], True
                            self.count("found_by_lookup")
                    pending = [j for j in pending if j.id is None]
                    if not pending:
                        return
                if pending[0].via_cli:
                    pending[0].id = self.add_cli(pending[0])
                else:
                    self.add_socket(pending)
                return
            except TRANSIENT as e:
                if isinstance(e, SlothError) and e.code not in PASSING:
                    never = [j for j in pending if e.code == "bad_request" and self.machinery.never_here(e.message, j)]
                    if not never:
                        self.violation(f"add refused with {e.code}: {e.message}")
                        return
                    never[0].refused = e.message  # it can never run here: refused, nothing added; the rest again
                    pending.remove(never[0])
                    self.count("adds refused: can never run here")
                    continue
                suspect = True
                self.count("add_retries")
                self.count(f"retry reason: {type(e).__name__}: {str(e)[:60]}")
                self.sleep(rng.uniform(pause / 2, pause))
                pause = min(pause * 2, 0.8)

    def lookup(self, lanes: list[str]) -> dict[str, int]:
        self.count("lookups")
        out: dict[str, int] = {}
        with Client(self.h.socket, timeout_s=30) as c:
            for lane in sorted(set(lanes)):
                for j in c.call("list", lane=lane, limit=100_000)["jobs"]:
                    if j.get("key"):
                        out.setdefault(j["key"], j["id"])
        return out

    def add_socket(self, batch: list[LJob]) -> None:
        ids = self.h.add_many([j.spec() for j in batch])
        if len(ids) != len(batch):
            raise ValueError(f"add returned {len(ids)} ids for {len(batch)} jobs")
        for j, jid in zip(batch, ids):
            j.id = jid

    def add_cli(self, j: LJob) -> int:
        argv = ["add", "--no-start", "--json", "--key", j.key,
                "--lane", j.lane, "--max-attempts", str(j.max_attempts)]
        if j.timeout_s:
            argv += ["--timeout", f"{j.timeout_s}s"]
        if j.lease_s:
            argv += ["--lease", f"{j.lease_s:g}s"]
        argv += j.cli_flags
        p = self.h.cli(*argv, "--", *j.argv, timeout_s=90)
        if p.returncode == 0:
            return int(json.loads(p.stdout)["ids"][0])
        if p.returncode == 2:  # refused (add_batch judges whether rightly)
            raise BadRequest(p.stderr.strip())
        if p.returncode not in (1, 3, 7):  # 3: not running; 1: cut off, or storage; 7: busy
            self.violation(f"sloth add exited {p.returncode}: {p.stderr.strip()[:300]}")
        with self.lock:
            self.n["cli_failures"] += 1
        raise SlothError(f"sloth add exited {p.returncode}: {p.stderr.strip()[:200]}")

    # ----------------------------------------------------------------- run
    def run(self) -> SoakResult:
        cfg = self.cfg
        t_start = time.monotonic()
        threads: list[threading.Thread] = []
        figures: dict[str, Any] = {}
        try:
            self.make_jobs()
            self.start_daemon("first start")
            self.machinery.start()
            self.chaos_started = time.monotonic()
            chaos_until = time.monotonic() + cfg.duration_s
            window = cfg.duration_s * cfg.enqueue_share
            for k in range(cfg.clients):
                t = threading.Thread(target=self.client_loop, args=(k, self.jobs[k::cfg.clients], window),
                                     name=f"client-{k}", daemon=True)
                t.start()
                threads.append(t)
            self.chaos_loop(chaos_until)
            t_chaos = time.monotonic()
            figures["chaos_s"] = t_chaos - t_start
            # Settle: the daemon up and running, every client done, every job final.
            self.h.daemon.send_signal(signal.SIGCONT)
            self.check_daemon()
            self.machinery.finish()
            settle_deadline = time.monotonic() + cfg.settle_s
            for t in threads:
                t.join(max(0.0, settle_deadline - time.monotonic()))
                if t.is_alive():
                    self.violation(f"{t.name} still enqueueing after the settle bound")
            self.wait_all_final(settle_deadline)
            figures["settle_s"] = time.monotonic() - t_chaos
            if cfg.idle_exit_s:
                self.idle_exit(figures)
            self.verify(figures)
        except Exception:
            self.violation(f"soak aborted:\n{traceback.format_exc()}")
        finally:
            self.abort.set()
            p = self.h.daemon
            if p is not None and p.poll() is None:
                p.send_signal(signal.SIGCONT)
            for pid in self.frozen:  # a keeper we stopped, if the soak broke off meanwhile
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGCONT)
            for t in threads:
                t.join(10)
            tail = ""
            if self.violations:
                chaos = (self.root / "chaos.log").read_text().splitlines()[-15:]
                tail = self.h.log_text() + "\n  chaos timeline tail:\n" + "\n".join(chaos)
            self.h.reap()
            if self.disk is not None:
                self.disk.unmount()
            self.timeline.close()
            if not cfg.keep_home:
                shutil.rmtree(self.root, ignore_errors=True)
        figures.update(self.n)
        figures.update(seed=self.seed, jobs=len(self.jobs), clients=cfg.clients,
                       jobs_via_cli=sum(j.via_cli for j in self.jobs),
                       wall_s=time.monotonic() - t_start)
        return SoakResult(figures, self.violations, self.warnings, self.root, tail, dict(self.by_audit))

    def wait_all_final(self, deadline: float) -> None:
        """Until every job is final; a settle with no progress (the same
        counts, no probe started or ended) for stall_s is a hang: said, with
        why the waiting jobs wait, and given up."""
        last: dict[str, int] = {}
        seen: tuple[Any, ...] = ()
        moved = time.monotonic()
        while time.monotonic() < deadline:
            try:
                with Client(self.h.socket, timeout_s=30) as c:
                    last = c.call("status")["counts"]
                if not any(last.get(s, 0) for s in ("blocked", "queued", "running")):
                    return
            except TRANSIENT:
                self.check_daemon()
            now = (sorted(last.items()), (self.rec / "starts").stat().st_size if (self.rec / "starts").exists() else 0,
                   (self.rec / "ends").stat().st_size if (self.rec / "ends").exists() else 0)
            if now != seen:
                seen, moved = now, time.monotonic()
            elif time.monotonic() - moved > self.cfg.stall_s:
                try:
                    waiting = self.ask("list", states=["queued", "blocked"], limit=20)["jobs"]
                except TRANSIENT:
                    waiting = []
                self.violation(f"the settle stalled for {self.cfg.stall_s:g} s with {last}; waiting: "
                               + "; ".join(f"{j['id']} ({j['lane']}): {j.get('wait_reason')}" for j in waiting[:8]),
                               "stall")
                return
            time.sleep(0.25)
        self.violation(f"jobs still unfinished after the settle bound: {last}")

    def idle_exit(self, fig: dict[str, Any]) -> None:
        """With ``idle_exit_s`` set: the chaos is over, every job final and
        the schedules paused (Machinery.finish), so nothing keeps the daemon.
        It must leave by itself within the window (plus the keeper's linger
        and a look's period), cleanly (exit 0, its log saying why), and the
        next daemon must find the queue as the last one left it: the checks
        that follow (verify) run against that next daemon. While schedules
        were enabled (all the chaos) it must never have left: check_daemon
        counts any exit of its own then."""
        d = self.daemons[-1]
        p = d["proc"]
        t0 = time.monotonic()
        bound = self.cfg.idle_exit_s * 2 + 30.0  # the window, the keeper's 5 s linger, a loaded machine
        try:
            rc = p.wait(bound)
        except subprocess.TimeoutExpired:
            self.violation(f"no idle exit within {bound:g} s of the settle with idle_exit_s "
                           f"{self.cfg.idle_exit_s:g}: the daemon stayed; its log: {self.h.log_text()[-600:]}")
            return
        d["ended_by"] = "idle exit"
        fig["idle_exit_after_s"] = round(time.monotonic() - t0, 2)
        if rc != DAEMON_END_RC["idle exit"] or "idle exit: nothing queued" not in self.h.log_text():
            self.violation(f"the daemon left with {rc} after the settle, without an idle exit in its log")
            return
        self.count("idle_exits")
        self.note(f"idle exit of daemon {p.pid} after {fig['idle_exit_after_s']} s")
        log = self.h.log_text()
        fig["dormant_spells"] = log.count("stopping (keeping running jobs): dormant:")
        fig["dormant_wakes"] = log.count("woken from dormancy")
        # The next daemon stays whole for the checks: they ask it things with pauses of seconds
        # between (reading the records), longer than the windows, and it would leave in the middle.
        stay = re.sub(r"dormant_after_s = [0-9.]+", "dormant_after_s = 0", self.good_config())
        (self.h.home / "config.toml").write_text(re.sub(r"idle_exit_s = [0-9.]+", "idle_exit_s = 0", stay))
        self.start_daemon("after its idle exit")

    # -------------------------------------------------------------- verify
    def never_held(self, job: dict[str, Any], lj: LJob) -> bool:
        """``job`` is held because this machine can never run it, rightly,
        by its word: its wait_reason, else the last `held` of its history."""
        if self.machinery.never_here(job.get("wait_reason") or "", lj):
            return True
        held = [e for e in self.h.events(job["id"]) if e["kind"] == "held"]
        return bool(held) and self.machinery.never_here(held[-1]["message"] or "", lj)

    def _fault_between(self, fault: str, t0: float, t1: float) -> bool:
        """A ``fault`` window overlaps the span from ``t0`` to ``t1``."""
        return any(a <= t1 and b >= t0 for a, b in self.windows.get(fault, ()))

    def rerun_cause(self, end: float, again: float, events: list[dict[str, Any]], killed_by_us: bool) -> str:
        """Why a run that finished at ``end`` ran again at ``again``: what
        its attempt's ``events`` say, else the chaos between the two."""
        kinds = {e["kind"] for e in events}
        if self._fault_between("reboot", end, again):
            return "reboot"
        if killed_by_us:
            return "job kill"
        if "interrupted" in kinds:  # the keeper ended it (outcomes.by_itself): it had not exited yet
            # A probe writes its end line, then exits: a daemon stop in between ends a run whose
            # work was done but whose process was not (the next daemon runs it again, by design).
            return "daemon stop as it ended" if self._fault_between("daemonstop", end, end + ENDING_S) \
                else "daemon stop"
        if "fenced" in kinds:
            lapsed = any(LAPSED in (e["message"] or "") for e in events if e["kind"] == "fenced")
            for fault, cause in (("keeperstop", "keeper stop"), ("stop", "daemon SIGSTOP")):
                if self._fault_between(fault, end, end):  # it ended while they slept: an outcome, not a fence,
                    return "fence after a lapse" if lapsed and fault == "keeperstop" else cause  # unless too late
            if any(self._fault_between(f, end - LAPSE_GRACE_S, end) for f in ("keeperstop", "stop")):
                return "fence after a lapse"  # still going when they woke past its lease
            near = [c for f, c in FAULT_CAUSES.items() if self._fault_between(f, end - LAPSE_GRACE_S, end)]
            return f"fence ({near[0]})" if near else "fence"
        if "abandoned" in kinds:
            return "kill -9"
        for fault, cause in FAULT_CAUSES.items():
            if self._fault_between(fault, end, again):
                return cause
        return "other"

    def check_cancelled(self, per_job: dict[str, list[tuple[float, int, str, float | None]]]) -> int:
        """Jobs cancelled (or killed) that started a run after the cancel was
        answered: by the fork time of the run's process (probe_job's
        "spawned", CLOCK_BOOTTIME) where known, else by its start line."""
        forked = {(r[0], r[2]): float(r[4]) for r in read_records(self.rec / "spawned")}
        n = 0
        for lj in self.jobs:
            if lj.cancelled_at is None or lj.cancelled_boot is None:
                continue
            late = []
            for ts, attempt, token, _end in per_job.get(str(lj.id), []):
                boot = forked.get((str(lj.id), token))
                after = boot - lj.cancelled_boot if boot is not None else ts - lj.cancelled_at
                if after > 0:
                    late.append(f"attempt {attempt} +{after:.3f} s")
            if late:
                n += 1
                self.violation(f"job {lj.id} ({lj.kind}): {lj.cancelled_by} answered 'cancelled', and then "
                               f"it started: {', '.join(late)} after the answer")
        return n

    def verify(self, fig: dict[str, Any]) -> None:
        h = self.h
        # 1. the daemons: every one we started ended by our kill -9, the last one serves
        unexpected = 0
        for d in self.daemons[:-1]:
            rc = d["proc"].returncode
            if rc != DAEMON_END_RC.get(d["ended_by"]):
                unexpected += 1
                self.violation(f"daemon pid {d['proc'].pid} ({d['why']}) ended with {rc}, "
                               f"ended by us: {d['ended_by']}")
        last = self.daemons[-1]["proc"]
        if last.poll() is not None:
            unexpected += 1
            self.violation(f"the last daemon pid {last.pid} exited with {last.returncode}")
        status = h.call("status")
        if status["pid"] != last.pid:
            self.violation(f"status answered by pid {status['pid']}, not the daemon we started ({last.pid})")
        fig["unexpected_exits"] = unexpected
        ready = sorted(d.get("ready_s", 0.0) for d in self.daemons)
        fig.update(daemon_starts=len(ready), ready_median_s=ready[len(ready) // 2], ready_max_s=ready[-1])
        log = h.daemon_log.read_text(errors="replace")
        for marker in ("Traceback", "worker loop died", "internal error"):
            if marker in log:
                i = log.index(marker)
                self.violation(f"daemon log has {marker!r}:\n{log[max(0, i - 300):i + 1500]}")
        errors = [ln for ln in log.splitlines() if " ERROR " in ln or " WARNING " in ln]
        if errors:
            self.warnings.append(f"{len(errors)} WARNING/ERROR log lines, e.g. {errors[0][:200]}")

        # 2. none lost, none duplicated: every key is exactly one job, and nothing else exists
        listed: list[dict[str, Any]] = h.call("list", limit=100_000)["jobs"]
        by_key: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for j in listed:
            by_key[j.get("key")].append(j)
        lost = dup = 0
        for lj in self.jobs:
            got = by_key.get(lj.key, [])
            if len(got) > 1:
                dup += 1
                self.violation(f"key {lj.key} has {len(got)} jobs: {[g['id'] for g in got]}")
            if lj.refused:
                if got:
                    self.violation(f"key {lj.key}: its add was refused ({lj.refused}), yet `list` has it")
                continue
            if not got:
                lost += 1
                self.violation(f"key {lj.key} ({lj.kind}, recorded id {lj.id}) has no job in `list`")
            elif lj.id != got[0]["id"]:
                lost += 1
                self.violation(f"key {lj.key}: the client recorded id {lj.id}, `list` has {got[0]['id']}")
        strays = [j["id"] for j in listed if j.get("key") not in {lj.key for lj in self.jobs}
                  and not str(j.get("key")).startswith("schedule:")]  # the schedules' jobs: audited apart
        if strays:
            self.violation(f"jobs nobody enqueued: {strays[:20]}")
        fig.update(lost=lost, duplicates=dup + len(strays))
        fig["states"] = dict(Counter(j["state"] for j in listed))

        # 3. final states
        jobs = {j["id"]: j for j in listed}
        not_final = 0
        final_by_kind: Counter[str] = Counter()
        for lj in self.jobs:
            j = jobs.get(lj.id) if lj.id is not None else None
            if j is None:
                continue
            final_by_kind[f"{lj.kind}:{j['state']}"] += 1
            if j["state"] == "held" and lj.expected == "done" and self.never_held(j, lj):
                self.count("held: can never run here")  # needs more than the lasting shrink left, and said so
                continue
            if j["state"] != lj.expected and not (lj.cancel_unsure and j["state"] == "cancelled"):
                not_final += 1
                self.violation(f"job {j['id']} ({lj.kind}) ended {j['state']} after {j['attempts']}/"
                               f"{j['max_attempts']} attempts, expected {lj.expected}: {j.get('message')}")
        fig["not_final"] = not_final
        fig["final_by_kind"] = dict(sorted(final_by_kind.items()))

        # 4. never two at once: the flock, the run intervals, (attempt, token) unique
        collisions = read_records(self.rec / "collisions", ts=False)
        for c in collisions:
            self.violation(f"flock collision: job {c[0]} attempt {c[1]} started while another copy held the lock")
        fig["collisions"] = len(collisions)
        starts = read_records(self.rec / "starts")
        ends = read_records(self.rec / "ends")
        exits = {(r[0], r[2]): float(r[4]) for r in ends + read_records(self.rec / "fails")}
        ends_by_attempt = {(r[0], r[1]) for r in ends}
        fig["starts"] = len(starts)
        per_job: dict[str, list[tuple[float, int, str, float | None]]] = defaultdict(list)
        for job, attempt, token, _pid, ts in starts:
            per_job[job].append((float(ts), int(attempt), token, exits.get((job, token))))
        overlaps = 0
        for job, runs in per_job.items():
            runs.sort()
            tokens = [r[2] for r in runs]
            attempts = [r[1] for r in runs]
            if len(set(tokens)) != len(tokens) or len(set(attempts)) != len(attempts):
                self.violation(f"job {job}: an (attempt, token) started twice: {list(zip(attempts, tokens))}")
            if attempts != sorted(attempts):
                self.violation(f"job {job}: attempts started out of order: {attempts}")
            busy_until = None
            for ts, attempt, token, end in runs:
                if busy_until is not None and ts < busy_until:
                    overlaps += 1
                    self.violation(f"job {job}: attempt {attempt} started at {ts:.3f} while the previous "
                                   f"run was still going (it ended at {busy_until:.3f})")
                busy_until = max(busy_until or 0.0, end if end is not None else ts)
        fig["overlaps"] = overlaps

        # 5. a cancel is final; a finished run is never run again, save after a reboot
        fig["cancelled_then_ran"] = self.check_cancelled(per_job)

        # 6. attempts and events agree with what ran
        n_attempts = reclaimed = resumed = timed_out = killed_attempts = self_reclaims = adopted = 0
        unrecorded: Counter[str] = Counter()  # kind of job -> probe starts missing from its history
        reruns: Counter[str] = Counter()
        finished = {(r[0], r[2]) for r in ends}  # (job, token): it wrote its end line and exited
        killed = {(j, a) for j, a, _t in self.killed_jobs}
        killed_tokens = {t for _j, _a, t in self.killed_jobs}
        for lj in self.jobs:
            if lj.id is None or lj.id not in jobs:
                continue
            job = jobs[lj.id]
            res = h.call("show", id=lj.id)
            ev = res["events"]
            n_attempts += job["attempts"]
            claims = sorted(e["attempt"] for e in ev if e["kind"] in ("claimed", "reclaimed"))
            reclaimed += sum(e["kind"] == "reclaimed" for e in ev)
            for e in ev:  # "by W; lease of W expired": a daemon re-issued its own lease
                m = re.match(r"by (\S+); lease of (\S+) expired", e["message"] or "")
                if e["kind"] == "reclaimed" and m and m.group(1) == m.group(2):
                    self_reclaims += 1
            resumed += sum(e["kind"] == "resumed" for e in ev)
            adopted += sum(e["kind"] == "adopted" for e in ev)
            timed_out += sum(e["kind"] == "failed" and "timed out" in (e["message"] or "") for e in ev)
            runs = per_job.get(str(lj.id), [])
            ran = sorted(r[1] for r in runs)
            kinds: dict[int, set[str]] = defaultdict(set)
            by_attempt: dict[int, list[dict[str, Any]]] = defaultdict(list)
            for e in ev:
                kinds[e["attempt"]].add(e["kind"])
                by_attempt[e["attempt"]].append(e)
            where = f"job {lj.id} ({lj.kind})"
            for (ts, attempt, token, end), nxt in zip(runs, runs[1:]):
                if (str(lj.id), token) not in finished or end is None:
                    continue
                cause = self.rerun_cause(end, nxt[0], by_attempt[attempt], token in killed_tokens)
                reruns[cause] += 1
                if cause not in RERUN_ALLOWED:
                    self.violation(f"{where}: attempt {attempt} finished at {end:.3f} (its events: "
                                   f"{sorted(kinds[attempt])}) and ran again at {nxt[0]:.3f} as attempt "
                                   f"{nxt[1]}: a finished run re-run ({cause})")
            for ts, attempt, _token, _end in runs:  # every start is in the history, save a reboot's
                if "started" not in kinds[attempt] and not self._fault_between("reboot", ts, time.time()):
                    unrecorded[f"{lj.kind}, {'+'.join(sorted(kinds[attempt])) or 'no events'}"] += 1
            killed_attempts += sum((str(lj.id), str(a)) in killed for a in ran)
            if claims != list(range(1, job["attempts"] + 1)):
                self.violation(f"{where}: claim events for attempts {claims}, but attempts = {job['attempts']}")
            missing = [a for a in ran if a not in claims]
            if missing:
                self.violation(f"{where}: the probe ran attempt(s) {missing} that no claim/reclaim event issued")
            if ran and max(ran) > job["attempts"]:
                self.violation(f"{where}: the probe ran attempt {max(ran)} > attempts {job['attempts']}")
            if job["tries"] > job["max_attempts"]:
                self.violation(f"{where}: tries {job['tries']} > max_attempts {job['max_attempts']}")
            final_kind = ev[-1]["kind"] if ev else None
            ok_kinds = {"done": {"done"}, "failed": {"failed", "lease_expired"},
                        "cancelled": {"cancelled", "ended"},
                        "held": {"held"}}.get(job["state"], set())  # held: it can never run here (judged above)
            if final_kind not in ok_kinds:
                self.violation(f"{where}: state {job['state']} but the last event is {final_kind}")
            if job["state"] == "done":
                done_at = [e["attempt"] for e in ev if e["kind"] == "done"][-1]
                if (str(lj.id), str(done_at)) not in ends_by_attempt:
                    self.violation(f"{where}: done at attempt {done_at}, but that attempt's probe never "
                                   "finished (ends has no line for it)")
        fig.update(attempts=n_attempts, reclaimed=reclaimed, resumed=resumed, timed_out=timed_out,
                   killed_attempts=killed_attempts, self_reclaims=self_reclaims, adopted=adopted,
                   unrecorded_starts=sum(unrecorded.values()), reruns_by_cause=dict(reruns),
                   finished_reruns=sum(n for c, n in reruns.items() if c not in RERUN_ALLOWED),
                   finished_reruns_allowed=sum(reruns[c] for c in RERUN_ALLOWED))
        # A daemon must never re-issue the lease of a job it runs itself (it renews it).
        if self_reclaims:
            self.violation(f"{self_reclaims} reclaimed event(s) where a daemon re-issued the lease "
                           "of its own job")
        if unrecorded:  # also a violation of the history audit (below), one per run
            self.warnings.append(f"{sum(unrecorded.values())} probe start(s) with no `started` event for their "
                                 f"attempt (kind, the attempt's events): {dict(unrecorded.most_common(4))}")
        probe_ran: dict[int, set[int]] = defaultdict(set)  # job -> the attempts its probe started
        excused: set[tuple[int, int]] = set()
        for job_s, job_runs in per_job.items():
            for started_at, att, _tok, _e in job_runs:
                probe_ran[int(job_s)].add(att)
                if self._fault_between("reboot", started_at, time.time()):
                    excused.add((int(job_s), att))

        # 7. nothing left behind: every job is final, so no job process may live
        # (the keeper may: it holds nothing and leaves once idle)
        keeper = h.call("status")["keeper"]["pid"]
        orphans = []
        for p in h.our_processes():
            try:
                if p.pid in (last.pid, keeper) or p.status() == psutil.STATUS_ZOMBIE:
                    continue
                orphans.append(f"{p.pid} {' '.join(p.cmdline())[:120]}")
            except psutil.Error:
                continue
        for o in orphans:
            self.violation(f"process left running after every job finished: {o}")
        fig["orphans"] = len(orphans)

        # 8. round 3's machinery (tests/support/soak_audits.py)
        self.machinery.audit(h.home / "queue.db", probe_ran, excused, fig)


def _sloth_or_job(p: psutil.Process) -> bool:
    """The keeper, or a job process (it carries its run's token); not a client."""
    try:
        return "sloth_daemon.keeper" in " ".join(p.cmdline()) or "SLOTH_JOB_TOKEN" in p.environ()
    except psutil.Error:
        return False


# Malformed frames: (name, what to send, what must come back).
_OVER = b'{"v":1,"id":9,"op":"add","args":{"jobs":[{"command":["' + b"A" * (protocol.MAX_FRAME + 64)
BAD_FRAMES: list[tuple[str, list[bytes], str]] = [
    ("invalid utf-8", [b"\xff\xfe\x00garbage\xc3\x28\n"], "error"),
    ("random bytes", [bytes(range(1, 10)) + bytes(range(11, 200)) + b"\n"], "error"),
    ("bad json", [b'{"v":1,"id":1,"op":"ping",\n'], "error"),
    ("json array", [b"[1,2,3]\n"], "error"),
    ("unknown op", [b'{"v":1,"id":2,"op":"self_destruct","args":{}}\n'], "error"),
    ("wrong version", [b'{"v":99,"id":3,"op":"ping","args":{}}\n'], "error"),
    ("add with jobs as a string", [b'{"v":1,"id":4,"op":"add","args":{"jobs":"rm -rf ~"}}\n'], "error"),
    ("add with a bad job", [b'{"v":1,"id":5,"op":"add","args":{"jobs":[{"command":[]}]}}\n'], "error"),
    ("show a bad id", [b'{"v":1,"id":6,"op":"show","args":{"id":"x"}}\n'], "error"),
    ("garbage then ping", [b"}{\n", b'{"v":1,"id":7,"op":"ping"}\n'], "error+pong"),
    ("over-size frame", [_OVER], "error+close"),
    ("half a frame, then gone", [b'{"v":1,"id":8,"op":"pi'], "nothing"),
]


def read_records(path: Path, ts: bool = True) -> list[list[str]]:
    """Lines of a probe record file, split; a torn last line is skipped."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return []
    want = 5 if ts else 4
    return [ln.split() for ln in text.splitlines() if len(ln.split()) >= want]


def run_soak(cfg: SoakConfig) -> SoakResult:
    return Soak(cfg).run()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--short", action="store_true", help="CI size: a few hundred jobs, ~20 s of chaos")
    ap.add_argument("--duration", type=float, help="seconds of chaos (default 300, --short 20)")
    ap.add_argument("--jobs", type=int, help="jobs to enqueue (default 3000, --short 300)")
    ap.add_argument("--clients", type=int)
    ap.add_argument("--seed", type=int)
    ap.add_argument("--settle", type=float, help="bound on the wait for all jobs after the chaos")
    ap.add_argument("--keep", action="store_true", help="keep the temporary SLOTH_HOME")
    ap.add_argument("--faults", help=f"comma-separated chaos kinds to throw (default all: {','.join(CHAOS)})")
    ap.add_argument("--no-lease-floor", dest="require_lease_floor", action="store_false",
                    help="count a too-short lease accepted instead of failing (a sloth before the floor)")
    ap.add_argument("--idle-exit", type=float, default=0.0, metavar="SECONDS",
                    help="the daemon's idle_exit_s: it exits when it has had nothing to do this long (default "
                         "off); the soak then waits for that exit after the settle and checks on the next daemon")
    ap.add_argument("--dormant", type=float, metavar="SECONDS",
                    help="the daemon's dormant_after_s (default: sloth's): it goes dormant after this long with "
                         "nothing but timers to do, and the chaos then hits the dormant process too")
    a = ap.parse_args(argv)
    kw: dict[str, Any] = {"seed": a.seed, "keep_home": a.keep, "require_lease_floor": a.require_lease_floor,
                          "idle_exit_s": a.idle_exit, "dormant_after_s": a.dormant}
    if a.faults:
        faults = tuple(f.strip() for f in a.faults.split(",") if f.strip())
        unknown = sorted(set(faults) - set(CHAOS))
        if unknown or not faults:
            ap.error(f"unknown fault(s) {', '.join(unknown) or '(none given)'}; choose from {', '.join(CHAOS)}")
        kw["faults"] = faults
    for name, val in (("duration_s", a.duration), ("jobs", a.jobs), ("clients", a.clients),
                      ("settle_s", a.settle)):
        if val is not None:
            kw[name] = val
    cfg = SoakConfig.short(**kw) if a.short else SoakConfig(**kw)
    res = run_soak(cfg)
    print(res.report())
    if a.keep:
        print(f"home kept at {res.home}")
    return 1 if res.violations else 0


if __name__ == "__main__":
    sys.exit(main())

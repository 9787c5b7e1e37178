#!/usr/bin/env python3
"""Chaos soak: the real daemon under kill -9, SIGSTOP, simulated sleep, job
kills and garbage on its socket, while clients keep adding jobs.

    python tests/chaos_soak.py --duration 300 --jobs 3000     # long
    python tests/chaos_soak.py --short                        # CI size (< ~60 s)

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

Meanwhile a chaos loop picks at random: kill -9 the daemon and restart it;
SIGSTOP it for 1-4 s (sometimes "sleeping" the clock while it is stopped);
jump its wall clock 10-60 min ahead (a simulated suspend); SIGKILL a running
job process; throw malformed frames at the socket. Clients retry through
the outages; after an ambiguous failure (the request may have been applied
before the daemon died) they look the key up before adding again, so a
retried add never makes a second job.

Then the daemon is let to finish everything and the invariants are checked:
every job final (done, or failed for the timeout kind), none lost, none
duplicated, no two runs of one job at once (flock collisions, and run
intervals from the records), attempts/events consistent with what ran, no
daemon re-issuing its own job's lease (so a run that ended well runs again
only when a kill -9 lost its end), no job process left behind, and no daemon
exit other than the kill -9s.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import shutil
import signal
import socket
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
from sloth_daemon.client import Client  # noqa: E402
from sloth_daemon.errors import SlothError  # noqa: E402
from tests.support.faults import DiskFull, flood, hold_write_lock  # noqa: E402
from tests.support import fakeclock as fc  # noqa: E402
from tests.support.harness import Harness  # noqa: E402

PROBE = str(REPO / "tests" / "support" / "probe_job.py")
CHAOS = ("kill9", "reboot", "stop", "jump", "jobkill", "badframes", "diskfull", "flood", "lock")
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
        "quick": 0.50, "slow": 0.12, "flaky": 0.22, "timeout": 0.10, "forker": 0.06})
    slow_hold_s: tuple[float, float] = (1.0, 3.0)
    stop_s: tuple[float, float] = (1.0, 4.0)
    jump_s: tuple[float, float] = (600.0, 3600.0)
    chaos_gap_s: tuple[float, float] = (0.5, 2.5)
    weights: dict[str, float] = field(default_factory=lambda: {
        "kill9": 2, "reboot": 0.5, "stop": 1, "jump": 1, "jobkill": 3, "badframes": 2,
        "diskfull": 1, "flood": 1, "lock": 1})
    fault_s: tuple[float, float] = (1.0, 3.0)  # how long a full disk, a flood or a foreign lock lasts
    max_attempts: int = 30  # for the kinds that must end done: room for the chaos
    lanes: dict[str, int] = field(default_factory=lambda: {"default": 4, "slow": 6})
    keep_home: bool = False
    log: Callable[[str], None] = print

    @classmethod
    def short(cls, **kw: Any) -> "SoakConfig":
        base: dict[str, Any] = dict(
            duration_s=20.0, jobs=300, clients=4, settle_s=60.0, chaos_gap_s=(0.3, 1.2),
            slow_hold_s=(1.0, 2.0), stop_s=(1.0, 2.5),
            mix={"quick": 0.55, "slow": 0.07, "flaky": 0.25, "timeout": 0.08, "forker": 0.05},
        )
        base.update(kw)
        return cls(**base)

    def daemon_config(self) -> str:
        lanes = "".join(f"{k} = {v}\n" for k, v in self.lanes.items())
        return ('lease_s = "3s"\nclock_check_s = "1s"\nkill_grace_s = "1s"\n'
                f'backoff_cap_s = "4s"\nmax_attempts = 3\n[lanes]\n{lanes}')


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
    id: int | None = None
    found_by_lookup: bool = False

    def spec(self) -> dict[str, Any]:
        s: dict[str, Any] = {"command": self.argv, "key": self.key, "lane": self.lane,
                             "max_attempts": self.max_attempts}
        if self.timeout_s:
            s["timeout_s"] = self.timeout_s
        return s

    @property
    def expected(self) -> str:
        return "failed" if self.kind == "timeout" else "done"


@dataclass
class SoakResult:
    figures: dict[str, Any]
    violations: list[str]
    warnings: list[str]
    home: Path
    log_tail: str = ""

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
            f"successful runs re-run: after a daemon kill -9 {f.get('reruns_after_kill9', 0)}, "
            f"after a reboot {f.get('reruns_after_reboot', 0)}, after a fence {f.get('reruns_after_fence', 0)}, "
            f"after a job kill {f.get('reruns_after_job_kill', 0)}, otherwise {f.get('reruns_other', 0)}",
            f"  edges: full disk {f.get('disk_windows', 0)} | connection floods {f.get('flood_windows', 0)} "
            f"(up to {f.get('flood_max', 0)} held) | foreign write locks {f.get('lock_windows', 0)} | "
            f"successful runs re-run after a full disk {f.get('reruns_after_disk', 0)}, after a foreign "
            f"lock {f.get('reruns_after_lock', 0)}",
            f"  daemon starts: {f.get('daemon_starts', 0)}, spawn -> answering median "
            f"{f.get('ready_median_s', 0):.2f} s, max {f.get('ready_max_s', 0):.2f} s",
            f"  invariants: lost {f.get('lost', '?')} | duplicates {f.get('duplicates', '?')} | "
            f"overlaps {f.get('overlaps', '?')} | collisions {f.get('collisions', '?')} | "
            f"orphans {f.get('orphans', '?')} | unexpected daemon exits "
            f"{f.get('unexpected_exits', '?')} | not final {f.get('not_final', '?')}",
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
        self.h = Harness(self.root / "h", config=cfg.daemon_config(),
                         extra_env=self.clock.env() if self.clock else None)
        self.violations: list[str] = []
        self.warnings: list[str] = []
        self.lock = threading.Lock()
        self.abort = threading.Event()
        self.daemons: list[dict[str, Any]] = []  # every daemon we started and how it ended
        self.n: Counter[str] = Counter()
        self.killed_jobs: list[tuple[str, str, str]] = []  # (job, attempt, token)
        self.jobs: list[LJob] = []
        self.timeline = open(self.root / "chaos.log", "a", buffering=1)  # what the chaos did, when

    def note(self, what: str) -> None:
        self.timeline.write(f"{time.time():.3f} {what}\n")

    # ---------------------------------------------------------------- util
    def violation(self, msg: str) -> None:
        with self.lock:
            self.violations.append(msg)
        self.cfg.log(f"VIOLATION: {msg}")

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
            else:  # timeout: always killed by its timeout (or the chaos): ends failed
                lane, timeout_s, max_attempts = "slow", rng.choice([0.5, 1.0]), 2
                argv += ["--hold", "60"]
            self.jobs.append(LJob(f"soak-{self.seed}-{i}", kind, lane, argv, max_attempts,
                                  timeout_s, rng.random() < cfg.cli_share))

    # -------------------------------------------------------------- daemon
    def start_daemon(self, why: str) -> None:
        t0 = time.monotonic()
        try:
            p = self.h.start()
        except AssertionError as e:  # it exited or never answered
            self.violation(f"daemon failed to start ({why}): {str(e)[:300]}")
            p = self.h.daemon
            if p is not None:
                self.daemons.append({"proc": p, "why": why, "killed": False})
            raise
        self.daemons.append({"proc": p, "why": why, "killed": False,
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
        d["killed"] = True
        self.note(f"kill -9 daemon {p.pid}")
        p.kill()
        rc = p.wait(15)
        if rc != -signal.SIGKILL:
            self.violation(f"daemon pid {p.pid} ended with {rc} on kill -9")
        self.count("kills")
        down = self.rng.uniform(0.0, 1.0)
        self.sleep(down)  # clients meet a dead socket meanwhile
        self.start_daemon("restart after kill -9")
        self.note(f"restarted: daemon {self.h.daemon.pid} (down {down:.2f} s, then "
                  f"{self.daemons[-1]['ready_s']:.2f} s from spawn to answering)")

    def act_reboot(self) -> None:
        """What a reboot or a power cut leaves: nothing of sloth running, the
        daemon, its keeper and every job process killed at once."""
        d = self.daemons[-1]
        d["killed"] = True
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

    def act_stop(self) -> None:
        p = self.daemons[-1]["proc"]
        t = self.rng.uniform(*self.cfg.stop_s)
        self.note(f"SIGSTOP daemon {p.pid} for {t:.2f} s")
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
        self.note(f"SIGCONT daemon {p.pid}")

    def act_jump(self) -> None:
        if self.clock is None:
            return
        s = self.rng.uniform(*self.cfg.jump_s)
        self.clock.jump(s)
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
        kinds = [k for k in CHAOS if k != "jump" or self.clock is not None]
        first = kinds[:]
        self.rng.shuffle(first)  # every kind at least once, early
        weights = [self.cfg.weights[k] for k in kinds]
        while time.monotonic() < until and not self.abort.is_set():
            self.sleep(self.rng.uniform(*self.cfg.chaos_gap_s))
            if time.monotonic() >= until:
                break
            self.check_daemon()
            act = first.pop() if first else self.rng.choices(kinds, weights)[0]
            getattr(self, f"act_{act}")()

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
                    self.violation(f"add refused with {e.code}: {e.message}")
                    return
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
        p = self.h.cli(*argv, "--", *j.argv, timeout_s=90)
        if p.returncode == 0:
            return int(json.loads(p.stdout)["ids"][0])
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
            settle_deadline = time.monotonic() + cfg.settle_s
            for t in threads:
                t.join(max(0.0, settle_deadline - time.monotonic()))
                if t.is_alive():
                    self.violation(f"{t.name} still enqueueing after the settle bound")
            self.wait_all_final(settle_deadline)
            figures["settle_s"] = time.monotonic() - t_chaos
            self.verify(figures)
        except Exception:
            self.violation(f"soak aborted:\n{traceback.format_exc()}")
        finally:
            self.abort.set()
            p = self.h.daemon
            if p is not None and p.poll() is None:
                p.send_signal(signal.SIGCONT)
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
        return SoakResult(figures, self.violations, self.warnings, self.root, tail)

    def wait_all_final(self, deadline: float) -> None:
        last: dict[str, int] = {}
        while time.monotonic() < deadline:
            try:
                with Client(self.h.socket, timeout_s=30) as c:
                    last = c.call("status")["counts"]
                if not any(last.get(s, 0) for s in ("blocked", "queued", "running")):
                    return
            except TRANSIENT:
                self.check_daemon()
            time.sleep(0.25)
        self.violation(f"jobs still unfinished after the settle bound: {last}")

    # -------------------------------------------------------------- verify
    def _fault_at(self, t: float | None, after_s: float = 2.0) -> str | None:
        """The fault whose window (or the ``after_s`` following it) holds time ``t``."""
        if t is not None:
            for fault, spans in self.windows.items():
                if any(t0 <= t <= t1 + after_s for t0, t1 in spans):
                    return fault
        return None

    def verify(self, fig: dict[str, Any]) -> None:
        h = self.h
        # 1. the daemons: every one we started ended by our kill -9, the last one serves
        unexpected = 0
        for d in self.daemons[:-1]:
            rc = d["proc"].returncode
            if not d["killed"] or rc != -signal.SIGKILL:
                unexpected += 1
                self.violation(f"daemon pid {d['proc'].pid} ({d['why']}) ended with {rc}, killed by us: {d['killed']}")
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
            if not got:
                lost += 1
                self.violation(f"key {lj.key} ({lj.kind}, recorded id {lj.id}) has no job in `list`")
            elif lj.id != got[0]["id"]:
                lost += 1
                self.violation(f"key {lj.key}: the client recorded id {lj.id}, `list` has {got[0]['id']}")
        strays = [j["id"] for j in listed if j.get("key") not in {lj.key for lj in self.jobs}]
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
            if j["state"] != lj.expected:
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

        # 5. attempts and events agree with what ran
        n_attempts = reclaimed = resumed = timed_out = killed_attempts = self_reclaims = adopted = 0
        crash_reruns = other_reruns = killed_reruns = fence_reruns = 0
        fault_reruns: Counter[str] = Counter()
        ended_at = {(r[0], r[1]): float(r[4]) for r in ends}
        killed = {(j, a) for j, a, _t in self.killed_jobs}
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
            ran = sorted(r[1] for r in per_job.get(str(lj.id), []))
            # A run that ended well but ran again. A kill -9 of the daemon alone
            # must never cause one (the keeper keeps the run and its end). Expected
            # only when the run's supervision died too (a reboot: the daemon
            # abandons the lease and re-runs the job), or when the run wrote its
            # end line and was then killed before exiting: by the keeper's fence
            # (its daemon was stopped past the lease) or by the chaos loop.
            succeeded = [a for a in ran if (str(lj.id), str(a)) in ends_by_attempt]
            abandoned = {e["attempt"] for e in ev if e["kind"] == "abandoned"}
            fenced = {e["attempt"] for e in ev if e["kind"] == "fenced"}
            for a in succeeded[:-1]:
                if a in abandoned:
                    crash_reruns += 1
                elif a in fenced:
                    fence_reruns += 1
                elif (str(lj.id), str(a)) in killed:
                    # the chaos loop SIGKILLed it after it wrote its end line but
                    # before it exited: to the daemon that attempt was killed
                    killed_reruns += 1
                elif fault := self._fault_at(ended_at.get((str(lj.id), str(a)))):
                    fault_reruns[fault] += 1  # ended in a full disk or a foreign lock: never re-run
                else:
                    other_reruns += 1
            killed_attempts += sum((str(lj.id), str(a)) in killed for a in ran)
            where = f"job {lj.id} ({lj.kind})"
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
                        "cancelled": {"cancelled"}}.get(job["state"], set())
            if final_kind not in ok_kinds:
                self.violation(f"{where}: state {job['state']} but the last event is {final_kind}")
            if job["state"] == "done":
                done_at = [e["attempt"] for e in ev if e["kind"] == "done"][-1]
                if (str(lj.id), str(done_at)) not in ends_by_attempt:
                    self.violation(f"{where}: done at attempt {done_at}, but that attempt's probe never "
                                   "finished (ends has no line for it)")
        rebooted = self.n.get("reboots", 0) > 0
        fig.update(attempts=n_attempts, reclaimed=reclaimed, resumed=resumed, timed_out=timed_out,
                   killed_attempts=killed_attempts, self_reclaims=self_reclaims, adopted=adopted,
                   reruns_after_reboot=crash_reruns if rebooted else 0,
                   reruns_after_kill9=0 if rebooted else crash_reruns, reruns_after_fence=fence_reruns,
                   reruns_other=other_reruns, reruns_after_job_kill=killed_reruns)
        if not rebooted and crash_reruns:
            self.violation(f"{crash_reruns} run(s) ended well and were run again after a kill -9 of "
                           "the daemon alone (the keeper should have kept them)")
        # A daemon must never re-issue the lease of a job it runs itself (it renews
        # it), so a run that ended well is re-run only after a kill -9 lost its end.
        if self_reclaims:
            self.violation(f"{self_reclaims} reclaimed event(s) where a daemon re-issued the lease "
                           "of its own job")
        if other_reruns:
            self.violation(f"{other_reruns} run(s) ended well and were run again with no daemon "
                           "crash in between")
        for fault, k in fault_reruns.items():
            self.violation(f"{k} run(s) that ended well during a {fault} window were run again "
                           "(their outcome must wait for the storage, never be lost)")
        fig.update({f"reruns_after_{f}": fault_reruns.get(f, 0) for f in ("disk", "lock", "flood")})

        # 6. nothing left behind: every job is final, so no job process may live
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
    a = ap.parse_args(argv)
    kw: dict[str, Any] = {"seed": a.seed, "keep_home": a.keep}
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

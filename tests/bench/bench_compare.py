#!/usr/bin/env python3
"""Side by side: sloth against task-spooler (`tsp`) and `nq`, same machine, same run.

    python tests/bench/bench_compare.py --out DIR [--quick] [--idle 60] [--reps 3] [--calls 100]
    python tests/bench/bench_compare.py --bulk [--reps 3] [--sweep 10000] [--burn 0]   # issue 34's bulk targets only

Writes DIR/compare.md (the table, also printed) and DIR/compare.png (a chart).
Each tool runs in its own temporary folders (SLOTH_HOME; TS_SOCKET and TMPDIR
for tsp; NQDIR for nq) and everything it started is killed at the end.
Installs `task-spooler` and `nq` with apt-get when missing and running as
root, and matplotlib (the `bench` extra) with pip when missing.

Measured (medians of several runs; the machine is shared and noisy, so read
the ratios):
  enqueue   one CLI call that queues `true`, many calls interleaved across the
            tools, against `python -c pass` (this interpreter) as the floor
  1,000     `true` jobs from the first enqueue to all finished: one CLI call
            per job (1 slot, and 2 where the tool has slots), sloth also with
            one `sloth add --stdin` of 1,000 lines; a bare
            `subprocess.run(["true"])` loop as the floor
  sweep     a 10,000-member batch end to end (--sweep N; 0 skips it), 1 and 2
            slots: sloth, one `sloth add --stdin` + `sloth wait` on every id;
            tsp, one `tsp true` per job + `tsp -w`; `xargs -P` over the same
            lines (no queue, no durability: the floor of a parallel runner)
  queued    processes and memory (PSS) with 100 jobs waiting behind a long one
  idle      resident memory, CPU and wake-ups of each tool's server over
            --idle seconds
  survive   5 jobs queued behind a long one; kill -9 the server, restart it,
            do they still run? And a simulated reboot: kill -9 every process of
            the tool (the running job too), restart, do they still run?

--bulk measures only issue 34's bulk targets, printed beside their peers
(the `sloth` commands from a fresh `pip install .`, as a user runs them;
--in-place: this venv's; the daemon is this tree's either way):
1,000 `true` from one `sloth add --stdin` + `sloth wait` on every id against
tsp (1 slot each; target <= 0.8x tsp's time in the same round) and the bare
loop, --reps rounds interleaved; then the --sweep row (1 and 2 slots: sloth,
tsp, `xargs -P`), --reps rounds too. Ranges over the rounds; nothing written.
--burn N runs N busy loops meanwhile (a loaded machine, as in issue 34's
2,000-member row where 2 slots were slower than 1).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import psutil

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from tests.bench._common import bench_bare, cpu_s, ensure_tools, fsync_rate, normal_install, pct, wakeups  # noqa: E402
from tests.support.harness import Harness, processes_with_env  # noqa: E402

PY = sys.executable
SLOTH = str(Path(PY).parent / "sloth")
N_JOBS = 1000


# ------------------------------------------------------------------ set-up
def ensure_matplotlib() -> bool:
    try:
        import matplotlib  # noqa: F401
        return True
    except ImportError:
        print("installing matplotlib (the `bench` extra) ...", flush=True)
        subprocess.run([PY, "-m", "pip", "install", "-q", "-e", f"{REPO}[bench]"])
        try:
            import matplotlib  # noqa: F401
            return True
        except ImportError:
            print("warning: no matplotlib: compare.png is not drawn", flush=True)
            return False


def kill_env(var: str, value: str) -> None:
    """SIGKILL every process whose environment has var=value (a tool's own
    folder): all frozen first, then all killed, so none moves on in between
    (a power cut stops everything at once)."""
    procs = processes_with_env(var, value)
    for sig in (signal.SIGSTOP, signal.SIGKILL):
        for p in procs:
            try:
                p.send_signal(sig)
            except psutil.Error:
                pass
    psutil.wait_procs(procs, timeout=5)


def run(argv: list[str], env: dict[str, str], *, cwd: Path | None = None, input: str | None = None,
        timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, env=env, cwd=str(cwd) if cwd else None, input=input, text=True,
                          capture_output=True, timeout=timeout)


def wait_until(pred: Callable[[], Any], timeout_s: float, step: float = 0.02) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(step)
    return None


def pss_mb(procs: list[psutil.Process]) -> float:
    total = 0
    for p in procs:
        try:
            total += p.memory_full_info().pss
        except (psutil.Error, AttributeError):
            try:
                total += p.memory_info().rss
            except psutil.Error:
                pass
    return total / 2**20


# ------------------------------------------------------------------- tools
class Tool:
    """One tool in its own temporary folder."""

    name = ""
    var = ""  # the environment variable that names its folder (to find its processes)

    def __init__(self, root: Path, slots: int = 1) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix=f"{self.name[:2]}-", dir=root))
        self.slots = slots
        self.env = dict(os.environ)

    def start(self) -> None: ...
    def add_argv(self, cmd: list[str]) -> list[str]: raise NotImplementedError
    def add(self, cmd: list[str]) -> str: raise NotImplementedError
    def wait_all(self, ids: list[str], n: int) -> None: raise NotImplementedError
    def server(self) -> psutil.Process | None: return None

    def procs(self) -> list[psutil.Process]:
        return processes_with_env(self.var, self.env[self.var])

    def close(self) -> None:
        kill_env(self.var, self.env[self.var])
        shutil.rmtree(self.dir, ignore_errors=True)


class Sloth(Tool):
    name, var = "sloth", "SLOTH_HOME"

    def __init__(self, root: Path, slots: int = 1) -> None:
        super().__init__(root, slots)
        self.h = Harness(self.dir / "h", config=f"[lanes]\ndefault = {slots}\n")
        self.env = dict(self.h.env)

    def start(self) -> None:
        self.h.start()

    def server(self) -> psutil.Process | None:
        d = self.h.daemon
        return psutil.Process(d.pid) if d is not None and d.poll() is None else None

    def add_argv(self, cmd: list[str]) -> list[str]:
        return [SLOTH, "add", "--", *cmd]

    def add(self, cmd: list[str]) -> str:
        p = run(self.add_argv(cmd), self.env, cwd=self.dir)
        assert p.returncode == 0, p.stderr
        return p.stdout.strip()

    def add_many(self, lines: list[str]) -> list[str]:
        p = run([SLOTH, "add", "--stdin"], self.env, cwd=self.dir, input="\n".join(lines) + "\n")
        assert p.returncode == 0, p.stderr
        return p.stdout.split()

    def wait_all(self, ids: list[str], n: int) -> None:
        # Wait for the last id, then poll the counts, as tsp's `-w` + `-l` below
        # (`sloth wait` on all ids works too: wait_every; this keeps the tools comparable).
        p = run([SLOTH, "wait", ids[-1]], self.env, cwd=self.dir, timeout=300)
        assert p.returncode == 0, p.stdout[-500:] + p.stderr
        ok = wait_until(lambda: self.h.call("status")["counts"]["done"] >= n, 60, 0.01)
        assert ok, f"sloth: not all {n} done: {self.h.call('status')['counts']}"

    def wait_every(self, ids: list[str]) -> None:
        """`sloth wait` on every id, as a user who waits for a sweep would."""
        p = run([SLOTH, "wait", *ids], self.env, cwd=self.dir, timeout=1200)
        assert p.returncode == 0, p.stdout[-500:] + p.stderr

    def queued_and_running(self) -> tuple[int, int]:
        c = self.h.call("status")["counts"]
        return c["queued"], c["running"]

    def kill9_server(self) -> None:
        self.h.kill9()

    def restart(self) -> None:
        self.h.start()

    def close(self) -> None:
        self.h.reap()
        super().close()


class Tsp(Tool):
    name, var = "tsp", "TS_SOCKET"

    def __init__(self, root: Path, slots: int = 1) -> None:
        super().__init__(root, slots)
        (self.dir / "tmp").mkdir()
        # TS_SAVELIST: "filename which will store the list, if the server dies":
        # set, to give tsp its best chance in the durability test.
        self.env.update(TS_SOCKET=str(self.dir / "sock"), TMPDIR=str(self.dir / "tmp"),
                        TS_MAXFINISHED="5000", TS_MAXCONN="5000",
                        TS_SAVELIST=str(self.dir / "savelist"))

    def start(self) -> None:
        run(["tsp", "-S", str(self.slots)], self.env)  # starts the server and sets the slots
        wait_until(self.server, 5)

    def server(self) -> psutil.Process | None:
        sock = self.env["TS_SOCKET"]
        for p in self.procs():
            try:
                if any(c.laddr == sock for c in p.net_connections("unix")):
                    return p
            except psutil.Error:
                continue
        return None

    def add_argv(self, cmd: list[str]) -> list[str]:
        return ["tsp", *cmd]

    def add(self, cmd: list[str]) -> str:
        p = run(self.add_argv(cmd), self.env)
        assert p.returncode == 0, p.stderr
        return p.stdout.strip()

    def listing(self) -> list[list[str]]:
        out = run(["tsp", "-l"], self.env).stdout.splitlines()[1:]
        return [ln.split() for ln in out if ln.strip()]

    def wait_all(self, ids: list[str], n: int) -> None:
        run(["tsp", "-w", ids[-1]], self.env)
        ok = wait_until(lambda: sum(r[1] == "finished" for r in self.listing()) >= n, 60, 0.01)
        assert ok, f"tsp: not all {n} finished"

    def queued_and_running(self) -> tuple[int, int]:
        rows = self.listing()
        return sum(r[1] == "queued" for r in rows), sum(r[1] == "running" for r in rows)

    def kill9_server(self) -> None:
        s = self.server()
        assert s is not None, "no tsp server"
        s.kill()
        psutil.wait_procs([s], 5)

    def restart(self) -> None:
        self.start()


class Nq(Tool):
    name, var = "nq", "NQDIR"

    def __init__(self, root: Path, slots: int = 1) -> None:
        super().__init__(root, slots)
        self.env["NQDIR"] = str(self.dir / "q")

    def add_argv(self, cmd: list[str]) -> list[str]:
        return ["nq", "-q", *cmd]

    def add(self, cmd: list[str]) -> str:
        p = run(["nq", *cmd], self.env)
        assert p.returncode == 0, p.stderr
        return p.stdout.strip()

    def wait_all(self, ids: list[str], n: int) -> None:
        run(["nq", "-w"], self.env)
        files = [f for f in os.listdir(self.env["NQDIR"]) if f.startswith(",")]
        assert len(files) >= n, f"nq: {len(files)} job files of {n}"

    def queued_and_running(self) -> tuple[int, int]:
        alive = [p for p in self.procs() if p.status() != psutil.STATUS_ZOMBIE]
        # every queued or running job is one nq process (it waits on the flocks, then execs the job)
        return len(alive), 0

    def kill9_server(self) -> None:
        raise NotImplementedError("nq has no server")

    def restart(self) -> None:
        pass  # nothing to restart: no daemon


TOOLS: dict[str, type[Tool]] = {"sloth": Sloth, "tsp": Tsp, "nq": Nq}


# --------------------------------------------------------------- measures
def bench_enqueue(root: Path, tools: list[str], calls: int) -> dict[str, dict[str, float]]:
    """Per-call latency of queueing `true`, calls interleaved across the tools."""
    inst = {t: TOOLS[t](root) for t in tools}
    try:
        for t in inst.values():
            t.start()
        argvs: dict[str, tuple[list[str], dict[str, str], Path | None]] = {
            "floor": ([PY, "-c", "pass"], dict(os.environ), None)}
        for name, t in inst.items():
            argvs[name] = (t.add_argv(["true"]), t.env, t.dir)
        times: dict[str, list[float]] = {k: [] for k in argvs}
        order = list(argvs)
        for _ in range(3):  # warm the page cache
            for k in order:
                argv, env, cwd = argvs[k]
                subprocess.run(argv, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for i in range(calls):
            for k in order[i % len(order):] + order[:i % len(order)]:
                argv, env, cwd = argvs[k]
                t0 = time.perf_counter()
                p = subprocess.run(argv, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
                times[k].append(time.perf_counter() - t0)
                if p.returncode != 0:
                    raise RuntimeError(f"{argv} -> {p.returncode}: {p.stderr.decode()[:300]}")
        return {k: {"median_ms": 1000 * statistics.median(v), "p95_ms": 1000 * pct(v, 0.95), "n": len(v)}
                for k, v in times.items()}
    finally:
        for t in inst.values():
            t.close()


def bench_thousand(root: Path, tool: str, slots: int, batch: bool = False, n: int = N_JOBS) -> float:
    """Seconds from the first enqueue to all n `true` jobs finished."""
    t = TOOLS[tool](root, slots)
    try:
        t.start()
        t0 = time.perf_counter()
        if batch:  # as a user waits for a batch: `sloth wait` on every id (issue 34)
            assert isinstance(t, Sloth)
            t.wait_every(t.add_many(["true"] * n))
            return time.perf_counter() - t0
        else:
            argv = t.add_argv(["true"])
            ids = []
            for _ in range(n):
                p = subprocess.run(argv, env=t.env, cwd=t.dir, capture_output=True, text=True)
                if p.returncode != 0:
                    raise RuntimeError(f"{argv} -> {p.returncode}: {p.stderr[:300]}")
                ids.append(p.stdout.strip())
        t.wait_all(ids, n)
        return time.perf_counter() - t0
    finally:
        t.close()


def bench_sweep(root: Path, tool: str, slots: int, n: int) -> float:
    """Seconds from the first enqueue to all n `true` jobs finished, a sweep's
    worth: sloth as one batch waited on by every id, tsp one call per job,
    `xargs -P` with no queue at all."""
    if tool == "xargs":
        t0 = time.perf_counter()
        p = subprocess.run(["xargs", "-P", str(slots), "-n", "1", "true"], input="x\n" * n, text=True,
                           capture_output=True)
        assert p.returncode == 0, p.stderr[-300:]
        return time.perf_counter() - t0
    t = TOOLS[tool](root, slots)
    if isinstance(t, Tsp):
        t.env.update(TS_MAXFINISHED=str(n + 10), TS_MAXCONN=str(n + 10))
    try:
        t.start()
        t0 = time.perf_counter()
        if isinstance(t, Sloth):
            t.wait_every(t.add_many(["true"] * n))
        else:
            argv = t.add_argv(["true"])
            ids = [subprocess.run(argv, env=t.env, cwd=t.dir, capture_output=True, text=True,
                                  check=True).stdout.strip() for _ in range(n)]
            t.wait_all(ids, n)
        return time.perf_counter() - t0
    finally:
        t.close()


def bench_queued(root: Path, tool: str, n: int = 100) -> dict[str, float]:
    """Processes and memory of the tool with n jobs waiting behind a long one."""
    t = TOOLS[tool](root, 1)
    try:
        t.start()
        t.add(["sleep", "120"])
        for _ in range(n):
            t.add(["true"])
        time.sleep(1.0)
        procs = [p for p in t.procs() if p.name() != "sleep"]
        procs = [p for p in procs if p.status() != psutil.STATUS_ZOMBIE]
        return {"procs": len(procs), "pss_mb": pss_mb(procs)}
    finally:
        t.close()


def bench_idle(root: Path, tools: list[str], seconds: float) -> dict[str, dict[str, float]]:
    """Idle servers measured side by side over the same window."""
    inst = {t: TOOLS[t](root) for t in tools if t != "nq"}
    # The floor: a bare interpreter that wakes every 5 s (as often as sloth's
    # clock check) and does nothing. A VM charges a sleeper something per wake-up.
    floor = subprocess.Popen([PY, "-c", "import selectors\ns = selectors.DefaultSelector()\n"
                              "while True: s.select(5)"])
    try:
        for t in inst.values():
            t.start()
        time.sleep(2.0)  # settle after start-up
        srv = {k: s for k, t in inst.items() if (s := t.server()) is not None}
        srv["floor"] = psutil.Process(floor.pid)
        # Six windows: the median window is the steady cost (a shared machine
        # charges stray ticks now and then); the total is reported too.
        windows = 6
        marks = [{k: (cpu_s(s), wakeups(s)) for k, s in srv.items()}]
        for _ in range(windows):
            time.sleep(seconds / windows)
            marks.append({k: (cpu_s(s), wakeups(s)) for k, s in srv.items()})
        out = {}
        for k, s in srv.items():
            per = [100 * (b[k][0] - a[k][0]) / (seconds / windows) for a, b in zip(marks, marks[1:])]
            out[k] = {"cpu_pct": statistics.median(per),
                      "cpu_pct_total": 100 * (marks[-1][k][0] - marks[0][k][0]) / seconds,
                      "wakeups_per_s": (marks[-1][k][1] - marks[0][k][1]) / seconds,
                      "rss_mb": s.memory_info().rss / 2**20, "pss_mb": pss_mb([s])}
        return out
    finally:
        floor.kill()
        floor.wait()
        for t in inst.values():
            t.close()


def bench_survive(root: Path, tool: str, kind: str) -> dict[str, Any]:
    """kind "server": kill -9 the server only. kind "reboot": kill -9 every process
    of the tool, the running job too. Then restart and see what still runs."""
    t = TOOLS[tool](root, 1)
    marks = t.dir / "marks"
    marks.mkdir()
    try:
        if kind == "server" and tool == "nq":
            return {"verdict": "n/a", "detail": "no server: each queued job is its own waiting process"}
        t.start()
        t.add(["sleep", "3"])
        for i in range(5):
            t.add(["touch", str(marks / f"m{i}")])
        time.sleep(0.7)  # the long job is running, the 5 wait
        before = t.queued_and_running()
        if kind == "server":
            t.kill9_server()
        else:
            kill_env(t.var, t.env[t.var])
            if isinstance(t, Sloth):
                if t.h.daemon is not None:
                    t.h.daemon.wait(5)
                # a reboot empties the runtime dir (/run/user/UID): the socket goes
                shutil.rmtree(t.h.home / "run", ignore_errors=True)
        time.sleep(0.5)
        t.restart()
        after_restart = _safe(t.queued_and_running)
        ran = wait_until(lambda: len(list(marks.iterdir())) == 5, 12, 0.1)
        n_ran = len(list(marks.iterdir()))
        what = "processes" if tool == "nq" else "queued/running"
        detail = (f"before: {before[0]}/{before[1]} {what}; after the restart: "
                  f"{after_restart[0]}/{after_restart[1]}" if isinstance(after_restart, tuple)
                  else f"after the restart: {after_restart}")
        if isinstance(t, Sloth):
            first = t.h.job(1)
            detail += f"; the killed long job: {first['state']} after {first['attempts']} attempts"
        if isinstance(t, Tsp):
            sl = Path(t.env["TS_SAVELIST"])
            detail += (f"; TS_SAVELIST file: {sl.stat().st_size} bytes" if sl.exists()
                       else "; TS_SAVELIST file: not written")
        if tool == "nq":
            files = sorted(os.listdir(t.env["NQDIR"]))
            detail += f"; {len(files)} job files left in NQDIR, nothing runs them"
        verdict = "kept: 5/5 ran" if ran else f"lost: {n_ran}/5 ran"
        return {"verdict": verdict, "ran": n_ran, "detail": detail}
    finally:
        t.close()


def _safe(fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except Exception as e:  # noqa: BLE001 - report, do not abort the benchmark
        return f"error: {e}"


# ------------------------------------------------------------------ report
def fmt_s(x: float | None) -> str:
    if x is None:
        return "—"
    return f"{x:.2f} s" if x < 10 else f"{x:.1f} s"


def render(r: dict[str, Any]) -> str:
    m = r["meta"]
    L = [f"# sloth vs task-spooler vs nq ({m['when']}, {m['host']})", "",
         f"One run of `{m['command']}` on {m['cpus']} CPUs, {m['os']}; tsp {m['tsp_version']}, "
         f"nq {m['nq_version']}, sloth {m['sloth_version']}. Medians of {m['reps']} runs "
         f"unless noted; the machine is shared and noisy, so read the ratios. "
         f"Its disk's single-commit rate (512 B write + fdatasync in the temp dir): "
         f"{m.get('fsync_per_s', 0):,.0f}/s. **Bold**: where sloth loses.", ""]
    e = r["enqueue"]
    floor = e["floor"]["median_ms"]
    L += [f"## Enqueue latency, one CLI call queueing `true` ({e['floor']['n']} calls each, interleaved)", "",
          "| tool | median | p95 | × floor | × best |", "|---|---|---|---|---|"]
    best = min(v["median_ms"] for k, v in e.items() if k != "floor")
    label = {"floor": "`python -c pass` (the floor)", "sloth": "`sloth add -- true`",
             "tsp": "`tsp true`", "nq": "`nq true`"}
    for k, v in e.items():
        bold = k == "sloth" and v["median_ms"] > best * 1.05
        cell = lambda s: f"**{s}**" if bold else s  # noqa: E731
        med_ms, p95_ms = v["median_ms"], v["p95_ms"]
        vs_best = cell(f"{med_ms / best:.1f}×") if k != "floor" else ""
        L.append(f"| {label[k]} | {cell(f'{med_ms:.1f} ms')} | {p95_ms:.1f} ms | "
                 f"{med_ms / floor:.2f}× | {vs_best} |")
    th = r["thousand"]
    L += ["", f"## {N_JOBS:,} `true` jobs, first enqueue to all finished", "",
          "| how | 1 slot | 2 slots | vs tsp (same slots) |", "|---|---|---|---|"]
    tsp1, tsp2 = th.get("tsp_1"), th.get("tsp_2")

    def vs(x: float | None, ref: float | None) -> str:
        if x is None or ref is None:
            return ""
        ratio = x / ref
        return f"{ratio:.2f}× ({'faster' if ratio < 1 else 'slower'})"

    rows = [
        ("bare `subprocess.run(['true'])` loop (the floor)", th.get("bare"), None, None),
        (f"sloth, {N_JOBS:,} × `sloth add -- true` + `sloth wait`", th.get("sloth_1"), None, tsp1),
        (f"sloth, one `sloth add --stdin` of {N_JOBS:,} lines + `sloth wait` on every id", th.get("sloth_batch_1"),
         th.get("sloth_batch_2"), tsp1),
        (f"tsp, {N_JOBS:,} × `tsp true` + `tsp -w`", tsp1, tsp2, None),
        (f"nq, {N_JOBS:,} × `nq true` + `nq -w` (no slots: one at a time)", th.get("nq_1"), None, tsp1),
    ]
    for name, a, b, ref in rows:
        if a is None and b is None:
            continue
        lose = ref is not None and name.startswith("sloth") and a is not None and a > ref
        cell_a = f"**{fmt_s(a)}**" if lose else fmt_s(a)
        v = vs(a, ref)
        if name.startswith("sloth, one") and b is not None and tsp2 is not None:
            v += f"; 2 slots {vs(b, tsp2)}"
        L.append(f"| {name} | {cell_a} | {fmt_s(b)} | {'**' + v + '**' if lose else v} |")
    if th.get("sloth_1_note"):
        L.append(f"\n{th['sloth_1_note']}")
    L.append("`sloth add --stdin` execs a plain line like `true` directly (a line with quoting, "
             "expansion or redirection runs in `/bin/sh -c`); tsp also execs directly. "
             "\"+ `sloth wait`\": `sloth wait` on the last id, then the counts polled (as for tsp, "
             "`tsp -w` on the last id, then `tsp -l`); the batch is waited on by every id.")
    sw = r.get("sweep") or {}
    if sw:
        sn = sw["n"]
        L += ["", f"## A {sn:,}-member batch, first enqueue to all finished (one run each)", "",
              "| how | 1 slot | 2 slots | vs tsp (same slots) |", "|---|---|---|---|"]
        for name, key in ((f"sloth, one `sloth add --stdin` of {sn:,} lines + `sloth wait` on every id", "sloth"),
                          (f"tsp, {sn:,} × `tsp true` + `tsp -w`", "tsp"),
                          ("`xargs -P N -n 1 true` (no queue: the floor)", "xargs")):
            a, b = sw.get(f"{key}_1"), sw.get(f"{key}_2")
            if a is None and b is None:
                continue
            v = "" if key == "tsp" else "; ".join(
                f"{s} slot{'s' if s > 1 else ''} {vs(x, sw.get(f'tsp_{s}'))}" for s, x in ((1, a), (2, b))
                if x is not None and sw.get(f"tsp_{s}"))
            L.append(f"| {name} | {fmt_s(a)} | {fmt_s(b)} | {v} |")
    q = r["queued"]
    L += ["", "## 100 jobs waiting behind a running one", "",
          "| tool | processes kept alive | their memory (PSS) |", "|---|---|---|"]
    for k, v in q.items():
        L.append(f"| {k} | {v['procs']} | {v['pss_mb']:.1f} MB |")
    idle = r["idle"]
    L += ["", f"## Idle server over {m['idle_s']:.0f} s", "",
          "| tool | RSS | PSS | CPU (median of 6 windows; whole run) | wake-ups |", "|---|---|---|---|---|"]
    others = [o for kk, o in idle.items() if kk not in ("sloth", "floor")]
    for k, v in idle.items():
        rss_loses = k == "sloth" and any(v["rss_mb"] > o["rss_mb"] for o in others)
        cpu_loses = k == "sloth" and any(v["cpu_pct"] > o["cpu_pct"] for o in others)
        rss = f"**{v['rss_mb']:.1f} MB**" if rss_loses else f"{v['rss_mb']:.1f} MB"
        cpu = f"{v['cpu_pct']:.3f} %; {v.get('cpu_pct_total', v['cpu_pct']):.3f} %"
        name = {"sloth": "sloth daemon", "floor": "bare `python` waking every 5 s (the floor)"}.get(k, f"{k} server")
        L.append(f"| {name} | {rss} | {v['pss_mb']:.1f} MB | {f'**{cpu}**' if cpu_loses else cpu} | "
                 f"{v['wakeups_per_s']:.2f} /s |")
    if "nq" in m["tools"]:
        L.append("| nq | no daemon | | | |")
    s = r["survive"]
    L += ["", "## Durability: 5 jobs queued behind a running one (tried, not quoted)", "",
          "| tool | kill -9 of the server, restart | simulated reboot: kill -9 every process of the tool, restart |",
          "|---|---|---|"]
    for k, v in s.items():
        L.append(f"| {k} | {v['server']['verdict']} | {v['reboot']['verdict']} |")
    L += ["", "Details:", ""]
    for k, v in s.items():
        for kind in ("server", "reboot"):
            L.append(f"- {k}, {kind}: {v[kind].get('detail', '')}")
    L += ["", "Where the state lives: sloth, one SQLite file in the data dir (a reboot keeps it; the socket "
          "in the runtime dir is recreated); tsp, the server's memory (the socket and the outputs in "
          "$TMPDIR, /tmp by default, which many systems clear at boot); nq, a lock+output file per job in "
          "NQDIR, but a queued job is only a waiting process: it dies with the session or the machine, "
          "and the file has to be re-run by hand (`sh FILE`)."]
    L += ["", "## Targets", ""]
    for line in r["targets"]:
        L.append(f"- {line}")
    return "\n".join(L) + "\n"


def targets(r: dict[str, Any]) -> list[str]:
    out = []
    th, e = r["thousand"], r["enqueue"]
    if th.get("sloth_batch_1") and th.get("tsp_1"):
        ok = th["sloth_batch_1"] < th["tsp_1"]
        out.append(f"{'MET' if ok else 'MISSED'}: sloth's {N_JOBS:,} jobs (batch enqueue, 1 slot) "
                   f"{fmt_s(th['sloth_batch_1'])} vs tsp's {fmt_s(th['tsp_1'])} (1 slot, same run)")
    if "sloth" in e:
        ratio = e["sloth"]["median_ms"] / e["floor"]["median_ms"]
        out.append(f"{'MET' if ratio <= 5 else 'MISSED'}: `sloth add` per call {ratio:.2f}× the "
                   f"interpreter floor (target <= 5×)")
    return out


def chart(r: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colors = {"sloth": "#2e7d32", "tsp": "#1565c0", "nq": "#ef6c00", "floor": "#9e9e9e", "bare": "#9e9e9e"}
    fig, axes = plt.subplots(2, 2, figsize=(14, 9.5))
    fig.suptitle(f"sloth vs task-spooler vs nq — one run, {r['meta']['cpus']} CPUs (medians; lower is better)",
                 fontsize=13)
    # 1. enqueue latency
    ax = axes[0][0]
    e = r["enqueue"]
    names = list(e)
    med = [e[k]["median_ms"] for k in names]
    err = [[0] * len(names), [e[k]["p95_ms"] - e[k]["median_ms"] for k in names]]
    labels = {"floor": "python -c pass\n(floor)", "sloth": "sloth add", "tsp": "tsp", "nq": "nq"}
    bars = ax.bar([labels[k] for k in names], med, yerr=err, capsize=4,
                  color=[colors[k] for k in names])
    for b, v, k in zip(bars, med, names):
        ax.annotate(f"{v:.1f} ms\n(p95 {e[k]['p95_ms']:.0f})", (b.get_x() + b.get_width() / 2, e[k]["p95_ms"]),
                    ha="center", va="bottom", xytext=(0, 3), textcoords="offset points", fontsize=9)
    ax.margins(y=0.15)
    ax.set_title("Enqueue one job: CLI call latency (median, whisker = p95)")
    ax.set_ylabel("ms per call")
    # 2. 1,000 jobs
    ax = axes[0][1]
    th = r["thousand"]
    items = [("bare loop (floor)", th.get("bare"), "bare"),
             ("sloth: 1,000 × add", th.get("sloth_1"), "sloth"),
             ("sloth: add --stdin, 1 slot", th.get("sloth_batch_1"), "sloth"),
             ("sloth: add --stdin, 2 slots", th.get("sloth_batch_2"), "sloth"),
             ("tsp: 1 slot", th.get("tsp_1"), "tsp"),
             ("tsp: 2 slots", th.get("tsp_2"), "tsp"),
             ("nq (one at a time)", th.get("nq_1"), "nq")]
    items = [i for i in items if i[1] is not None]
    y = list(range(len(items)))[::-1]
    ax.barh(y, [i[1] for i in items], color=[colors[i[2]] for i in items])
    ax.set_yticks(y, [i[0] for i in items])
    ax.set_xscale("log")
    for yy, i in zip(y, items):
        ax.annotate(fmt_s(i[1]), (i[1], yy), va="center", xytext=(4, 0), textcoords="offset points", fontsize=9)
    ax.set_xlim(right=max(i[1] for i in items) * 4)
    ax.set_title(f"{N_JOBS:,} `true` jobs: first enqueue to all finished (log scale)")
    ax.set_xlabel("seconds")
    # 3. memory: idle server, and 100 queued jobs
    ax = axes[1][0]
    idle, q = r["idle"], r["queued"]
    tools = [t for t in ("sloth", "tsp", "nq") if t in q or t in idle]
    x = range(len(tools))
    w = 0.38
    idle_v = [idle[t]["pss_mb"] if t in idle else 0 for t in tools]
    q_v = [q[t]["pss_mb"] if t in q else 0 for t in tools]
    b1 = ax.bar([i - w / 2 for i in x], idle_v, w, label="idle server (PSS)", color="#90a4ae")
    b2 = ax.bar([i + w / 2 for i in x], q_v, w, label="with 100 jobs queued (PSS, all processes)",
                color=[colors[t] for t in tools])
    for bars_, vals, extra in ((b1, idle_v, None), (b2, q_v, [q.get(t, {}).get("procs") for t in tools])):
        for k, (b, v) in enumerate(zip(bars_, vals)):
            txt = f"{v:.1f} MB" if v else "no daemon"
            if extra is not None and extra[k] is not None:
                txt += f"\n{extra[k]} process{'es' if extra[k] != 1 else ''}"
            ax.annotate(txt, (b.get_x() + b.get_width() / 2, v), ha="center", va="bottom",
                        xytext=(0, 3), textcoords="offset points", fontsize=8)
    ax.set_xticks(list(x), tools)
    ax.set_ylabel("MB")
    cpu = ", ".join(f"{'bare python' if t == 'floor' else t} {idle[t]['cpu_pct']:.2f} %"
                    for t in idle)
    wake = ", ".join(f"{'bare python' if t == 'floor' else t} {idle[t]['wakeups_per_s']:.2f}/s"
                     for t in idle)
    ax.set_title(f"Memory (PSS)\nidle {r['meta']['idle_s']:.0f} s, CPU: {cpu}\nwake-ups: {wake}",
                 fontsize=9.5)
    ax.legend(fontsize=8, loc="upper left")
    ax.margins(y=0.25)
    # 4. durability grid
    ax = axes[1][1]
    s = r["survive"]
    rows = list(s)
    cols = ["kill -9 server", "simulated reboot"]
    cell = [[s[t]["server"]["verdict"], s[t]["reboot"]["verdict"]] for t in rows]
    col = [["#c8e6c9" if c.startswith("kept") else "#eeeeee" if c == "n/a" else "#ffcdd2" for c in row]
           for row in cell]
    ax.axis("off")
    tab = ax.table(cellText=cell, rowLabels=rows, colLabels=cols, cellColours=col, loc="center",
                   cellLoc="center")
    tab.scale(1, 2.6)
    tab.set_fontsize(11)
    ax.set_title("Durability: 5 jobs queued behind a running one, then ...")
    notes = {"sloth": "sloth: queue in SQLite; the killed running job is re-run (attempt 2)",
             "tsp": "tsp: the new server starts empty; the waiting clients died (TS_SAVELIST set, not written)",
             "nq": "nq: no daemon; the waiting processes died, their job files stay unrun"}
    ax.text(0.5, 0.08, "\n".join(notes[t] for t in rows if t in notes), transform=ax.transAxes,
            ha="center", va="top", fontsize=8.5, wrap=True)
    fig.tight_layout(rect=(0, 0, 1, 0.96))
    fig.savefig(path, dpi=110)
    plt.close(fig)


# -------------------------------------------------------------------- main
def version(argv: list[str]) -> str:
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=10)
        return (p.stdout or p.stderr).strip().splitlines()[0]
    except (OSError, IndexError, subprocess.TimeoutExpired):
        return "?"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, help="folder for compare.md and compare.png (not with --bulk)")
    ap.add_argument("--quick", action="store_true", help="fewer runs, 10 s idle, skip the slow sloth loop")
    ap.add_argument("--idle", type=float, help="idle measurement seconds (default 60, --quick 10)")
    ap.add_argument("--reps", type=int, help="runs per 1,000-job measure (default 3, --quick 1)")
    ap.add_argument("--calls", type=int, help="CLI calls per tool for the latency (default 100, --quick 30)")
    ap.add_argument("--sweep", type=int, default=10_000, help="members of the sweep batch (0: skip it)")
    ap.add_argument("--bulk", action="store_true", help="only the bulk targets of issue 34 (see above)")
    ap.add_argument("--burn", type=int, default=0, help="with --bulk: busy loops run meanwhile")
    ap.add_argument("--in-place", action="store_true",
                    help="with --bulk: this venv's `sloth` for the commands, not a fresh `pip install .`'s")
    ap.add_argument("--replot", action="store_true",
                    help="only redraw compare.md/.png from the compare.json of an earlier run in --out")
    a = ap.parse_args(argv)
    if a.bulk:
        global SLOTH
        where = Path(tempfile.mkdtemp(prefix="slbi-"))
        burners: list[subprocess.Popen[bytes]] = []
        try:
            if not a.in_place:  # as a user runs it: an editable install's finder adds ~24 ms to each start, and
                print("installing (pip install . into a fresh venv) ...", flush=True)  # under
                SLOTH = normal_install(where)["sloth"]  # PYTHONDONTWRITEBYTECODE each compiles what it loads
                os.sync()  # the install's writes on disk now, not under the first round's fsyncs (tsp makes none)
            burners = [subprocess.Popen([PY, "-c", "while True: pass"]) for _ in range(a.burn)]
            return bulk(a.reps or 3, a.sweep)
        finally:
            for b in burners:
                b.kill()
                b.wait()
            shutil.rmtree(where, ignore_errors=True)
    if a.out is None:
        ap.error("--out is required (but with --bulk)")
    if a.replot:
        r = json.loads((a.out / "compare.json").read_text())
        (a.out / "compare.md").write_text(render(r))
        if ensure_matplotlib():
            chart(r, a.out / "compare.png")
        print(render(r))
        return 0
    idle_s = a.idle if a.idle is not None else (10 if a.quick else 60)
    reps = a.reps or (1 if a.quick else 3)
    calls = a.calls or (30 if a.quick else 100)
    a.out.mkdir(parents=True, exist_ok=True)
    have = ensure_tools()
    for k, v in have.items():
        if not v:
            print(f"warning: {k} is not installed (and cannot be installed here): left out", flush=True)
    tools = ["sloth"] + [t for t in ("tsp", "nq") if have[t]]
    can_chart = ensure_matplotlib()
    root = Path(tempfile.mkdtemp(prefix="slbc-"))
    t_start = time.monotonic()
    from sloth_daemon import __version__

    r: dict[str, Any] = {"meta": {
        "when": time.strftime("%Y-%m-%d %H:%M"), "host": os.uname().nodename, "cpus": os.cpu_count(),
        "os": f"{os.uname().sysname} {os.uname().release}", "reps": reps, "idle_s": idle_s,
        "tools": tools, "sloth_version": __version__,
        "tsp_version": version(["tsp", "-V"]) if have["tsp"] else "-",
        "nq_version": _dpkg_version("nq") if have["nq"] else "-",
        "command": "python tests/bench/bench_compare.py " + " ".join(sys.argv[1:] if argv is None else argv),
        "fsync_per_s": fsync_rate(root),
    }}

    def step(msg: str) -> None:
        print(f"[{time.monotonic() - t_start:6.1f} s] {msg}", flush=True)

    try:
        step(f"enqueue latency: {calls} calls per tool, interleaved")
        r["enqueue"] = bench_enqueue(root, tools, calls)
        th: dict[str, Any] = {}
        plan: list[tuple[str, Callable[[], float]]] = [("bare", lambda: bench_bare(N_JOBS))]
        for slots in (1, 2):
            plan.append((f"sloth_batch_{slots}", lambda s=slots: bench_thousand(root, "sloth", s, batch=True)))
            if have["tsp"]:
                plan.append((f"tsp_{slots}", lambda s=slots: bench_thousand(root, "tsp", s)))
        if have["nq"]:
            plan.append(("nq_1", lambda: bench_thousand(root, "nq", 1)))
        runs: dict[str, list[float]] = {k: [] for k, _ in plan}
        for i in range(reps):  # round-robin: noise hits every tool alike
            for k, fn in plan:
                step(f"{N_JOBS:,} jobs: {k} (run {i + 1}/{reps})")
                runs[k].append(fn())
        th.update({k: statistics.median(v) for k, v in runs.items()})
        th["runs"] = runs
        if a.quick:
            th["sloth_1_note"] = ("`sloth add` once per job was skipped (--quick); it costs about "
                                  f"{N_JOBS:,} × the per-call latency above.")
        else:
            step(f"{N_JOBS:,} jobs: one `sloth add` per job (1 run: it takes a while)")
            th["sloth_1"] = bench_thousand(root, "sloth", 1)
            th["sloth_1_note"] = (f"`sloth add` once per job ran once (not {reps} times): "
                                  "it is dominated by the per-call latency above.")
        r["thousand"] = th
        if a.sweep:
            sw: dict[str, Any] = {"n": a.sweep}
            for slots in (1, 2):
                for tool in ("sloth", "tsp", "xargs"):
                    if tool == "tsp" and not have["tsp"]:
                        continue
                    step(f"a {a.sweep:,}-member sweep: {tool}, {slots} slot(s)")
                    sw[f"{tool}_{slots}"] = bench_sweep(root, tool, slots, a.sweep)
            r["sweep"] = sw
        step("100 jobs queued behind a long one")
        r["queued"] = {t: bench_queued(root, t) for t in tools}
        step("durability: kill -9 of the server, and a simulated reboot")
        r["survive"] = {t: {"server": bench_survive(root, t, "server"),
                            "reboot": bench_survive(root, t, "reboot")} for t in tools}
        step(f"idle servers, side by side, {idle_s:.0f} s")
        r["idle"] = bench_idle(root, tools, idle_s)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    r["targets"] = targets(r)
    md = render(r)
    (a.out / "compare.md").write_text(md)
    (a.out / "compare.json").write_text(json.dumps(r, indent=1, default=str))
    print("\n" + md)
    if can_chart:
        chart(r, a.out / "compare.png")
        print(f"wrote {a.out / 'compare.md'} and {a.out / 'compare.png'}")
    step("done")
    return 0


def bulk(reps: int, sweep: int) -> int:
    """Issue 34's bulk targets, each beside its peer measured in the same round."""
    if not ensure_tools()["tsp"]:
        print("tsp is not installed (and cannot be installed here): the peer is missing", flush=True)
        return 1
    root = Path(tempfile.mkdtemp(prefix="slbk-"))
    load = [os.getloadavg()[0]]
    th: dict[str, list[float]] = {"sloth": [], "tsp": [], "bare": []}
    sw: dict[str, list[float]] = {}
    try:
        for i in range(reps):
            th["sloth"].append(bench_thousand(root, "sloth", 1, batch=True))
            th["tsp"].append(bench_thousand(root, "tsp", 1))
            th["bare"].append(bench_bare(N_JOBS))
            print(f"round {i + 1}/{reps}: {N_JOBS:,} jobs sloth {th['sloth'][-1]:.2f} s, tsp {th['tsp'][-1]:.2f} s"
                  f" ({th['sloth'][-1] / th['tsp'][-1]:.2f}x), bare {th['bare'][-1]:.2f} s", flush=True)
        for i in range(reps if sweep else 0):
            for slots in (1, 2):
                for tool in ("sloth", "tsp", "xargs"):
                    sw.setdefault(f"{tool}_{slots}", []).append(bench_sweep(root, tool, slots, sweep))
            print(f"round {i + 1}/{reps}: {sweep:,}-member sweep " + ", ".join(f"{k} {v[-1]:.1f} s"
                                                                              for k, v in sw.items()), flush=True)
            load.append(os.getloadavg()[0])
    finally:
        shutil.rmtree(root, ignore_errors=True)
    load.append(os.getloadavg()[0])

    def rng(xs: list[float]) -> str:
        return f"{min(xs):.2f}-{max(xs):.2f}"

    ratios = [s / t for s, t in zip(th["sloth"], th["tsp"])]
    print(f"\n{reps} rounds, {os.cpu_count()} CPUs, load average {min(load):.1f}-{max(load):.1f}")
    print(f"{N_JOBS:,} `true`, one `sloth add --stdin` + `sloth wait` on every id, 1 slot: sloth {rng(th['sloth'])} s,"
          f" tsp {rng(th['tsp'])} s: {rng(ratios)}x tsp's time in the same round (target <= 0.80x:"
          f" {'MET' if max(ratios) <= 0.8 else 'met in some rounds' if min(ratios) <= 0.8 else 'MISSED'});"
          f" bare loop {rng(th['bare'])} s")
    if sw:
        print(f"a {sweep:,}-member sweep, first enqueue to all finished (seconds):")
        print(f"  {'':6} {'1 slot':>13} {'2 slots':>13}")
        for tool in ("sloth", "tsp", "xargs"):
            print(f"  {tool:6} {rng(sw[f'{tool}_1']):>13} {rng(sw[f'{tool}_2']):>13}")
        for slots in (1, 2):
            r = [s / t for s, t in zip(sw[f"sloth_{slots}"], sw[f"tsp_{slots}"])]
            x = [s / t for s, t in zip(sw[f"sloth_{slots}"], sw[f"xargs_{slots}"])]
            print(f"  sloth, {slots} slot(s): {rng(r)}x tsp's time, {rng(x)}x xargs -P's (same round)")
        two = [b / a for a, b in zip(sw["sloth_1"], sw["sloth_2"])]
        print(f"  sloth 2 slots / 1 slot: {rng(two)}")
    return 0


def _dpkg_version(pkg: str) -> str:
    return version(["dpkg-query", "-W", "-f", "${Version}", pkg])


if __name__ == "__main__":
    sys.exit(main())

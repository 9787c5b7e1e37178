"""CLI and socket benchmark: what a user (or a script in a loop) pays to enqueue.

    python tests/bench/bench_cli.py [--quick] [--runs N] [--out DIR]

Starts the real daemon in temporary SLOTH_HOMEs and prints medians over
several runs (the machine is shared and noisy; ratios matter more than
absolutes):

  call      wall time of one enqueue command run from a shell, median and p95
            of --calls calls: `python -c pass` with the venv's interpreter (the
            floor), `sloth add -- true` (daemon paused, and running the jobs),
            task-spooler's `tsp true` and `nq true`, each in its own temp dir
            (TS_SOCKET / NQDIR). tsp and nq are installed with apt-get when
            missing and we are root; otherwise their rows are skipped.
  conn      durable enqueues per second over one connection: a Python Client
            sending single-job `add` requests in a loop (daemon paused); and
            the same enqueues in process without the socket (the disk's
            fsync rate, which bounds the first)
  stdin     jobs per second through `sloth add --stdin` (50,000 lines; daemon
            paused so nothing runs), and, to show where that time goes, the
            daemon's Queue.enqueue_many alone for the same jobs with and
            without the caller's environment attached
  import    `python -X importtime` of a real `sloth add`: the modules that cost most

Targets: `sloth add` median <= 100 ms; --stdin >= 50,000 jobs/s; one
connection >= 1,000 durable enqueues/s.

Python files are byte-compiled first and the runs may write .pyc files (an
installed package has them; PYTHONDONTWRITEBYTECODE would make every call
recompile the edited modules and measure the compiler).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from sloth_daemon.client import Client  # noqa: E402
from tests.bench._common import ensure_tools, pct  # noqa: E402
from tests.support.harness import Harness  # noqa: E402

PY = sys.executable
VENV_BIN = Path(PY).parent
SLOTH = str(VENV_BIN / "sloth") if (VENV_BIN / "sloth").exists() else None
TARGETS = {"add_median_ms": 100.0, "stdin_jobs_s": 50_000.0, "conn_enqueues_s": 1_000.0}


def base_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLOTH_")}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["NO_COLOR"] = "1"
    return env


def med(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def time_calls(argv: list[str], n: int, env: dict[str, str], cwd: str, warmup: int = 2) -> list[float]:
    """Wall seconds of ``n`` runs of argv, each exec'd the way a shell would (no shell)."""
    for _ in range(warmup):
        subprocess.run(argv, env=env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, check=True)
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        subprocess.run(argv, env=env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, check=True)
        out.append(time.perf_counter() - t0)
    return out


class Daemon:
    """A real daemon in a temporary SLOTH_HOME, reaped on exit."""

    def __init__(self, *, paused: bool) -> None:
        self.tmp = Path(tempfile.mkdtemp(prefix="slb-"))
        self.h = Harness(self.tmp / "h")
        self.h.env.pop("PYTHONDONTWRITEBYTECODE", None)
        self.h.daemon_env = dict(self.h.env)
        self.paused = paused

    def __enter__(self) -> Harness:
        self.h.start()
        if self.paused:
            self.h.call("pause")
        return self.h

    def __exit__(self, *exc: object) -> None:
        try:
            self.h.stop()
        except Exception:
            pass
        self.h.reap()
        shutil.rmtree(self.tmp, ignore_errors=True)


# ------------------------------------------------------------------ tools
def bench_tsp(tsp: str, n: int) -> list[float]:
    d = Path(tempfile.mkdtemp(prefix="tsb-"))
    env = dict(base_env(), TS_SOCKET=str(d / "ts.sock"), TMPDIR=str(d), TS_SLOTS="1")
    try:
        return time_calls([tsp, "true"], n, env, str(d))
    finally:
        subprocess.run([tsp, "-K"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        shutil.rmtree(d, ignore_errors=True)


def bench_nq(nq: str, n: int) -> list[float]:
    d = Path(tempfile.mkdtemp(prefix="nqb-"))
    env = dict(base_env(), NQDIR=str(d))
    try:
        return time_calls([nq, "true"], n, env, str(d))
    finally:
        time.sleep(0.2)  # its jobs are `true`: let the last ones finish before removing the dir
        shutil.rmtree(d, ignore_errors=True)


def bench_sloth_add(n: int, *, paused: bool) -> list[float]:
    argv = [SLOTH, "add", "--", "true"] if SLOTH else [PY, "-m", "sloth_daemon", "add", "--", "true"]
    with Daemon(paused=paused) as h:
        return time_calls(argv, n, h.env, str(h.home))


# ------------------------------------------------------------- throughput
def bench_conn(n: int) -> float:
    """Single-job add requests over one connection, one at a time: durable enqueues/s."""
    with Daemon(paused=True) as h:
        with Client(h.socket) as c:
            common = {"cwd": "/", "env": {"PATH": "/usr/bin:/bin"}}
            for i in range(20):  # warm up
                c.call("add", jobs=[{"command": ["true", f"w{i}"]}], common=common)
            t0 = time.perf_counter()
            for i in range(n):
                c.call("add", jobs=[{"command": ["true", str(i)]}], common=common)
            dt = time.perf_counter() - t0
        assert h.call("status")["counts"]["queued"] == n + 20
    return n / dt


def bench_queue_single(n: int) -> float:
    """The same single-job durable enqueues in process, without the socket:
    the disk's commit (fsync) rate bounds what one connection can reach."""
    from sloth_daemon.queue import Queue

    d = Path(tempfile.mkdtemp(prefix="slq-"))
    try:
        q = Queue(d / "q.db")
        common = {"cwd": "/", "env": {"PATH": "/usr/bin:/bin"}}
        t0 = time.perf_counter()
        for i in range(n):
            q.enqueue_many([{**common, "command": ["true", str(i)]}])
        dt = time.perf_counter() - t0
        q.close()
    finally:
        shutil.rmtree(d, ignore_errors=True)
    return n / dt


def bench_stdin(n: int) -> float:
    lines = "".join(f"echo job {i}\n" for i in range(n))
    argv = [SLOTH, "add", "--stdin"] if SLOTH else [PY, "-m", "sloth_daemon", "add", "--stdin"]
    with Daemon(paused=True) as h:
        t0 = time.perf_counter()
        p = subprocess.run(argv, input=lines, env=h.env, cwd=str(h.home), capture_output=True, text=True)
        dt = time.perf_counter() - t0
        assert p.returncode == 0, p.stderr
        assert h.call("status")["counts"]["queued"] == n
    return n / dt


def bench_queue_split(n: int) -> dict[str, float]:
    """Where --stdin's time goes: the daemon's Queue.enqueue_many alone, in
    process, for jobs carrying the environment `sloth add` captures vs none."""
    from sloth_daemon.queue import Queue

    out = {}
    d = Path(tempfile.mkdtemp(prefix="slq-"))
    try:
        env = {k: v for k, v in base_env().items()}
        for label, e in (("with the caller's env", env), ("without env", None)):
            q = Queue(d / f"{len(out)}.db")
            common: dict[str, Any] = {"cwd": "/tmp", "lane": "default", **({"env": e} if e else {})}
            specs = [{**common, "command": ["/bin/sh", "-c", f"echo job {i}"], "shell": True} for i in range(n)]
            t0 = time.perf_counter()
            q.enqueue_many(specs)
            out[label] = n / (time.perf_counter() - t0)
            q.close()
        out["env_bytes"] = len(json.dumps(env))
    finally:
        shutil.rmtree(d, ignore_errors=True)
    return out


def profile_daemon_stdin(n: int, top: int = 18) -> str:
    """cProfile of the daemon while it takes `sloth add --stdin` of n lines."""
    import pstats
    import signal

    tmp = Path(tempfile.mkdtemp(prefix="slp-"))
    h = Harness(tmp / "h")
    h.env.pop("PYTHONDONTWRITEBYTECODE", None)
    prof = tmp / "daemon.prof"
    log = open(tmp / "daemon.log", "ab")
    d = subprocess.Popen([PY, "-m", "cProfile", "-o", str(prof), "-m", "sloth_daemon", "daemon", "run"],
                         env=h.env, stdout=log, stderr=log, stdin=subprocess.DEVNULL, cwd=str(h.home),
                         start_new_session=True)
    log.close()
    h.spawned.append(d)
    try:
        h.wait_ready(d)
        h.call("pause")
        lines = "".join(f"echo job {i}\n" for i in range(n))
        subprocess.run([PY, "-m", "sloth_daemon", "add", "--stdin"], input=lines, env=h.env,
                       cwd=str(h.home), capture_output=True, text=True, check=True)
        d.send_signal(signal.SIGTERM)
        d.wait(60)
        import io

        out = io.StringIO()
        st = pstats.Stats(str(prof), stream=out)
        st.sort_stats("cumulative").print_stats(r"server\.py|queue\.py|protocol\.py|db\.py|json|sqlite", top)
        return out.getvalue().split("ncalls", 1)[-1].join(["ncalls", ""]) if "ncalls" in out.getvalue() else out.getvalue()
    finally:
        h.reap()
        shutil.rmtree(tmp, ignore_errors=True)


# ----------------------------------------------------------------- import
IMPORT_LINE = re.compile(r"import time:\s+(\d+) \|\s+(\d+) \|( *)(\S+)")


def import_profile() -> dict[str, Any]:
    """importtime of a real `sloth add -- true` against a paused daemon."""
    with Daemon(paused=True) as h:
        runs = []
        for _ in range(5):
            p = subprocess.run([PY, "-X", "importtime", "-m", "sloth_daemon", "add", "--", "true"],
                               env=h.env, cwd=str(h.home), capture_output=True, text=True)
            assert p.returncode == 0, p.stderr[-2000:]
            runs.append(p.stderr)
    rows: dict[str, list[tuple[int, int, int]]] = {}
    for text in runs:
        for m in IMPORT_LINE.finditer(text):
            self_us, cum_us, indent, name = int(m.group(1)), int(m.group(2)), len(m.group(3)), m.group(4)
            rows.setdefault(name, []).append((self_us, cum_us, indent))
    table = {name: {"self_ms": med([r[0] for r in v]) / 1000, "cum_ms": med([r[1] for r in v]) / 1000,
                    "depth": v[0][2] // 2} for name, v in rows.items()}
    top = {n: r for n, r in table.items() if r["depth"] == 0}
    shallow = {n: r for n, r in table.items() if r["depth"] <= 1}
    return {
        "total_ms": sum(r["cum_ms"] for r in top.values()),
        "top_level": sorted(shallow.items(), key=lambda kv: -kv[1]["cum_ms"])[:12],
        "by_self": sorted(table.items(), key=lambda kv: -kv[1]["self_ms"])[:12],
        "ours": sorted(((n, r) for n, r in table.items() if n.startswith("sloth_daemon")),
                       key=lambda kv: -kv[1]["cum_ms"]),
    }


# ------------------------------------------------------------------- main
def repeat(runs: int, fn: Callable[[], Any]) -> list[Any]:
    return [fn() for _ in range(runs)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer calls and jobs (a smoke run)")
    ap.add_argument("--runs", type=int, default=None, help="repeat each measurement (default 3; 1 with --quick)")
    ap.add_argument("--calls", type=int, default=None, help="calls per run for the per-call rows (default 50)")
    ap.add_argument("--out", type=Path, default=None, help="write results.json and results.md here")
    ap.add_argument("--profile", action="store_true",
                    help="also print a cProfile of the daemon side of `sloth add --stdin`")
    a = ap.parse_args()
    runs = a.runs or (1 if a.quick else 3)
    calls = a.calls or (15 if a.quick else 50)
    n_conn = 500 if a.quick else 3000
    n_stdin = 10_000 if a.quick else 50_000

    subprocess.run([PY, "-m", "compileall", "-q", str(REPO / "sloth_daemon")], check=False,
                   stdout=subprocess.DEVNULL)
    tools = ensure_tools()
    per_call: dict[str, list[list[float]]] = {}

    def add_row(name: str, fn: Callable[[], list[float]]) -> None:
        per_call[name] = repeat(runs, fn)
        print(f"  measured {name}", file=sys.stderr)

    add_row("python -c pass (floor)", lambda: time_calls([PY, "-c", "pass"], calls, base_env(), "/tmp"))
    add_row("sloth add -- true (paused)", lambda: bench_sloth_add(calls, paused=True))
    add_row("sloth add -- true (running)", lambda: bench_sloth_add(calls, paused=False))
    if tools["tsp"]:
        add_row("tsp true", lambda: bench_tsp(tools["tsp"], calls))
    if tools["nq"]:
        add_row("nq true", lambda: bench_nq(tools["nq"], calls))
    conn = repeat(runs, lambda: bench_conn(n_conn))
    single = repeat(runs, lambda: bench_queue_single(n_conn))
    print("  measured one connection", file=sys.stderr)
    stdin = repeat(runs, lambda: bench_stdin(n_stdin))
    print("  measured --stdin", file=sys.stderr)
    split = [bench_queue_split(n_stdin) for _ in range(runs)]
    imp = import_profile()

    floor = med([med(r) for r in per_call["python -c pass (floor)"]])
    res: dict[str, Any] = {"runs": runs, "calls": calls, "per_call": {}, "python": sys.version.split()[0]}
    lines = [f"sloth CLI benchmark: {runs} run(s), {calls} calls each; medians of the runs' medians/p95s",
             "", f"| {'command':<30} | {'median ms':>9} | {'p95 ms':>7} | {'x floor':>7} |",
             f"|{'-' * 32}|{'-' * 11}|{'-' * 9}|{'-' * 9}|"]
    for name, rs in per_call.items():
        m = med([med(r) for r in rs]) * 1000
        p = med([pct(r, 0.95) for r in rs]) * 1000
        res["per_call"][name] = {"median_ms": m, "p95_ms": p, "runs_median_ms": [med(r) * 1000 for r in rs]}
        lines.append(f"| {name:<30} | {m:>9.1f} | {p:>7.1f} | {m / (floor * 1000):>7.1f} |")
    for tool in ("tsp", "nq"):
        if not tools[tool]:
            lines.append(f"| {tool + ' (not installed)':<30} | {'-':>9} | {'-':>7} | {'-':>7} |")
    res["conn_enqueues_s"] = med(conn)
    res["queue_single_enqueues_s"] = med(single)
    res["stdin_jobs_s"] = med(stdin)
    lines += ["", f"| {'throughput':<45} | {'median':>10} | {'runs':<26} |", f"|{'-' * 47}|{'-' * 12}|{'-' * 28}|",
              f"| {f'one connection, single-job adds ({n_conn})':<45} | {med(conn):>8.0f}/s | "
              f"{', '.join(f'{x:.0f}' for x in conn):<26} |",
              f"| {'  Queue.enqueue_many only, same adds':<45} | {med(single):>8.0f}/s | "
              f"{', '.join(f'{x:.0f}' for x in single):<26} |",
              f"| {f'sloth add --stdin ({n_stdin:,} lines)':<45} | {med(stdin):>8.0f}/s | "
              f"{', '.join(f'{x:.0f}' for x in stdin):<26} |"]
    for label in ("with the caller's env", "without env"):
        v = [x[label] for x in split]
        name = f"  Queue.enqueue_many only, {label.replace('with the ', '').replace('without', 'no')}"
        lines.append(f"| {name:<45} | {med(v):>8.0f}/s | {', '.join(f'{x:.0f}' for x in v):<26} |")
    res["queue_split"] = split
    add_ms = res["per_call"]["sloth add -- true (paused)"]["median_ms"]
    res["add_median_ms"] = add_ms
    checks = [("sloth add median", add_ms, "<=", TARGETS["add_median_ms"], "ms"),
              ("--stdin", med(stdin), ">=", TARGETS["stdin_jobs_s"], "jobs/s"),
              ("one connection", med(conn), ">=", TARGETS["conn_enqueues_s"], "enqueues/s")]
    lines += ["", "targets:"]
    for what, v, op, target, unit in checks:
        ok = v <= target if op == "<=" else v >= target
        lines.append(f"  {'ok  ' if ok else 'MISS'} {what}: {v:,.1f} {unit} ({op} {target:,.0f})")
    res["targets_met"] = {c[0]: (c[1] <= c[3] if c[2] == "<=" else c[1] >= c[3]) for c in checks}

    lines += ["", f"imports of `sloth add` (python -X importtime, median of 5; sum of top level "
                  f"{imp['total_ms']:.1f} ms):", f"  {'module (top two levels)':<44} {'cumulative ms':>13}"]
    lines += [f"  {n:<44} {r['cum_ms']:>13.1f}" for n, r in imp["top_level"]]
    lines += [f"  {'module (by own time)':<44} {'self ms':>13}"]
    lines += [f"  {n:<44} {r['self_ms']:>13.1f}" for n, r in imp["by_self"]]
    lines += [f"  {'ours':<44} {'cumulative ms':>13}"]
    lines += [f"  {n:<44} {r['cum_ms']:>13.1f}" for n, r in imp["ours"]]
    res["imports"] = imp
    if a.profile:
        lines += ["", f"daemon side of `sloth add --stdin` ({n_stdin:,} lines), cProfile, by cumulative time:",
                  profile_daemon_stdin(n_stdin)]
    text = "\n".join(lines)
    print(text)
    if a.out:
        a.out.mkdir(parents=True, exist_ok=True)
        (a.out / "results.json").write_text(json.dumps(res, indent=2))
        (a.out / "results.md").write_text(text + "\n")


if __name__ == "__main__":
    main()

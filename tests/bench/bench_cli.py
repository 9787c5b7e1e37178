"""CLI and socket benchmark: what a user (or a script in a loop) pays per command.

    python tests/bench/bench_cli.py [--quick] [--calls N] [--runs N] [--in-place] [--out DIR]

Makes a normal install first -- a fresh venv in a temp dir and `pip install .`
of a copy of this tree, as the README's first command does -- because an
editable install's finder adds ~24 ms to every Python start and inflates the
floor (--in-place measures this venv instead). Starts real daemons in
temporary SLOTH_HOMEs. The machine is shared and noisy: each command is run
--calls times round-robin with the others (so a busy spell hits all alike),
and every row reports the median and the range (min-max); ratios to the floor
matter more than absolutes.

  call      one command run the way a shell runs it: `python -c pass` with the
            install's interpreter (the floor), `sloth add -- true` (daemon
            paused, and running the jobs), `sloth ls` (and with --since,
            --all, --state/--lane), `config` (and --json), `show ID`, `status`,
            `lane ls`, `schedule ls` and `schedule show` (paused, 20 jobs, 2 schedules),
            `add --help` and `ls --help`,
            `add --wait -- true` (the round trip to a job's end), `logs ID` and `wait ID` of a
            finished job, `cancel ID` and `retry ID` (one queued job,
            cancelled and queued again each round), `kill ID` (a running
            `sleep`, a new one each round), `pause` and `resume` (a daemon
            of their own), one TAB of bash completion (`sloth show <TAB>`:
            job ids; `sloth ls --lane <TAB>`: lanes), and task-spooler's
            `tsp true` and `nq true` (installed with apt-get when missing and
            we are root; else skipped)
  loop      a shell loop of 200 `sloth add -- true` (daemon paused): wall
            time and adds per second (and 200 `tsp true` beside it)
  conn      durable enqueues per second over one connection: a Python Client
            sending single-job `add` requests in a loop (daemon paused); and
            the same enqueues in process without the socket (the disk's
            fsync rate, which bounds the first)
  stdin     jobs per second through `sloth add --stdin` (50,000 lines; daemon
            paused so nothing runs), and, to show where that time goes, the
            daemon's Queue.enqueue_many alone for the same jobs with and
            without the caller's environment attached
  import    `python -X importtime` of a real `sloth add`: the modules that cost most

Targets (issue 13, then issues 22 and 30): `sloth add` median <= 2x the floor
(stretch 1.3x); every daily command (add, ls with any filter, show, logs,
status, wait, cancel, retry, kill, pause, resume, lane ls, config) <= 2x; a
TAB <= 60 ms; a command's --help <= 60 ms; add --wait -- true <= 25 ms; --stdin
>= 50,000 jobs/s; one connection >= 1,000 durable enqueues/s. --calls-only
measures the per-call rows and their targets alone (a few minutes a run), --runs
times, and ends with issue 30's item 5 over the runs: the `add --wait -- true`
round trip beside `tsp true`, `add -- true` against its stretch target, and the
daily command nearest its line, each ratio against the floor of its own run.

Python files are byte-compiled (pip does that on install) and the runs may
write .pyc files (PYTHONDONTWRITEBYTECODE would make every call of an
in-place run recompile the edited modules and measure the compiler).
"""

from __future__ import annotations

import argparse
import contextlib
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
from typing import Any, Callable, Iterator

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from sloth_daemon.cli.client import Client  # noqa: E402
from tests.bench._common import ensure_tools, normal_install  # noqa: E402
from tests.support.harness import Harness  # noqa: E402

PY = sys.executable  # this venv: the daemons, and the in-process parts
# The install the per-call rows measure (normal_install() sets them; --in-place: this venv).
INSTALL = {"python": PY, "sloth": str(Path(PY).parent / "sloth")}
TARGETS = {"add_x_floor": 2.0, "add_x_floor_stretch": 1.3, "daily_x_floor": 2.0, "tab_ms": 60.0,
           "stdin_jobs_s": 50_000.0, "conn_enqueues_s": 1_000.0,
           "help_ms": 60.0, "add_wait_ms": 25.0}  # issue 30: a command's --help; add --wait -- true, round trip
# The per-call rows each held to daily_x_floor (issue 22), by the start of their names.
# (issue 30: `ls` with any of its filters -- every "sloth ls ..." row -- and `config` too.)
DAILY = ("sloth add -- true (paused)", "sloth ls", "sloth show", "sloth logs", "sloth status", "sloth wait",
         "sloth cancel", "sloth retry", "sloth kill", "sloth pause", "sloth resume", "sloth lane ls",
         "sloth schedule ls", "sloth schedule show", "sloth config")


def base_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLOTH_")}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["NO_COLOR"] = "1"
    return env


def med(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def run_once(argv: list[str], env: dict[str, str], cwd: str) -> tuple[float, float]:
    """Wall seconds of one run of argv, exec'd the way a shell would (no
    shell), and the CPU seconds (user + system) the process itself spent:
    on a busy machine the wall time waits for a CPU, its own time does not."""
    import resource

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(argv, env=env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, check=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


class Probe:
    """One command to time: argv (or, for a command that must name a new
    job each time, a function of the round's number giving it), its
    environment and folder."""

    def __init__(self, name: str, argv: list[str] | Callable[[int], list[str]], env: dict[str, str],
                 cwd: str) -> None:
        self.name, self.env, self.cwd = name, env, cwd
        self.argv_for = argv if callable(argv) else (lambda i: argv)
        self.times: list[float] = []
        self.cpu: list[float] = []


def round_robin(probes: list[Probe], n: int, warmup: int = 3) -> None:
    """Run every probe n times, one after another in turn: a busy spell of
    the machine then falls on all of them alike, not on one row."""
    for i in range(warmup):
        for p in probes:
            run_once(p.argv_for(i), p.env, p.cwd)
    for i in range(warmup, warmup + n):
        for p in probes:
            wall, cpu = run_once(p.argv_for(i), p.env, p.cwd)
            p.times.append(wall)
            p.cpu.append(cpu)


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


def tab(words: str) -> dict[str, str]:
    """The environment bash's completion function gives `sloth` for one TAB at the end of ``words``."""
    cword = len(words.split()) - (0 if words.endswith(" ") else 1)
    return {"_SLOTH_COMPLETE": "complete_bash", "COMP_WORDS": words, "COMP_CWORD": str(cword)}


def per_call(n: int, tools: dict[str, str | None], warmup: int = 3) -> list[Probe]:
    """The per-call rows, timed round-robin (see the module's docstring)."""
    py, sloth = INSTALL["python"], INSTALL["sloth"]
    with Daemon(paused=True) as paused, Daemon(paused=False) as running, Daemon(paused=True) as reads, \
            Daemon(paused=True) as acts, Daemon(paused=False) as lanes:
        for i in range(20):
            reads.add("true", str(i), lane="video" if i % 4 == 0 else "default")
        for name, when in (("nightly", {"cron": "0 3 * * *", "jitter_s": 600}), ("hourly", {"every_s": 3600})):
            reads.call("schedule_add", name=name, recipe={**when, "job": {"command": ["true"], "cwd": "/tmp"}})
        done = running.add("sh", "-c", "echo hello; echo world")  # logs and wait: a finished job
        running.wait_state(done, "done")
        running.call("lane_set", lane="k", concurrency=n + warmup, create=True)
        sleeps = running.add_many([{"command": ["sleep", "600"], "lane": "k"}] * (n + warmup))
        for j in sleeps:
            running.wait_state(j, "running")
        queued = acts.add("true")  # cancelled, then queued again, each round
        e, r, home, rh, re_ = paused.env, reads.env, str(paused.home), str(reads.home), running.env
        rr, a, ah = str(running.home), acts.env, str(acts.home)
        probes = [Probe("python -c pass (floor)", [py, "-c", "pass"], base_env(), "/tmp"),
                  Probe("sloth add -- true (paused)", [sloth, "add", "--", "true"], e, home),
                  Probe("sloth add -- true (running)", [sloth, "add", "--", "true"], re_, rr),
                  Probe("sloth ls (20 jobs)", [sloth, "ls"], r, rh),
                  Probe("sloth ls --since 12h", [sloth, "ls", "--since", "12h"], r, rh),
                  Probe("sloth ls --all", [sloth, "ls", "--all"], r, rh),
                  Probe("sloth ls --state queued --lane video", [sloth, "ls", "--state", "queued", "--lane", "video"],
                        r, rh),
                  Probe("sloth config", [sloth, "config"], r, rh),
                  Probe("sloth config --json", [sloth, "config", "--json"], r, rh),
                  Probe("--help: sloth add --help", [sloth, "add", "--help"], r, rh),
                  Probe("--help: sloth ls --help", [sloth, "ls", "--help"], r, rh),
                  Probe("round trip: sloth add --wait -- true", [sloth, "add", "--wait", "--", "true"], re_, rr),
                  Probe("sloth show 1", [sloth, "show", "1"], r, rh),
                  Probe("sloth status (20 jobs)", [sloth, "status"], r, rh),
                  Probe("sloth lane ls", [sloth, "lane", "ls"], r, rh),
                  Probe("sloth schedule ls (2)", [sloth, "schedule", "ls"], r, rh),
                  Probe("sloth schedule show NAME", [sloth, "schedule", "show", "nightly"], r, rh),
                  Probe("sloth logs ID (done)", [sloth, "logs", str(done)], re_, rr),
                  Probe("sloth wait ID (done)", [sloth, "wait", str(done)], re_, rr),
                  Probe("sloth cancel ID (queued)", [sloth, "cancel", str(queued)], a, ah),
                  Probe("sloth retry ID (cancelled)", [sloth, "retry", str(queued)], a, ah),
                  Probe("sloth kill ID (running)", lambda i: [sloth, "kill", str(sleeps[i])], re_, rr),
                  Probe("sloth pause", [sloth, "pause"], lanes.env, str(lanes.home)),
                  Probe("sloth resume", [sloth, "resume"], lanes.env, str(lanes.home)),
                  Probe("TAB: sloth show <TAB> (ids)", [sloth], dict(r, **tab("sloth show ")), rh),
                  Probe("TAB: sloth ls --lane <TAB>", [sloth], dict(r, **tab("sloth ls --lane ")), rh)]
        with tool_probes(tools) as extra:
            round_robin(probes + extra, n, warmup)
            return probes + extra


@contextlib.contextmanager
def tool_probes(tools: dict[str, str | None]) -> Iterator[list[Probe]]:
    """`tsp true` and `nq true`, each in its own temp dir, for the rows beside sloth's."""
    d = Path(tempfile.mkdtemp(prefix="tsb-"))
    ts_env = dict(base_env(), TS_SOCKET=str(d / "ts.sock"), TMPDIR=str(d), TS_SLOTS="1")
    out = []
    if tools["tsp"]:
        out.append(Probe("tsp true", [tools["tsp"], "true"], ts_env, str(d)))
    if tools["nq"]:
        (d / "nq").mkdir()
        out.append(Probe("nq true", [tools["nq"], "true"], dict(base_env(), NQDIR=str(d / "nq")), str(d)))
    try:
        yield out
    finally:
        if tools["tsp"]:
            subprocess.run([tools["tsp"], "-K"], env=ts_env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(0.2)  # nq's jobs are `true`: let the last ones finish before removing the dir
        shutil.rmtree(d, ignore_errors=True)


def shell_loop(n: int, tsp: str | None) -> dict[str, float]:
    """Seconds for a shell loop of n `sloth add -- true` (daemon paused), and of n `tsp true`."""
    loop = 'i=0; while [ $i -lt "$N" ]; do "$CMD" add -- true >/dev/null; i=$((i+1)); done'
    out = {}
    with Daemon(paused=True) as h:
        env = dict(h.env, N=str(n), CMD=INSTALL["sloth"])
        t0 = time.perf_counter()
        subprocess.run(["sh", "-c", loop], env=env, cwd=str(h.home), check=True)
        out["sloth add"] = time.perf_counter() - t0
        assert h.call("status")["counts"]["queued"] == n
    if tsp:
        d = Path(tempfile.mkdtemp(prefix="tsb-"))
        env = dict(base_env(), TS_SOCKET=str(d / "ts.sock"), TMPDIR=str(d), TS_SLOTS="1", N=str(n), CMD=tsp)
        t0 = time.perf_counter()
        subprocess.run(["sh", "-c", loop.replace('"$CMD" add -- true', '"$CMD" true')], env=env, cwd=str(d),
                       check=True)
        out["tsp"] = time.perf_counter() - t0
        subprocess.run([tsp, "-K"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        shutil.rmtree(d, ignore_errors=True)
    return out


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
    argv = [INSTALL["sloth"], "add", "--stdin"]
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
            p = subprocess.run([INSTALL["python"], "-X", "importtime", INSTALL["sloth"], "add", "--", "true"],
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
    ap.add_argument("--runs", type=int, default=None, help="repeat the throughput measurements, or with --calls-only the per-call "
                    "rows, each run against its own floor (default 3; 1 quick)")
    ap.add_argument("--calls", type=int, default=None, help="runs of each per-call command (default 30; 15 quick)")
    ap.add_argument("--loop", type=int, default=200, help="`sloth add` calls in the shell loop")
    ap.add_argument("--in-place", action="store_true", help="measure this venv, not a fresh `pip install .`")
    ap.add_argument("--calls-only", action="store_true", help="only the per-call rows and their targets")
    ap.add_argument("--out", type=Path, default=None, help="write results.json and results.md here")
    ap.add_argument("--profile", action="store_true",
                    help="also print a cProfile of the daemon side of `sloth add --stdin`")
    a = ap.parse_args()
    runs = a.runs or (1 if a.quick else 3)
    calls = max(15, a.calls or (15 if a.quick else 30))
    with tempfile.TemporaryDirectory(prefix="slinst-") as where:
        if not a.in_place:
            print("  installing (pip install . into a fresh venv) ...", file=sys.stderr, flush=True)
            INSTALL.update(normal_install(Path(where)))
        else:
            subprocess.run([PY, "-m", "compileall", "-q", str(REPO / "sloth_daemon")], check=False,
                           stdout=subprocess.DEVNULL)
        res, lines = measure(a, runs, calls)
    text = "\n".join(lines)
    print(text)
    if a.out:
        a.out.mkdir(parents=True, exist_ok=True)
        (a.out / "results.json").write_text(json.dumps(res, indent=2))
        (a.out / "results.md").write_text(text + "\n")


def measure(a: argparse.Namespace, runs: int, calls: int) -> tuple[dict[str, Any], list[str]]:
    tools = ensure_tools()
    if a.calls_only:  # each run its own round-robin and floor; issue 30's targets over the runs at the end
        per_run = [per_call_rows(calls, tools) for _ in range(runs)]
        lines = [ln for i, (res, rows) in enumerate(per_run)
                 for ln in [f"run {i + 1} of {runs}:", *rows, *target_lines(res, res["floor_ms"] / 1000, None, None), ""]]
        return {"runs": [r for r, _ in per_run]}, lines + headline([r for r, _ in per_run])
    res, lines = per_call_rows(calls, tools)
    res["runs"] = runs
    return throughput(a, runs, res, lines, res["floor_ms"] / 1000, tools)


def per_call_rows(calls: int, tools: dict[str, str | None]) -> tuple[dict[str, Any], list[str]]:
    """One round-robin of the per-call rows: their table, and its figures (``floor_ms``: the floor's median)."""
    probes = per_call(calls, tools)
    print("  measured the per-call rows", file=sys.stderr, flush=True)
    res: dict[str, Any] = {"install": "in place" if INSTALL["python"] == PY else "pip install . (fresh venv)",
                           "calls": calls, "python": sys.version.split()[0], "per_call": {}}
    lines = [f"sloth CLI benchmark ({res['install']}, Python {res['python']}): {calls} runs of each command,"
             " round-robin (cpu: the command's own user+system time, median)", "",
             f"| {'command':<32} | {'median ms':>9} | {'range ms':>13} | {'x floor':>7} | {'cpu ms':>6} |",
             f"|{'-' * 34}|{'-' * 11}|{'-' * 15}|{'-' * 9}|{'-' * 8}|"]
    floor = med(probes[0].times)
    res["floor_ms"] = floor * 1000
    for p in probes:
        m = med(p.times)
        res["per_call"][p.name] = {"median_ms": m * 1000, "min_ms": min(p.times) * 1000,
                                   "max_ms": max(p.times) * 1000, "x_floor": m / floor,
                                   "cpu_median_ms": med(p.cpu) * 1000, "times_ms": [t * 1000 for t in p.times]}
        rng = f"{min(p.times) * 1000:.1f}-{max(p.times) * 1000:.1f}"
        lines.append(f"| {p.name:<32} | {m * 1000:>9.1f} | {rng:>13} | {m / floor:>7.2f} | {med(p.cpu) * 1000:>6.1f} |")
    for tool in ("tsp", "nq"):
        if not tools[tool]:
            lines.append(f"| {tool + ' (not installed)':<32} | {'-':>9} | {'-':>13} | {'-':>7} | {'-':>6} |")
    return res, lines


def headline(runs: list[dict[str, Any]]) -> list[str]:
    """Issue 30's item 5 over several runs, each against the floor of its own run: the round trip
    `add --wait -- true` (with tsp's `tsp true` beside it), `add -- true` against the stretch
    target, and the daily command nearest its line."""
    def span(xs: list[float], fmt: str) -> str:
        return f"{min(xs):{fmt}}-{max(xs):{fmt}}" if len(xs) > 1 else f"{xs[0]:{fmt}}"

    def row(name: str, key: str) -> list[float]:
        return [r["per_call"][name][key] for r in runs if name in r["per_call"]]

    wait = row("round trip: sloth add --wait -- true", "median_ms")
    tsp = row("tsp true", "median_ms")
    add = row("sloth add -- true (paused)", "x_floor")
    floors = [r["floor_ms"] for r in runs]
    daily = [max(((v["x_floor"], k) for k, v in r["per_call"].items() if k.startswith(DAILY))) for r in runs]
    out = ["", f"issue 30, item 5, over {len(runs)} run(s) (medians; each ratio against the floor of its own run,"
               f" `python -c pass` {span(floors, '.1f')} ms):",
           f"  {'ok  ' if max(wait) <= TARGETS['add_wait_ms'] else 'MISS'} `sloth add --wait -- true` round trip: "
           f"{span(wait, '.1f')} ms (target <= {TARGETS['add_wait_ms']:g} ms)"
           + (f"; `tsp true` {span(tsp, '.1f')} ms" if tsp else ""),
           f"  {'ok  ' if max(add) <= TARGETS['add_x_floor_stretch'] else 'MISS'} `sloth add -- true`: "
           f"{span(add, '.2f')}x the floor (stretch target <= {TARGETS['add_x_floor_stretch']:g}x)",
           f"  {'ok  ' if max(d[0] for d in daily) <= TARGETS['daily_x_floor'] else 'MISS'} the daily command "
           f"nearest its line: {span([d[0] for d in daily], '.2f')}x ({', '.join(sorted({d[1] for d in daily}))};"
           f" target <= {TARGETS['daily_x_floor']:g}x)"]
    return out


def throughput(a: argparse.Namespace, runs: int, res: dict[str, Any], lines: list[str], floor: float,
               tools: dict[str, str | None]) -> tuple[dict[str, Any], list[str]]:
    """The rows after the per-call ones: the shell loop, one connection, --stdin, the imports."""
    loop = shell_loop(50 if a.quick else a.loop, tools["tsp"])
    n_conn, n_stdin = (500, 10_000) if a.quick else (3000, 50_000)
    conn = repeat(runs, lambda: bench_conn(n_conn))
    single = repeat(runs, lambda: bench_queue_single(n_conn))
    stdin = repeat(runs, lambda: bench_stdin(n_stdin))
    split = [bench_queue_split(n_stdin) for _ in range(runs)]
    print("  measured throughput", file=sys.stderr, flush=True)
    imp = import_profile()
    n_loop = 50 if a.quick else a.loop
    res["loop"] = {"calls": n_loop, **{k: {"s": v, "per_s": n_loop / v} for k, v in loop.items()}}
    lines += ["", f"shell loop of {n_loop} calls: " + "; ".join(
        f"{k}: {v:.2f} s ({n_loop / v:.0f}/s)" for k, v in loop.items())]
    lines += throughput_lines(res, conn, single, stdin, split, n_conn, n_stdin)
    lines += target_lines(res, floor, med(stdin), med(conn))
    lines += import_lines(imp)
    res["imports"] = imp
    if a.profile:
        lines += ["", f"daemon side of `sloth add --stdin` ({n_stdin:,} lines), cProfile, by cumulative time:",
                  profile_daemon_stdin(n_stdin)]
    return res, lines


def throughput_lines(res: dict[str, Any], conn: list[float], single: list[float], stdin: list[float],
                     split: list[dict[str, float]], n_conn: int, n_stdin: int) -> list[str]:
    res.update(conn_enqueues_s=med(conn), queue_single_enqueues_s=med(single), stdin_jobs_s=med(stdin),
               queue_split=split)
    lines = ["", f"| {'throughput':<45} | {'median':>10} | {'runs':<26} |", f"|{'-' * 47}|{'-' * 12}|{'-' * 28}|",
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
    return lines


def target_lines(res: dict[str, Any], floor: float, stdin: float | None, conn: float | None) -> list[str]:
    pc = res["per_call"]
    add = pc["sloth add -- true (paused)"]["x_floor"]
    tab_ms = max(pc[k]["median_ms"] for k in pc if k.startswith("TAB"))
    checks: list[tuple[str, float, str, float, str]] = [
        ("  sloth add stretch", add, "<=", TARGETS["add_x_floor_stretch"], "x")]
    checks[:0] = [(f"{k}, x floor", pc[k]["x_floor"], "<=", TARGETS["daily_x_floor"], "x")
                  for k in pc if k.startswith(DAILY)]
    checks.append(("a TAB (the slower of the two)", tab_ms, "<=", TARGETS["tab_ms"], "ms"))
    checks += [(f"{k}, ms", pc[k]["median_ms"], "<=", TARGETS["help_ms"], "ms") for k in pc if k.startswith("--help")]
    checks += [(f"{k}, ms", pc[k]["median_ms"], "<=", TARGETS["add_wait_ms"], "ms")
               for k in pc if k.startswith("round trip")]
    if stdin is not None and conn is not None:
        checks += [("--stdin", stdin, ">=", TARGETS["stdin_jobs_s"], "jobs/s"),
                   ("one connection", conn, ">=", TARGETS["conn_enqueues_s"], "enqueues/s")]
    lines = ["", f"targets (floor: python -c pass, median {floor * 1000:.1f} ms):"]
    for what, v, op, target, unit in checks:
        ok = v <= target if op == "<=" else v >= target
        lines.append(f"  {'ok  ' if ok else 'MISS'} {what}: {v:,.2f} {unit} ({op} {target:,.1f})")
    res["targets_met"] = {c[0].strip(): (c[1] <= c[3] if c[2] == "<=" else c[1] >= c[3]) for c in checks}
    return lines


def import_lines(imp: dict[str, Any]) -> list[str]:
    lines = ["", f"imports of `sloth add` (python -X importtime, median of 5; sum of top level "
                 f"{imp['total_ms']:.1f} ms):", f"  {'module (top two levels)':<44} {'cumulative ms':>13}"]
    lines += [f"  {n:<44} {r['cum_ms']:>13.1f}" for n, r in imp["top_level"]]
    lines += [f"  {'module (by own time)':<44} {'self ms':>13}"]
    lines += [f"  {n:<44} {r['self_ms']:>13.1f}" for n, r in imp["by_self"]]
    lines += [f"  {'ours':<44} {'cumulative ms':>13}"]
    return lines + [f"  {n:<44} {r['cum_ms']:>13.1f}" for n, r in imp["ours"]]


if __name__ == "__main__":
    main()

"""Helpers shared by the benchmark scripts (not collected by pytest)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import psutil

_PACKAGES = {"tsp": "task-spooler", "nq": "nq"}


def ensure_tools() -> dict[str, str | None]:
    """tsp and nq from Debian's packages: their paths, installed with apt-get
    when missing and running as root; None for one that cannot be had."""
    found = {tool: shutil.which(tool) for tool in _PACKAGES}
    missing = [_PACKAGES[t] for t, path in found.items() if not path]
    if missing and os.geteuid() == 0 and shutil.which("apt-get"):
        print(f"installing {' '.join(missing)} with apt-get ...", file=sys.stderr, flush=True)
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        cmd = ["apt-get", "install", "-y", "-q", *missing]
        if subprocess.run(cmd, env=env, capture_output=True).returncode != 0:
            subprocess.run(["apt-get", "update", "-q"], env=env, capture_output=True)
            subprocess.run(cmd, env=env, capture_output=True)
        found = {tool: shutil.which(tool) for tool in _PACKAGES}
    return found


def log(msg: str) -> None:
    """Progress on stderr (stdout holds the figures)."""
    print(msg, file=sys.stderr, flush=True)


def pct(xs: list[float], q: float) -> float:
    """The q-quantile (nearest rank) of xs; NaN for none."""
    s = sorted(xs)
    return s[min(len(s) - 1, round(q * (len(s) - 1)))] if s else float("nan")


def bench_bare(n: int) -> float:
    """Seconds to run `true` n times one after another: the floor."""
    t0 = time.perf_counter()
    for _ in range(n):
        subprocess.run(["true"])
    return time.perf_counter() - t0


def cpu_s(p: psutil.Process) -> float:
    """Seconds on a CPU, all threads: /proc/PID/task/*/schedstat is in ns, where
    cpu_times() counts whole clock ticks (a daemon that wakes for a few ms now
    and then is charged a full tick, or none, by chance)."""
    total = 0
    try:
        for task in Path(f"/proc/{p.pid}/task").iterdir():
            try:
                total += int((task / "schedstat").read_text().split()[0])
            except (OSError, ValueError, IndexError):
                continue
        return total / 1e9
    except OSError:
        c = p.cpu_times()
        return c.user + c.system


def wakeups(p: psutil.Process) -> int:
    """Voluntary context switches of every thread: how often it woke up."""
    total = 0
    for task in Path(f"/proc/{p.pid}/task").iterdir():
        try:
            for line in (task / "status").read_text().splitlines():
                if line.startswith("voluntary_ctxt_switches"):
                    total += int(line.split()[1])
        except OSError:
            continue
    return total


def fsync_rate(folder: Path, n: int = 500) -> float:
    """fdatasync() calls per second on a file in ``folder``."""
    path = folder / "fsync.probe"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        t0 = time.perf_counter()
        for _ in range(n):
            os.write(fd, b"x" * 512)
            os.fdatasync(fd)
        return n / (time.perf_counter() - t0)
    finally:
        os.close(fd)
        os.unlink(path)


def race_workers(source: str, run: Path, n: int, *args: str) -> tuple[int, float]:
    """Start ``n`` processes running ``source`` (``python -c``; argv: the
    ready file, the go file, the out file, then ``args``), release them at
    once when all are ready, wait for all; returns (jobs they report done,
    seconds from the go to the last one's end). Each writes "COUNT END_TIME"
    to its out file (bench_pg.py's and bench_pairs.py's workers)."""
    go = run / "go"
    procs = []
    for i in range(n):
        argv = [sys.executable, "-c", source, *args[:1], str(run / f"{i}.ready"), str(go), str(run / f"{i}.out"),
                *args[1:]]
        procs.append(subprocess.Popen(argv, env=dict(os.environ, PYTHONDONTWRITEBYTECODE="1"),
                                      cwd=Path(__file__).resolve().parents[2]))
    try:
        for i, p in enumerate(procs):
            while not (run / f"{i}.ready").exists():
                if p.poll() is not None:
                    raise RuntimeError(f"worker {i} exited with {p.returncode} before it was ready")
                time.sleep(0.001)
        t0 = time.time()
        go.touch()
        for p in procs:
            if p.wait(timeout=600) != 0:
                raise RuntimeError(f"a worker exited with {p.returncode}")
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    done, end = 0, t0
    for i in range(n):
        count, t = (run / f"{i}.out").read_text().split()
        done, end = done + int(count), max(end, float(t))
    return done, end - t0


def normal_install(where: Path) -> dict[str, str]:
    """A fresh venv with `pip install .` of a copy of this tree (the copy
    keeps setuptools' build/ out of it): its python and sloth."""
    repo = Path(__file__).resolve().parents[2]
    src = where / "src"
    src.mkdir(parents=True)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(repo / name, src / name)
    for name in ("sloth_daemon", "service"):
        shutil.copytree(repo / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
    return venv_install(src, where, "pip install .")


def venv_install(src: Path, where: Path, what: str) -> dict[str, str]:
    """A fresh venv in ``where`` with the source tree ``src`` pip-installed: its python and sloth."""
    venv = where / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check", str(src)]
    p = subprocess.run(pip, capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(f"{what} failed:\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}")
    return {"python": str(venv / "bin" / "python"), "sloth": str(venv / "bin" / "sloth")}

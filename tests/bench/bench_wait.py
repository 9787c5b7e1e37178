"""What a waiter costs the daemon: 1,000 `true` jobs from one `sloth add --stdin`,
with `sloth wait` on the last id vs `sloth wait` on all of them.

    python tests/bench/bench_wait.py [--runs N] [--jobs N] [--calls N] [--against REF] [--in-place] [--out DIR]

Makes a normal install first (a fresh venv, `pip install .` of a copy of
this tree, as bench_cli.py does; --in-place measures this venv). Each run is
one new daemon, started from that install in a temporary SLOTH_HOME, which
gets the jobs (one `sloth add --stdin`), then one `sloth wait` (its output to
a pipe, as in `ids=$(sloth wait ...)`), timed from the add's start to the
wait's exit; the daemon's CPU seconds over the same span are read from
/proc. Runs alternate last/all so a busy spell of the (shared, noisy)
machine falls on both alike. Target (issue 22): the ratio of the medians,
all / last, close to 1. With --against REF (say main), a second normal
install of that commit (git archive) is measured the same way, its runs
taken in turn with this tree's, so both see the same machine.

Then `sloth wait ID` on a finished job against `python -c pass` (the floor),
--calls times round-robin (issue 22: <= 2x the floor).
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tests.bench._common import cpu_s, log, venv_install  # noqa: E402
from tests.bench.bench_cli import INSTALL, Probe, base_env, normal_install, round_robin  # noqa: E402
from tests.support.harness import Harness  # noqa: E402


class Daemon:
    """A daemon of ``install`` (default: the measured one) in a temporary
    SLOTH_HOME, reaped on exit."""

    def __init__(self, install: dict[str, str] | None = None) -> None:
        self.install = install or INSTALL
        self.tmp = Path(tempfile.mkdtemp(prefix="slw-"))
        self.h = Harness(self.tmp / "h")
        self.h.env.pop("PYTHONDONTWRITEBYTECODE", None)
        self.proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> Daemon:
        out = open(self.h.daemon_log, "ab")
        self.proc = subprocess.Popen([self.install["sloth"], "daemon", "run"], env=self.h.env, stdout=out, stderr=out,
                                     stdin=subprocess.DEVNULL, start_new_session=True, cwd=str(self.h.home))
        out.close()
        self.h.spawned.append(self.proc)
        self.h.daemon = self.proc
        self.h.wait_ready(self.proc)
        return self

    def sloth(self, *args: str, input: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run([self.install["sloth"], *args], env=self.h.env, cwd=str(self.h.home), input=input,
                              capture_output=True, text=True, timeout=600)

    def timed(self, *args: str) -> tuple[subprocess.CompletedProcess[str], float]:
        """Run ``sloth ARGS``; also its CPU seconds (user + system, from wait4)."""
        p = subprocess.Popen([self.install["sloth"], *args], env=self.h.env, cwd=str(self.h.home),
                             stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        out, err = p.communicate(timeout=600)
        ru = resource.getrusage(resource.RUSAGE_CHILDREN)
        return subprocess.CompletedProcess(p.args, p.returncode, out, err), ru.ru_utime + ru.ru_stime

    def __exit__(self, *exc: object) -> None:
        try:
            self.h.stop()
        except Exception:
            pass
        self.h.reap()
        shutil.rmtree(self.tmp, ignore_errors=True)


def one_run(install: dict[str, str], n: int, mode: str) -> dict[str, float]:
    """Seconds from `sloth add --stdin` of n `true` to the exit of `sloth wait`
    on the last id (mode "last") or every id ("all"), the daemon's CPU
    seconds over that span, and the waiting client's own."""
    with Daemon(install) as d:
        assert d.proc is not None
        daemon = psutil.Process(d.proc.pid)
        cpu0, t0 = cpu_s(daemon), time.perf_counter()
        p = d.sloth("add", "--stdin", input="true\n" * n)
        assert p.returncode == 0, p.stderr
        ids = p.stdout.split()
        assert len(ids) == n, p.stdout[-500:]
        children0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        w, children1 = d.timed("wait", *(ids if mode == "all" else ids[-1:]))
        dt, cpu = time.perf_counter() - t0, cpu_s(daemon) - cpu0
        assert w.returncode == 0, w.stderr[-2000:]
        counts = d.h.call("status")["counts"]
        assert counts.get("done") == n, counts
        out = {"s": dt, "daemon_cpu_s": cpu, "waiter_cpu_s": children1 - children0.ru_utime - children0.ru_stime}
        if mode == "all":
            assert len(w.stdout.splitlines()) == n, w.stdout[-500:]  # one line per job, piped
            t1 = time.perf_counter()  # again, all finished now: the waiter's cost alone (the frames of n jobs)
            again = d.sloth("wait", *ids)
            out["again_s"] = time.perf_counter() - t1
            assert again.returncode == 0 and len(again.stdout.splitlines()) == n, again.stderr[-2000:]
            out.update(frame_bytes(d.h.socket, [int(i) for i in ids]))
        return out


def frame_bytes(sock: Path, ids: list[int]) -> dict[str, float]:
    """The bytes of the frames of a wait on ``ids`` (all finished: the jobs
    event and the response), every field and SHOWN_FIELDS (what `sloth wait`
    asks for), as the daemon encodes them (compact JSON); a daemon from
    before ``fields`` gives the first only."""
    from sloth_daemon import protocol
    from sloth_daemon.cli.client import Client
    from sloth_daemon.cli.wait import SHOWN_FIELDS
    from sloth_daemon.errors import SlothError

    out: dict[str, float] = {}
    for name, ask in (("bytes_whole", {}), ("bytes_shown", {"fields": SHOWN_FIELDS})):
        try:
            with Client(sock, timeout_s=60) as c:
                out[name] = sum(len(protocol.dumps(ev, compact=True)) for ev in c.stream("wait", ids=ids, **ask))
        except SlothError:
            pass
    return out


def waits(installs: dict[str, dict[str, str]], runs: int, n: int) -> dict[str, dict[str, list[dict[str, float]]]]:
    out: dict[str, dict[str, list[dict[str, float]]]] = {name: {"last": [], "all": []} for name in installs}
    for i in range(runs):
        for name, install in installs.items():
            for mode in ("last", "all") if i % 2 == 0 else ("all", "last"):
                out[name][mode].append(one_run(install, n, mode))
                log(f"  run {i + 1}/{runs} {name}, wait on {mode}: {out[name][mode][-1]['s']:.2f} s")
    return out


def install_ref(ref: str, where: Path) -> dict[str, str]:
    """A normal install of commit ``ref`` of this repository (git archive, then pip install)."""
    src = where / "src"
    src.mkdir(parents=True)
    tar = subprocess.run(["git", "-C", str(REPO), "archive", ref, "pyproject.toml", "README.md", "sloth_daemon",
                          "service"], capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(src)], input=tar, check=True)
    return venv_install(src, where, f"pip install of {ref}")


def wait_finished(calls: int) -> list[Probe]:
    """`sloth wait ID` on a job that has ended, beside `python -c pass`."""
    with Daemon() as d:
        p = d.sloth("add", "--wait", "--", "true")
        assert p.returncode == 0, p.stderr
        jid = p.stdout.split()[0]
        probes = [Probe("python -c pass (floor)", [INSTALL["python"], "-c", "pass"], base_env(), "/tmp"),
                  Probe(f"sloth wait {jid} (done)", [INSTALL["sloth"], "wait", jid], d.h.env, str(d.h.home))]
        round_robin(probes, calls)
        return probes


def med(xs: list[float]) -> float:
    return statistics.median(xs)


def report(n: int, res: dict[str, dict[str, list[dict[str, float]]]],
           probes: list[Probe]) -> tuple[dict[str, Any], str]:
    out: dict[str, Any] = {"jobs": n, "runs": res, "install": INSTALL}
    runs = len(next(iter(res.values()))["last"])
    rows = [f"{n:,} `true` jobs from one `sloth add --stdin`, one daemon per run ({runs} runs each), "
            "`sloth wait` piped:", "",
            f"| {'install':<10} | {'wait on':<9} | {'median s':>8} | {'range s':>11} | {'daemon CPU s':>21} | "
            f"{'waiter CPU s':>12} |",
            f"|{'-' * 12}|{'-' * 11}|{'-' * 10}|{'-' * 13}|{'-' * 23}|{'-' * 14}|"]
    ratios = []
    for name, by_mode in res.items():
        for mode in ("last", "all"):
            xs = [r["s"] for r in by_mode[mode]]
            cpu = [r["daemon_cpu_s"] for r in by_mode[mode]]
            own = [r["waiter_cpu_s"] for r in by_mode[mode]]
            what = "last id" if mode == "last" else f"all {n:,}"
            rows.append(f"| {name:<10} | {what:<9} | {med(xs):>8.2f} | {min(xs):>5.2f}-{max(xs):<5.2f} | "
                        f"{med(cpu):>5.2f} ({min(cpu):.2f}-{max(cpu):.2f}){'':>4} | {med(own):>12.2f} |")
        wall = med([r["s"] for r in by_mode["all"]]) / med([r["s"] for r in by_mode["last"]])
        cpu_r = med([r["daemon_cpu_s"] for r in by_mode["all"]]) / med([r["daemon_cpu_s"] for r in by_mode["last"]])
        out.setdefault("ratio", {})[name] = {"wall": wall, "daemon_cpu": cpu_r}
        ratios.append(f"  {name}: {wall:.3f} (wall), {cpu_r:.3f} (daemon CPU)")
    rows += ["", "ratio all/last (target close to 1):", *ratios, "",
             f"`sloth wait` on all {n:,} again, finished (the waiter's own cost, the frames of {n:,} jobs):"]
    for name, by_mode in res.items():
        xs = [r["again_s"] for r in by_mode["all"]]
        sizes = ", ".join(f"{k[6:]} fields {med([r[k] for r in by_mode['all']]) / 1e6:.2f} MB of frames"
                          for k in ("bytes_whole", "bytes_shown") if all(k in r for r in by_mode["all"]))
        rows.append(f"  {name}: median {med(xs) * 1000:.0f} ms ({min(xs) * 1000:.0f}-{max(xs) * 1000:.0f}); {sizes}")
    floor, wait = (med(p.times) for p in probes)
    out.update(wait_finished_ms=wait * 1000, floor_ms=floor * 1000, wait_x_floor=wait / floor)
    rows += ["", f"`sloth wait ID` on a finished job ({len(probes[1].times)} calls): median {wait * 1000:.1f} ms "
             f"({min(probes[1].times) * 1000:.1f}-{max(probes[1].times) * 1000:.1f}), "
             f"floor `python -c pass` {floor * 1000:.1f} ms: {wait / floor:.2f}x (target <= 2x)"]
    return out, "\n".join(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=4, help="runs of each mode (default 4)")
    ap.add_argument("--jobs", type=int, default=1000, help="jobs per run (default 1000)")
    ap.add_argument("--calls", type=int, default=30, help="calls of `sloth wait` on a finished job (default 30)")
    ap.add_argument("--in-place", action="store_true", help="measure this venv, not a fresh `pip install .`")
    ap.add_argument("--against", default=None, metavar="REF", help="also measure a normal install of this commit")
    ap.add_argument("--out", type=Path, default=None, help="write results.json and results.md here")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="slinst-") as where:
        if not a.in_place:
            log("  installing (pip install . into a fresh venv) ...")
            INSTALL.update(normal_install(Path(where) / "this"))
        installs = {"this tree": dict(INSTALL)}
        if a.against:
            log(f"  installing {a.against} (git archive, pip install into a fresh venv) ...")
            installs[a.against] = install_ref(a.against, Path(where) / "against")
        res = waits(installs, a.runs, a.jobs)
        probes = wait_finished(a.calls)
        data, text = report(a.jobs, res, probes)
    print(text)
    if a.out:
        a.out.mkdir(parents=True, exist_ok=True)
        (a.out / "results.json").write_text(json.dumps(data, indent=2))
        (a.out / "results.md").write_text(text + "\n")


if __name__ == "__main__":
    main()

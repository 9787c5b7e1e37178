"""Start the real daemon as a process in a temporary SLOTH_HOME; drive the real CLI.

Everything spawned is reaped at teardown, also when a test fails: the daemon,
and every process whose environment carries this test's SLOTH_HOME (jobs get
the environment `sloth add` captured, so they carry it too).
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import psutil

from sloth_daemon.cli.client import Client
from sloth_daemon.keeper.procident import wait_gone

# Short leases and a 1 s clock check keep the real-daemon tests quick; the
# durations are still real (no clock is faked here except where a test says).
TEST_CONFIG = """
lease_s = "3s"
clock_check_s = "1s"
kill_grace_s = "2s"
backoff_cap_s = "60s"
"""


def alive(pid: int) -> bool:
    """Running and not a zombie (a zombie runs no more code)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


@contextlib.contextmanager
def temp_harness(config: str = "", *, prefix: str = "slb-") -> Iterator["Harness"]:
    """A Harness in a new temporary folder (short: socket paths are limited),
    reaped and removed on the way out, also on error. For scripts; tests use
    the ``harness`` fixture."""
    root = Path(tempfile.mkdtemp(prefix=prefix))
    h = Harness(root / "h", config=config)
    try:
        yield h
    finally:
        h.reap()
        shutil.rmtree(root, ignore_errors=True)


def sandbox_env(root: Path, fakes: dict[str, str]) -> dict[str, str]:
    """An environment for running `sloth` against fake service commands:
    a private HOME, config and SLOTH_HOME under ``root``, and ``fakes``
    (name -> script text) first on PATH."""
    bin_dir = root / "bin"
    bin_dir.mkdir()
    for name, text in fakes.items():
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    (root / "home").mkdir()
    return {
        "HOME": str(root / "home"), "XDG_CONFIG_HOME": str(root / "cfg"), "SLOTH_HOME": str(root / "sl"),
        "PATH": f"{bin_dir}:/usr/bin:/bin", "LANG": "C.UTF-8",
    }


def processes_with_env(var: str, value: str) -> list[psutil.Process]:
    """Every other process whose environment has ``var=value`` (a test's or a
    tool's own folder: the daemon and every job it started carry it)."""
    out = []
    for p in psutil.process_iter():
        try:
            if p.pid != os.getpid() and p.environ().get(var) == value:
                out.append(p)
        except psutil.Error:
            continue
    return out


class Harness:
    def __init__(self, home: Path, *, config: str = "", extra_env: dict[str, str] | None = None) -> None:
        self.home = home
        home.mkdir(parents=True, exist_ok=True)
        (home / "config.toml").write_text(config)
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("SLOTH_")}
        self.env.update({"SLOTH_HOME": str(home), "NO_COLOR": "1", "PYTHONUNBUFFERED": "1"})
        self.daemon_env = dict(self.env, **(extra_env or {}))
        self.daemon: subprocess.Popen[bytes] | None = None
        self.daemon_log = home / "daemon-test.log"
        self.spawned: list[subprocess.Popen[bytes]] = []

    # -------------------------------------------------------------- daemon
    def start(self, *, wait: bool = True, env: dict[str, str] | None = None,
              nofile: tuple[int, int] | None = None, wrap: list[str] | None = None) -> subprocess.Popen[bytes]:
        """Start `sloth daemon run`; ``nofile``: its (soft, hard) descriptor limit; ``wrap``:
        an argv prefix that execs it (tests/support/power.py's namespace)."""
        log = open(self.daemon_log, "ab")
        self.daemon = subprocess.Popen(
            [*(wrap or []), sys.executable, "-m", "sloth_daemon", "daemon", "run"],
            env=dict(self.daemon_env, **(env or {})), stdout=log, stderr=log,
            stdin=subprocess.DEVNULL, start_new_session=True, cwd=str(self.home),
            preexec_fn=None if nofile is None else lambda: resource.setrlimit(resource.RLIMIT_NOFILE, nofile),
        )
        log.close()
        self.spawned.append(self.daemon)
        if wait:
            self.wait_ready(self.daemon)
        return self.daemon

    def wait_ready(self, proc: subprocess.Popen[bytes], timeout_s: float = 20) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise AssertionError(f"daemon exited with {proc.returncode}:\n{self.log_text()}")
            try:
                with Client(self.socket, timeout_s=5) as c:
                    c.call("ping")
                return
            except Exception:
                time.sleep(0.02)
        raise AssertionError(f"daemon not ready in {timeout_s}s:\n{self.log_text()}")

    @property
    def socket(self) -> Path:
        return self.home / "run" / "sloth.sock"

    def log_text(self) -> str:
        try:
            return self.daemon_log.read_text(errors="replace")[-5000:]
        except OSError:
            return ""

    def kill9(self) -> None:
        assert self.daemon is not None
        self.daemon.kill()
        self.daemon.wait(10)

    def keeper_pid(self) -> int:
        """The keeper of the running daemon (it owns the job processes)."""
        return int(self.call("status")["keeper"]["pid"])

    def kill9_all(self) -> None:
        """What a reboot leaves of sloth: nothing of the daemon or its keeper
        (their job processes are left, as orphans, for the test to look at)."""
        keeper = psutil.Process(self.keeper_pid())
        self.kill9()
        keeper.kill()
        self.wait_for(lambda: not alive(keeper.pid), timeout_s=10, what="the keeper gone")

    def stop(self, sig: int = signal.SIGTERM, timeout_s: float = 30) -> int:
        assert self.daemon is not None
        self.daemon.send_signal(sig)
        return self.daemon.wait(timeout_s)

    # ------------------------------------------------------------------ cli
    def cli(self, *args: str, input: str | None = None, check: bool = False,
            timeout_s: float = 60, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
        p = subprocess.run(
            [sys.executable, "-m", "sloth_daemon", *args], env=self.env, input=input,
            capture_output=True, text=True, timeout=timeout_s, cwd=str(cwd or self.home),
        )
        if check and p.returncode != 0:
            raise AssertionError(f"sloth {' '.join(args)} -> {p.returncode}\n{p.stdout}\n{p.stderr}")
        return p

    def cli_json(self, *args: str, **kw: Any) -> Any:
        """Run `sloth ARGS --json` and parse stdout; --json goes before a `--`
        (after it, it would be part of the job's command)."""
        if "--" in args:
            i = args.index("--")
            args = args[:i] + ("--json",) + args[i:]
        else:
            args += ("--json",)
        return json.loads(self.cli(*args, check=True, **kw).stdout)

    def call(self, op: str, **args: Any) -> Any:
        with Client(self.socket, timeout_s=30) as c:
            return c.call(op, **args)

    def add(self, *cmd: str, **spec: Any) -> int:
        return self.add_many([{"command": list(cmd), **spec}])[0]

    def add_many(self, jobs: list[dict[str, Any]]) -> list[int]:
        """One request, as `sloth add` sends it: this harness's env and home as cwd."""
        common = {"env": dict(self.env), "cwd": str(self.home)}
        return self.call("add", jobs=jobs, common=common)["ids"]

    def job(self, job_id: int) -> dict[str, Any]:
        return self.call("show", id=job_id)["job"]

    def events(self, job_id: int) -> list[dict[str, Any]]:
        return self.call("show", id=job_id)["events"]

    def wait_for(self, pred: Callable[[], Any], timeout_s: float = 30, what: str = "condition") -> Any:
        """Poll until ``pred()`` is truthy. A bound on waiting, not a timing assertion."""
        deadline = time.monotonic() + timeout_s
        last_exc: Exception | None = None
        while time.monotonic() < deadline:
            try:
                v = pred()
                if v:
                    return v
            except Exception as e:  # daemon restarting etc.
                last_exc = e
            time.sleep(0.05)
        raise AssertionError(f"timed out waiting for {what} (last error: {last_exc})\n{self.log_text()}")

    def wait_state(self, job_id: int, *states: str, timeout_s: float = 30) -> dict[str, Any]:
        return self.wait_for(lambda: (j := self.job(job_id))["state"] in states and j,
                             timeout_s, f"job {job_id} in {states}")

    # -------------------------------------------------------------- cleanup
    def our_processes(self) -> list[psutil.Process]:
        return processes_with_env("SLOTH_HOME", str(self.home))

    def reap(self) -> None:
        procs = self.our_processes()
        for p in self.spawned:
            if p.poll() is None:
                try:
                    procs.append(psutil.Process(p.pid))
                except psutil.Error:
                    pass
        kill_and_wait(procs, self.spawned)


def on_one_queue(make: Callable[[str, str], "Harness"], url: str, configs: dict[str, str],
                 **start: Any) -> list["Harness"]:
    """A daemon per host (``configs``: host name -> its config.toml, ``host``
    set for it), the daemon and its CLI both on the PostgreSQL queue at
    ``url``, each started (``start``: Harness.start's options)."""
    made = [make(f'host = "{name}"\n{config}', name) for name, config in configs.items()]
    for m in made:
        m.daemon_env["SLOTH_QUEUE_URL"] = m.env["SLOTH_QUEUE_URL"] = url
        m.start(**start)
    return made


def kill_and_wait(procs: list[psutil.Process], popens: list[subprocess.Popen[bytes]]) -> None:
    """SIGKILL every process, wait for them (5 s at most), and reap the ones we started.

    Dead means exited or a zombie (it runs no more code): a keeper or a job
    is an orphan, reaped by init, which here (a VM's init) takes ~1.3 s to
    do it; psutil.wait_procs would wait for that, at every test's teardown."""
    for p in procs:
        try:
            p.kill()
        except psutil.Error:
            pass
    wait_gone(procs, 5)
    for pop in popens:
        try:
            pop.wait(5)
        except subprocess.TimeoutExpired:
            pass

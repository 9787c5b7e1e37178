"""Run a real keeper (``python -m sloth_daemon.keeper``, keeper/__main__.py) in a short temporary
folder and talk to it over its real socket, for tests and measuring scripts.

Every process a rig starts carries ``SLOTH_KEEPER_TEST=<its folder>`` in its
environment (the keeper, and every job through the spawn helper), so
``reap()`` finds and kills all of them, also after a failure; a test that
makes a process without it (``env -i``) records the pid in ``rig.extra_pids``.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import psutil

from sloth_daemon.paths import Paths
from tests.support.harness import alive, kill_and_wait, processes_with_env

MARK = "SLOTH_KEEPER_TEST"


def wait_for(pred: Callable[[], Any], timeout_s: float = 20, what: str = "condition", step_s: float = 0.01) -> Any:
    """Poll until ``pred()`` is truthy: a bound on waiting, never a timing assertion."""
    deadline = time.monotonic() + timeout_s
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        time.sleep(step_s)


class Wire:
    """A plain blocking client of the keeper protocol. Events that arrive
    while waiting for a response are kept in ``events`` for ``event()``."""

    def __init__(self, path: Path, timeout_s: float = 20) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout_s)
        self.sock.connect(str(path))
        self.buf = b""
        self.events: list[dict[str, Any]] = []
        self.next_id = 1

    def close(self) -> None:
        self.sock.close()

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def read_msg(self, timeout_s: float | None = None) -> dict[str, Any]:
        self.sock.settimeout(timeout_s if timeout_s is not None else 20)
        while b"\n" not in self.buf:
            chunk = self.sock.recv(1 << 20)
            if not chunk:
                raise ConnectionError("the keeper closed the connection")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return json.loads(line)

    def request(self, op: str, **args: Any) -> dict[str, Any]:
        rid = self.next_id
        self.next_id += 1
        self.send(json.dumps({"v": 1, "id": rid, "op": op, "args": args}).encode() + b"\n")
        while True:
            msg = self.read_msg()
            if "event" in msg and msg.get("id") is None:
                self.events.append(msg["event"])
            elif msg.get("id") == rid:
                return msg

    def call(self, op: str, **args: Any) -> Any:
        msg = self.request(op, **args)
        assert msg["ok"], f"{op} failed: {msg['error']}"
        return msg["result"]

    def hello(self) -> dict[str, Any]:
        return self.call("hello", role="daemon", pid=os.getpid(), name="test")

    def event(self, kind: str, key: str, timeout_s: float = 20) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        while True:
            for ev in self.events:
                if ev["kind"] == kind and ev["key"] == key:
                    self.events.remove(ev)
                    return ev
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no {kind} event for {key} within {timeout_s}s (have {self.events})")
            try:
                msg = self.read_msg(left)
            except socket.timeout:
                continue
            if "event" in msg:
                self.events.append(msg["event"])


class KeeperRig:
    def __init__(self, root: Path) -> None:
        self.root = root
        home = root / "h"
        self.paths = Paths(home, home, home / "logs", home / "run", home)
        for d in (home, self.paths.runtime_dir, self.paths.jobs_log_dir):
            d.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.stderr_path = root / "keeper-stderr.log"
        self.procs: list[subprocess.Popen[bytes]] = []
        self.wires: list[Wire] = []
        self.extra_pids: list[int] = []
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("SLOTH_")}
        self.env.update({MARK: str(root), "PYTHONUNBUFFERED": "1"})
        # The test plays the daemon, so it holds the daemon's lock as a daemon
        # does: a keeper the client starts lets only its holder attach.
        self.daemon_lock = os.open(self.paths.lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        fcntl.flock(self.daemon_lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.write(self.daemon_lock, f"{os.getpid()}\n".encode())

    # ---------------------------------------------------------------- keeper
    def argv(self, *, check_s: float = 0.2, idle_exit_s: float = 60.0) -> list[str]:
        p = self.paths
        return [sys.executable, "-m", "sloth_daemon.keeper", "--socket", str(p.keeper_socket),
                "--lock", str(p.keeper_lock), "--journal", str(p.keeper_journal),
                "--check-s", str(check_s), "--idle-exit-s", str(idle_exit_s)]

    def start(self, *, wait: bool = True, env: dict[str, str] | None = None, **kw: float) -> subprocess.Popen[bytes]:
        """Start a keeper in the foreground (our child: we see its exit code)."""
        err = open(self.stderr_path, "ab")
        proc = subprocess.Popen(self.argv(**kw), env={**self.env, **(env or {})}, stdin=subprocess.DEVNULL,
                                stdout=err, stderr=err, start_new_session=True)
        err.close()
        self.procs.append(proc)
        if wait:
            wait_for(lambda: proc.poll() is not None or self.answers(), what="the keeper to listen")
            assert proc.poll() is None, f"keeper exited {proc.returncode}:\n{self.keeper_log()}"
        return proc

    def answers(self) -> bool:
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                s.connect(str(self.paths.keeper_socket))
            return True
        except OSError:
            return False

    def keeper_log(self) -> str:
        text = ""
        for p in (self.stderr_path, self.paths.keeper_log):
            try:
                text += p.read_text(errors="replace")
            except OSError:
                pass
        return text[-8000:]

    def wire(self, hello: bool = True) -> Wire:
        w = Wire(self.paths.keeper_socket)
        self.wires.append(w)
        if hello:
            w.hello()
        return w

    # ------------------------------------------------------------------ jobs
    def job(self, key: str, *argv: str, **extra: Any) -> dict[str, Any]:
        """spawn args for ``argv``, its log jobs/KEY.log, ``extra`` on top."""
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), MARK: str(self.root), "LANG": "C.UTF-8"}
        env.update(extra.pop("env", {}))
        args = {"key": key, "job_id": 1, "attempt": 1, "token": f"tok-{key}-{self.root.name}",
                "argv": list(argv), "env": env, "cwd": str(self.root),
                "log_path": str(self.paths.jobs_log_dir / f"{key}.log"), "log_cap": 1 << 20,
                "kill_grace_s": 2.0}
        args.update(extra)
        return args

    def log_of(self, key: str) -> bytes:
        """The job's log file; b"" before its first byte (it is created then)."""
        try:
            return (self.paths.jobs_log_dir / f"{key}.log").read_bytes()
        except FileNotFoundError:
            return b""

    def keeper_pids(self) -> list[int]:
        """Every keeper of this folder, ours or detached (by its socket argument)."""
        sock = str(self.paths.keeper_socket)
        out = []
        for p in psutil.process_iter(["cmdline"]):
            if sock in (p.info["cmdline"] or []) and "sloth_daemon.keeper" in (p.info["cmdline"] or []):
                out.append(p.pid)
        return out

    # --------------------------------------------------------------- cleanup
    def reap(self) -> None:
        for w in self.wires:
            w.close()
        if self.daemon_lock is not None:
            os.close(self.daemon_lock)
            self.daemon_lock = None
        procs = processes_with_env(MARK, str(self.root))
        for pid in self.keeper_pids() + self.extra_pids:
            try:
                procs.append(psutil.Process(pid))
            except psutil.Error:
                pass
        kill_and_wait(procs, self.procs)


def make_rig() -> KeeperRig:
    # Unix socket paths are limited to ~107 bytes: keep the folder short.
    return KeeperRig(Path(tempfile.mkdtemp(prefix="slk-")))


def remove_rig(rig: KeeperRig) -> None:
    try:
        rig.reap()
    finally:
        shutil.rmtree(rig.root, ignore_errors=True)


def tree_pids_alive(pids: list[int]) -> list[int]:
    return [p for p in pids if alive(p)]


def process_state(pid: int) -> str:
    """The one-letter state from /proc (T: stopped)."""
    with open(f"/proc/{pid}/stat", "rb") as f:
        data = f.read()
    return data[data.rfind(b")") + 2:].split()[0].decode()


def frozen(pid: int) -> bool:
    """Stopped (T); or caught inside vfork(): a shell (dash starts each
    command so) whose child was stopped before it could exec waits for that
    child uninterruptibly (D) and runs no code until the child is continued,
    so its own SIGSTOP stays pending meanwhile."""
    try:
        state = process_state(pid)
        if state != "D":
            return state == "T"
        return any(process_state(c.pid) == "T" for c in psutil.Process(pid).children())
    except (OSError, psutil.Error):
        return False

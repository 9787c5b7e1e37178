"""`sloth doctor` through the real CLI: a daemon on a real Unix socket (the real
one when it can be started, else a small fake serving `status`), a real
SQLite file, fake systemctl/loginctl on PATH."""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable

import pytest

from sloth_daemon import protocol
from sloth_daemon.paths import Paths, ensure_dir, resolve
from tests.support.harness import sandbox_env

SLOTH = Path(sys.executable).with_name("sloth")
pytestmark = pytest.mark.skipif(not SLOTH.is_file(), reason="no sloth console script beside python")

FAKE_SYSTEMCTL = """#!/bin/sh
case "$*" in
  *is-enabled*) echo "${FAKE_ENABLED:-enabled}" ;;
  *is-active*) echo "${FAKE_ACTIVE:-active}" ;;
esac
exit 0
"""
FAKE_LOGINCTL = """#!/bin/sh
echo "Linger=${FAKE_LINGER:-yes}"
"""


class FakeDaemon:
    """Answers `status` (one request per connection) on the real socket path."""

    def __init__(self, p: Paths, status: Callable[[], dict[str, Any]]) -> None:
        ensure_dir(p.runtime_dir)
        self.status = status
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(str(p.socket))
        os.chmod(p.socket, 0o600)
        self.sock.listen(8)
        self.sock.settimeout(0.05)
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while not self.stopped.is_set():
            try:
                conn, _ = self.sock.accept()
            except (socket.timeout, OSError):
                continue
            with conn:
                conn.settimeout(5)
                buf = b""
                while b"\n" not in buf:
                    chunk = conn.recv(65536)
                    if not chunk:
                        break
                    buf += chunk
                if b"\n" in buf:
                    req = protocol.parse_request(buf.split(b"\n", 1)[0])
                    conn.sendall(protocol.encode(protocol.ok(req.id, self.status())))

    def close(self) -> None:
        self.stopped.set()
        self.thread.join(5)
        self.sock.close()


FAKE_INHIBIT = """#!/bin/sh
if [ -n "$FAKE_NO_LOGIND" ]; then echo "Failed to connect to bus: No such file or directory" >&2; exit 1; fi
exit 0
"""


class Box:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.env = sandbox_env(root, {"systemctl": FAKE_SYSTEMCTL, "loginctl": FAKE_LOGINCTL,
                                      "notify-send": "#!/bin/sh\nexit 0\n",
                                      # logind answers `--list` unless told not to (FAKE_NO_LOGIND)
                                      "systemd-inhibit": FAKE_INHIBIT})
        self.env["SLOTH_SERVICE_PLATFORM"] = "linux"
        self.fakes: list[FakeDaemon] = []

    @property
    def paths(self) -> Paths:
        return resolve({"SLOTH_HOME": self.env["SLOTH_HOME"]})

    def sloth(self, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(SLOTH), *args], capture_output=True, text=True, timeout=60,
                              env={**self.env, **env}, cwd=self.root)

    def doctor(self, **env: str) -> tuple[int, dict[str, dict[str, str]]]:
        cp = self.sloth("doctor", "--json", **env)
        assert cp.returncode in (0, 1), cp.stderr
        data = json.loads(cp.stdout)
        assert data["ok"] is (cp.returncode == 0)
        return cp.returncode, {c["name"]: c for c in data["checks"]}

    def install_service(self) -> None:
        cp = self.sloth("service", "install", "--now")
        assert cp.returncode == 0, cp.stderr

    def make_db(self) -> Path:
        db = self.paths.db
        ensure_dir(db.parent)
        con = sqlite3.connect(db)
        os.chmod(db, 0o600)  # as the daemon makes it
        con.execute("PRAGMA journal_mode=WAL")
        con.execute("CREATE TABLE jobs (id INTEGER PRIMARY KEY, command TEXT)")
        con.executemany("INSERT INTO jobs (command) VALUES (?)", [(f"echo {i}" * 20,) for i in range(500)])
        con.commit()
        con.close()
        return db

    def fake_daemon(self, clock: dict[str, Any] | None | Callable[[], dict[str, Any]] = None) -> FakeDaemon:
        p = self.paths

        def status() -> dict[str, Any]:
            st: dict[str, Any] = {"pid": os.getpid(), "version": "0.1.0", "uptime_s": 3.0, "counts": {},
                                  "paths": p.as_dict()}
            c = clock() if callable(clock) else clock
            if c is not None:
                st["clock"] = c
            return st

        fake = FakeDaemon(p, status)
        self.fakes.append(fake)
        return fake


@pytest.fixture
def box(tmp_path: Path):
    b = Box(tmp_path)
    yield b
    for f in b.fakes:
        f.close()


def fresh_clock() -> dict[str, Any]:
    return {"last_check_at": time.time() - 1, "check_interval_s": 5.0, "timerfd": True}


def statuses(checks: dict[str, dict[str, str]]) -> dict[str, str]:
    return {name: c["status"] for name, c in checks.items()}


# ------------------------------------------------------------------- tests
def test_everything_ok_with_a_daemon_answering_status(box):
    box.install_service()
    box.make_db()
    box.fake_daemon(fresh_clock)
    code, checks = box.doctor()
    assert statuses(checks) == {
        "service": "ok", "service binary": "ok", "daemon": "ok", "runtime dir": "ok", "data dir": "ok",
        "files": "ok", "queue": "ok", "database": "ok", "linger": "ok", "clock check": "ok", "config": "ok",
        "keep-awake": "ok", "limits": "ok",  # informational: what applies here
        "notify": "ok",
    }, checks
    assert code == 0
    assert f"pid {os.getpid()}" in checks["daemon"]["detail"]
    assert checks["service binary"]["detail"] == str(SLOTH)
    # The human view: one line per check, then a summary.
    cp = box.sloth("doctor")
    lines = cp.stdout.splitlines()
    assert cp.returncode == 0 and len(lines) == 15
    assert lines[0].startswith("ok    service ")
    assert lines[-1] == "doctor: 14 ok, 0 warn, 0 fail"


def test_nothing_installed_or_running_warns_but_passes(box):
    code, checks = box.doctor(FAKE_LINGER="no")
    assert code == 0
    st = statuses(checks)
    assert st["service"] == "warn" and "sloth service install --now" in checks["service"]["hint"]
    assert st["daemon"] == "warn" and "sloth daemon start" in checks["daemon"]["hint"]
    assert st["clock check"] == "warn"
    assert st["linger"] == "warn" and checks["linger"]["hint"].startswith("loginctl enable-linger ")
    assert st["data dir"] == "ok" and "created at first start" in checks["data dir"]["detail"]
    assert st["database"] == "ok" and st["config"] == "ok" and st["runtime dir"] == "ok"
    human = box.sloth("doctor", FAKE_LINGER="no").stdout
    assert "warn  linger          off: the service and its jobs stop when you log out; fix: loginctl enable-linger" in human


def test_broken_database_fails_with_a_hint_and_is_not_written(box):
    db = box.paths.db
    ensure_dir(db.parent)
    db.write_bytes(b"this is not sqlite at all" * 200)
    before = db.read_bytes()
    code, checks = box.doctor()
    assert code == 1
    c = checks["database"]
    assert c["status"] == "fail" and "not a SQLite database" in c["detail"]
    assert "mv " in c["hint"] and ".recover" in c["hint"]
    assert db.read_bytes() == before


def test_corrupt_pages_fail_quick_check(box):
    db = box.make_db()
    data = bytearray(db.read_bytes())
    page = 4096
    data[2 * page: 3 * page] = b"\xab" * page  # trash a b-tree page, keep the header
    db.write_bytes(bytes(data))
    code, checks = box.doctor()
    assert code == 1 and checks["database"]["status"] == "fail", checks["database"]


def test_data_dir_that_cannot_be_created_fails(box):
    blocker = box.root / "blocker"
    blocker.write_text("a regular file where a folder should be")
    code, checks = box.doctor(SLOTH_HOME=str(blocker / "sl"))
    assert code == 1
    c = checks["data dir"]
    assert c["status"] == "fail" and f"{blocker} is a file, not a folder" in c["detail"]
    assert "SLOTH_HOME" in c["hint"]
    assert checks["runtime dir"]["status"] == "ok"  # not created yet: no second failure


def test_bad_config_fails_with_the_file_named(box):
    cfg = box.paths.config_file
    cfg.parent.mkdir(parents=True)
    cfg.write_text("lease_s = \n")
    code, checks = box.doctor()
    assert code == 1
    assert checks["config"]["status"] == "fail" and str(cfg) in checks["config"]["detail"]
    cfg.write_text("no_such_setting = 1\n")
    code, checks = box.doctor()
    assert code == 1 and "unknown setting" in checks["config"]["detail"]
    assert checks["config"]["hint"]


def test_runtime_dir_and_socket_permissions(box):
    box.fake_daemon(fresh_clock)
    p = box.paths
    os.chmod(p.runtime_dir, 0o755)
    os.chmod(p.socket, 0o666)
    code, checks = box.doctor()
    assert code == 1
    c = checks["runtime dir"]
    assert c["status"] == "fail"
    assert "mode 0755 (want 0700)" in c["detail"] and "mode 0666 (want 0600)" in c["detail"]
    assert f"chmod 700 {p.runtime_dir}" in c["hint"]


def test_stale_or_missing_clock_check(box):
    box.fake_daemon({"last_check_at": time.time() - 600, "check_interval_s": 5.0})
    code, checks = box.doctor()
    assert code == 1 and checks["clock check"]["status"] == "fail"
    assert "restart the daemon" in checks["clock check"]["hint"].lower()
    box.fakes.pop().close()
    os.unlink(box.paths.socket)
    box.fake_daemon(None)  # an older daemon that does not report it
    code, checks = box.doctor()
    assert checks["clock check"]["status"] == "warn" and "unknown" in checks["clock check"]["detail"]


def test_service_problems(box):
    box.install_service()
    code, checks = box.doctor(FAKE_ENABLED="disabled", FAKE_ACTIVE="inactive")
    assert checks["service"]["status"] == "warn" and "not enabled" in checks["service"]["detail"]
    code, checks = box.doctor(FAKE_ACTIVE="failed")
    assert code == 1 and checks["service"]["status"] == "fail"
    assert "journalctl --user -u sloth.service" in checks["service"]["hint"]
    unit = box.root / "cfg" / "systemd" / "user" / "sloth.service"
    unit.write_text(unit.read_text().replace(str(SLOTH), "/gone/venv/bin/sloth"))
    code, checks = box.doctor()
    assert code == 1
    assert checks["service binary"]["status"] == "fail"
    assert "/gone/venv/bin/sloth no longer exists" in checks["service binary"]["detail"]
    assert checks["service"]["status"] == "warn"  # differs from what install writes now


def test_stale_socket_file_is_only_a_warning(box):
    p = box.paths
    ensure_dir(p.runtime_dir)
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(str(p.socket))
    os.chmod(p.socket, 0o600)
    s.close()  # bound, never listening: what a crashed daemon leaves
    code, checks = box.doctor()
    assert code == 0
    assert checks["daemon"]["status"] == "warn" and "stale socket" in checks["daemon"]["detail"]


@pytest.mark.skipif(importlib.util.find_spec("sloth_daemon.daemon.main") is None, reason="the daemon is not written yet")
def test_against_the_real_daemon(box):
    cp = box.sloth("daemon", "start")
    if cp.returncode != 0:
        pytest.skip(f"the real daemon did not start: {cp.stderr.strip()[-300:]}")
    pid = None
    try:
        pid = json.loads(box.sloth("daemon", "status", "--json").stdout)["pid"]
        code, checks = box.doctor()
        st = statuses(checks)
        assert st["daemon"] == "ok", checks["daemon"]
        assert f"pid {pid}" in checks["daemon"]["detail"]
        for name in ("runtime dir", "data dir", "database", "config"):
            assert st[name] == "ok", checks[name]
        assert st["clock check"] in ("ok", "warn"), checks["clock check"]
    finally:
        if box.sloth("daemon", "stop", "--timeout", "20s").returncode != 0 and pid:
            try:
                os.kill(pid, 15)
            except ProcessLookupError:
                pass


def test_doctor_says_what_applies_keep_awake_and_limits_here(box):
    """issue 24: which mechanism applies each limit, and what --keep-awake runs (or why it cannot)."""
    from sloth_daemon.keeper import resource_limits

    code, checks = box.doctor()
    found = resource_limits.probe()
    assert f"mem: {found['mem']}" in checks["limits"]["detail"] and "nice: setpriority" in checks["limits"]["detail"]
    if found["cpus"] is None:
        assert "not here (refused at add): cpus" in checks["limits"]["detail"]
    assert checks["keep-awake"]["status"] == "ok" and "systemd-inhibit" in checks["keep-awake"]["detail"]


def test_keep_awake_that_cannot_be_had_is_a_warning_with_a_fix_that_fits(box):
    """issue 30: doctor said keep-awake ok where `--keep-awake` could not be
    held (no logind on a system bus); it warns, saying add refuses it."""
    _, checks = box.doctor(FAKE_NO_LOGIND="1")
    c = checks["keep-awake"]
    assert c["status"] == "warn" and "refused at add" in c["detail"] and "Failed to connect to bus" in c["detail"], c
    assert "logind" in c["hint"] and "leave --keep-awake out" in c["hint"], c
    (box.root / "bin" / "systemd-inhibit").unlink()
    _, checks = box.doctor(PATH=str(box.root / "bin"))
    c = checks["keep-awake"]
    assert c["status"] == "warn" and "not installed" in c["detail"] and "Install" in c["hint"], c


def test_a_notification_whose_tool_is_missing_is_a_warning_that_says_so(box):
    """Issue 22, item 3: `notify = ["failed"]` (the default) and no notify-send:
    said, with the fix; notify = [] is fine; with the tool there, ok."""
    only_ours = {"PATH": str(box.root / "bin")}
    (box.root / "bin" / "notify-send").unlink()
    _, checks = box.doctor(**only_ours)
    c = checks["notify"]
    assert c["status"] == "warn" and "notify-send is not on PATH" in c["detail"], c
    assert "libnotify" in c["hint"] and "notify = []" in c["hint"]
    cfg = Path(box.env["SLOTH_HOME"]) / "config.toml"
    cfg.parent.mkdir(parents=True, exist_ok=True)
    cfg.write_text("notify = []\n")
    _, checks = box.doctor(**only_ours)
    assert checks["notify"]["status"] == "ok" and "off" in checks["notify"]["detail"]

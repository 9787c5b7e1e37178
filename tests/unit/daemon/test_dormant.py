"""The dormant process (daemon/dormant.py), run as the daemon runs it
(``python -I -S dormant.py``) with a real listening socket, real signals and
files, and a real NOTIFY_SOCKET; the "daemon" it execs is a small Python
program that reports what it was handed."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sloth_daemon.daemon import dormant
from sloth_daemon.daemon.renewal import Dormancy

SCRIPT = Path(dormant.__file__)
# What the exec'd "daemon" reports: why it was woken, the signals pending for
# it, whether the socket handed over still has the connection waiting, its pid.
REPORT = r"""
import json, os, signal, socket, sys
fd = int(sys.argv[1])
s = socket.socket(fileno=fd)
s.settimeout(0.5)
try:
    c, _ = s.accept(); waiting = True; c.close()
except OSError:
    waiting = False
print(json.dumps({"woke": os.environ.get("SLOTH_DORMANT_WOKE"), "pid": os.getpid(), "waiting": waiting,
                  "pending": sorted(int(x) for x in signal.sigpending())}))
"""


@pytest.fixture
def listener(tmp_path):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(str(tmp_path / "s.sock"))
    s.listen(8)
    s.set_inheritable(True)
    yield s
    s.close()


def start(listener: socket.socket, *extra: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    """The dormant process with the stop and reload signals blocked, as a renewal's exec leaves them."""
    fd = listener.fileno()
    argv = [sys.executable, "-I", "-S", str(SCRIPT), "--listen", str(fd), "--look-s", "0.1", *extra,
            "--", sys.executable, "-c", REPORT, str(fd)]
    return subprocess.Popen(argv, pass_fds=[fd], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env, preexec_fn=lambda: signal.pthread_sigmask(signal.SIG_BLOCK, dormant.SIGNALS))


def report(p: subprocess.Popen[str]) -> dict:
    out, err = p.communicate(timeout=20)
    assert p.returncode == 0, err
    return json.loads(out)


def dormant_yet(p: subprocess.Popen[str]) -> bool:
    """Its handlers in place (the signal mask unblocked)."""
    try:
        status = Path(f"/proc/{p.pid}/status").read_text()
    except OSError:
        return False
    blocked = int(next(line.split()[1] for line in status.splitlines() if line.startswith("SigBlk:")), 16)
    return "dormant.py" in Path(f"/proc/{p.pid}/cmdline").read_text(errors="replace") and not blocked & (
        1 << (signal.SIGTERM - 1))


def wait_dormant(p: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 10
    while not dormant_yet(p):
        assert time.monotonic() < deadline and p.poll() is None, p.stderr.read() if p.stderr else ""
        time.sleep(0.01)


def test_a_connection_wakes_it_and_waits_for_the_daemon_in_the_same_process(listener, tmp_path):
    p = start(listener)
    wait_dormant(p)
    time.sleep(0.3)
    assert p.poll() is None  # nothing came: it stays
    c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    c.connect(str(tmp_path / "s.sock"))
    r = report(p)
    c.close()
    assert r["woke"] == "a connection" and r["waiting"] and r["pid"] == p.pid


@pytest.mark.parametrize("sig", dormant.SIGNALS)
def test_a_signal_sent_before_and_after_it_listens_is_left_pending_for_the_daemon(listener, sig):
    p = start(listener)
    p.send_signal(sig)  # blocked still (as across the renewal's exec): heard once it unblocks
    r = report(p)
    assert r["woke"] == f"signal {sig.name}" and r["pending"] == [sig]
    q = start(listener)
    wait_dormant(q)
    q.send_signal(sig)
    assert report(q)["pending"] == [sig]


def test_the_wake_time_wakes_it_and_a_past_one_at_once(listener):
    t0 = time.time()
    r = report(start(listener, "--wake-at", repr(t0 + 0.6)))
    assert r["woke"].startswith("the wake time") and time.time() - t0 >= 0.6
    assert report(start(listener, "--wake-at", repr(t0 - 5)))["woke"].startswith("the wake time")


def test_a_write_to_a_watched_file_wakes_it_an_empty_new_one_does_not(listener, tmp_path):
    db, wal = tmp_path / "q.db", tmp_path / "q.db-wal"
    db.write_bytes(b"x" * 100)
    seen = [dormant.seen_arg(s) for s in dormant.stamps([str(db), str(wal)])]
    p = start(listener, "--watch", str(db), "--seen", seen[0], "--watch", str(wal), "--seen", seen[1])
    wait_dormant(p)
    wal.write_bytes(b"")  # a reader's empty WAL: no work
    time.sleep(0.4)
    assert p.poll() is None
    wal.write_bytes(b"frames")
    assert report(p)["woke"] == "the queue's files changed (another process wrote them)"


def test_a_write_before_it_started_is_seen_against_what_the_daemon_left(listener, tmp_path):
    db = tmp_path / "q.db"
    db.write_bytes(b"x" * 100)
    argv = Dormancy(None, 0.0, 0.1, (str(db),)).argv(listener.fileno(), ["daemon"])
    seen = argv[argv.index("--seen") + 1]
    with open(db, "ab") as f:
        f.write(b"y")  # between the daemon's exit and the dormant process's first look
    p = start(listener, "--watch", str(db), "--seen", seen)
    assert report(p)["woke"].startswith("the queue's files changed")


def test_it_pings_systemds_watchdog_as_the_daemon_does(listener, tmp_path):
    notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    notify.bind(str(tmp_path / "notify"))
    notify.settimeout(5)
    env = dict(os.environ, NOTIFY_SOCKET=str(tmp_path / "notify"), WATCHDOG_USEC="200000")
    p = start(listener, env=env)
    try:
        got = [notify.recv(64) for _ in range(3)]
        assert got == [b"WATCHDOG=1"] * 3
    finally:
        p.send_signal(signal.SIGTERM)
        report(p)
        notify.close()
    other = dict(env, WATCHDOG_PID="1")  # another process's watchdog: not ours to ping
    q = start(listener, env=other)
    notify2 = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    (tmp_path / "notify").unlink()
    notify2.bind(str(tmp_path / "notify"))
    notify2.settimeout(0.6)
    with pytest.raises(socket.timeout):
        notify2.recv(64)
    q.send_signal(signal.SIGTERM)
    report(q)
    notify2.close()


@pytest.mark.parametrize("args", [[], ["--listen", "x", "--", "d"], ["--bogus", "1", "--", "d"], ["--listen", "3"],
                                  ["--listen", "3", "--seen", "1,2,3", "--", "d"],
                                  ["--listen", "3", "--zone-seen", "1,2,3", "--", "d"],
                                  ["--listen", "3", "--watch", "f", "--seen", "1,x", "--", "d"]])
def test_bad_arguments_end_it_with_a_message(args):
    p = subprocess.run([sys.executable, "-I", "-S", str(SCRIPT), *args], capture_output=True, text=True, timeout=20)
    assert p.returncode == 2 and "sloth: dormant: bad arguments" in p.stderr


def test_an_exec_that_fails_ends_it_saying_why(listener, tmp_path):
    fd = listener.fileno()
    p = subprocess.run([sys.executable, "-I", "-S", str(SCRIPT), "--listen", str(fd), "--wake-at", "0", "--",
                        str(tmp_path / "no-such-python")], pass_fds=[fd], capture_output=True, text=True, timeout=20)
    assert p.returncode == 1 and "sloth: dormant: cannot exec" in p.stderr


def test_it_loads_no_sloth_module_and_no_site(listener):
    """What makes it small: every module it imports, as -X importtime lists them, up to its exec."""
    fd = listener.fileno()
    p = subprocess.run([sys.executable, "-I", "-S", "-X", "importtime", str(SCRIPT), "--listen", str(fd),
                        "--wake-at", "0", "--", "/bin/true"], pass_fds=[fd], capture_output=True, text=True,
                       timeout=20)
    assert p.returncode == 0, p.stderr
    imported = {line.rsplit("|", 1)[-1].strip() for line in p.stderr.splitlines() if line.startswith("import time:")}
    assert imported and not {m for m in imported if m.startswith(("sloth", "site", "asyncio", "json", "logging"))}


def test_no_module_beside_it_shadows_the_standard_library():
    """Run by path, its folder comes first on sys.path under Python 3.10
    (3.11's -I leaves it out): a daemon/enum.py would be imported as enum."""
    beside = {p.stem for p in SCRIPT.parent.iterdir() if p.suffix == ".py" or (p / "__init__.py").exists()}
    assert not beside & set(sys.stdlib_module_names)


def test_the_wall_clock_set_back_wakes_it(listener, fakeclock):
    """A clock put right after it was set ahead: the daemon brings its
    schedules back to it (Scheduler.carry); the wake time, on the wrong
    date, would not come."""
    p = start(listener, "--wake-at", repr(time.time() + 7200), env=dict(os.environ, **fakeclock.env()))
    wait_dormant(p)
    fakeclock.jump(-3600)
    assert report(p)["woke"] == "the wall clock was set back"


def test_a_sleep_of_the_machine_wakes_it_short_of_the_wake_time(listener, fakeclock):
    """The shim moves the boot time and the wall clock, not the monotonic
    clock: a resume. The daemon records the sleep (ClockWatch.carry)."""
    p = start(listener, "--wake-at", repr(time.time() + 7200), env=dict(os.environ, **fakeclock.env()))
    wait_dormant(p)
    fakeclock.jump(600)
    assert report(p)["woke"] == "the machine slept"


def test_the_local_zones_file_replaced_wakes_it(listener, tmp_path):
    zone = tmp_path / "localtime"
    zone.write_bytes(b"TZif UTC")
    argv = Dormancy(None, 0.0, 0.1, (), zone=str(zone)).argv(listener.fileno(), ["daemon"])
    p = start(listener, *argv[argv.index("--zone"):argv.index("--")])
    wait_dormant(p)
    time.sleep(0.3)
    assert p.poll() is None
    (tmp_path / "new").write_bytes(b"TZif Asia/Tokyo")
    os.replace(tmp_path / "new", zone)  # as timedatectl set-timezone: another file there
    assert report(p)["woke"] == "the local time zone changed"


def test_a_sleep_before_it_started_is_seen_against_the_clocks_the_daemon_read(listener, fakeclock):
    """The resume between the daemon's last clock check and this process's
    first look: against its own first reading it saw nothing."""
    read = [time.time(), time.monotonic(), time.clock_gettime(time.CLOCK_BOOTTIME)]  # the daemon's (no shim)
    argv = Dormancy(None, 0.0, 0.1, ()).argv(listener.fileno(), ["daemon"], read)
    fakeclock.jump(600)
    p = start(listener, *argv[argv.index("--clocks"):argv.index("--")], "--wake-at", repr(time.time() + 7200),
              env=dict(os.environ, **fakeclock.env()))
    assert report(p)["woke"] == "the machine slept"


def test_a_listening_socket_at_a_high_descriptor_is_watched(listener, tmp_path):
    """select() cannot take a descriptor of 1024 or more (ValueError: it
    ended the holder); poll() can. A daemon with many connections and files
    open when it renewed could hand such a one over."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 1100:
        pytest.skip(f"RLIMIT_NOFILE hard limit {hard}")
    high = 1050
    os.dup2(listener.fileno(), high)
    try:
        argv = [sys.executable, "-I", "-S", str(SCRIPT), "--listen", str(high), "--look-s", "0.1",
                "--", sys.executable, "-c", REPORT, str(high)]
        p = subprocess.Popen(argv, pass_fds=[high], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 2048), hard)))
        wait_dormant(p)
        c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        c.connect(str(tmp_path / "s.sock"))
        r = report(p)
        c.close()
        assert r["woke"] == "a connection" and r["waiting"]
    finally:
        os.close(high)

"""The LD_PRELOAD fake-suspend clock (tests/support/fakeclock.*).

Children are real interpreters (sys.executable) running with the shim.  Clock
offsets are measured as ``(clock - CLOCK_MONOTONIC)`` in the child minus the
same difference in this (un-shimmed) process: both processes read the same
system-wide kernel clocks, so this is independent of scheduling delays.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time

import pytest

from tests.support import fakeclock as fc_mod
from tests.support.fakeclock import CompilerNotFound, FakeClock, build

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux LD_PRELOAD shim")

# Shared by the children and (via exec) by this process.
PRELUDE = r'''
import ctypes, datetime, json, os, sys, time

CLOCKS = {
    "realtime": 0, "monotonic": 1, "monotonic_raw": 4, "realtime_coarse": 5,
    "monotonic_coarse": 6, "boottime": 7, "realtime_alarm": 8,
    "boottime_alarm": 9, "tai": 11,
}

class _timeval(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_usec", ctypes.c_long)]

class _timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]

libc = ctypes.CDLL(None, use_errno=True)
libc.time.restype = ctypes.c_long
libc.time.argtypes = [ctypes.c_void_p]

def read():
    """One sample of every clock, as float seconds (None: clock unsupported)."""
    r = {}
    mono = time.clock_gettime(1)
    for name, cid in CLOCKS.items():
        try:
            r[name] = time.clock_gettime(cid)
        except OSError:
            r[name] = None
    r["monotonic"] = mono
    r["time.time"] = time.time()
    r["datetime.now"] = datetime.datetime.now(datetime.timezone.utc).timestamp()
    tv = _timeval()
    assert libc.gettimeofday(ctypes.byref(tv), None) == 0
    r["gettimeofday"] = tv.tv_sec + tv.tv_usec / 1e6
    r["time()"] = float(libc.time(None))
    ts = _timespec()
    assert libc.timespec_get(ctypes.byref(ts), 1) == 1
    r["timespec_get"] = ts.tv_sec + ts.tv_nsec / 1e9
    r["cputime"] = time.process_time()
    return r

def emit(obj):
    print(json.dumps(obj), flush=True)
'''

_ns: dict = {}
exec(PRELUDE, _ns)
parent_read = _ns["read"]

SHIFTED = ["realtime", "realtime_coarse", "boottime", "realtime_alarm", "boottime_alarm", "tai",
           "time.time", "datetime.now", "gettimeofday", "time()", "timespec_get"]
UNSHIFTED = ["monotonic_raw", "monotonic_coarse"]
# time() has 1 s granularity; everything else is read within microseconds.
TOLERANCE = {"time()": 1.01}
DEFAULT_TOL = 0.25


def offsets(child: dict, parent: dict) -> dict[str, float]:
    """Per clock: how far the child's clock is ahead of the real one."""
    out = {}
    for name in SHIFTED + UNSHIFTED:
        if child.get(name) is None or parent.get(name) is None:
            continue  # e.g. *_ALARM clocks need an RTC wakeup device
        out[name] = (child[name] - child["monotonic"]) - (parent[name] - parent["monotonic"])
    return out


def assert_offsets(child: dict, parent: dict, expected: float) -> None:
    got = offsets(child, parent)
    assert {"realtime", "boottime", "time.time", "gettimeofday", "time()", "monotonic_raw"} <= set(got)
    for name, value in got.items():
        want = expected if name in SHIFTED else 0.0
        tol = TOLERANCE.get(name, DEFAULT_TOL)
        assert abs(value - want) <= tol, f"{name}: offset {value:.6f}, expected {want} (all: {got})"


def child_env(fc: FakeClock, **extra: str) -> dict[str, str]:
    env = {**os.environ, **fc.env(), **extra}
    return env


def run_child(body: str, env: dict[str, str], *argv: str) -> list:
    """Run PRELUDE+body in a child (``argv`` in its sys.argv[1:]); return
    the JSON objects it printed."""
    res = subprocess.run(
        [sys.executable, "-c", PRELUDE + textwrap.dedent(body), *argv],
        env=env, capture_output=True, text=True, timeout=60,
    )
    assert res.returncode == 0, res.stderr
    return [json.loads(line) for line in res.stdout.splitlines() if line.strip()]


# --------------------------------------------------------------------------
# helper module


def test_build_is_cached_by_source_hash(tmp_path):
    so = build(tmp_path)
    assert so.is_file() and so.name.startswith("fakeclock-") and so.suffix == ".so"
    mtime = so.stat().st_mtime_ns
    assert build(tmp_path) == so
    assert so.stat().st_mtime_ns == mtime
    assert [p.name for p in tmp_path.iterdir()] == [so.name]  # no temp leftovers


def test_build_without_compiler_is_a_clear_runtime_error(tmp_path, monkeypatch):
    monkeypatch.setenv("CC", "/nonexistent/bin/cc")
    with pytest.raises(CompilerNotFound, match="C compiler|CC") as info:
        build(tmp_path / "empty")
    assert isinstance(info.value, RuntimeError)


def test_fakeclock_api(fakeclock, tmp_path):
    env = fakeclock.env()
    assert set(env) == {"LD_PRELOAD", fc_mod.ENV_VAR}
    assert os.path.isabs(env["LD_PRELOAD"]) and os.path.isfile(env["LD_PRELOAD"])
    assert os.path.isabs(env[fc_mod.ENV_VAR])
    assert fakeclock.offset == 0.0
    assert float(fakeclock.offset_file.read_text()) == 0.0
    fakeclock.jump(3600)
    fakeclock.jump(0.5)
    assert fakeclock.offset == 3600.5
    assert float(fakeclock.offset_file.read_text()) == 3600.5
    assert sorted(p.name for p in fakeclock.offset_file.parent.iterdir()) == ["offset"]
    with pytest.raises(ValueError):
        FakeClock(tmp_path / "a:b.so", tmp_path / "off")


# --------------------------------------------------------------------------
# the shim


def test_zero_offset_matches_real_time(fakeclock):
    before = parent_read()
    (child,) = run_child("emit(read())", child_env(fakeclock))
    after = parent_read()
    assert_offsets(child, before, 0.0)
    assert before["time.time"] - 1 <= child["time.time"] <= after["time.time"] + 1
    assert before["monotonic"] <= child["monotonic"] <= after["monotonic"]


def test_jump_mid_run_moves_wall_and_boot_clocks_not_monotonic(fakeclock):
    body = """
        first = read()
        emit(first)
        assert sys.stdin.readline() == "jumped\\n"
        base = first["realtime"] - first["monotonic"]
        deadline = time.monotonic() + 20
        while True:  # the shim re-checks the offset file every 50 ms
            second = read()
            if second["realtime"] - second["monotonic"] - base > 1000 or time.monotonic() > deadline:
                break
            time.sleep(0.002)
        emit(second)
    """
    proc = subprocess.Popen(
        [sys.executable, "-c", PRELUDE + textwrap.dedent(body)],
        env=child_env(fakeclock), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True,
    )
    try:
        first = json.loads(proc.stdout.readline())
        parent_mid = parent_read()
        fakeclock.jump(3600)
        proc.stdin.write("jumped\n")
        proc.stdin.flush()
        second = json.loads(proc.stdout.readline())
        parent_end = parent_read()
        assert proc.wait(timeout=30) == 0, proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        for f in (proc.stdin, proc.stdout, proc.stderr):
            f.close()

    # Inside the one child: wall and boot clocks jumped by ~3600 s, monotonic did not.
    mono_delta = second["monotonic"] - first["monotonic"]
    assert 0 < mono_delta < 20
    for name in ("realtime", "boottime", "time.time", "gettimeofday", "timespec_get", "datetime.now"):
        extra = (second[name] - first[name]) - mono_delta
        assert 3599 < extra < 3601, (name, extra)
    assert 3598 < (second["time()"] - first["time()"]) - mono_delta < 3602
    for name in ("monotonic_raw", "monotonic_coarse"):
        assert abs((second[name] - first[name]) - mono_delta) < DEFAULT_TOL, name
    assert second["cputime"] - first["cputime"] < 20

    # The child's monotonic clock is the real one: ordered with the parent's reads.
    assert first["monotonic"] <= parent_mid["monotonic"] <= second["monotonic"] <= parent_end["monotonic"]
    # Against the parent's real clocks: 0 before the jump, 3600 after.
    assert_offsets(first, parent_mid, 0.0)
    assert_offsets(second, parent_end, 3600.0)
    assert 3599 < second["time.time"] - parent_end["time.time"] < 3601


def test_sleep_threading_and_asyncio_timers_work_under_offset(fakeclock):
    fakeclock.jump(3600)
    body = """
        import asyncio, queue, threading
        res = {"clocks": read()}
        def timed(fn):
            t0, w0 = time.monotonic(), time.time()
            out = fn()
            return [time.monotonic() - t0, time.time() - w0, out]
        res["sleep"] = timed(lambda: time.sleep(0.01))
        res["event"] = timed(lambda: threading.Event().wait(0.02))
        lock = threading.Lock()
        lock.acquire()
        res["lock"] = timed(lambda: lock.acquire(timeout=0.02))
        def get_empty():
            try:
                queue.Queue().get(timeout=0.02)
            except queue.Empty:
                return "empty"
        res["queue"] = timed(get_empty)
        def timer():
            fired = threading.Event()
            threading.Timer(0.02, fired.set).start()
            return fired.wait(30)
        res["timer"] = timed(timer)
        async def main():
            loop = asyncio.get_running_loop()
            for _ in range(3):
                await asyncio.sleep(0.05)
            fut = loop.create_future()
            loop.call_later(0.02, fut.set_result, "called")
            out = [await fut]
            try:
                await asyncio.wait_for(asyncio.sleep(30), 0.02)
            except asyncio.TimeoutError:
                out.append("timeout")
            return out
        res["asyncio"] = timed(lambda: asyncio.run(main()))
        emit(res)
    """
    before = parent_read()
    (res,) = run_child(body, child_env(fakeclock))
    assert_offsets(res["clocks"], before, 3600.0)
    expected = {
        "sleep": (0.01, None), "event": (0.02, False), "lock": (0.02, False),
        "queue": (0.02, "empty"), "timer": (0.02, True), "asyncio": (0.19, ["called", "timeout"]),
    }
    for name, (nominal, result) in expected.items():
        mono, wall, out = res[name]
        assert out == result, name
        assert nominal * 0.9 <= mono < nominal + 10, (name, mono)
        assert abs(wall - mono) < 1, (name, wall, mono)  # no further jump while waiting


def test_children_inherit_fake_time_unless_preload_is_stripped(fakeclock):
    fakeclock.jump(3600)
    body = """
        import subprocess
        cmd = [sys.executable, "-c", PRELUDE + "emit(read())"]
        stripped = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
        out = {"self": read()}
        for name, env in (("stripped", stripped), ("inherited", dict(os.environ))):
            res = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60, check=True)
            out[name] = json.loads(res.stdout)
        emit(out)
    """
    before = parent_read()
    (out,) = run_child(f"PRELUDE = {PRELUDE!r}\n" + textwrap.dedent(body), child_env(fakeclock))
    assert_offsets(out["self"], before, 3600.0)
    assert_offsets(out["inherited"], before, 3600.0)
    assert_offsets(out["stripped"], before, 0.0)
    assert abs(out["stripped"]["time.time"] - time.time()) < 60


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("3600", 3600.0),
        ("1.5\n", 1.5),
        ("  -2.25 \n", -2.25),
        ("+7200.000000000", 7200.0),
        ("1e3", 1000.0),
        ("2.5E+2\n", 250.0),
        ("5.", 5.0),
        (".5", 0.5),
        ("0000000000000000000000000042", 42.0),
        ("0", 0.0),
        ("", 0.0),
        ("garbage", 0.0),
        ("12abc", 0.0),
        ("1 2", 0.0),
        ("nan", 0.0),
        ("inf", 0.0),
        ("1e", 0.0),
        ("1e99", 0.0),  # does not fit in int64 nanoseconds
        ("9" * 200, 0.0),  # longer than the shim reads
    ],
)
def test_offset_file_formats(fakeclock, content, expected):
    fakeclock.offset_file.write_text(content)
    before = parent_read()
    (child,) = run_child("emit(read())", child_env(fakeclock))
    assert_offsets(child, before, expected)


@pytest.mark.parametrize("case", ["unset_env", "empty_env", "missing_file", "directory"])
def test_no_usable_offset_means_real_time(fakeclock, tmp_path, case):
    fakeclock.jump(3600)  # must not leak through in any of these cases
    env = child_env(fakeclock)
    if case == "unset_env":
        del env[fc_mod.ENV_VAR]
    elif case == "empty_env":
        env[fc_mod.ENV_VAR] = ""
    elif case == "missing_file":
        env[fc_mod.ENV_VAR] = str(tmp_path / "does-not-exist")
    else:
        env[fc_mod.ENV_VAR] = str(tmp_path)
    before = parent_read()
    (child,) = run_child("emit(read())", env)
    assert_offsets(child, before, 0.0)


def test_errno_is_preserved_when_refresh_fails(fakeclock, tmp_path):
    # Offset file missing: each refresh's stat() fails with ENOENT, which the
    # shim must not leak into errno of a successful clock call.
    body = """
        ts, tv = _timespec(), _timeval()
        calls = {
            "clock_gettime": lambda: libc.clock_gettime(0, ctypes.byref(ts)),
            "gettimeofday": lambda: libc.gettimeofday(ctypes.byref(tv), None),
            "time": lambda: 0 if libc.time(None) > 0 else -1,
        }
        out = {}
        for name, call in calls.items():
            time.sleep(0.06)  # let the 50 ms throttle expire: this call refreshes
            ctypes.set_errno(0)
            rc = call()
            out[name] = [rc, ctypes.get_errno()]
        emit(out)
    """
    env = child_env(fakeclock, **{fc_mod.ENV_VAR: str(tmp_path / "missing")})
    (out,) = run_child(body, env)
    assert out == {"clock_gettime": [0, 0], "gettimeofday": [0, 0], "time": [0, 0]}


def test_threads_see_consistent_offsets_while_it_changes(fakeclock):
    # Worker threads call clock_gettime through ctypes (which releases the GIL,
    # so they really run concurrently in the shim) while the main thread keeps
    # flipping the offset between 0 and 3600.
    body = """
        import threading
        base = float(sys.argv[1])
        path = os.environ["SLOTH_FAKECLOCK_FILE"]
        stop = threading.Event()
        bad, seen = [], set()
        def worker():
            rt, mono = _timespec(), _timespec()
            while not stop.is_set():
                for _ in range(200):
                    libc.clock_gettime(1, ctypes.byref(mono))
                    libc.clock_gettime(0, ctypes.byref(rt))
                    skew = (rt.tv_sec - mono.tv_sec) + (rt.tv_nsec - mono.tv_nsec) / 1e9 - base
                    near = min((0, 3600), key=lambda v: abs(skew - v))
                    seen.add(near)
                    if abs(skew - near) > 0.5:
                        bad.append(skew)
        threads = [threading.Thread(target=worker) for _ in range(6)]
        for t in threads:
            t.start()
        for i in range(12):
            with open(path + ".tmp", "w") as f:
                f.write("3600" if i % 2 == 0 else "0")
            os.replace(path + ".tmp", path)
            time.sleep(0.06)
        stop.set()
        for t in threads:
            t.join()
        emit({"bad": bad[:10], "seen": sorted(seen)})
    """
    real = parent_read()
    out = run_child(body, child_env(fakeclock), repr(real["realtime"] - real["monotonic"]))
    assert out == [{"bad": [], "seen": [0, 3600]}]

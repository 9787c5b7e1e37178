"""lockholder.holds: which process holds an flock, as the kernel says (and
where /proc/locks cannot be read, as the lock and its file say)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from sloth_daemon.keeper import lockholder

HOLD = """if 1:
    import fcntl, os, sys
    fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    os.write(fd, (sys.argv[2] if len(sys.argv) > 2 else str(os.getpid())).encode() + b"\\n")
    print("held", flush=True)
    sys.stdin.read()
"""


@pytest.fixture(params=["kernel", "file"])
def where(request, monkeypatch, tmp_path):
    if request.param == "file":
        monkeypatch.setattr(lockholder, "PROC_LOCKS", str(tmp_path / "no-proc-locks"))
    elif not os.path.exists(lockholder.PROC_LOCKS):
        pytest.skip("no /proc/locks here")
    return request.param


def holder(path, *claim: str) -> subprocess.Popen[str]:
    p = subprocess.Popen([sys.executable, "-c", HOLD, str(path), *claim], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True)
    assert p.stdout is not None and p.stdout.readline() == "held\n"
    return p


def test_the_holder_holds_and_no_one_else(tmp_path, where):
    lock = tmp_path / "daemon.lock"
    assert not lockholder.holds(os.getpid(), lock)  # no file: nobody
    p = holder(lock)
    try:
        assert lockholder.holds(p.pid, lock)
        assert not lockholder.holds(os.getpid(), lock)
    finally:
        p.communicate("")
    assert not lockholder.holds(p.pid, lock)  # it exited: the kernel dropped its lock


def test_a_file_that_names_another_pid_proves_nothing_to_the_kernel(tmp_path):
    if not os.path.exists(lockholder.PROC_LOCKS):
        pytest.skip("no /proc/locks here")
    lock = tmp_path / "daemon.lock"
    p = holder(lock, str(os.getpid()))  # it holds the lock but writes our pid in the file
    try:
        assert not lockholder.holds(os.getpid(), lock) and lockholder.holds(p.pid, lock)
    finally:
        p.communicate("")


def test_a_link_is_no_lock(tmp_path, where):
    real, link = tmp_path / "real.lock", tmp_path / "daemon.lock"
    link.symlink_to(real)
    p = holder(real)
    try:
        assert not lockholder.holds(p.pid, link)
    finally:
        p.communicate("")

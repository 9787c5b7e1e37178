"""The renewal's handover pieces (daemon/renewal.py, main.InstanceLock):
the lock's descriptor handed over is taken without a moment unlocked, a
descriptor of another file is refused (and the lock taken the ordinary
way), and the handover is read once and taken out of the environment.
The whole renewal through a real daemon: tests/acceptance/test_renewal.py."""

from __future__ import annotations

import fcntl
import os

import pytest

from sloth_daemon.daemon import renewal
from sloth_daemon.daemon.main import InstanceLock
from sloth_daemon.errors import DaemonAlreadyRunning
from sloth_daemon.paths import resolve


def test_the_lock_handed_over_is_held_throughout_and_a_second_daemon_is_still_refused(tmp_path):
    paths = resolve({"SLOTH_HOME": str(tmp_path)})
    first = InstanceLock(paths)
    os.set_inheritable(first.fd, True)  # as before the exec
    taken = InstanceLock(paths, handed=first.fd)  # the new process (same open file)
    assert taken.fd == first.fd and not os.get_inheritable(taken.fd)
    with pytest.raises(DaemonAlreadyRunning):
        InstanceLock(paths)
    taken.release()
    InstanceLock(paths).release()  # free once the renewed daemon is gone


def test_a_handed_descriptor_of_another_file_is_closed_and_the_lock_taken_anew(tmp_path):
    paths = resolve({"SLOTH_HOME": str(tmp_path)})
    stray = os.open(tmp_path / "other", os.O_RDWR | os.O_CREAT)
    lock = InstanceLock(paths, handed=stray)
    assert lock.fd != stray or not renewal.same_file(lock.fd, tmp_path / "other")
    probe = os.open(paths.lock, os.O_RDWR)
    with pytest.raises(OSError):  # held: taken the ordinary way
        fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)
    os.close(probe)
    lock.release()


def test_the_handover_is_read_once_and_removed_from_the_environment():
    env = {renewal.ENV: f'{{"pid": {os.getpid()}, "listen_fd": 3, "lock_fd": 4, "owned": true, "started_at": 12.5,'
                        ' "up_row": 7}'}
    h = renewal.taken(env)
    assert h == renewal.Handover(3, 4, True, 12.5, 7, {}) and renewal.ENV not in env
    assert renewal.taken(env) is None
    bad = {renewal.ENV: "{not json"}
    assert renewal.taken(bad) is None and bad == {}


def test_a_handover_for_another_process_or_none_named_is_ignored():
    """An exec keeps the pid: a handover naming another (an environment
    inherited, copied or forged) is not this process's, as LISTEN_PID's."""
    for pid in (os.getpid() + 1, None):
        env = {renewal.ENV: f'{{"pid": {"null" if pid is None else pid}, "listen_fd": 3, "lock_fd": 4,'
                            ' "owned": true, "started_at": 12.5}'}
        assert renewal.taken(env) is None and env == {}


def test_docstrings_are_left_out_only_where_the_compiled_files_can_be_kept(tmp_path, monkeypatch):
    """renewal.optimized: -OO where each module's .opt-2.pyc exists or can be
    written, else nothing (every renewal compiling from source costs more
    than the docstrings it sheds)."""
    import importlib.util
    import py_compile
    import sys

    (tmp_path / "renewal_probe_mod.py").write_text('"""A module with a docstring."""\n')
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(sys, "pycache_prefix", None)
    importlib.invalidate_caches()
    import renewal_probe_mod  # noqa: F401

    names = ("renewal_probe_mod",)
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    assert renewal.optimized(names) == ["-OO"]  # its __pycache__ can be written (made: its folder is writable)
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    assert renewal.optimized(names) == []  # nothing kept: no -OO
    compiled = importlib.util.cache_from_source(str(tmp_path / "renewal_probe_mod.py"), optimization=2)
    py_compile.compile(str(tmp_path / "renewal_probe_mod.py"), cfile=compiled, optimize=2)
    assert renewal.optimized(names) == ["-OO"]  # already there
    assert renewal.optimized(("sys",)) == [] and renewal.optimized(("not_loaded_at_all",)) == []  # no source
    for level in (1, 2):  # -O or PYTHONOPTIMIZE: as started; -OO: the interpreter's flags carry it
        monkeypatch.setattr(sys, "flags", type("Flags", (), {"optimize": level})())
        assert renewal.optimized(names) == []

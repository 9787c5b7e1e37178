"""How the keeper makes a job's process (keeper/spawning.py): posix_spawn
lends the job the keeper's own working directory, umask and PATH for the
call, and closes no descriptor, so each of those is checked here through a
real keeper: the job gets its own, the keeper keeps its own, and nothing the
keeper was started with leaks into a job. And the keeper's SIGCHLD hook is
how a job's exit is noticed (no exit watch of its own): with no periodic
check to fall back on, a chain of jobs still runs to its end."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

from tests.support.keeper_rig import wait_for

LEAKED_FD = 77


def _script(path: Path, body: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def _status(pid: int, field: str) -> str:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return line.split(":", 1)[1].strip()
    raise AssertionError(f"no {field} in /proc/{pid}/status")


def _start_holding_a_descriptor(rig) -> subprocess.Popen[bytes]:
    """A keeper started the way a careless starter would: holding an
    inheritable descriptor (LEAKED_FD) it knows nothing of."""
    fd = os.open(rig.root / "leak", os.O_RDWR | os.O_CREAT)
    os.dup2(fd, LEAKED_FD)  # inheritable
    os.close(fd)
    try:
        err = open(rig.root / "keeper-stderr.log", "ab")
        proc = subprocess.Popen(rig.argv(), env=rig.env, stdin=subprocess.DEVNULL, stdout=err, stderr=err,
                                start_new_session=True, pass_fds=(LEAKED_FD,))
        err.close()
    finally:
        os.close(LEAKED_FD)
    rig.procs.append(proc)
    wait_for(lambda: proc.poll() is not None or rig.answers(), what="the keeper to listen")
    assert proc.poll() is None, rig.keeper_log()
    assert os.path.exists(f"/proc/{proc.pid}/fd/{LEAKED_FD}")  # it has it: the jobs must not
    return proc


def test_a_job_gets_its_own_path_cwd_and_umask_and_no_descriptor_the_keeper_was_started_with(rig):
    keeper = _start_holding_a_descriptor(rig)
    umask_before = _status(keeper.pid, "Umask")
    w = rig.wire()
    report = f'echo "$1 $(umask) $(pwd)"; [ -e /proc/$$/fd/{LEAKED_FD} ] && echo leaked || echo sealed\n'
    _script(rig.root / "one" / "whoami-xyz", report.replace("$1", "one"))
    _script(rig.root / "two" / "whoami-xyz", report.replace("$1", "two"))
    work = rig.root / "work"
    work.mkdir()
    system = "/usr/bin:/bin"
    for key, folder in (("a", "one"), ("b", "two")):  # searched in each job's PATH, not the keeper's
        job = rig.job(key, "whoami-xyz", cwd=str(work), env={"PATH": f"{rig.root / folder}:{system}"})
        w.call("spawn", **job)
        assert w.event("exited", key)["outcome"]["returncode"] == 0
        assert rig.log_of(key).decode().splitlines() == [f"{folder} 0022 {work}", "sealed"]
    missing = w.request("spawn", **rig.job("c", "whoami-xyz", env={"PATH": system}))
    assert missing["error"]["message"] == "command not found: whoami-xyz" and missing["error"]["retry"] is False
    # what it lent each spawn it has back
    assert os.readlink(f"/proc/{keeper.pid}/cwd") == "/"
    assert _status(keeper.pid, "Umask") == umask_before


def test_a_job_without_a_path_searches_the_default_one(rig):
    rig.start()
    w = rig.wire()
    job = rig.job("d", "true")
    del job["env"]["PATH"]
    w.call("spawn", **job)
    assert w.event("exited", "d")["outcome"]["returncode"] == 0  # /bin:/usr/bin, as execvp's


def test_with_no_periodic_check_each_exit_is_noticed_and_the_next_in_the_chain_starts(rig):
    """check_s of an hour: nothing but the SIGCHLD hook can notice these exits."""
    rig.start(check_s=3600)
    w = rig.wire()
    n = 20
    for i in range(n):
        w.call("spawn", **rig.job(f"r{i}", "sh", "-c", f"exit {i % 3}", **({"after": f"r{i - 1}"} if i else {})))
    codes = [w.event("exited", f"r{i}")["outcome"]["returncode"] for i in range(n)]
    assert codes == [i % 3 for i in range(n)]


def test_an_empty_command_name_is_a_spawn_failure_alone_and_behind_another(rig):
    """posix_spawn refuses an empty argv[0] with a ValueError (Popen's exec
    says EACCES): the daemon must hear spawn_failed, as ever, never an
    internal error; and behind another run (started from the SIGCHLD hook)
    the one before still ends and this one ends unstarted."""
    rig.start()
    w = rig.wire()
    alone = w.request("spawn", **rig.job("e", ""))
    assert alone["error"]["code"] == "spawn_failed" and alone["error"]["retry"] is False, alone
    w.call("spawn", **rig.job("f", "sleep", "0.5"))
    w.call("spawn", **rig.job("g", "", after="f"))
    assert w.event("exited", "f")["outcome"]["returncode"] == 0
    ended = w.event("exited", "g")["outcome"]
    assert ended["started"] is False and ended["spawn_error"]["retry"] is False, ended


def test_an_argument_or_value_no_path_can_hold_is_a_spawn_failure_alone_and_behind_another(rig):
    """A lone surrogate (valid JSON, "\\ud800") cannot be encoded for exec:
    a spawn failure the daemon is told of, never an internal error, and
    behind another run the one before still ends."""
    rig.start()
    w = rig.wire()
    for n, (argv, env) in enumerate(((["echo", "\ud800"], {}), (["true"], {"ODD": "\ud800"}))):
        alone = w.request("spawn", **rig.job(f"e{n}", *argv, env={"PATH": "/usr/bin:/bin", **env}))
        assert alone["error"]["code"] == "spawn_failed" and alone["error"]["retry"] is False, alone
        w.call("spawn", **rig.job(f"f{n}", "sleep", "0.5"))
        w.call("spawn", **rig.job(f"g{n}", *argv, env={"PATH": "/usr/bin:/bin", **env}, after=f"f{n}"))
        assert w.event("exited", f"f{n}")["outcome"]["returncode"] == 0
        ended = w.event("exited", f"g{n}")["outcome"]
        assert ended["started"] is False and ended["spawn_error"]["retry"] is False, ended

"""A hook's escapees are ended like a job's (issue 20 item 9).

The on_finish hook here starts a sleeper that leaves the hook's process
group and session (setsid, from a subshell that exits: a double fork), as
a careless hook does with a background helper. On 1d80a5b only the hook's
group was killed, so the sleeper outlived ``hook_timeout_s`` and the
daemon. Now the hook's tree is found the way a job's is (its group, its
descendants, its token) and ended: when the hook ends, when it times out,
and when the daemon stops. /proc says whether the sleeper still runs.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.support.harness import TEST_CONFIG, alive

pytestmark = pytest.mark.acceptance


def hook_config(pidfile: Path, *, then: str, timeout: str) -> str:
    escape = f"(setsid sleep 307 </dev/null >/dev/null 2>&1 & echo $! > {pidfile})"
    return TEST_CONFIG + f'on_finish = "{escape}; {then}"\nhook_timeout_s = "{timeout}"\n'


def running(pid: int) -> bool:
    """Alive as /proc says (a zombie runs no more code)."""
    return Path(f"/proc/{pid}").exists() and alive(pid)


@pytest.mark.parametrize("case", ["hook exits", "hook times out", "daemon stops"])
def test_what_a_hook_left_running_in_another_session_is_ended(make_harness, case):
    then, timeout = {"hook exits": ("exit 0", "60s"), "hook times out": ("sleep 60", "1s"),
                     "daemon stops": ("sleep 60", "60s")}[case]
    h = make_harness(TEST_CONFIG)
    pidfile = h.home / "sleeper.pid"
    (h.home / "config.toml").write_text(hook_config(pidfile, then=then, timeout=timeout))
    h.start()
    h.wait_state(h.add("true"), "done")
    sleeper = int(h.wait_for(lambda: pidfile.exists() and pidfile.read_text().strip(), what="the sleeper"))
    if running(sleeper):
        assert os.getsid(sleeper) == sleeper  # it did leave the hook's session (and group)
    if case == "daemon stops":
        assert running(sleeper)  # the hook has 60 s: only the stop can end it
        assert h.stop() == 0
        assert not running(sleeper), "the sleeper outlived the daemon"
        return
    h.wait_for(lambda: not running(sleeper), timeout_s=15, what="the sleeper ended")
    if case == "hook times out":
        assert "still running after 1s: killed" in h.log_text()
    assert h.call("ping") is not None  # the daemon serves on

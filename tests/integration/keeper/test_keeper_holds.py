"""The keeper's pause/resume ops and its spawn's limits, on a real keeper
process over its real socket (issue 24, items 3 and 4): a pause survives a
suspend's freeze and thaw (only a resume continues it), bad requests are
refused and change nothing, and limits it is sent are applied to the job
(or refused as a bad request)."""

from __future__ import annotations

import signal

import psutil

from sloth_daemon.daemon.keeper_client import boot_now
from tests.support.harness import alive
from tests.support.keeper_rig import frozen, wait_for

TREE = "sleep 300 & sleep 300 & wait"


def tree(pid: int) -> list[int]:
    return [pid, *(c.pid for c in psutil.Process(pid).children(recursive=True))]


def test_pause_and_resume_stop_and_continue_the_tree_and_hello_lists_the_pause(rig):
    rig.start()
    w = rig.wire()
    pid = w.call("spawn", **rig.job("a", "sh", "-c", TREE))["pid"]
    rig.extra_pids.append(pid)
    wait_for(lambda: len(tree(pid)) == 3, what="the tree")
    res = w.call("pause", keys=["a", "nope"])
    assert res["runs"]["a"]["paused"] is True and res["runs"]["a"]["processes"] == 3
    assert res["unknown"] == ["nope"]
    assert all(frozen(p) for p in tree(pid))
    assert w.call("pause", keys=["a"])["runs"]["a"]["already"] is True
    runs = w.hello()["runs"]
    assert runs[0]["paused"] is True and runs[0]["state"] == "running"
    assert w.call("resume", keys=["a"])["runs"]["a"]["resumed"] is True
    wait_for(lambda: not any(frozen(p) for p in tree(pid)), what="the tree continued")
    assert w.call("resume", keys=["a"])["runs"]["a"] == {"resumed": False, "state": "running"}
    assert w.hello()["runs"][0]["paused"] is False


def test_a_paused_run_stays_paused_through_a_suspend_freeze_and_thaw(rig, fakeclock):
    rig.start(env=fakeclock.env(), check_s=0.1)
    w = rig.wire()
    pid = w.call("spawn", **rig.job("p", "sh", "-c", TREE, trust_until=boot_now() + 3, term_lead_s=0.5))["pid"]
    rig.extra_pids.append(pid)
    wait_for(lambda: len(tree(pid)) == 3, what="the tree")
    w.call("pause", keys=["p"])
    fakeclock.jump(3600)
    w.event("frozen", "p")
    assert w.call("trust", items=[{"key": "p", "until": boot_now() + fakeclock.offset + 30}]) == {}
    assert w.hello()["runs"][0]["state"] == "running"
    assert all(frozen(p) for p in tree(pid))  # the thaw after the suspend did not continue a paused run
    w.call("kill", key="p", reason="cancelled", grace_s=5)
    out = w.event("exited", "p")["outcome"]
    assert out["returncode"] == -signal.SIGTERM  # continued after its SIGTERM, it acted on it
    wait_for(lambda: not alive(pid), what="the tree ended")


def test_bad_pause_requests_are_refused_and_change_nothing(rig):
    rig.start()
    w = rig.wire()
    pid = w.call("spawn", **rig.job("b", "sleep", "300"))["pid"]
    rig.extra_pids.append(pid)
    for keys in ("b", [1, 2], [""], None, ["b"] * 10_001):
        msg = w.request("pause", keys=keys)
        assert not msg["ok"] and msg["error"]["code"] == "bad_request", msg
    assert w.request("pause")["error"]["code"] == "bad_request"  # keys missing
    assert not any(frozen(p) for p in tree(pid))
    assert w.call("pause", keys=[]) == {"runs": {}, "unknown": []}


def test_limits_are_applied_in_the_job_and_bad_ones_refused(rig):
    rig.start()
    w = rig.wire()
    limits = {"mem": 200 << 20, "mem_via": "rlimit", "nice": 7, "io": "idle", "via": {}}
    pid = w.call("spawn", **rig.job("l", "sleep", "300", limits=limits))["pid"]
    rig.extra_pids.append(pid)
    p = psutil.Process(pid)
    assert p.nice() == 7
    assert p.rlimit(psutil.RLIMIT_DATA) == (200 << 20, 200 << 20)
    assert p.ionice().ioclass == psutil.IOPRIO_CLASS_IDLE
    for bad in ({"mem": 5}, {"mem": 200 << 20}, {"nice": 40}, {"io": "realtime"}, {"cpus": 1.0, "mem_via": "rlimit"},
                {"what": 1}, "lots"):
        msg = w.request("spawn", **rig.job(f"x{len(str(bad))}", "true", limits=bad))
        assert not msg["ok"] and msg["error"]["code"] == "bad_request", (bad, msg)
    assert [r["key"] for r in w.hello()["runs"]] == ["l"]

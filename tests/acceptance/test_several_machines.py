"""Several machines on one PostgreSQL queue (issue 11): three real daemons,
each with a home and a host name of its own, each in a network namespace
of its own reaching a real server over a veth pair (tests/support/
machines.py), their real keepers and real job processes.

Probe jobs (tests/support/probe_job.py) record every start, end and tick,
and hold a flock: two runs of one job at once would show as a collision or
as overlapping records. In each disruption one machine holding a job is
lost -- crashed (kill -9 of everything it runs), its daemon stopped
(SIGSTOP), cut off (its link down), or asleep (its clocks jump, LD_PRELOAD
fakeclock, while its network is still down) -- past the job's lease. Each
time the job must have stopped there before another machine starts it,
another machine must take it over, and the lost machine must rejoin (a job
pinned to it runs there). What each took (the windows) is printed.

Waits are bounded by deadlines, never timed assertions; everything is
reaped, and the namespaces and the cluster removed, also on failure.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

import psutil
import pytest

from tests.support import probes
from tests.support.fakeclock import FakeClock
from tests.support.machines import PROBE, Machine, Machines, Network, alive, netns_unavailable, wait_until

pytestmark = [pytest.mark.acceptance, pytest.mark.postgres]

LEASE_S = 4.0
CONFIG = f"""
lease_s = "{LEASE_S}s"
clock_check_s = "1s"
kill_grace_s = "1s"
poll_s = "1s"
backoff_cap_s = "2s"
max_attempts = 20
[lanes]
default = 3
"""
TAGS = {2: 'tags = ["gpu"]\n'}  # machine c advertises a tag
WAIT_S = 60.0  # a bound on every wait (a loaded CI machine is slow; nothing here is timed)


@pytest.fixture(scope="module")
def network():
    if os.environ.get("SLOTH_SKIP_PG", "") not in ("", "0"):
        pytest.skip("SLOTH_SKIP_PG is set")
    why = netns_unavailable()
    net = Network(3, netns=why is None)
    try:
        yield net
    finally:
        net.close()


def machines(network: Network, *, env: Callable[[int], dict[str, str]] = lambda i: {},
             config: Callable[[int], str] = lambda i: TAGS.get(i, "")) -> Machines:
    return Machines(network, 3, config_of=lambda i: config(i) + CONFIG, env=env)


@pytest.fixture
def three(network):
    ms = machines(network)
    try:
        ms.start()
        yield ms
    finally:
        ms.close()


def needs_netns(network: Network) -> None:
    if not network.links:
        pytest.skip(netns_unavailable() or "no network namespaces")


# ----------------------------------------------------------------- helpers
def probe(rec: Path, *opts: str) -> list[str]:
    return [sys.executable, PROBE, str(rec), *opts]


def add(m: Machine, argv: list[str], *opts: str) -> int:
    return int(m.cli("add", *opts, "--", *argv, check=True).stdout)


def host_of(m: Machine, jid: int) -> str | None:
    worker = m.job(jid).get("worker") or ""
    return worker.split(":")[1] if worker.startswith("sloth-daemon:") else None


def by_name(ms: Machines, name: str | None) -> Machine:
    return next(m for m in ms if m.name == name)


def started(rec: Path, jid: int, n: int) -> list[probes.ProbeRun]:
    rs = probes.runs(rec).get(jid, [])
    return rs if len(rs) >= n else []


def gone(pid: int) -> bool:
    return not alive(pid)


def no_overlap(rec: Path) -> None:
    assert probes.collisions(rec) == [], "two runs of a job held its lock at once"
    assert probes.overlaps(rec) == []


def rejoins(ms: Machines, x: Machine, rec: Path) -> None:
    """The lost machine takes work again: a job pinned to it runs there."""
    jid = add(ms[(ms.machines.index(x) + 1) % 3], probe(rec, "--hold", "0.1"), "--on", x.name)
    job = wait_until(lambda: (j := x.job(jid))["state"] == "done" and j, WAIT_S, f"job {jid} pinned to {x.name}")
    assert job["worker"].split(":")[1] == x.name and job["attempts"] == 1


def windows(name: str, **w: float) -> None:
    """Print what a disruption took (and append it where SLOTH_WINDOWS_OUT says)."""
    print(f"\n{name}: " + ", ".join(f"{k} {v:.2f}s" for k, v in w.items()))
    out = os.environ.get("SLOTH_WINDOWS_OUT")
    if out:
        with open(out, "a") as f:
            f.write(json.dumps({"scenario": name, **w}) + "\n")


# -------------------------------------------------------------- the runs
def test_probe_jobs_anywhere_each_done_once_never_two_at_once(three, tmp_path):
    """Probe jobs from one machine's `sloth add --anywhere`, served by all
    three: each done exactly once, never two runs of one at once.
    (SLOTH_MULTI_JOBS sets how many; tests/multi_soak.py runs 3,000.)"""
    n = int(os.environ.get("SLOTH_MULTI_JOBS", "120"))
    rec = tmp_path / "rec"
    rec.mkdir()
    lines = "\n".join(f"{sys.executable} {PROBE} {rec} --hold 0.05" for _ in range(n))
    ids = [int(x) for x in three[0].cli("add", "--anywhere", "--stdin", input=lines, check=True).stdout.split()]
    wait_until(lambda: three[0].cli_json("ls", "--state", "done")["total"] == n, WAIT_S * 4, f"{n} jobs done",
               step_s=0.5)
    rs = probes.runs(rec)
    assert sorted(rs) == sorted(ids)
    assert [j for j, r in rs.items() if [x.end is not None for x in r].count(True) != 1] == []
    no_overlap(rec)
    served = {host_of(three[0], i) for i in ids[:: max(1, n // 30)]}
    assert len(served) >= 2, f"one machine did it all: {served}"


def test_jobs_run_where_they_are_placed_and_logs_read_from_anywhere(three, tmp_path):
    a, b, c = three
    say = ["sh", "-c", 'echo "ran job $SLOTH_JOB_ID with token $SLOTH_FENCE_TOKEN"']
    ids = {"default-a": add(a, say), "default-b": add(b, say), "on-b": add(a, say, "--on", "b"),
           "gpu": add(a, say, "--on", "gpu"), "on-c": add(b, say, "--on", "c")}
    for i in ids.values():
        a.wait_state(i, "done", timeout_s=WAIT_S)
    where = {k: host_of(a, i) for k, i in ids.items()}
    assert where == {"default-a": "a", "default-b": "b", "on-b": "b", "gpu": "c", "on-c": "c"}
    out = a.cli("logs", str(ids["on-b"]), check=True).stdout  # ran on b: read from a
    assert re.fullmatch(rf"ran job {ids['on-b']} with token [0-9]+-[0-9a-f]{{16}}\n", out), out
    assert out == b.cli("logs", str(ids["on-b"]), check=True).stdout
    on_b = {j["id"] for j in a.cli_json("ls", "--host", "b")["jobs"]}
    assert on_b == {ids["default-b"], ids["on-b"]}
    # live, from another machine, through the copy the running machine stores
    slow = add(a, ["sh", "-c", "for i in 1 2 3 4; do echo line $i; sleep 0.5; done"], "--on", "b")
    p = c.cli("logs", "-f", str(slow), timeout_s=WAIT_S)
    assert (p.returncode, p.stdout) == (0, "line 1\nline 2\nline 3\nline 4\n"), p.stderr
    st = a.cli_json("status")
    assert {h["name"] for h in st["hosts"] if h["alive"]} == {"a", "b", "c"} and st["host"] == "a"


def test_a_job_cancelled_on_another_machine_ends_at_once(three, tmp_path):
    a, b, _ = three
    jid = add(a, probe(tmp_path, "--hold", "60"), "--on", "b")
    run = wait_until(lambda: started(tmp_path, jid, 1), WAIT_S, "the job started on b")[0]
    a.cli("cancel", str(jid), check=True)  # b hears it by NOTIFY, not at its next renewal
    wait_until(lambda: gone(run.pid), WAIT_S, "b ended the cancelled job")
    assert b.job(jid)["state"] == "cancelled"


def test_wait_logs_and_show_with_no_id_mean_the_latest_job_queued_from_this_machine(three, tmp_path):
    """Issue 28 #14: with no id, `wait`, `logs` and `show` on machine a mean
    the latest job queued from a, never a later one b queued (and `logs`
    the latest of a's that ran: a job of a's still delayed is passed over)."""
    a, b, _ = three
    mine = add(a, ["sh", "-c", "echo mine; sleep 60"])
    a.wait_state(mine, "running", timeout_s=WAIT_S)
    theirs = add(b, ["echo", "theirs"], "--on", "b")
    b.wait_state(theirs, "done", timeout_s=WAIT_S)
    with pytest.raises(subprocess.TimeoutExpired):  # its own job still runs: the wait goes on
        a.cli("wait", timeout_s=3)
    later = add(a, ["true"], "--delay", "1h")  # a's latest, never started
    theirs = add(b, ["echo", "theirs"], "--on", "b")
    b.wait_state(theirs, "done", timeout_s=WAIT_S)
    p = a.cli("show", "--json", check=True)
    assert [j["id"] for j in json.loads(p.stdout)["jobs"]] == [later], p.stderr
    p = a.cli("logs", check=True)
    assert f"latest job that ran, {mine}" in p.stderr and p.stdout == "mine\n", (p.stdout, p.stderr)
    assert [j["id"] for j in b.cli_json("show")["jobs"]] == [theirs]
    a.cli("cancel", str(mine), str(later), check=True)


# ---------------------------------------------------------- disruptions
def takeover(ms: Machines, rec: Path, name: str, lose: Callable[[Machine], None],
             back: Callable[[Machine], None]) -> None:
    """A job runs on a machine X; X is lost (``lose``) past the lease; X's
    run must be gone before another machine starts the job; X comes back
    (``back``) and rejoins."""
    jid = add(ms[0], probe(rec, "--hold", "60", "--tick", "0.1"), "--anywhere")
    first = wait_until(lambda: started(rec, jid, 1), WAIT_S, "the job started")[0]
    x = by_name(ms, host_of(ms[0], jid))
    t0 = time.time()
    lose(x)
    wait_until(lambda: gone(first.pid), WAIT_S, f"the job's run on {x.name} ended")
    t_dead = time.time()
    second = wait_until(lambda: started(rec, jid, 2), WAIT_S, "another machine started the job")[1]
    y = host_of(next(m for m in ms if m is not x), jid)
    assert y != x.name, f"{x.name} ran it again"
    assert t_dead <= second.start, f"the job started on {y} while its run on {x.name} still lived"
    assert max(probes.ticks_of(rec, first.token)) < second.start
    no_overlap(rec)
    back(x)
    rejoins(ms, x, rec)
    windows(name, stopped_after_s=t_dead - t0, started_elsewhere_after_s=second.start - t0)


def test_a_crashed_machine_s_jobs_are_taken_over_and_it_rejoins(three, tmp_path):
    takeover(three, tmp_path, "crash (kill -9 of daemon, keeper and jobs)", lambda x: x.crash(),
             lambda x: x.start())


def test_a_stopped_daemon_s_jobs_are_fenced_taken_over_and_it_rejoins(three, tmp_path):
    def stop(x: Machine) -> None:
        assert x.daemon is not None
        x.daemon.send_signal(signal.SIGSTOP)

    def cont(x: Machine) -> None:
        assert x.daemon is not None
        x.daemon.send_signal(signal.SIGCONT)

    takeover(three, tmp_path, "daemon stopped (SIGSTOP)", stop, cont)


def test_a_partitioned_machine_fences_its_jobs_they_are_taken_over_and_it_rejoins(network, three, tmp_path):
    needs_netns(network)
    links = {m.name: network.links[i] for i, m in enumerate(three)}
    takeover(three, tmp_path, "network partition (link down)", lambda x: links[x.name].cut(),
             lambda x: links[x.name].heal())


def test_a_machine_that_sleeps_past_its_leases_freezes_its_jobs_then_kills_or_continues(
        network, tmp_path, fakeclock: FakeClock):
    """Machine a sleeps (its clocks jump, as on a resume) and wakes with its
    network not back yet: its keeper freezes both its jobs at once, before
    their leases lapse on the server. While it is away, b or c takes the
    job that may run anywhere. When a's network is back, a fenced renewal
    decides: the job taken elsewhere is killed, never having run again; the
    job pinned to a, whose lapsed lease nobody could take, is renewed and
    thaws, and ends after one run."""
    needs_netns(network)
    ms = machines(network, env=lambda i: fakeclock.env() if i == 0 else {})
    try:
        a = ms[0]
        a.start()  # a alone first: it takes both jobs
        free = add(a, probe(tmp_path, "--hold", "60", "--tick", "0.1", "--lock", "0"), "--anywhere")
        mine = add(a, probe(tmp_path, "--hold", "12", "--tick", "0.1", "--lock", "0"))
        r_free, r_mine = (wait_until(lambda: started(tmp_path, j, 1), WAIT_S, f"job {j} on a")[0] for j in (free, mine))
        for m in ms.machines[1:]:
            m.start()
        network.links[0].cut()
        t0 = time.time()
        fakeclock.jump(3 * LEASE_S)  # a slept past its leases; its network is not back yet
        wait_until(lambda: all(psutil.Process(r.pid).status() == psutil.STATUS_STOPPED for r in (r_free, r_mine)),
                   WAIT_S, "a's keeper froze both jobs")
        t_frozen = time.time()
        second = wait_until(lambda: started(tmp_path, free, 2), WAIT_S, "b or c took the free job")[1]
        assert psutil.Process(r_free.pid).status() == psutil.STATUS_STOPPED  # still frozen, never ran on
        assert max(probes.ticks_of(tmp_path, r_free.token)) < min(t_frozen, second.start)
        network.links[0].heal()
        wait_until(lambda: gone(r_free.pid), WAIT_S, "a killed the job it lost")
        job = a.wait_state(mine, "done", timeout_s=WAIT_S)
        assert job["attempts"] == 1 and "resumed" in [e["kind"] for e in a.events(mine)]
        assert probes.overlaps(tmp_path) == []
        rejoins(ms, a, tmp_path)
        windows("suspend past the lease, network back later", frozen_after_s=t_frozen - t0,
                started_elsewhere_after_s=second.start - t0)
    finally:
        ms.close()


def test_a_wall_clock_ten_minutes_off_changes_nothing(network, tmp_path, fakeclock: FakeClock):
    """Machine a's wall clock is ten minutes ahead from the start: its jobs
    run once, renewed on time (the server's clock decides), with no sleep or
    jump seen, and leases as long as the server says."""
    fakeclock.jump(600)
    ms = machines(network, env=lambda i: fakeclock.env() if i == 0 else {})
    try:
        ms.start()
        a = ms[0]
        ids = [add(a, probe(tmp_path, "--hold", str(2.5 * LEASE_S))) for _ in range(2)]
        ids.append(add(ms[1], probe(tmp_path, "--hold", "0.2"), "--on", "a"))
        for i in ids:
            job = a.wait_state(i, "done", timeout_s=WAIT_S)
            kinds = [e["kind"] for e in a.events(i)]
            assert job["attempts"] == 1 and host_of(a, i) == "a", kinds
            assert not {"reclaimed", "resumed", "fenced", "abandoned"} & set(kinds), kinds
        assert a.call("status")["last_jump"] is None
        no_overlap(tmp_path)
    finally:
        ms.close()

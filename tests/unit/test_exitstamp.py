"""exitstamp: the kernel's bound on when an exited, unreaped child ended
(a real child process; the keeper uses it when it reaps late), and the
shortest lease's room between renewal and fence."""

from __future__ import annotations

import os
import time

import pytest

from sloth_daemon import exitstamp
from sloth_daemon.checks import MIN_LEASE_S
from sloth_daemon.runs import RENEW_SPARE_S, renewal_spare

HAS_SCHED = os.path.exists("/proc/thread-self/sched")


def boot() -> float:
    return time.clock_gettime(time.CLOCK_BOOTTIME)


@pytest.mark.skipif(not HAS_SCHED, reason="no /proc/PID/sched on this kernel")
def test_a_zombie_is_placed_at_its_end_not_at_its_reap():
    """Its last CPU another than ours where there are two: each CPU's task
    clock is its own; the bound is read on the zombie's."""
    cpus = sorted(os.sched_getaffinity(0))
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: on the last CPU, say when it is about to end, then end
        os.sched_setaffinity(0, {cpus[-1]})
        os.write(w, repr(boot()).encode())
        os._exit(0)
    os.close(w)
    about_to_end = float(os.read(r, 64))
    os.close(r)
    try:
        while os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None:
            time.sleep(0.005)
        time.sleep(0.5)  # reaped late
        os.sched_setaffinity(0, {cpus[0]})
        now = boot()
        bound = exitstamp.ended_by(pid, boot)
        assert os.sched_getaffinity(0) == {cpus[0]}  # put back as it was
        assert bound is not None
        assert about_to_end <= bound <= about_to_end + 0.25  # its end, with the slack; not now
        assert bound < now - 0.2
    finally:
        os.sched_setaffinity(0, set(cpus))
        os.waitpid(pid, 0)
    assert exitstamp.ended_by(pid, boot) is None  # reaped: the kernel keeps nothing of it


def test_no_record_is_no_bound(tmp_path):
    assert exitstamp.ended_by(2**22 + 12345, boot) is None  # no such process
    forged = tmp_path / "sched"
    forged.write_bytes(b"x (1, #threads: 1)\n---\nse.exec_start : 1.000000\nse.exec_start : 2.000000\n")
    assert exitstamp._exec_start(str(forged)) is None  # exactly one, or none is believed
    forged.write_bytes(b"x (1, #threads: 1)\n---\nse.exec_start      :       1500.250000\n")
    assert exitstamp._exec_start(str(forged)) == 1.50025
    stat = tmp_path / "stat"
    stat.write_bytes(b"42 (a) b) (c) Z " + b" ".join(str(i).encode() for i in range(4, 53)))
    assert exitstamp._cpu(str(stat)) == 39  # field 39, counted past the name's last parenthesis


def test_the_shortest_lease_leaves_room_to_renew_before_the_fence():
    assert renewal_spare(MIN_LEASE_S) >= RENEW_SPARE_S - 1e-9
    assert renewal_spare(MIN_LEASE_S - 0.5) < RENEW_SPARE_S  # the minimum is the minimum
    for lease in (MIN_LEASE_S, 5, 10, 60, 3600):  # and longer leases leave more
        assert renewal_spare(lease) >= renewal_spare(MIN_LEASE_S) - 1e-9
        assert renewal_spare(lease, kill_grace_s=0.0) >= renewal_spare(lease)
    assert renewal_spare(1.0) == pytest.approx(0.0, abs=1e-9)  # why `--lease 1s` looped

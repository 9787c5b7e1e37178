"""limits.Postponement: the wait after a spawn failed for the daemon's own
lack of resources (descriptors, processes, memory)."""

from __future__ import annotations

from sloth_daemon.daemon.limits import Postponement


def test_it_doubles_while_spawns_go_on_failing_and_ends_with_one_that_works():
    p = Postponement(cap_s=8)
    now = 100.0
    waits = []
    for _ in range(5):  # each failure heard after the last wait ended: the shortage goes on
        waits.append(p.failed(now))
        now += waits[-1]
        assert not p.holds(now)
    assert waits == [1, 2, 4, 8, 8]
    p.started()
    assert p.failed(now) == 1


def test_failures_of_one_burst_share_one_wait():
    """Twenty spawns sent at once, all short of descriptors: they fail while
    the first failure's wait holds, and wait it out, not 2**20 capped."""
    p = Postponement(cap_s=60)
    first = p.failed(100.0)
    rest = [p.failed(100.0 + i * 0.01) for i in range(1, 20)]
    assert first == 1 and all(abs(100.0 + i * 0.01 + w - 101.0) < 1e-9 for i, w in enumerate(rest, 1))
    assert p.holds(100.5) and not p.holds(101.0)
    assert p.failed(101.0) == 2  # the next try failed too: now it doubles

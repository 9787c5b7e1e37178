"""Queue fixtures: a real SQLite file in tmp_path and a ManualClock (no sleeping)."""

from __future__ import annotations

import pytest

from sloth_daemon.clock import ManualClock
from sloth_daemon.queue import Queue


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(0.0)


@pytest.fixture
def db_path(tmp_path):
    return tmp_path / "data" / "queue.db"


@pytest.fixture
def make_queue(db_path, clock):
    """Queue(db_path, clock, **overrides); every queue made is closed at teardown."""
    made: list[Queue] = []

    def make(**kw) -> Queue:
        kw.setdefault("lease_s", 100)
        q = Queue(kw.pop("path", db_path), clock, **kw)
        made.append(q)
        return q

    yield make
    for q in made:
        q.close()


@pytest.fixture
def q(make_queue) -> Queue:
    """lease 100 s, 3 attempts, backoff cap 300 s, clock at t=0."""
    return make_queue(lease_s=100, max_attempts=3, backoff_cap_s=300)

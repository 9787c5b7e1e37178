"""Queue fixtures: the contract tests run once per backend.

A test that uses ``q`` or ``make_queue`` runs against a real SQLite file in
tmp_path and against a real PostgreSQL database (emptied for each test),
both on a ManualClock: no sleeping, no timed assertions. A test that is
about one backend by nature says so with ``@pytest.mark.backends("sqlite")``.
"""

from __future__ import annotations

import pytest

from sloth_daemon.clock import ManualClock
from sloth_daemon.queue import open_queue
from tests.support.queues import BACKENDS


def pytest_configure(config):
    config.addinivalue_line("markers", "backends(*names): run only against these queue backends")


def pytest_generate_tests(metafunc):
    if "backend" not in metafunc.fixturenames:
        return
    marker = metafunc.definition.get_closest_marker("backends")
    names = marker.args if marker else BACKENDS
    metafunc.parametrize(
        "backend",
        [pytest.param(n, marks=[pytest.mark.postgres] if n == "postgres" else []) for n in names],
        ids=list(names),
    )


@pytest.fixture
def clock() -> ManualClock:
    """The tests' clock, for every backend: SQLite reads it, PostgreSQL pins
    each transaction's sloth.now() to it."""
    return ManualClock(0.0)


@pytest.fixture
def db_path(tmp_path):
    return tmp_path / "data" / "queue.db"


@pytest.fixture
def queue_target(backend, db_path, request):
    """Where make_queue opens its queues: the SQLite file, or the PostgreSQL URL."""
    return db_path if backend == "sqlite" else request.getfixturevalue("pg_url")


@pytest.fixture
def make_queue(queue_target, clock):
    """open_queue(target, clock, **overrides); every queue made is closed at teardown."""
    made: list = []

    def make(**kw):
        kw.setdefault("lease_s", 100)
        q = open_queue(kw.pop("target", queue_target), clock, **kw)
        made.append(q)
        return q

    yield make
    for q in made:
        q.close()


@pytest.fixture
def q(make_queue):
    """lease 100 s, 3 attempts, backoff cap 300 s, clock at t=0."""
    return make_queue(lease_s=100, max_attempts=3, backoff_cap_s=300)

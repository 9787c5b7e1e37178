"""Fixtures for every test that runs the real daemon (acceptance and
integration), and the PostgreSQL server the PostgreSQL tests share."""

import os
import shutil
import tempfile
from pathlib import Path

import pytest

from tests.support.harness import TEST_CONFIG, Harness
from tests.support.pg import SKIP_ENV, PgCluster, PgDatabases, fast_tmp

# The `fakeclock` fixture (an LD_PRELOAD shim that simulates a suspend).
pytest_plugins = ["tests.support.fakeclock"]


@pytest.fixture
def home():
    # Unix socket paths are limited to ~107 bytes: keep the folder short.
    d = Path(tempfile.mkdtemp(prefix="sl-"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def make_harness(home):
    """Harness(home / name, config=...) for a test that needs other settings;
    every one made is reaped at teardown, also when the test fails."""
    made: list[Harness] = []

    def make(config: str = TEST_CONFIG, name: str = "h") -> Harness:
        made.append(Harness(home / name, config=config))
        return made[-1]

    try:
        yield make
    finally:
        for h in made:
            h.reap()


@pytest.fixture
def harness(make_harness):
    return make_harness()


@pytest.fixture
def quick_retry(make_harness):
    """A daemon whose retries come after 0.2 s instead of 2 s (backoff cap 200 ms)."""
    return make_harness(TEST_CONFIG.replace('backoff_cap_s = "60s"', 'backoff_cap_s = "200ms"'), "q")


# ------------------------------------------------------------- PostgreSQL
@pytest.fixture(scope="session")
def pg_cluster():
    """One real PostgreSQL server for the whole session (tests/support/pg.py),
    stopped and removed at the end, also when tests fail. Without a server
    or psycopg every PostgreSQL test errors, loudly: set SLOTH_SKIP_PG=1 to
    skip them on a machine that cannot have one (CI never sets it)."""
    if os.environ.get(SKIP_ENV, "") not in ("", "0"):
        pytest.skip(f"{SKIP_ENV} is set: PostgreSQL tests skipped")
    try:
        import psycopg  # noqa: F401
    except ImportError as e:
        raise RuntimeError(f"psycopg is not installed ({e}): pip install -e '.[test]',"
                           f" or set {SKIP_ENV}=1 to skip the PostgreSQL tests") from e
    cluster = PgCluster(fast_tmp())
    try:
        yield cluster
    finally:
        cluster.destroy()


@pytest.fixture(scope="session")
def pg_dbs(pg_cluster) -> PgDatabases:
    return PgDatabases(pg_cluster)


@pytest.fixture
def pg_url(pg_dbs) -> str:
    """The shared queue database, emptied for this test (a few ms)."""
    return pg_dbs.reset()


@pytest.fixture
def pg_fresh(pg_dbs):
    """make(migrated=True) -> the URL of a new database of this test's own
    (for tests that change the schema, restart the server or share it
    between processes); dropped at teardown."""
    made: list[str] = []

    def make(*, migrated: bool = True) -> str:
        made.append(pg_dbs.fresh(migrated=migrated))
        return made[-1]

    yield make
    for url in made:
        try:
            pg_dbs.drop(url)
        except Exception:  # the server may be down after a restart test: the cluster goes anyway
            pass

"""Fixtures for every test that runs the real daemon (acceptance and
integration), and the PostgreSQL server the PostgreSQL tests share."""

import os
import shutil
import signal
import tempfile
from pathlib import Path

import pytest

from tests.support.harness import TEST_CONFIG, Harness
from tests.support.pg import SKIP_ENV, PgCluster, PgDatabases, fast_tmp

# A suite started in the background of a non-interactive shell (`cmd &`,
# nohup) inherits SIGINT ignored, and so would every sloth a test starts:
# the tests that press Ctrl-C on a terminal would see it ignored. A user's
# terminal delivers it, so the suite restores the default (a handler set
# here becomes SIG_DFL in every child at exec).
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# The `fakeclock` fixture (an LD_PRELOAD shim that simulates a suspend).
pytest_plugins = ["tests.support.fakeclock"]

# The tests that take 15 s or more alone (measured, docs/testing.md): run
# first, so that none of them is the tail of a run on several workers.
# A name no longer here is ignored.
SLOW = (
    "tests/unit/backends/test_queue_model.py::test_queue_model",
    "tests/acceptance/test_resources.py::test_a_spawn_short_of_descriptors_waits_without_spending_an_attempt",
    "tests/unit/daemon/test_handlers_scan.py::test_jobs_with_large_commands_are_sent_in_smaller_events",
    "tests/acceptance/test_ls_stream.py::test_ls_json_of_30000_jobs",
    "tests/acceptance/test_ls_stream.py::test_without_a_daemon_ls_json_reads_the_queue_a_chunk_at_a_time",
    "tests/integration/backends/test_concurrent_claim.py::test_four_processes_claim_each_job_exactly_once",
    "tests/acceptance/test_daily_commands.py::test_after_a_crash_each_command_that_needs_the_daemon_starts_it",
    "tests/acceptance/test_schedules.py::test_three_daemons_on_one_postgres_queue_make_one_job_per_slot",
    "tests/acceptance/test_keeper_linger.py::test_spawns_hammered_around_the_linger",
    "tests/acceptance/test_stop_mid_burst.py::test_daemon_stop_never_gives_back_a_run_that_ended_by_itself",
)


@pytest.hookimpl(optionalhook=True)  # a hook of pytest-xdist's: none without it
def pytest_xdist_make_scheduler(config, log):
    """With -n: tests/support/workers.py (a file sharing a fixture on one worker)."""
    from tests.support.workers import Together

    return Together(config, log) if config.getvalue("dist") == "load" else None


def pytest_collection_modifyitems(config, items):
    """The slow tests first (alone, and on several workers: see SLOW)."""
    items.sort(key=lambda item: not item.nodeid.startswith(SLOW))  # stable: the rest keep their order


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

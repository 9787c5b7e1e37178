"""A started daemon on either engine, for acceptance tests that run once on
a SQLite file and once on a PostgreSQL queue (issue 33: watchdogs, results)."""

from __future__ import annotations

from typing import Any, Callable

import pytest

from tests.support.harness import TEST_CONFIG, Harness

QUICK = TEST_CONFIG.replace('backoff_cap_s = "60s"', 'backoff_cap_s = "200ms"')  # retries after 0.2 s
ENGINES = ["sqlite", pytest.param("pg", marks=pytest.mark.postgres)]


def started_on(request: Any, make_harness: Callable[..., Harness], config: str = QUICK) -> Harness:
    """``make_harness`` with ``config`` on the engine ``request.param`` names, started."""
    if request.param == "pg":
        config += f'queue_url = "{request.getfixturevalue("pg_url")}"\n'
    made = make_harness(config)
    made.start()
    return made


def add_id(h: Harness, *args: str) -> int:
    """`sloth add ARGS`: the new job's id."""
    return int(h.cli("add", *args, check=True).stdout.split()[0])

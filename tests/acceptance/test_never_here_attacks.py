"""A hostile reviewer's attacks on issue 28's never-here rule (round 4, X1):
what another machine on a shared queue may write in its host row, and the
reasons a held job shows staying true. Through the real daemon and CLI."""

from __future__ import annotations

import time

import pytest

from tests.support.harness import TEST_CONFIG

pytestmark = pytest.mark.acceptance

# The daemon under 1 GiB of address space: a list of a billion tokens fails
# at once, instead of after the shared machine's RAM.
LIMITED = ["prlimit", f"--as={1 << 30}", "--"]


@pytest.mark.postgres
def test_a_hostile_machines_published_resources_cannot_break_or_stall_an_add(make_harness, pg_fresh):
    """Another machine on the shared queue wrote its hosts.resources: JSON
    nested past Python's recursion limit, a count of a billion tokens, a
    count that is not a number. An add placed there is judged (or, where
    nothing can be read, not judged) in a moment, the daemon keeps serving,
    and `sloth db status` still lists the machines."""
    import psycopg

    url = pg_fresh()
    m1 = make_harness(f'host = "m1"\n{TEST_CONFIG}poll_s = "1s"\n[resources]\ngpu = ["0"]\n', "m1")
    m1.daemon_env["SLOTH_QUEUE_URL"] = m1.env["SLOTH_QUEUE_URL"] = url
    m1.start(wrap=LIMITED)
    hostile = {"deep": "[" * 100_000, "huge": '{"gpu": 1000000000}', "yes": '{"gpu": true}',
               "few": '{"gpu": 1}'}
    with psycopg.connect(url, autocommit=True) as c:
        for name, text in hostile.items():
            c.execute("INSERT INTO sloth.hosts (name, worker, pid, boot_id, version, started_at, last_seen, resources)"
                      " VALUES (%s, 'w', 1, 'b', '0', sloth.now(), sloth.now() + 3600, %s)", (name, text))
    for name in hostile:
        t0 = time.monotonic()
        p = m1.cli("add", "--on", name, "--needs", "gpu=1", "--", "true")
        assert p.returncode == 0, (name, p.stdout, p.stderr)
        assert time.monotonic() - t0 < 10, name
    p = m1.cli("add", "--on", "few", "--needs", "gpu=2", "--", "true")  # what reads as resources is judged
    assert p.returncode != 0 and "few" in p.stderr and "1 gpu" in p.stderr, (p.stdout, p.stderr)
    p = m1.cli("db", "status")
    assert p.returncode == 0 and "deep" in p.stdout, (p.stdout, p.stderr)
    assert m1.call("ping") is not None

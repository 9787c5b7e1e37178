"""A lease too short to be renewed before its keeper fences the job is
refused wherever a lease can be set -- `sloth add --lease` (fast path and
Typer), a socket add, the config file at start and at reload -- naming the
minimum; nothing is queued or changed (issue 20, item 4: `--lease 1s` ran
its job again and again, fenced before every renewal).

Real daemon, real CLI, real socket. That fence refunds stop after a bound is
tests/unit/test_worker.py's and test_queue.py's (an injected clock).
"""

from __future__ import annotations

import pytest

from sloth_daemon.checks import MIN_LEASE_S
from sloth_daemon.errors import BadRequest, EXIT_USAGE
from tests.support.harness import TEST_CONFIG, Harness

MINIMUM = f"at least {MIN_LEASE_S:g}s"


def error_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert lines and lines[0].startswith("sloth: error: ") and "Traceback" not in stderr, stderr
    return lines[0]


def counts(h: Harness) -> dict[str, int]:
    return {k: v for k, v in h.call("status")["counts"].items() if v}


def test_sloth_add_refuses_a_lease_under_the_minimum_and_names_it(harness):
    harness.start()
    for args in (["add", "--lease", "1s", "--", "true"],  # the fast path
                 ["add", "-ldefault", "--lease", "1s", "--", "true"],  # an attached short value: Typer reads it
                 ["add", "--lease", "1ms", "--", "true"],
                 ["add", "--lease", "2.9", "--", "true"]):
        p = harness.cli(*args)
        assert p.returncode == EXIT_USAGE, (args, p.stdout, p.stderr)
        line = error_line(p.stderr)
        assert "--lease" in line and MINIMUM in line and "nothing was queued" in line, line
        assert "renewed" in p.stderr  # the hint says why
    assert counts(harness) == {}
    ok = harness.cli_json("add", "--lease", f"{MIN_LEASE_S:g}s", "--", "true")["ids"][0]
    assert harness.job(ok)["lease_s"] == MIN_LEASE_S


def test_a_socket_add_with_a_short_lease_is_refused_whole(harness):
    harness.start()
    jobs = [{"command": ["true"]}, {"command": ["true"], "lease_s": 1}]
    with pytest.raises(BadRequest) as e:
        harness.add_many(jobs)
    assert "lease_s" in e.value.message and MINIMUM in e.value.message
    with pytest.raises(BadRequest):
        harness.add("true", lease_s=0.001)
    assert counts(harness) == {}  # all or none: the good job of the batch was not queued either
    assert harness.call("ping") is not None  # and the daemon serves on


def test_a_config_lease_under_the_minimum_is_refused_at_start_and_at_reload(home):
    h = Harness(home / "h", config='lease_s = "1s"\n')
    try:
        p = h.start(wait=False)
        assert p.wait(20) != 0
        assert "lease_s must be at least" in h.log_text() and MINIMUM in h.log_text()
        p = h.cli("config")
        assert p.returncode != 0 and MINIMUM in error_line(p.stderr)

        (h.home / "config.toml").write_text(TEST_CONFIG)
        h.start()
        (h.home / "config.toml").write_text(TEST_CONFIG.replace('lease_s = "3s"', 'lease_s = "500ms"'))
        p = h.cli("daemon", "reload")
        assert p.returncode == EXIT_USAGE and MINIMUM in error_line(p.stderr)
        assert h.call("config")["settings"]["lease_s"]["value"] == 3.0  # kept
    finally:
        h.reap()

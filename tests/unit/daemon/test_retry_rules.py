"""The retry rules (issue 33 item 5): which ends retry and the words that
say so (daemon/worker/outcomes.py), the per-job backoff (backends/rules.py),
config's retry_on checked."""

from __future__ import annotations

import json

import pytest

from sloth_daemon import config
from sloth_daemon.backends.rules import job_backoff_s
from sloth_daemon.daemon.worker.outcomes import retry_verdict
from sloth_daemon.daemon.worker.spawner import Outcome
from sloth_daemon.errors import ConfigError
from sloth_daemon.models import Job, JobState


def job(**kw) -> Job:
    return Job(1, ["x"], JobState.RUNNING, 1, 3, None, 0.0, "t", "w", "", 0.0, 0.0, **kw)


DEFAULTS = ("signal", "stall", "timeout")


@pytest.mark.parametrize("outcome, kw, retry, rule", [
    (Outcome(-9, "stalled: no output for 1s", killed_by="stall"), {}, True,
     "retry rule: stall retries (retry_on: signal,stall,timeout)"),
    (Outcome(-15, "matched --fail-on 'x': x", killed_by="match"), {}, False,
     "not retried: match is not in retry_on (signal,stall,timeout; --retry-on match asks)"),
    (Outcome(-15, "matched", killed_by="match"), {"rules": {"retry_on": ["match"]}}, True,
     "retry rule: match retries (--retry-on match)"),
    (Outcome(1, note="exceeded --mem 100M", over="mem"), {}, False,
     "not retried: mem is not in retry_on (signal,stall,timeout; --retry-on mem asks)"),
    (Outcome(-9, "timed out after 1s", killed_by="timeout"), {"rules": {"no_retry_on": ["timeout"]}}, False,
     "not retried: timeout is in --no-retry-on"),
    (Outcome(-11), {}, True, "retry rule: signal retries (retry_on: signal,stall,timeout)"),
    (Outcome(2), {"no_retry_exit": [2]}, False, "not retried: exit 2 is in --no-retry-exit"),
    (Outcome(126), {}, False, "not retried: exit 126 is in the default --no-retry-exit 126,127"),
    (Outcome(3), {"retry_exit": [1, 75]}, False, "not retried: exit 3 is not in --retry-exit 1,75"),
    (Outcome(75), {"retry_exit": [1, 75]}, True, "retry rule: exit 75 is in --retry-exit"),
    (Outcome(1), {"no_retry_exit": []}, True, "retry rule: exit 1 retries (--no-retry-exit none)"),
    (Outcome(1), {"no_retry_exit": [2]}, True, "retry rule: exit 1 retries (--no-retry-exit 2)"),
])
def test_each_end_is_decided_by_a_named_rule(outcome, kw, retry, rule):
    assert retry_verdict(job(**kw), outcome, outcome.describe()[1], DEFAULTS)[::2] == (retry, rule)


def test_a_job_without_rules_keeps_the_queues_backoff_and_one_with_them_its_own():
    def row(tries: int, rules: dict | None = None) -> dict:
        return {"tries": tries, "rules": json.dumps(rules) if rules else None}
    assert [job_backoff_s(row(t), 300.0) for t in (1, 2, 3, 9)] == [2.0, 4.0, 8.0, 300.0]
    own = {"backoff_s": 5.0, "backoff_cap_s": 600.0}
    assert [job_backoff_s(row(t, own), 300.0) for t in (1, 2, 3, 8)] == [5.0, 10.0, 20.0, 600.0]
    assert job_backoff_s(row(4000, own), 300.0) == 600.0  # no overflow
    assert job_backoff_s(row(1, {"backoff_cap_s": 1.0}), 300.0) == 1.0


def test_config_retry_on_takes_only_known_ends(tmp_path):
    f = tmp_path / "config.toml"
    f.write_text('retry_on = ["mem", "oom"]\n')
    with pytest.raises(ConfigError, match="retry_on must be a list of timeout, stall, match, mem, signal"):
        config.load(f)
    f.write_text('retry_on = []\n')
    assert config.load(f).retry_on == ()

"""`--after` takes at most 1,000 ids: more is refused with the cap named,
the option as typed and the count, and nothing queued, never cut to fit
(issue 20, seen once); the same through the socket."""

from __future__ import annotations

import pytest

from sloth_daemon.checks import MAX_PREREQS
from sloth_daemon.errors import BadRequest


@pytest.mark.parametrize("option", ["--after", "--after-any"])
def test_more_ids_than_the_cap_are_refused_naming_it_and_nothing_is_queued(harness, option):
    harness.start()
    n = MAX_PREREQS + 5
    ids = ",".join(str(i) for i in range(1, n + 1))
    p = harness.cli("add", option, ids, "--", "true")
    assert p.returncode == 2, p.stderr
    assert f"{option} names {n} jobs; a job may wait for at most {MAX_PREREQS}; nothing was queued" in p.stderr
    assert harness.call("status")["counts"]["blocked"] == 0 and harness.cli_json("ls", "--all")["jobs"] == []
    with pytest.raises(BadRequest, match=f"names {n} jobs; a job may wait for at most {MAX_PREREQS}"):
        harness.add("true", **{option.lstrip("-").replace("-", "_"): list(range(1, n + 1))})
    first = harness.add("true")
    ok = harness.cli("add", option, ",".join([str(first)] * n), "--", "true")  # one id many times: one job
    assert ok.returncode == 0, ok.stderr

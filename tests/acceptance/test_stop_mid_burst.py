"""`sloth daemon stop` while many short jobs run side by side, on the real
daemon, keeper and CLI (issue 20, item 2): a run that ended by itself
before the stop's kill reached it is recorded as it ended, never given
back (``interrupted``) to run again.

The keeper ends a run's tree after a scan of the user's processes; at a
stop it ends every run at once, one scan each, so the last SIGTERM goes
out a while after the kill was asked. A short job exits meanwhile. Each
job appends "ID ATTEMPT" to ran.txt as the last thing it does: a line
means that attempt finished its work by itself."""

from __future__ import annotations

import collections
from typing import Any

import pytest

from tests.acceptance.test_held_runs import histories, kinds
from tests.support.harness import TEST_CONFIG, Harness

pytestmark = pytest.mark.acceptance

LANES = TEST_CONFIG + "[lanes]\ndefault = 24\nsingle = 1\n"


@pytest.fixture
def h(make_harness) -> Harness:
    return make_harness(LANES)


def finished(h: Harness) -> collections.Counter[tuple[int, int]]:
    """(job, attempt) -> how many runs of it wrote their line."""
    path = h.home / "ran.txt"
    lines = path.read_text().split("\n") if path.exists() else []
    return collections.Counter((int(a), int(b)) for a, b in (ln.split() for ln in lines if ln))


def test_daemon_stop_never_gives_back_a_run_that_ended_by_itself(h):
    marks = h.home / "ran.txt"

    def job(hold: float, lane: str = "default") -> dict[str, Any]:
        line = f'sleep {hold:.2f}; echo "$SLOTH_JOB_ID $SLOTH_JOB_ATTEMPT" >> {marks}'
        return {"command": ["sh", "-c", line], "lane": lane}

    h.start()
    ids: list[int] = []
    for _ in range(3):  # a burst in a lane of 24 slots and one of 1, a stop in its midst
        ids += h.add_many([job(0.05, "single")] * 40 + [job(0.05 + 0.01 * (k % 20)) for k in range(120)])
        h.wait_for(lambda: len(finished(h)) >= len(ids) - 100, timeout_s=60, what="the burst running")
        h.cli("daemon", "stop", check=True)
        assert h.daemon is not None and h.daemon.wait(30) == 0
        h.start()
    h.wait_for(lambda: h.call("status")["counts"].get("done", 0) == len(ids), timeout_s=120,
               what="every job done")
    done = finished(h)
    given_back = []
    for i, (_state, ev) in histories(h, ids).items():
        assert kinds(ev).count("done") == 1, (i, ev)
        given_back += [(i, e["attempt"], e["message"], kinds(ev)) for e in ev
                       if e["kind"] in ("interrupted", "released", "reclaimed") and done[(i, e["attempt"])]]
    assert not given_back, ("finished by itself, recorded interrupted", given_back[:5])
    assert all(c == 1 for c in done.values()), "a finished run ran again"
    assert {j for j, _a in done} == set(ids)

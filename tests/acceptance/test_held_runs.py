"""Runs held in the keeper behind a running one (pipelining) meet a cancel,
a kill or a stop in the middle of a burst, on the real daemon and keeper,
driven through the real CLI (issue 20, items 1 and 2).

The daemon's view of a held run lags the keeper's: in a burst the keeper
starts one after another with no round trip. So every job notes from
inside, in one append, that it ran (``job attempt``); the test holds the
histories to what ran: a cancelled job never starts after its cancel is
recorded, a run that started is recorded as started (and how it ended), a
run that ended by itself is never given back to run again. The harness
fixture reaps the daemon, the keeper and every job, also on failure."""

from __future__ import annotations

import collections
import json
from pathlib import Path
from typing import Any

import pytest

from sloth_daemon import errors
from tests.support.harness import TEST_CONFIG, Harness

pytestmark = pytest.mark.acceptance

ONE_SLOT = TEST_CONFIG + "[lanes]\ndefault = 1\n"


@pytest.fixture
def h(make_harness) -> Harness:
    return make_harness(ONE_SLOT)


def burst(h: Harness, n: int) -> list[int]:
    """``n`` short jobs in the one slot, each appending "ID ATTEMPT" to ran.txt."""
    marks = h.home / "ran.txt"
    job = {"command": ["sh", "-c", f'echo "$SLOTH_JOB_ID $SLOTH_JOB_ATTEMPT" >> {marks}']}
    h.call("pause")
    ids: list[int] = []
    for _ in range(0, n, 500):
        ids += h.add_many([job] * min(500, n - len(ids)))
    h.call("resume")
    return ids


def ran(h: Harness) -> collections.Counter[int]:
    """job -> how many of its runs wrote their line."""
    path = h.home / "ran.txt"
    lines = path.read_text().split("\n") if path.exists() else []
    return collections.Counter(int(ln.split()[0]) for ln in lines if ln)


def settled(h: Harness, n: int) -> bool:
    counts = h.call("status")["counts"]
    return counts.get("done", 0) + counts.get("cancelled", 0) == n and not h.call("status")["running"]


def histories(h: Harness, ids: list[int]) -> dict[int, tuple[str, list[dict[str, Any]]]]:
    """job -> (its state, its history), a few hundred per `show`."""
    out = {}
    for k in range(0, len(ids), 250):
        for j in h.call("show", ids=ids[k:k + 250])["jobs"]:
            out[j["id"]] = (j["state"], j["events"])
    return out


def cancel(h: Harness, *args: str) -> dict[str, Any]:
    """`sloth cancel ARGS --json`: jobs that ended a moment ago are left
    alone (exit EXIT_CONFLICT, each said in ``skipped``)."""
    p = h.cli("cancel", "--json", *args)
    assert p.returncode in (0, errors.EXIT_CONFLICT), p.stderr
    return json.loads(p.stdout)


def kinds(events: list[dict[str, Any]]) -> list[str]:
    return [e["kind"] for e in events]


def assert_cancelled_truly(job_id: int, ev: list[dict[str, Any]], *, ran: bool) -> None:
    """A cancelled job's history: if its run started (it may have been
    ended before it wrote its line), it started before the cancel was
    recorded, and how it ended follows; if not, nothing of a claim is left."""
    if ran:
        assert "started" in kinds(ev), ("it ran, but its history says it never started", job_id, ev)
    if "started" in kinds(ev):
        at = {e["kind"]: e["at"] for e in ev}
        assert at["started"] <= at["cancelled"], ("it started after its cancel was recorded", job_id, ev)
        assert kinds(ev) == ["claimed", "started", "cancelled", "ended"], (job_id, ev)
    else:  # never ran: cancelled while queued, or withdrawn unstarted from the keeper first
        assert kinds(ev) == ["cancelled"], (job_id, ev)


def test_cancels_in_a_burst_never_let_a_held_run_start_after_its_cancel(h):
    """Three `sloth cancel` of the next jobs in line while a burst runs:
    many of them are held in the keeper by then (some already started
    there, unheard of). A cancelled job that ran started before its cancel
    was recorded, and its history says so: started, cancelled, ended."""
    h.start()
    ids = burst(h, 1500)
    doomed: set[int] = set()
    last = 0
    for _ in range(3):  # every third of the next 600: some are held in the keeper when it comes
        h.wait_for(lambda: max(ran(h), default=0) > last + 60, timeout_s=60, what="the burst running")
        last = max(ran(h))
        batch = [i for i in ids if i > last][:600:3]
        res = cancel(h, *map(str, batch))
        assert {j["id"] for j in res["jobs"]} | {s["id"] for s in res["skipped"]} == set(batch)
        doomed |= set(batch)
    h.wait_for(lambda: settled(h, len(ids)), timeout_s=120, what="every job done or cancelled")
    marks = ran(h)
    assert all(c == 1 for c in marks.values()), {i: c for i, c in marks.items() if c > 1}
    cancelled = 0
    for i, (state, ev) in histories(h, ids).items():
        if state == "done":
            assert marks[i] == 1 and kinds(ev) == ["claimed", "started", "done"], (i, ev)
            continue
        cancelled += 1
        assert state == "cancelled" and i in doomed, (i, state)
        assert_cancelled_truly(i, ev, ran=i in marks)
    assert cancelled >= 100  # the cancels came while most of their jobs were still ahead
    assert h.call("status")["pipeline"]["held"] > 0  # the keeper held next jobs: what this test is about


def test_a_cancel_of_the_whole_lane_mid_burst_starts_nothing_after_it(h):
    h.start()
    ids = burst(h, 800)
    h.wait_for(lambda: len(ran(h)) > 50, timeout_s=60, what="the burst running")
    cancel(h, "--lane", "default")
    h.wait_for(lambda: settled(h, len(ids)), timeout_s=60, what="every job done or cancelled")
    marks = ran(h)
    assert all(c == 1 for c in marks.values())
    states: collections.Counter[str] = collections.Counter()
    for i, (state, ev) in histories(h, ids).items():
        states[state] += 1
        if state == "done":
            assert marks[i] == 1 and kinds(ev) == ["claimed", "started", "done"], (i, ev)
        else:
            assert state == "cancelled", (i, state)
            assert_cancelled_truly(i, ev, ran=i in marks)
    assert states["cancelled"] > 100 and states["done"] > 50


def interrupted_for_real(h: Harness, job_id: int, ev: list[dict[str, Any]]) -> bool:
    """Each attempt recorded interrupted was ended by the keeper while it ran
    (its log has the keeper's note), none ended by itself first."""
    for e in ev:
        if e["kind"] == "interrupted":
            log = Path(h.call("logs", id=job_id, attempt=e["attempt"])["path"])  # created at its first byte
            text = log.read_text(errors="replace") if log.exists() else ""
            if "[sloth] interrupted: ending the process tree" not in text:
                return False
    return True


def test_daemon_stop_mid_burst_gives_held_runs_back_unstarted_and_records_what_ran(h):
    """`sloth daemon stop` twice in a burst in one slot, starting the
    daemon again each time. The held runs go back as never claimed; what
    the keeper had started or finished meanwhile is recorded as it ran; only
    the one run going at each stop is interrupted (and may run again)."""
    h.start()
    ids = burst(h, 1000)
    stops = 2
    for k in range(stops):
        h.wait_for(lambda: len(ran(h)) > 200 * (k + 1), timeout_s=60, what="the burst running")
        h.cli("daemon", "stop", check=True)
        assert h.daemon is not None and h.daemon.wait(30) == 0
        h.start()
    h.wait_for(lambda: h.call("status")["counts"].get("done", 0) == len(ids), timeout_s=120,
               what="every job done")
    marks = ran(h)
    interrupted = 0
    for i, (_state, ev) in histories(h, ids).items():
        k = kinds(ev)
        interrupted += k.count("interrupted")
        assert marks[i] <= k.count("started") and k.count("done") == 1, (i, marks[i], ev)
        assert marks[i] <= 1 + k.count("interrupted"), (i, marks[i], ev)  # again only after an interruption
        assert interrupted_for_real(h, i, ev), (i, ev)
    assert interrupted <= stops  # one slot: at most the one run going at each stop
    assert sum(marks.values()) <= len(ids) + interrupted

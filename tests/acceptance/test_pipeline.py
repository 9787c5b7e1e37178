"""Pipelining on the real daemon and keeper: a burst of short jobs in one
slot, each run once and never two at a time; a long job holds no successor
longer than HOT_S. Every job notes its own start and end (with flock) from
inside; the harness fixture reaps every process, also on failure."""

from __future__ import annotations

import pytest

from sloth_daemon.daemon.worker.pipeline import DEPTH, HOT_S
from tests.support.harness import TEST_CONFIG

pytestmark = pytest.mark.acceptance

ONE_SLOT = TEST_CONFIG + "[lanes]\ndefault = 1\n"

# fd 9 holds the lane's lock for the whole life of the job: a second job
# running at the same moment cannot take it, and says so.
NOTING_JOB = (
    'exec 9>>"$D/lane.lock"; flock -n 9 || flock "$D/rec.lock" sh -c \'echo "overlap $SLOTH_JOB_ID" >> "$D/rec"\'; '
    'flock "$D/rec.lock" sh -c \'echo "s $SLOTH_JOB_ID $(date +%s%N)" >> "$D/rec"\'; '
    'flock "$D/rec.lock" sh -c \'echo "e $SLOTH_JOB_ID $(date +%s%N)" >> "$D/rec"\''
)


@pytest.fixture
def harness1(make_harness):
    return make_harness(ONE_SLOT)


def test_a_burst_of_short_jobs_in_one_slot_runs_each_once_and_never_two_at_a_time(harness1, home):
    h = harness1
    h.start()
    h.call("pause")
    ids = h.add_many([{"command": ["sh", "-c", NOTING_JOB], "env": {**h.env, "D": str(home)}}
                      for _ in range(200)])
    h.call("resume")
    h.wait_for(lambda: h.call("status")["counts"].get("done", 0) == 200, timeout_s=120, what="200 jobs done")
    for i in ids:
        job = h.job(i)
        assert (job["state"], job["attempts"]) == ("done", 1), job
    lines = [ln.split() for ln in (home / "rec").read_text().splitlines()]
    assert [ln for ln in lines if ln[0] == "overlap"] == []
    starts = {int(ln[1]): int(ln[2]) for ln in lines if ln[0] == "s"}
    ends = {int(ln[1]): int(ln[2]) for ln in lines if ln[0] == "e"}
    assert sorted(starts) == sorted(ends) == sorted(ids)
    assert len(lines) == 400  # once each
    spans = sorted((starts[i], ends[i]) for i in ids)
    assert all(b[0] >= a[1] for a, b in zip(spans, spans[1:]))  # one at a time, as seen from inside
    st = h.call("status")["pipeline"]
    assert st["enabled"] and st["held"] > 0  # the keeper held next jobs: what this test is about


def test_a_long_job_holds_no_successor_longer_than_hot_s(harness1, home):
    h = harness1
    h.start()
    gate = home / "gate"
    h.call("pause")
    long = h.add("sh", "-c", f"i=0; while [ ! -e {gate} ] && [ $i -lt 3000 ]; do sleep 0.01; i=$((i+1)); done")
    short = h.add_many([{"command": ["true"]} for _ in range(3)])
    h.call("resume")
    held = min(DEPTH, len(short))  # successors held behind it, then taken back, one by one
    h.wait_for(lambda: h.call("status")["pipeline"]["taken_back"] >= held
               and [j["id"] for j in h.call("list", states=["running"])["jobs"]] == [long], timeout_s=30,
               what="the long job's successors taken back")
    for _ in range(5):  # and it stays so while the long job runs (polls, not timing)
        st = h.call("status")
        assert st["pending"] == [] and [r["id"] for r in st["running"]] == [long]
        running = h.call("list", states=["running"])["jobs"]
        assert [j["id"] for j in running] == [long]  # what `sloth ls` and `sloth status` show
        for i in short:
            job = h.job(i)
            assert (job["state"], job["attempts"]) == ("queued", 0)
            assert "claimed" not in [e["kind"] for e in h.events(i)]  # it never ran: no trace
    assert h.call("status")["pipeline"]["hot_s"] == HOT_S
    gate.touch()
    for i in short:
        job = h.wait_state(i, "done")
        assert job["attempts"] == 1 and [e["kind"] for e in h.events(i)] == ["claimed", "started", "done"]


def _runs(home) -> tuple[dict[int, list[tuple[int, int]]], list[list[str]]]:
    """job -> its (start, end) spans from inside, and any overlaps noted."""
    lines = [ln.split() for ln in (home / "rec").read_text().splitlines()]
    spans: dict[int, list[tuple[int, int]]] = {}
    opened: dict[int, int] = {}
    for kind, job, *rest in lines:
        if kind == "s":
            opened[int(job)] = int(rest[0])
        elif kind == "e":
            spans.setdefault(int(job), []).append((opened.pop(int(job)), int(rest[0])))
    return spans, [ln for ln in lines if ln[0] == "overlap"]


def _one_at_a_time(spans: dict[int, list[tuple[int, int]]]) -> bool:
    flat = sorted(s for ss in spans.values() for s in ss)
    return all(b[0] >= a[1] for a, b in zip(flat, flat[1:]))


def test_a_cancel_in_a_burst_leaves_held_jobs_cancelled_and_every_other_job_done_once(harness1, home):
    h = harness1
    h.start()
    h.call("pause")
    ids = h.add_many([{"command": ["sh", "-c", NOTING_JOB], "env": {**h.env, "D": str(home)}}
                      for _ in range(150)])
    h.call("resume")
    h.wait_for(lambda: h.call("status")["counts"].get("done", 0) >= 20, timeout_s=60, what="20 jobs done")
    doomed = set(ids[40:110])
    h.call("cancel", ids=sorted(doomed))
    h.wait_for(lambda: h.call("status")["counts"].get("done", 0) + h.call("status")["counts"].get("cancelled", 0)
               == 150 and not h.call("status")["running"], timeout_s=120, what="every job done or cancelled")
    spans, overlaps = _runs(home)
    assert overlaps == [] and _one_at_a_time(spans)
    cancelled = [i for i in ids if h.job(i)["state"] == "cancelled"]
    assert cancelled and set(cancelled) <= doomed
    for i in ids:
        job = h.job(i)
        if job["state"] == "done":
            assert job["attempts"] == 1 and len(spans[i]) == 1, job
        else:
            assert len(spans.get(i, [])) <= 1  # ran at most once, before the cancel reached it
            assert "reclaimed" not in [e["kind"] for e in h.events(i)]
    assert h.call("status")["pipeline"]["held"] > 0


KILLER = ('[ -e "$D/killed" ] || { : > "$D/killed"; kill -9 "$(cat "$D/daemon.pid")"; '
          'while [ ! -e "$D/restarted" ]; do sleep 0.01; done; }; ')


def test_a_daemon_killed_9_with_held_runs_then_restarted_runs_every_job_exactly_once(harness1, home):
    """Job 30 kills the daemon -9 the moment it starts, with no pause (in a
    burst the daemon holds the next jobs behind a run as it starts it, and
    takes them back once the run is HOT_S old: a pause before the kill
    could outlast that on a loaded machine): the runs the keeper
    holds behind it wait for a daemon; the next one takes them back (they
    never ran, so no trace) or adopts them if they have started, and runs
    the rest. From inside: every job ran once, never two at a time."""
    h = harness1
    daemon = h.start()
    (home / "daemon.pid").write_text(str(daemon.pid))
    h.call("pause")
    env = {**h.env, "D": str(home)}
    ids = h.add_many([{"command": ["sh", "-c", (KILLER if n == 30 else "") + NOTING_JOB], "env": env}
                      for n in range(80)])
    h.call("resume")
    h.wait_for(lambda: daemon.poll() is not None, timeout_s=60, what="the daemon killed by job 30")
    h.start()
    # Job 30 still runs (it waits for the file below), in the only slot:
    # what the new daemon takes back now is what the keeper held behind it.
    h.wait_for(lambda: h.call("status")["pipeline"]["taken_back"] >= 1, timeout_s=10,
               what="the runs held behind job 30 taken back")
    assert h.call("status")["pending"] == []
    (home / "restarted").touch()
    h.wait_for(lambda: h.call("status")["counts"].get("done", 0) == 80, timeout_s=120, what="80 jobs done")
    spans, overlaps = _runs(home)
    assert overlaps == [] and _one_at_a_time(spans)
    assert sorted(spans) == sorted(ids) and all(len(s) == 1 for s in spans.values())
    assert "adopted" in [e["kind"] for e in h.events(ids[30])]
    for i in ids[31:]:  # the held ones were taken back: no trace of the first claim or an adoption
        kinds = [e["kind"] for e in h.events(i)]
        assert kinds.count("started") == 1 and "adopted" not in kinds, (i, kinds)
        assert "reclaimed" not in kinds or "abandoned" in kinds  # only a claim the keeper never heard of

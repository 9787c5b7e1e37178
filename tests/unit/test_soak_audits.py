"""The chaos soak's audits (tests/support/soak_audits.py) catch what they
are for: each is fed a clean sample (no violation) and a doctored one with
a planted violation (caught, named). The token and slot audits are shown
on real probe processes (tests/support/probe_job.py) holding a token or a
lane's slots at once."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from tests.support import soak_audits as audits
from tests.support.soak_audits import EditTarget, Ev, ScheduleSeen, StoppedSeen

PROBE = str(Path(__file__).resolve().parents[1] / "support" / "probe_job.py")


def evs(job: int, *kinds: str) -> list[Ev]:
    """Events of one job from "kind:attempt" words, in that order."""
    out = []
    for i, w in enumerate(kinds):
        k, a = w.split(":")
        out.append(Ev(job * 1000 + i, job, k, int(a)))
    return out


CLEAN = (evs(1, "claimed:1", "started:1", "paused:1", "continued:1", "done:1")
         + evs(2, "held:0", "released:0", "claimed:1", "started:1", "failed:1", "reclaimed:2", "started:2",
               "done:2")
         + evs(3, "claimed:1", "cancelled:1")  # claimed, cancelled before it started: fine
         + evs(4, "claimed:1", "started:1", "fenced:1", "claimed:2", "adopted:2", "started:2", "done:2"))


# ------------------------------------------------------------ history
def test_a_complete_history_in_order_passes():
    assert audits.history(CLEAN, ran={1: {1}, 2: {1, 2}, 4: {1, 2}}) == []


def test_an_adopted_run_with_no_started_is_caught():
    bad = evs(5, "claimed:1", "adopted:1", "done:1")  # issue 28.9: the 300 s soak's three
    found = audits.history(CLEAN + bad)
    assert len(found) == 1 and "job 5: done of attempt 1 with no `started`" in found[0]


def test_paused_before_started_is_caught():
    found = audits.history(evs(6, "claimed:1", "paused:1", "started:1", "continued:1", "done:1"))
    assert found and "paused of attempt 1 with no `started` before it" in found[0]


def test_a_run_event_before_its_claim_and_claims_out_of_order_are_caught():
    found = audits.history(evs(7, "started:1", "claimed:1", "done:1") + evs(8, "claimed:2", "claimed:1"))
    assert any("job 7: started of attempt 1 before its claim" in f for f in found)
    assert any("job 8: attempt 1 claimed after attempt 2" in f for f in found)


def test_a_continue_without_a_pause_and_two_starts_are_caught():
    found = audits.history(evs(9, "claimed:1", "started:1", "continued:1", "started:1", "done:1"))
    assert any("continued without a pause" in f for f in found)
    assert any("started twice" in f for f in found)


def test_a_run_the_probe_saw_start_needs_its_started_event_unless_a_reboot_lost_it():
    hist = evs(10, "claimed:1", "failed:1", "claimed:2", "started:2", "done:2")
    found = audits.history(hist, ran={10: {1, 2}})
    assert len(found) == 1 and "attempt 1 ran (its probe started) with no `started`" in found[0]
    assert audits.history(hist, ran={10: {1, 2}}, excused={(10, 1)}) == []
    assert "no history at all" in audits.history([], ran={11: {1}})[0]


# ------------------------------------------------------------ schedules
def sched(rows: list[tuple[int, int | None, str]], next_slot: int, paused_at: float = 0) -> ScheduleSeen:
    return ScheduleSeen("tick", 2, 100, next_slot,
                        [{"slot": s, "manual": 0, "job_id": j, "note": n} for s, j, n in rows], paused_at)


def keys(rows: list[tuple[int, int | None, str]]) -> dict[str, list[int]]:
    return {f"schedule:tick:{s}": [j] for s, j, _ in rows if j is not None}


ROWS = [(102, 1, ""), (104, 2, ""), (112, 3, "catch-up, 10m late; 3 earlier slot(s) missed too"),
        (114, None, "skipped: job 3 is still running")]


def test_every_slot_once_or_coalesced_passes():
    assert audits.schedule_slots(sched(ROWS, 116, paused_at=120), keys(ROWS)) == []


def test_a_slot_missing_with_no_catch_up_note_is_caught():
    rows = ROWS[:2] + [(112, 3, "catch-up, 10m late")] + ROWS[3:]  # the note no longer covers 106-110
    found = audits.schedule_slots(sched(rows, 116), keys(rows))
    assert len(found) == 1 and "3 slot(s) missing before slot 112" in found[0]


def test_two_jobs_of_one_slot_and_a_keyed_job_without_a_row_are_caught():
    k = keys(ROWS)
    k["schedule:tick:104"] = [2, 9]
    k["schedule:tick:106"] = [10]
    found = audits.schedule_slots(sched(ROWS, 116), k)
    assert any("slot 104 names job 2, jobs with its key: [2, 9]" in f for f in found)
    assert any("jobs [10] have key schedule:tick:106 and no slot row" in f for f in found)


def test_progress_past_unhandled_slots_and_a_stalled_schedule_are_caught():
    found = audits.schedule_slots(sched(ROWS, 120), keys(ROWS))
    assert len(found) == 1 and "2 slot(s) skipped with no row" in found[0]
    found = audits.schedule_slots(sched(ROWS, 116, paused_at=200), keys(ROWS))
    assert len(found) == 1 and "behind the daemon's clock" in found[0]


def test_the_coalesced_count_is_read_from_both_notes():
    assert audits.coalesced("catch-up, 2h late; 7 earlier slot(s) missed too") == 7
    assert audits.coalesced("1700 older slot(s) dropped beyond the cap of 100") == 1700
    assert audits.coalesced("") == 0


# ------------------------------------------------------------ edits
def test_an_acknowledged_edit_must_be_visible():
    t = EditTarget(5, label="l1", priority=3, mark="m2", edits=2)
    rows = {5: {"state": "done", "label": "l1", "priority": 3, "command": ["python", "p", "--mark", "m2"]}}
    edited = [Ev(1, 5, "edited", 0), Ev(2, 5, "edited", 0)]
    assert audits.edits([t], rows, edited, {5: ["m2"]}, {}) == []
    lost = {5: {"state": "done", "label": "l0", "priority": 0, "command": ["python", "p", "--mark", "m1"]}}
    found = audits.edits([t], lost, edited[:1], {5: ["m1"]}, {})
    assert any("label 'l1' acknowledged, the row has 'l0'" in f for f in found)
    assert any("priority 3 acknowledged" in f for f in found)
    assert any("command with mark m2 acknowledged" in f for f in found)
    assert any("ran the command marked m1" in f for f in found)
    assert any("2 edit(s) acknowledged, 1 `edited` event(s)" in f for f in found)
    assert audits.edits([EditTarget(5, label="l1", unsure=True)], lost, [], {}, {}) == []


def test_a_held_job_started_before_its_release_is_caught():
    t = EditTarget(6, held=[(10.0, 20.0)])
    rows: dict[int, dict[str, object]] = {6: {"state": "done", "label": None, "priority": 0, "command": []}}
    assert audits.edits([t], rows, [], {}, {6: [20.5]}) == []
    found = audits.edits([t], rows, [], {}, {6: [15.0]})
    assert len(found) == 1 and "started at 15.00 before its release" in found[0]


def test_a_start_in_the_release_s_own_clock_tick_is_not_before_it():
    """probe_job.py's fork time is /proc's, in 10 ms ticks rounded down: a
    fork 3 ms after the release was asked (at 20.004) reads 20.00; only a
    tick that ends before the release is surely a start before it."""
    t = EditTarget(6, held=[(10.0, 20.004)])
    rows: dict[int, dict[str, object]] = {6: {"state": "done", "label": None, "priority": 0, "command": []}}
    assert audits.edits([t], rows, [], {}, {6: [20.0]}) == []
    assert len(audits.edits([t], rows, [], {}, {6: [19.99]})) == 1


# ------------------------------------------------------------ acks, stopped trees
def test_a_pause_or_resume_answered_must_be_in_the_history():
    hist = evs(1, "claimed:1", "started:1", "paused:1", "done:1")
    assert audits.acks([(1, "paused")], hist) == []
    found = audits.acks([(1, "paused"), (1, "continued")], hist)  # issue 28.9: "resumed", no event
    assert found == ["job 1: answered continued 1 time(s), 0 `continued` event(s)"]


def test_a_tree_left_stopped_after_its_run_ended_is_caught():
    legit = StoppedSeen(10, 1, "aa", "running", "aa", 5.0)  # paused on purpose, still its run
    ended = StoppedSeen(11, 2, "bb", "done", None, 3.0)
    superseded = StoppedSeen(12, 3, "cc", "running", "dd", 2.5)
    brief = StoppedSeen(13, 4, "ee", "cancelled", None, 0.5)
    found = audits.stopped([legit, ended, superseded, brief])
    assert len(found) == 2 and "pid 11 of job 2" in found[0] and "as run dd" in found[1]


# ------------------------------------------------------------ tokens and slots, real probes
def probe(rec: Path, job: str, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    e = dict(os.environ, SLOTH_JOB_ID=job, SLOTH_JOB_ATTEMPT="1", SLOTH_JOB_TOKEN=f"t{job}", **(env or {}))
    return subprocess.Popen([sys.executable, PROBE, str(rec), *args], env=e)


def run_pair(rec: Path, first: tuple[str, ...], second: tuple[str, ...], env1: dict[str, str],
             env2: dict[str, str]) -> None:
    a = probe(rec, "1", *first, env=env1)
    deadline = time.monotonic() + 10
    while not (rec / "starts").exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    b = probe(rec, "2", *second, env=env2)
    assert b.wait(10) == 0 and a.wait(10) == 0


def test_a_token_given_to_two_live_runs_is_caught_and_one_after_the_other_is_not(tmp_path):
    rec = tmp_path / "shared"
    rec.mkdir()
    run_pair(rec, ("--res", "gpu", "--hold", "0.6"), ("--res", "gpu,lic", "--hold", "0"),
             {"SLOTH_GPU": "0,1"}, {"SLOTH_GPU": "1", "SLOTH_LIC": "0"})
    lines = [ln.split() for ln in (rec / "token_collisions").read_text().splitlines()]
    found = audits.collisions(lines, "a resource token")
    assert len(found) == 1 and "job 2 attempt 1" in found[0] and "gpu:1" in found[0]
    apart = tmp_path / "apart"
    apart.mkdir()
    for job in ("3", "4"):  # one after the other: the lock goes with the process
        assert probe(apart, job, "--res", "gpu", env={"SLOTH_GPU": "0"}).wait(10) == 0
    assert not (apart / "token_collisions").exists()


def test_a_lane_running_more_slots_than_it_has_is_caught(tmp_path):
    run_pair(tmp_path, ("--lane-slots", "wide:3:2", "--hold", "0.6"), ("--lane-slots", "wide:3:2", "--hold", "0"),
             {}, {})
    lines = [ln.split() for ln in (tmp_path / "slot_collisions").read_text().splitlines()]
    found = audits.collisions(lines, "a lane slot")
    assert len(found) == 1 and "job 2" in found[0] and "wide:1/2of3" in found[0]


# ------------------------------------------------------------ outbox
def test_the_outbox_audit_passes_messages_delivered_once_or_pending_and_finds_lost_ones():
    msgs = [{"key": "job:1:1:started", "state": "sent"}, {"key": "job:1:1:done", "state": "pending"},
            {"key": "job:2:1:done", "state": "sent"}]
    assert audits.outbox(msgs, [(1, 1, "done"), (2, 1, "done")], ["job:1:1:started", "job:2:1:done"]) == []
    found = audits.outbox([*msgs[:2], {"key": "job:2:1:done", "state": "failed"}],
                          [(1, 1, "done"), (2, 1, "done"), (3, 2, "failed")], ["job:1:1:started", "job:9:1:done"])
    assert found == ["message job:2:1:done failed", "job 3 ended failed (attempt 2) with no message in the outbox",
                     "received job:9:1:done that no message is"]
    assert audits.outbox(msgs, [], ["job:1:1:started"]) == ["message job:2:1:done marked sent, never received"]

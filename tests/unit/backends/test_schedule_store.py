"""The schedules tables on both engines (backends/*/schedules.py): a firing
writes its slots and their jobs in one transaction, compare-and-set on
the schedule's version, one job per slot whatever happens."""

from __future__ import annotations

import pytest

from sloth_daemon.backends.schedule_rules import MANUAL, Firing, Occurrence, slot_key
from sloth_daemon.errors import IllegalTransition, ScheduleNotFound, StorageError
from sloth_daemon.spec import Defaults, JobSpec
from tests.support.queues import make_inserts_fail

RECIPE = {"every_s": 60, "job": {"command": ["true"]}}


def spec(name: str, slot, **kw) -> JobSpec:
    return JobSpec.parse({"command": ["true"], "key": slot_key(name, slot), **kw}, Defaults())


def test_add_get_list_and_a_duplicate_name_changes_nothing(q):
    rec = q.schedules.add("b", RECIPE, 60)
    assert rec["next_slot"] == 60 and rec["version"] == 0 and rec["recipe"] == RECIPE and not rec["paused"]
    with pytest.raises(IllegalTransition, match="exists already"):
        q.schedules.add("b", {"every_s": 5, "job": {"command": ["x"]}}, 5)
    assert q.schedules.get("b")["recipe"] == RECIPE
    assert [r["name"] for r in q.schedules.all()] == ["b"]
    with pytest.raises(ScheduleNotFound):
        q.schedules.get("nope")


def test_a_firing_writes_slot_and_job_together_and_moves_progress(q):
    q.schedules.add("b", RECIPE, 60)
    out = q.schedules.fire("b", Firing(0, [Occurrence(60, spec("b", 60))], 120, missed=2))
    job = q.get(out[0]["job_id"])
    assert job.key == "schedule:b:60"
    rec = q.schedules.get("b")
    assert (rec["next_slot"], rec["last_slot"], rec["last_job"], rec["missed"], rec["version"]) == (120, 60, job.id, 2, 1)
    assert rec["last_state"] == "queued"
    assert [(r["slot"], r["job_id"]) for r in q.schedules.runs("b")] == [(60, job.id)]


def test_a_stale_version_writes_nothing(q):
    q.schedules.add("b", RECIPE, 60)
    assert q.schedules.fire("b", Firing(0, [Occurrence(60, spec("b", 60))], 120)) is not None
    assert q.schedules.fire("b", Firing(0, [Occurrence(60, spec("b", 60))], 120)) is None
    assert sum(q.counts().values()) == 1


def test_a_slot_never_makes_two_jobs_even_when_its_first_job_ended(q):
    q.schedules.add("b", RECIPE, 60)
    first = q.schedules.fire("b", Firing(None, [Occurrence(60, spec("b", 60))]))[0]["job_id"]
    q.cancel(first)  # finished: the key alone would no longer stop a second
    again = q.schedules.fire("b", Firing(None, [Occurrence(60, spec("b", 60))]))
    assert again[0]["taken"] and sum(q.counts().values()) == 1


def test_a_failing_job_insert_leaves_no_slot_row_and_no_progress(q):
    """A crash between queuing the job and recording the slot cannot
    happen: they are one transaction (a failure inside undoes both)."""
    q.schedules.add("b", RECIPE, 60)
    make_inserts_fail(q, "boom")
    with pytest.raises(StorageError):
        q.schedules.fire("b", Firing(0, [Occurrence(60, spec("b", 60, label="boom"))], 120))
    rec = q.schedules.get("b")
    assert (rec["next_slot"], rec["version"], q.schedules.runs("b")) == (60, 0, [])
    assert q.schedules.fire("b", Firing(0, [Occurrence(60, spec("b", 60))], 120))[0]["job_id"]


def test_a_manual_run_while_one_is_active_is_the_same_job(q):
    q.schedules.add("b", RECIPE, 60)
    a = q.schedules.fire("b", Firing(None, [Occurrence(5, spec("b", MANUAL))]))[0]
    b = q.schedules.fire("b", Firing(None, [Occurrence(6, spec("b", MANUAL))]))[0]
    assert b["deduped"] and b["job_id"] == a["job_id"] and sum(q.counts().values()) == 1
    assert q.schedules.get("b")["next_slot"] == 60  # a run by hand leaves the slots alone


def test_two_manual_runs_in_one_second_are_two_jobs_and_two_rows(q):
    """Issue 28.6: the first ended (cancelled) in the same second: the second queues its own job."""
    q.schedules.add("b", RECIPE, 60)
    a = q.schedules.fire("b", Firing(None, [Occurrence(5, spec("b", MANUAL))]))[0]
    q.cancel(a["job_id"])
    b = q.schedules.fire("b", Firing(None, [Occurrence(5, spec("b", MANUAL))]))[0]
    assert b["job_id"] and b["job_id"] != a["job_id"] and not b.get("taken") and (a["slot"], b["slot"]) == (5, 6)
    assert [r["job_id"] for r in q.schedules.runs("b")] == [b["job_id"], a["job_id"]]
    assert q.schedules.get("b")["last_slot"] == 6  # a run by hand is the last run (LAST)


def test_chained_occurrence_waits_for_the_last_active_job(q):
    q.schedules.add("b", RECIPE, 60)
    first = q.schedules.fire("b", Firing(None, [Occurrence(60, spec("b", 60))]))[0]["job_id"]
    second = q.schedules.fire("b", Firing(None, [Occurrence(120, spec("b", 120, after_previous="after_any"))]))
    job = q.get(second[0]["job_id"])
    assert job.after_any == [first] and job.state.value == "blocked"
    q.cancel(first)
    third = q.schedules.fire("b", Firing(None, [Occurrence(180, spec("b", 180, after_previous="after_any"))]))
    assert q.get(third[0]["job_id"]).after_any == [job.id]


def test_skipped_slot_recorded_without_a_job(q):
    q.schedules.add("b", RECIPE, 60)
    out = q.schedules.fire("b", Firing(0, [Occurrence(60, None, "not run: busy")], 120))
    assert out[0]["job_id"] is None
    assert q.schedules.runs("b")[0]["note"] == "not run: busy" and sum(q.counts().values()) == 0


def test_change_pause_and_remove(q):
    q.schedules.add("b", RECIPE, 60)
    assert q.schedules.change("b", paused=True)["paused"]
    assert q.schedules.change("b", version=0, next_slot=5) is None  # version moved
    rec = q.schedules.change("b", paused=False, next_slot=600, recipe={**RECIPE, "every_s": 600})
    assert (rec["paused"], rec["next_slot"], rec["recipe"]["every_s"]) == (False, 600, 600)
    with pytest.raises(ScheduleNotFound):
        q.schedules.change("zz", paused=True)
    q.schedules.fire("b", Firing(None, [Occurrence(600, spec("b", 600))]))
    q.schedules.remove("b")
    with pytest.raises(ScheduleNotFound):
        q.schedules.remove("b")
    assert q.schedules.all() == [] and sum(q.counts().values()) == 1  # its jobs stay, as jobs


def test_a_schedule_made_again_under_a_removed_ones_name_gets_its_own_manual_run(q):
    """rm while its `schedule run` job is active (the job stays), add again:
    its run by hand was answered with the removed schedule's job."""
    q.schedules.add("b", RECIPE, 60)
    old = q.schedules.fire("b", Firing(None, [Occurrence(5, spec("b", MANUAL))]))[0]["job_id"]
    q.schedules.remove("b")
    q.schedules.add("b", RECIPE, 60)
    new = q.schedules.fire("b", Firing(None, [Occurrence(6, spec("b", MANUAL))]))[0]
    assert not new.get("deduped") and new["job_id"] != old
    assert q.get(old).state.value == "queued"  # the removed schedule's job stays

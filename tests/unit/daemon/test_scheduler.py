"""The Scheduler on a real queue (both engines) and an injected clock: a
simulated sleep, each overlap policy, jitter on the job, runs by hand, bad
input changing nothing. No sleeping: ``tick(now)`` is the timer firing."""

from __future__ import annotations

import pytest

from sloth_daemon.daemon.schedules.scheduler import Ports, Scheduler
from sloth_daemon.errors import BadRequest, IllegalTransition, JobNotFound, ScheduleNotFound
from sloth_daemon.models import ACTIVE_STATES
from sloth_daemon.spec import Defaults, JobSpec

H = 3600


class World:
    def __init__(self, q, clock):
        self.q, self.clock, self.cancelled, self.wakes = q, clock, [], 0

        def active(job_id):
            try:
                return q.get(job_id).state.value in ACTIVE_STATES
            except JobNotFound:
                return False

        def woke():
            self.wakes += 1

        self.s = Scheduler(q.schedules, Ports(now=clock.now, active=active, job=lambda d: JobSpec.parse(d, Defaults()),
                                              place=dict, queued=woke, cancel=lambda j, why: self.cancelled.append(j)), machine="m1")
        self.s.load()

    def add(self, name, **recipe):
        return self.s.add(name, {"job": {"command": ["true"]}, **recipe})

    def jobs(self, name):
        return [j for j in self.q.jobs(lane=None, limit=1000, states=None) if (j.key or "").startswith(f"schedule:{name}:")]

    def at(self, t):
        self.clock.set(t)
        return self.s.tick()


@pytest.fixture
def w(q, clock):
    return World(q, clock)


def test_a_simulated_sleep_of_three_slots_is_one_catch_up_then_on_time(w):
    w.add("b", every_s=H)
    assert w.s.earliest() == H and w.at(H - 1) == 0
    w.at(3 * H + 600)
    assert len(w.jobs("b")) == 1 and w.s.get("b")["missed"] == 2
    w.at(4 * H)
    assert len(w.jobs("b")) == 1  # the first still queued: --overlap skip
    assert "not run" in w.q.schedules.runs("b")[0]["note"]


def test_overlap_queue_runs_after_the_previous(w):
    w.add("b", every_s=H, overlap="queue")
    w.at(H)
    w.at(2 * H)
    first, second = sorted(w.jobs("b"), key=lambda j: j.id)
    assert second.after_any == [first.id] and second.state.value == "blocked"


def test_overlap_parallel_runs_beside(w):
    w.add("b", every_s=H, overlap="parallel")
    w.at(H)
    w.at(2 * H)
    assert [j.state.value for j in w.jobs("b")] == ["queued", "queued"]


def test_overlap_replace_ends_the_previous_then_runs(w):
    w.add("b", every_s=H, overlap="replace")
    w.at(H)
    first = w.jobs("b")[0]
    w.at(2 * H)
    second = max(w.jobs("b"), key=lambda j: j.id)
    assert w.cancelled == [first.id] and second.after_any == [first.id]


def test_jitter_delays_the_job_by_the_machines_fixed_offset(w):
    rec = w.add("b", every_s=H, jitter_s=600)
    w.at(H)
    job = w.jobs("b")[0]
    from sloth_daemon.daemon.schedules.policy import jitter_s

    assert job.not_before == pytest.approx(H + jitter_s("b", "m1", 600))
    assert rec["recipe"]["machine"] == "m1"


def test_a_run_by_hand_is_due_now_not_jittered(w, clock):
    """`sloth schedule run` means now: the machine's offset is for slots."""
    w.add("b", every_s=H, jitter_s=600)
    job_id = w.s.run_now("b")["job_id"]
    job = next(j for j in w.jobs("b") if j.id == job_id)
    assert job.not_before <= clock.now()


def test_two_runs_by_hand_at_once_are_one_job(w):
    w.add("b", every_s=H)
    a, b = w.s.run_now("b"), w.s.run_now("b")
    assert b["deduped"] and a["job_id"] == b["job_id"] and len(w.jobs("b")) == 1


def test_a_run_by_hand_keeps_the_schedules_next_slot(w, q):
    """A run by hand writes the schedule's row (a new version), and the
    scheduler's own entry for its next slot became stale: dropped, never
    pushed again, so after `sloth schedule run nightly` nightly never fired
    at its slots until the daemon restarted (the chaos soak's hourly "hand"
    schedule: "slots due were never handled")."""
    w.add("b", every_s=H)
    w.s.run_now("b")
    q.cancel_many(None, lane="default")  # the hand's job out of the way (--overlap skip)
    assert w.s.earliest() == H
    assert w.at(H) == 1 and [j.key for j in w.jobs("b") if j.key.endswith(f":{H}")] == [f"schedule:b:{H}"]


def test_two_schedulers_on_one_queue_fire_a_slot_once(w, q, clock):
    other = World(q, clock)
    w.add("b", every_s=H, missed="all", overlap="parallel")
    other.s.load()
    clock.set(3 * H)
    assert w.s.tick() + other.s.tick() == 1
    assert len(w.jobs("b")) == 3


def test_a_clock_stepped_back_makes_no_second_job(w):
    w.add("b", every_s=H, overlap="parallel")
    w.at(H)
    w.at(H - 1800)  # stepped back half an hour
    w.at(H + 5)
    assert len(w.jobs("b")) == 1


def test_paused_fires_nothing_and_resume_starts_from_the_next_slot(w):
    w.add("b", every_s=H)
    w.s.pause("b")
    assert w.s.earliest() is None and w.at(5 * H) == 0
    w.s.resume("b")
    assert w.s.earliest() == 6 * H and w.jobs("b") == []


@pytest.mark.parametrize("recipe, error", [
    ({"cron": "99 * * * *"}, BadRequest), ({"every_s": "soon"}, BadRequest), ({"every_s": H, "tz": "No/Where"}, BadRequest),
    ({"cron": "@daily", "tz": "No/Where"}, BadRequest), ({"every_s": H, "job": {"command": "not a list"}}, BadRequest)])
def test_bad_input_changes_nothing(w, recipe, error):
    fields = {"job": {"command": ["true"]}, **recipe}  # a zone is checked beside an interval too
    with pytest.raises(error):
        w.s.add("b", fields)
    assert w.q.schedules.all() == []


def test_unknown_and_duplicate_names(w):
    w.add("b", every_s=H)
    with pytest.raises(IllegalTransition):
        w.add("b", every_s=60)
    assert w.s.get("b")["recipe"]["every_s"] == H
    for op in (w.s.pause, w.s.resume, w.s.remove, w.s.run_now, w.s.get):
        with pytest.raises(ScheduleNotFound):
            op("nope")
    with pytest.raises(BadRequest):
        w.add("bad name!", every_s=H)


def test_a_turn_fires_at_most_a_batch_and_the_rest_follow(w):
    for i in range(10):
        w.add(f"s{i}", every_s=H)
    w.clock.set(H)
    assert w.s.tick(most=4) == 4 and w.s.earliest() == H  # the rest still due: the next turn, at once
    assert w.s.tick(most=4) == 4 and w.s.tick(most=4) == 2 and w.s.earliest() == 2 * H


def test_a_recipe_that_no_longer_makes_a_valid_job_records_the_slot_as_not_queued(w, q, clock):
    w.add("b", every_s=H)
    bad = World(q, clock)
    bad.s.ports.job = lambda d: (_ for _ in ()).throw(BadRequest("lane 'x' is gone"))
    bad.s.load()
    clock.set(H)
    bad.s.tick()
    assert w.jobs("b") == [] and "not queued: lane 'x' is gone" in q.schedules.runs("b")[0]["note"]
    assert q.schedules.get("b")["next_slot"] == 2 * H


def test_a_clock_set_far_ahead_then_put_right_does_not_silence_the_schedule_nor_repeat_a_slot(w):
    w.add("b", every_s=H, overlap="parallel")
    w.at(H)
    w.at(1000 * H + 5)  # the clock was set far ahead: one catch-up for slot 1000H
    assert w.s.get("b")["next_slot"] == 1001 * H
    w.clock.set(10 * H + 5)  # put right
    w.s.clock_jumped()
    assert w.s.get("b")["next_slot"] == 11 * H
    w.at(11 * H)
    assert sorted(j.key for j in w.jobs("b")) == sorted(f"schedule:b:{s}" for s in (H, 1000 * H, 11 * H))
    w.clock.set(H + 10)  # stepped back again, behind the first slot
    w.s.clock_jumped()
    w.at(2 * H)
    w.at(1000 * H + 5)
    keys = [j.key for j in w.jobs("b")]
    assert len(keys) == len(set(keys))  # slot H and slot 1000H: still one job each

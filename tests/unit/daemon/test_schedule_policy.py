"""Schedules' rules on an injected clock (daemon/schedules/): slots, DST
both ways, missed once/skip/all across a simulated sleep, overlap, jitter."""

from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo

import pytest

from sloth_daemon.daemon.schedules import policy, slots
from sloth_daemon.daemon.schedules.recipe import Recipe, parse
from sloth_daemon.errors import BadRequest

JOB = {"command": ["true"]}
H = 3600


def every(s: int, anchor: int = 0, **kw) -> Recipe:
    return Recipe(job=JOB, every_s=s, anchor=anchor, **kw)


def cron(expr: str, tz: str, **kw) -> Recipe:
    return Recipe(job=JOB, cron=expr, tz=tz, **kw)


def at(tz: str, *fields: int, fold: int = 0) -> int:
    return int(datetime(*fields, tzinfo=ZoneInfo(tz), fold=fold).timestamp())


def local(t: int, tz: str) -> str:
    return datetime.fromtimestamp(t, ZoneInfo(tz)).strftime("%Y-%m-%d %H:%M %Z")


def run_slots(r: Recipe, start: int, n: int) -> list[int]:
    out, t = [], start
    for _ in range(n):
        t = slots.next_after(r, t)
        out.append(t)
    return out


# ------------------------------------------------------------------ DST
@pytest.mark.parametrize("tz, day", [("Europe/Berlin", (2026, 3, 29)), ("America/New_York", (2026, 3, 8))])
def test_a_local_time_that_does_not_exist_fires_once_at_the_first_valid_instant_after_it(tz, day):
    r = cron("30 2 * * *", tz)
    got = run_slots(r, at(tz, *day, 0, 0) - 86400, 3)
    assert [local(t, tz) for t in got][1].endswith("03:00 " + ("CEST" if "Berlin" in tz else "EDT"))
    assert len(set(got)) == 3 and got == sorted(got)


@pytest.mark.parametrize("tz, day", [("Europe/Berlin", (2026, 10, 25)), ("America/New_York", (2026, 11, 1))])
def test_a_local_time_that_exists_twice_fires_once(tz, day):
    hour = 2 if "Berlin" in tz else 1
    r = cron(f"30 {hour} * * *", tz)
    start = at(tz, *day, 0, 0)
    got = run_slots(r, start, 2)
    assert got[0] == at(tz, *day, hour, 30, fold=0)  # the first of the two
    assert got[1] - got[0] == 25 * H  # the next day's: the repeat is not a slot


def test_every_quarter_hour_across_the_autumn_hour_fires_each_local_time_once():
    tz = "Europe/Berlin"
    r = cron("*/15 * * * *", tz)
    got = run_slots(r, at(tz, 2026, 10, 25, 1, 50), 8)
    shown = [local(t, tz)[11:16] for t in got]
    assert shown == ["02:00", "02:15", "02:30", "02:45", "03:00", "03:15", "03:30", "03:45"]
    assert len(set(shown)) == len(shown)


def test_every_quarter_hour_across_the_spring_gap_fires_once_at_the_jump():
    tz = "America/New_York"
    r = cron("*/15 * * * *", tz)
    got = run_slots(r, at(tz, 2026, 3, 8, 1, 40), 4)
    assert [local(t, tz)[11:16] for t in got] == ["01:45", "03:00", "03:15", "03:30"]


def test_latest_from_inside_the_repeated_hour_sees_the_first_pass():
    tz = "Europe/Berlin"
    r = cron("45 2 * * *", tz)
    now = at(tz, 2026, 10, 25, 2, 10, fold=1)  # the second 02:10
    due, n = slots.latest(r, now - 86400 + 1, now, 1)
    assert due == [at(tz, 2026, 10, 25, 2, 45, fold=0)] and n == 1


# ------------------------------------------------------------- missed
def test_missed_once_a_sleep_of_three_hours_through_every_hour_is_one_catch_up():
    r = every(H, missed="once")
    p = policy.plan(r, H, 3 * H + 600)  # slept from before 1h to 3h10m
    assert p.queue == [3 * H] and p.missed == 2 and p.next_slot == 4 * H and "catch-up" in p.note


def test_missed_skip_waits_for_the_next_slot():
    r = every(H, missed="skip")
    p = policy.plan(r, H, 3 * H + 600)
    assert p.queue == [] and p.skipped == 3 * H and p.missed == 3 and p.next_slot == 4 * H
    on_time = policy.plan(r, 4 * H, 4 * H + 2)
    assert on_time.queue == [4 * H]


def test_missed_all_queues_each_slot_up_to_the_cap_and_counts_the_dropped():
    r = every(60, missed="all")
    p = policy.plan(r, 60, 60 * 250 + 5)
    assert len(p.queue) == 100 and p.queue[-1] == 60 * 250 and p.queue[0] == 60 * 151
    assert p.dropped == 150 and "150" in p.note
    few = policy.plan(r, 60, 60 * 3)
    assert few.queue == [60, 120, 180] and few.dropped == 0


def test_missed_all_for_cron_counts_beyond_the_cap():
    r = cron("* * * * *", "UTC", missed="all")
    p = policy.plan(r, 60, 60 * 250 + 5)
    assert len(p.queue) == 100 and p.dropped == 150


def test_nothing_due_is_no_plan():
    assert policy.plan(every(H), 2 * H, 2 * H - 1) is None


# ------------------------------------------------------------ overlap
@pytest.mark.parametrize("mode, busy, want", [
    ("skip", True, policy.SKIP), ("skip", False, policy.QUEUE), ("queue", True, policy.AFTER),
    ("parallel", True, policy.QUEUE), ("replace", True, policy.REPLACE), ("replace", False, policy.QUEUE)])
def test_overlap(mode, busy, want):
    assert policy.overlap(mode, busy) == want


# ------------------------------------------------------------- jitter
def test_jitter_is_stable_per_machine_and_spreads_schedules():
    a = policy.jitter_s("backup", "machine-a", 600)
    assert a == policy.jitter_s("backup", "machine-a", 600)
    assert 0 <= a < 600
    assert a != policy.jitter_s("backup", "machine-b", 600)
    many = {int(policy.jitter_s(f"s{i}", "m", 600)) for i in range(100)}
    assert len(many) > 50  # a hundred catch-ups do not start in the same second
    assert policy.jitter_s("backup", "machine-a", 0) == 0


# ---------------------------------------------------------- checking
@pytest.mark.parametrize("bad", ["61 * * * *", "* * *", "0 0 31 2 *", "*/0 * * * *", "0 0 * * * *", "hello"])
def test_a_bad_cron_expression_is_refused_clearly(bad):
    with pytest.raises(BadRequest) as e:
        slots.check(parse({"cron": bad, "job": JOB}, machine="m", anchor=0))
    assert "cron" in e.value.message


@pytest.mark.parametrize("fields, word", [
    ({"every_s": 0.5, "job": JOB}, "every_s"), ({"job": JOB}, "exactly one"),
    ({"every_s": 60, "cron": "@daily", "job": JOB}, "exactly one"), ({"every_s": 60}, "job"),
    ({"every_s": 60, "job": {**JOB, "key": "k"}}, "key"), ({"every_s": 60, "job": JOB, "missed": "twice"}, "missed"),
    ({"every_s": 60, "job": JOB, "bogus": 1}, "bogus"), ({"every_s": "1h", "job": JOB}, "every_s")])
def test_bad_fields_are_refused(fields, word):
    with pytest.raises(BadRequest) as e:
        parse(fields, machine="m", anchor=0)
    assert word in e.value.message


def test_an_unknown_zone_is_refused():
    with pytest.raises(BadRequest, match="time zone"):
        slots.check(parse({"cron": "@daily", "tz": "Mars/Olympus", "job": JOB}, machine="m", anchor=0))


def test_aliases_and_words():
    assert slots.expression("@weekly") == "0 0 * * 0"
    assert "03:00" in slots.describe(cron("0 3 * * *", "Europe/Berlin"))
    assert slots.describe(every(3600)) == "every 1h"


def test_an_unknown_zone_is_refused_on_an_interval_too():
    """`schedule add --every 1h --tz Nope/Zone` was accepted (the zone was
    checked only beside --cron), and a later `edit --cron` then failed on a
    zone the schedule had been given long before."""
    with pytest.raises(BadRequest, match="time zone"):
        slots.check(parse({"every_s": 3600, "tz": "Mars/Olympus", "job": JOB}, machine="m", anchor=0))
    slots.check(parse({"every_s": 3600, "tz": "Europe/Berlin", "job": JOB}, machine="m", anchor=0))


def _one_by_one(r: Recipe, since: int, now: int) -> int:
    n = 0
    for s in slots._cron_forward(r, since - 1):
        if s > now:
            return n
        n += 1
    return n


@pytest.mark.parametrize("expr", ["* * * * *", "*/7 9-17 * * 1-5", "30 2 * * *", "0 0 L * *", "15 3 * * 0#2",
                                  "0,30 * 13 * 5", "59 23 * 2 *"])
@pytest.mark.parametrize("tz", ["UTC", "Europe/Berlin", "America/Santiago", "Asia/Kathmandu", "Australia/Lord_Howe"])
def test_slots_are_counted_a_day_at_a_time_as_many_as_one_by_one(expr, tz):
    """Issue 28.4: the count is the one-by-one count, across DST both ways,
    with since and now at odd seconds (spans with the zones' changes in them)."""
    r = cron(expr, tz)
    for since, now in [(at(tz, 2027, 3, 26, 7, 13, 5), at(tz, 2027, 4, 5, 16, 2, 0)),
                       (at(tz, 2027, 9, 3, 0, 0, 0), at(tz, 2027, 9, 6, 23, 59, 59)),
                       (at(tz, 2027, 10, 2, 0, 0, 0), at(tz, 2027, 10, 4, 1, 2, 3)),
                       (at(tz, 2027, 10, 30, 22, 0, 0), at(tz, 2027, 11, 1, 3, 0, 0)),
                       (at(tz, 2027, 6, 1, 12, 0, 1), at(tz, 2027, 6, 1, 12, 0, 0)),
                       (at(tz, 2027, 6, 1, 12, 0, 0), at(tz, 2027, 6, 1, 12, 0, 0))]:
        assert slots.count(r, since, now) == _one_by_one(r, since, now), (since, now)


def test_a_year_away_counts_every_missed_slot_at_once():
    """Issue 28.4: "* * * * *" after a year off is 525,600 slots, counted
    exactly (one by one, capped at 100,000, it took 0.84 s a schedule)."""
    r = cron("* * * * *", "UTC")
    since = at("UTC", 2027, 1, 1, 0, 0)
    p = policy.plan(r, since, since + 365 * 86400 - 1)
    assert p is not None and p.queue == [since + 365 * 86400 - 60] and p.missed == 525_600 - 1

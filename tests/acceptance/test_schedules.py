"""Schedules through the real daemon (issue 23): a sleep of hours is one
catch-up (the repository's LD_PRELOAD clock shim), a kill -9 at any moment
of firing leaves no duplicate and no gap, and three daemons on one
PostgreSQL queue make one job per slot. Waits are bounded, never timed."""

from __future__ import annotations

import random
import time
from collections import Counter

import pytest

from sloth_daemon.errors import SlothError
from tests.support.harness import TEST_CONFIG

pytestmark = pytest.mark.acceptance
HOUR = 3600


def schedule(h, name: str) -> dict:
    return h.cli_json("schedule", "show", name, "--limit", "100000", "--json")


def slot_jobs(h, name: str) -> list[dict]:
    jobs = h.call("list", limit=100000, states=["blocked", "queued", "running", "done", "failed", "cancelled"])["jobs"]
    return [j for j in jobs if (j.get("key") or "").startswith(f"schedule:{name}:")]


def test_a_sleep_of_hours_through_every_hour_is_one_catch_up(harness, fakeclock):
    harness.daemon_env.update(fakeclock.env())
    harness.start()
    harness.cli("schedule", "add", "hourly", "--every", "1h", "--", "true", check=True)
    harness.cli("schedule", "add", "each", "--every", "1h", "--missed", "all", "--overlap", "parallel",
                "--", "true", check=True)
    harness.cli("schedule", "add", "skipper", "--every", "1h", "--missed", "skip", "--", "true", check=True)
    fakeclock.jump(3 * HOUR + 600)  # the laptop slept 3h10m: three slots passed
    harness.wait_for(lambda: len(slot_jobs(harness, "each")) == 3, what="the three slots of --missed all")
    harness.wait_for(lambda: schedule(harness, "skipper")["runs"], what="the skipped slot recorded")
    hourly = schedule(harness, "hourly")
    assert len(slot_jobs(harness, "hourly")) == 1, hourly  # once, not three times
    assert hourly["schedule"]["missed_slots"] == 2 and "catch-up" in hourly["runs"][0]["note"]
    assert slot_jobs(harness, "skipper") == [] and "not run" in schedule(harness, "skipper")["runs"][0]["note"]
    time.sleep(2.5)  # more clock checks pass: still nothing more
    assert len(slot_jobs(harness, "hourly")) == 1 and len(slot_jobs(harness, "each")) == 3


def test_kill_9_at_any_moment_of_firing_leaves_no_duplicate_and_no_gap(harness):
    harness.start()
    harness.cli("schedule", "add", "tick", "--every", "1s", "--missed", "all", "--overlap", "parallel",
                "--", "true", check=True)
    rng = random.Random(23)
    for _ in range(8):
        time.sleep(rng.uniform(0.2, 1.5))
        harness.kill9_all()
        harness.start()
    time.sleep(1.5)
    jobs = slot_jobs(harness, "tick")
    slots = sorted(int(j["key"].rsplit(":", 1)[1]) for j in jobs)
    assert Counter(j["key"] for j in jobs).most_common(1)[0][1] == 1  # no slot twice
    assert slots == list(range(slots[0], slots[-1] + 1)), slots  # no gap (--missed all)
    assert len(slots) >= 8


@pytest.mark.postgres
def test_three_daemons_on_one_postgres_queue_make_one_job_per_slot(make_harness, pg_url):
    hs = [make_harness(TEST_CONFIG + f'queue_url = "{pg_url}"\nhost = "m{i}"\npoll_s = "1s"\n', f"m{i}")
          for i in range(3)]
    for h in hs:
        h.start()
    hs[0].cli("schedule", "add", "shared", "--every", "1s", "--missed", "all", "--overlap", "parallel",
              "--anywhere", "--", "true", check=True)
    hs[0].cli("schedule", "add", "home", "--every", "1s", "--", "true", check=True)  # runs where it was made
    hs[0].cli("schedule", "add", "there", "--every", "1s", "--on", "m2", "--", "true", check=True)
    time.sleep(2.0)  # every daemon has read it (a poll)
    hs[1].kill9_all()  # one machine crashes and comes back meanwhile
    hs[1].start()
    time.sleep(4.0)
    for name in ("shared", "home", "there"):
        hs[0].cli("schedule", "pause", name, check=True)
    jobs = slot_jobs(hs[2], "shared")
    slots = sorted(int(j["key"].rsplit(":", 1)[1]) for j in jobs)
    assert len(slots) >= 4 and len(set(slots)) == len(slots), slots
    assert slots == list(range(slots[0], slots[-1] + 1)), slots
    for name, host in (("home", "m0"), ("there", "m2")):
        placed = slot_jobs(hs[2], name)
        assert placed and {j["place"] for j in placed} == {host}, placed
        ran = [j for j in placed if j["worker"]]
        assert ran and all(f":{host}:" in j["worker"] for j in ran), ran


def test_bad_input_on_the_cli_and_the_socket_changes_nothing_and_the_daemon_keeps_serving(harness):
    harness.start()
    for args, code in [(("add", "b", "--cron", "0 25 * * *", "--", "true"), 2),
                       (("add", "b", "--every", "soon", "--", "true"), 2),
                       (("add", "b", "--cron", "@daily", "--tz", "Mars/Base", "--", "true"), 2),
                       (("add", "b", "--every", "1h"), 2), (("show", "nope"), 4), (("run", "nope"), 4),
                       (("rm", "nope"), 4)]:
        p = harness.cli("schedule", *args)
        assert p.returncode == code, (args, p.stdout, p.stderr)
        assert "error" in p.stderr and "Traceback" not in p.stderr
    for args in [{"name": ["x"], "recipe": {}}, {"name": "b", "recipe": "every day"},
                 {"name": "b", "recipe": {"every_s": 60, "job": {"command": ["true"]}, "evil": 1}}]:
        with pytest.raises(SlothError) as e:
            harness.call("schedule_add", **args)
        assert e.value.exit_code == 2
    assert harness.call("ping")["pong"]
    assert harness.cli_json("schedule", "ls", "--json") == {"schedules": []}
    harness.cli("schedule", "add", "b", "--every", "1h", "--", "true", check=True)
    p = harness.cli("schedule", "add", "b", "--every", "2h", "--", "false")
    assert p.returncode == 6 and "exists already" in p.stderr
    assert harness.cli_json("schedule", "show", "b", "--json")["schedule"]["every_s"] == 3600


def _berlin(*fields: int, fold: int = 0) -> float:
    from datetime import datetime
    from zoneinfo import ZoneInfo

    return datetime(*fields, tzinfo=ZoneInfo("Europe/Berlin"), fold=fold).timestamp()


def test_dst_through_the_daemon_the_skipped_time_fires_once_at_the_jump_the_repeated_once(make_harness, fakeclock):
    """The daemon's clock (the shim) set just before Berlin's spring jump,
    then just before the autumn repeat: "30 2 * * *" fires at 03:00 CEST
    (02:30 does not exist), and 02:30 fires once though it comes twice."""
    h = make_harness()
    h.daemon_env.update(fakeclock.env(), TZ="Europe/Berlin")
    fakeclock.jump(_berlin(2027, 3, 28, 1, 59, 57) - time.time())
    h.start()
    h.cli("schedule", "add", "spring", "--cron", "30 2 * * *", "--", "true", check=True)
    jump = int(_berlin(2027, 3, 28, 3, 0))
    assert h.cli_json("schedule", "show", "spring", "--json")["schedule"]["next_run"] == jump
    h.wait_for(lambda: slot_jobs(h, "spring"), what="the slot at the spring jump")
    assert [j["key"] for j in slot_jobs(h, "spring")] == [f"schedule:spring:{jump}"]
    assert h.cli_json("schedule", "show", "spring", "--json")["schedule"]["next_run"] == int(_berlin(2027, 3, 29, 2, 30))

    fakeclock.jump(_berlin(2027, 10, 31, 2, 29, 57) - (time.time() + fakeclock.offset))
    h.cli("schedule", "add", "autumn", "--cron", "30 2 * * *", "--missed", "skip", "--", "true", check=True)
    first = int(_berlin(2027, 10, 31, 2, 30))
    h.wait_for(lambda: slot_jobs(h, "autumn"), what="the first 02:30")
    fakeclock.jump(3600)  # 02:30 again, in CET
    time.sleep(3.0)  # clock checks pass, the second 02:30 with them
    assert [j["key"] for j in slot_jobs(h, "autumn")] == [f"schedule:autumn:{first}"]
    assert h.cli_json("schedule", "show", "autumn", "--json")["schedule"]["next_run"] == int(_berlin(2027, 11, 1, 2, 30))

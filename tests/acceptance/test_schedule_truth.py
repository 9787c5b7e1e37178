"""Schedules that tell the truth and never stall (issues 28 and 30), each
through the real daemon: a shell line that cannot parse is refused, every
`schedule run` queues a job, `schedule ls`/`show` say when a job will be
queued, what ran last and where it runs, read the queue without starting a
daemon, a catch-up after a year away never stalls the socket, a replaced
occurrence ends before the next starts, and a schedule's zone is its own.
Waits are bounded, never timed."""

from __future__ import annotations

import time

import pytest

from tests.support.harness import TEST_CONFIG, processes_with_env

pytestmark = pytest.mark.acceptance


def _show(h, name: str) -> dict:
    return h.cli_json("schedule", "show", name)


# ------------------------------------------------------------- issue 28.12
def test_a_shell_line_that_does_not_parse_is_refused_by_schedule_add_and_edit(harness):
    harness.start()
    p = harness.cli("schedule", "add", "b", "--every", "1h", "--shell", "--", 'echo "unterminated')
    assert p.returncode == 2 and "not a shell command sh can read" in p.stderr, (p.stdout, p.stderr)
    assert "the schedule was not added" in p.stderr
    assert harness.cli_json("schedule", "ls") == {"schedules": []}
    harness.cli("schedule", "add", "b", "--every", "1h", "--shell", "--", "echo fine | wc -c", check=True)
    p = harness.cli("schedule", "edit", "b", "--shell", "--", "for f in *; do echo")
    assert p.returncode == 2 and "the schedule was not changed" in p.stderr, (p.stdout, p.stderr)
    assert _show(harness, "b")["schedule"]["command"] == ["/bin/sh", "-c", "echo fine | wc -c"]


# -------------------------------------------------------------- issue 28.6
def test_every_schedule_run_queues_a_job_even_twice_in_one_second(harness):
    harness.start()
    harness.cli("schedule", "add", "b", "--every", "1h", "--", "true", check=True)
    ids = []
    for _ in range(3):
        while time.time() % 1 > 0.5:  # the runs below fall in one second
            time.sleep(0.05)
        first = harness.call("schedule_run", name="b")
        harness.call("cancel", ids=[first["id"]])
        second = harness.call("schedule_run", name="b")
        assert isinstance(first["id"], int) and isinstance(second["id"], int), (first, second)
        assert second["id"] != first["id"] and not second["deduped"]
        harness.call("cancel", ids=[second["id"]])
        ids += [first["id"], second["id"]]
    assert len(set(ids)) == 6
    out = harness.cli("schedule", "run", "b", check=True).stdout
    assert out.split()[0].isdigit(), out
    # while a run is queued, another names it (said), never a silent nothing
    harness.call("pause")
    one = harness.cli_json("schedule", "run", "b")
    again = harness.cli("schedule", "run", "b", check=True).stdout
    assert again.startswith(f"{one['id']} ") and "already queued or running" in again, again


# -------------------------------------------------------- issue 30, the truth
def test_schedule_ls_and_show_say_where_when_and_what_ran_last(harness):
    harness.start()
    harness.cli("schedule", "add", "home", "--cron", "0 3 * * *", "--jitter", "10m", "--", "true", check=True)
    harness.cli("schedule", "add", "any", "--every", "1h", "--anywhere", "--", "true", check=True)
    home, anyw = _show(harness, "home")["schedule"], _show(harness, "any")["schedule"]
    text = harness.cli("schedule", "show", "home", check=True).stdout
    assert "runs on this machine" in text and "runs anywhere" not in text, text
    assert "runs anywhere" in harness.cli("schedule", "show", "any", check=True).stdout
    assert "rules" not in text and "DST" not in text, text  # the rules are in --help and docs, not every call
    # NEXT is when the job will be queued (the slot plus this machine's jitter); the slot is its own field
    assert home["jitter_offset_s"] > 0 and home["next_run"] == home["next_slot"] + int(home["jitter_offset_s"])
    assert anyw["next_run"] == anyw["next_slot"]
    listed = {s["name"]: s for s in harness.cli_json("schedule", "ls")["schedules"]}
    assert listed["home"]["next_run"] == home["next_run"] and listed["home"]["next_slot"] == home["next_slot"]
    # LAST after a `schedule run` is that run, as OUTCOME is
    job = harness.cli_json("schedule", "run", "any")["id"]
    harness.wait_state(job, "done")
    row = [ln for ln in harness.cli("schedule", "ls", check=True).stdout.splitlines() if ln.startswith("any ")][0]
    assert "done" in row and " - " not in row.split("done")[0][-6:], row
    assert harness.cli_json("schedule", "ls")["schedules"][0]["last_run"] is not None


# ------------------------------------------------------------- issue 28.16
def test_schedule_ls_and_show_read_the_queue_and_never_start_a_daemon(harness, tmp_path):
    for home in (harness.home, tmp_path / "mistyped"):
        env = dict(harness.env, SLOTH_HOME=str(home))
        harness.env, saved = env, harness.env
        try:
            p = harness.cli("schedule", "ls")
            assert p.returncode == 0 and "no schedules" in p.stdout, (p.stdout, p.stderr)
            p = harness.cli("schedule", "show", "nightly")
            assert p.returncode == 4 and "nightly" in p.stderr, (p.stdout, p.stderr)
        finally:
            harness.env = saved
        assert not processes_with_env("SLOTH_HOME", str(home))  # no daemon was started
        assert not list(home.rglob("*.db")) if home.exists() else True  # and no queue made
    # a queue a daemon made, read with the daemon stopped: the same answer, said read-only
    harness.start()
    harness.cli("schedule", "add", "b", "--every", "1h", "--", "true", check=True)
    before = _show(harness, "b")
    harness.stop()
    p = harness.cli("schedule", "show", "b", "--json", check=True)
    assert "no daemon is running" in p.stderr
    import json

    after = json.loads(p.stdout)
    assert after["schedule"] == before["schedule"]
    assert "no daemon is running" in harness.cli("schedule", "ls", check=True).stderr  # show started none


# -------------------------------------------------------------- issue 28.4
def test_a_year_away_with_64_minutely_schedules_never_stalls_the_daemon(harness, fakeclock):
    """The machine off for a year (the clock shim): `daemon start` answers
    within its 10 s, `status` at once, and each schedule's catch-up counts
    every missed slot (one by one it was 0.84 s a schedule, capped at 100,000)."""
    harness.env.update(fakeclock.env())
    harness.daemon_env.update(fakeclock.env())
    harness.start()
    for i in range(64):
        harness.call("schedule_add", name=f"m{i:02d}",
                     recipe={"cron": "* * * * *", "job": {"command": ["true"], "cwd": str(harness.home)}})
    assert harness.stop() == 0
    fakeclock.jump(365 * 86400)
    p = harness.cli("daemon", "start")
    assert p.returncode == 0, (p.stdout, p.stderr)
    from sloth_daemon.cli.client import Client

    with Client(harness.socket, timeout_s=10) as c:
        assert c.call("status")["pid"]
    harness.wait_for(lambda: all(s["last_run"] for s in harness.call("schedule_ls")["schedules"]),
                     what="every schedule's catch-up")
    missed = {s["missed_slots"] for s in harness.call("schedule_ls")["schedules"]}
    # a year of minutes, less the run; the 64 adds may straddle a minute (a loaded machine): then two counts, 1 apart
    assert max(missed) - min(missed) <= 1 and all(525_600 - 2 <= m <= 525_600 + 2 for m in missed), missed


# ---------------------------------------------------------- issues 28.7, 28.8
def _next_local(tz: str, hour: int, now: float) -> int:
    from datetime import datetime, timedelta
    from zoneinfo import ZoneInfo

    z = ZoneInfo(tz)
    t = datetime.fromtimestamp(now, z).replace(hour=hour, minute=0, second=0, microsecond=0)
    return int((t if t.timestamp() > now else t + timedelta(days=1)).timestamp())


def test_local_time_schedules_follow_a_change_of_the_local_zone_under_a_running_daemon(harness, tmp_path):
    """The zone file changes from UTC to Tokyo (as `timedatectl set-timezone`
    does; here the file the daemon reads, $SLOTH_LOCALTIME): "0 3 * * *" on
    local time moves to 03:00 in Tokyo within a clock check, no restart."""
    import os
    import shutil

    zone = tmp_path / "localtime"
    shutil.copyfile("/usr/share/zoneinfo/UTC", zone)
    harness.daemon_env.pop("TZ", None)
    harness.daemon_env["SLOTH_LOCALTIME"] = str(zone)
    harness.start()
    harness.cli("schedule", "add", "night", "--cron", "0 3 * * *", "--", "true", check=True)
    harness.cli("schedule", "add", "hourly", "--every", "1h", "--", "true", check=True)
    hourly = _show(harness, "hourly")["schedule"]["next_slot"]
    assert _show(harness, "night")["schedule"]["next_slot"] == _next_local("UTC", 3, time.time())
    shutil.copyfile("/usr/share/zoneinfo/Asia/Tokyo", tmp_path / "new")
    os.replace(tmp_path / "new", zone)
    tokyo = _next_local("Asia/Tokyo", 3, time.time())
    harness.wait_for(lambda: _show(harness, "night")["schedule"]["next_slot"] == tokyo, timeout_s=20,
                     what="the schedule moved to 03:00 in Tokyo")
    assert _show(harness, "hourly")["schedule"]["next_slot"] == hourly  # an interval is no local time
    assert "local time zone changed" in harness.log_text()


@pytest.mark.postgres
def test_on_a_shared_queue_a_schedule_keeps_the_zone_of_the_machine_that_made_it(make_harness, pg_url):
    """mA (UTC) adds "0 3 * * *"; mB (Asia/Kathmandu, +05:45) computes its
    slots (a pause and a resume there) in UTC too: 03:00 UTC, not 03:00 in
    Kathmandu; both machines show the same zone and the same next slot."""
    hs = []
    for name, tz in (("mA", "UTC"), ("mB", "Asia/Kathmandu")):
        h = make_harness(f'{TEST_CONFIG}queue_url = "{pg_url}"\nhost = "{name}"\npoll_s = "1s"\n', name)
        h.daemon_env["TZ"] = tz
        h.start()
        hs.append(h)
    ma, mb = hs
    ma.cli("schedule", "add", "night", "--cron", "0 3 * * *", "--anywhere", "--", "true", check=True)
    ma.cli("schedule", "add", "hourly", "--cron", "0 * * * *", "--anywhere", "--", "true", check=True)
    made = _show(ma, "night")["schedule"]
    assert made["tz"] == "UTC" and "(UTC)" in made["spec"], made
    assert made["next_slot"] == _next_local("UTC", 3, time.time())
    assert ma.stop() == 0  # mB alone computes from here on
    for name in ("night", "hourly"):
        mb.cli("schedule", "pause", name, check=True)
        mb.cli("schedule", "resume", name, check=True)
    assert _show(mb, "night")["schedule"]["next_slot"] == _next_local("UTC", 3, time.time())
    nxt = _show(mb, "hourly")["schedule"]["next_slot"]
    assert nxt % 3600 == 0, nxt  # on the hour in UTC, not at :15 (Kathmandu's hour)
    # the zone is what the schedule says: --tz is kept as given
    mb.cli("schedule", "add", "kt", "--cron", "0 3 * * *", "--tz", "Asia/Kathmandu", "--", "true", check=True)
    assert _show(mb, "kt")["schedule"]["next_slot"] == _next_local("Asia/Kathmandu", 3, time.time())


# -------------------------------------------------------------- issue 28.5
def test_overlap_replace_starts_the_next_occurrence_only_after_the_old_process_ended(harness):
    """A lane of 4, `--every 3s --overlap replace`, a job that takes 1 s to
    exit on SIGTERM: no two runs overlap (each writes when it starts and when
    its process ends), and the replaced one's history says the schedule
    replaced it, not the user."""
    # A grace long enough that SIGKILL never cuts the trap short on a loaded
    # machine: a killed run writes no end line, and then nothing proves it ended.
    (harness.home / "config.toml").write_text(TEST_CONFIG.replace('kill_grace_s = "2s"', 'kill_grace_s = "20s"'))
    harness.start()
    harness.cli("lane", "set", "rl", "-c", "4", "--create", check=True)
    spans = harness.home / "spans"
    script = (f"echo start $SLOTH_JOB_ID $(date +%s.%N) >> {spans}; "
              f"trap 'sleep 1; echo end $SLOTH_JOB_ID $(date +%s.%N) >> {spans}; exit 0' TERM; "
              "while :; do sleep 0.1; done")
    harness.cli("schedule", "add", "r", "--every", "3s", "--overlap", "replace", "--lane", "rl", "--shell",
                "--", script, check=True)
    harness.wait_for(lambda: spans.exists() and spans.read_text().count("end") >= 3, timeout_s=40,
                     what="three occurrences replaced")
    harness.cli("schedule", "pause", "r", check=True)
    starts: dict[str, float] = {}
    ends: dict[str, float] = {}
    for word, job, at in (ln.split() for ln in spans.read_text().splitlines()):
        (starts if word == "start" else ends)[job] = float(at)
    order = sorted(starts, key=starts.get)  # type: ignore[arg-type]
    for job, after in zip(order, order[1:]):  # each run ended (its trap ran) before the next one started
        assert job in ends, (job, starts, ends)
        assert starts[after] >= ends[job], (job, after, starts, ends)
    jobs = [j for j in harness.call("list", limit=100, states=["cancelled"])["jobs"]
            if (j.get("key") or "").startswith("schedule:r:")]
    assert jobs
    said = [e.get("message") or "" for e in harness.events(jobs[0]["id"])]
    assert any("replaced by the next occurrence of schedule r" in m for m in said), said
    assert not any("cancelled by user" in m for m in said), said

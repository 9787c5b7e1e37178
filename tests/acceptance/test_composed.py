"""How the round-3 features compose (edits, holds, gates, pauses,
schedules), through the real daemon: what one branch checks at add must
hold when another branch's command changes the job later."""

from __future__ import annotations

import json

import pytest

from tests.support.inhibit import with_fake_inhibit
from tests.support.harness import TEST_CONFIG

pytestmark = pytest.mark.acceptance


def test_edit_into_a_lane_too_small_for_the_jobs_slots_is_refused(make_harness):
    """`add --slots 3 --lane tiny` (tiny runs 1) is refused: it would never
    start; `edit --lane tiny` of a held --slots 3 job must be too, and
    change nothing."""
    h = make_harness(TEST_CONFIG + "[lanes]\nbig = 3\ntiny = 1\n")
    h.start()
    jid = h.add("true", lane="big", slots=3, hold=True)
    p = h.cli("edit", str(jid), "--lane", "tiny")
    assert p.returncode != 0, p.stdout + p.stderr
    assert "would never start" in p.stderr
    assert h.job(jid)["lane"] == "big"
    assert "edited" not in [e["kind"] for e in h.events(jid)]
    h.cli("release", str(jid), check=True)
    h.wait_state(jid, "done", timeout_s=20)


def test_edit_across_lanes_with_their_own_limits_is_refused(make_harness):
    """[lanes.heavy] mem and nice are given to a job when it is added; `edit
    --lane heavy` moved a job in without them (it ran unlimited) and `edit
    --lane default` moved one out with them. Refused, changing nothing,
    while the lanes' held settings differ; a move between plain lanes works."""
    h = make_harness(TEST_CONFIG + '[lanes.heavy]\nmem = "1G"\nnice = 10\n')
    h.start()
    plain = h.add("true", hold=True)
    heavy = h.add("true", lane="heavy", hold=True)
    for jid, lane in ((plain, "heavy"), (heavy, "default")):
        p = h.cli("edit", str(jid), "--lane", lane)
        assert p.returncode != 0 and "[lanes.heavy]" in p.stderr, p.stdout + p.stderr
        assert "edited" not in [e["kind"] for e in h.events(jid)]
    assert h.job(plain)["lane"] == "default" and h.job(heavy)["lane"] == "heavy"
    h.cli("edit", str(plain), "--lane", "other", check=True)
    assert h.job(plain)["lane"] == "other"


def test_status_and_wait_say_a_paused_job_is_paused(harness):
    """`ls` said paused; `status` listed it under "running" and `wait`'s
    live line said "running for 3s" while its tree was stopped."""
    import io

    from sloth_daemon.cli.wait import _View

    h = harness
    h.start()
    jid = h.add("sleep", "30")
    h.wait_for(lambda: (h.job(jid)["runner"] or {}).get("pid"), 15, "the job to run")
    h.cli("pause", "--job", str(jid), check=True)
    out = h.cli("status", check=True).stdout
    line = next(ln for ln in out.splitlines() if f" {jid} " in f" {ln} " and ln.split()[0] in ("running", "paused"))
    assert line.split()[0] == "paused", out
    view = _View([jid], io.StringIO(), live=False, quiet=True)
    view.update([h.job(jid)], initial=True)
    assert "paused" in view.line() and "running for" not in view.line(), view.line()
    h.cli("kill", str(jid), check=True)


def test_schedule_show_says_what_its_jobs_wait_for_and_hold(make_harness):
    """A schedule's --when, --needs, --slots, --keep-awake and limits were
    kept and given to each occurrence, but neither `schedule show` nor its
    --json said so: after `schedule edit --needs gpu=1` nothing showed it."""
    h = make_harness(TEST_CONFIG + '[resources]\ngpu = ["0", "1"]\n[lanes]\ndefault = 2\n')
    with_fake_inhibit(h)  # --keep-awake is refused where nothing can hold it
    h.start()
    h.cli("schedule", "add", "nightly", "--every", "1d", "--when", "disk>=1M", "--on-lost", "pause",
          "--keep-awake", "--nice", "5", "--", "true", check=True)
    h.cli("schedule", "edit", "nightly", "--needs", "gpu=1", "--slots", "2", check=True)
    out = h.cli("schedule", "show", "nightly", check=True).stdout
    for want in ("when      disk>=1M  (if lost while running: pause)", "needs     gpu=1", "slots     2",
                 "--keep-awake", "nice 5"):
        assert want in out, out
    opts = h.cli_json("schedule", "show", "nightly")["schedule"]["job_options"]
    assert opts["needs"] == {"gpu": 1} and opts["when"] == ["disk>=1M"] and opts["keep_awake"] is True, opts


def test_a_schedule_made_again_after_rm_runs_its_own_command(make_harness):
    """`schedule rm old` while its `schedule run` job runs (its jobs stay),
    then `schedule add old` with a new command: `schedule run old`
    answered the removed schedule's job ("already queued or running") and
    ran nothing new."""
    h = make_harness(TEST_CONFIG + "[lanes]\ndefault = 2\n")
    h.start()
    h.cli("schedule", "add", "old", "--every", "1d", "--", "sleep", "60", check=True)
    first = int(h.cli("schedule", "run", "old", check=True).stdout.split()[0])
    h.cli("schedule", "rm", "old", check=True)
    h.cli("schedule", "add", "old", "--every", "1d", "--", "echo", "new", check=True)
    second = int(h.cli("schedule", "run", "old", check=True).stdout.split()[0])
    assert second != first
    assert h.wait_state(second, "done", timeout_s=20)["command"] == ["echo", "new"]
    assert h.job(first)["state"] in ("queued", "running")  # the old one's job stays
    h.cli("kill", str(first), check=True)


def test_a_schedule_takes_watchdogs_and_retry_rules_and_shows_them_and_its_channels(make_harness, tmp_path):
    """`schedule add` refused --stall, --fail-on, --retry-on, --backoff (a
    nightly job is where a hung run matters most), and `schedule show`
    never said who its occurrences tell: a --ping or --webhook given at add
    was kept but not shown. Its URLs come masked, as `show` masks a job's."""
    h = make_harness(TEST_CONFIG)
    h.start()
    h.cli("schedule", "add", "nightly", "--every", "1d", "--stall", "10m", "--fail-on", "loss: nan",
          "--retry-on", "mem", "--backoff", "5s..10m", "--ping", "https://hc.example/ping/0f1e2d3c",
          "--mail-to", "me@example.com", "--", "true", check=True)
    h.cli("schedule", "edit", "nightly", "--stall", "20m", check=True)  # one rule changed, the others kept
    out = h.cli("schedule", "show", "nightly", check=True).stdout
    for want in ("watch     stall 20m; fail-on 'loss: nan'", "retries   also on mem; backoff 5s..10m",
                 "tells     ping https://hc.example/***", "tells     mail me@example.com on failed,missed"):
        assert want in out, out
    assert "0f1e2d3c" not in out
    sched = h.cli_json("schedule", "show", "nightly")["schedule"]
    assert sched["job_options"]["rules"] == {"stall_s": 1200.0, "fail_on": "loss: nan", "retry_on": ["mem"],
                                              "backoff_s": 5.0, "backoff_cap_s": 600.0}, sched
    assert "0f1e2d3c" not in json.dumps(sched)
    jid = int(h.cli("schedule", "run", "nightly", check=True).stdout.split()[0])
    (job,) = h.cli_json("show", str(jid))["jobs"]
    assert job["rules"]["stall_s"] == 1200.0 and job["rules"]["fail_on"] == "loss: nan", job
    bad = h.cli("schedule", "add", "other", "--every", "1d", "--fail-on", "(", "--", "true")
    assert bad.returncode != 0 and "--fail-on" in bad.stderr, bad.stderr
    assert "other" not in h.cli("schedule", "ls", check=True).stdout

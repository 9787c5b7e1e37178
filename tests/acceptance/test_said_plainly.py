"""Issues 28 (item 10) and 30 (part 3, "words a person reads", and
`daemon stop`): commands that say what they did, in words a person reads,
driven as a person would through the real CLI and a real daemon (a
pseudo-terminal where it is about a terminal)."""

from __future__ import annotations

import re
import sys

import pytest

from sloth_daemon.errors import EXIT_USAGE
from tests.support.harness import Harness
from tests.support.terminal import Terminal

pytestmark = pytest.mark.acceptance
SLOTH = [sys.executable, "-m", "sloth_daemon"]


def add(h: Harness, *args: str, **kw) -> int:
    return h.cli_json("add", *args, **kw)["ids"][0]


def test_edit_takes_a_new_command_only_after_dashes(harness):
    h = harness
    h.start()
    jid = add(h, "--hold", "--", "echo", "kept")
    for line in (["edit", str(jid), "2", "--priority", "5"], ["edit", str(jid), "--priority", "3", "oops"]):
        p = h.cli(*line)
        assert p.returncode == EXIT_USAGE, (line, p.stdout, p.stderr)
        assert "after --" in p.stderr and p.stdout == "", p.stderr
    job = h.job(jid)
    assert job["command"] == ["echo", "kept"] and job["priority"] == 0  # nothing changed
    assert h.cli("edit", str(jid), "--priority", "5", "--", "echo", "new", check=True).stdout.startswith(
        f"job {jid} edited")
    assert h.job(jid)["command"] == ["echo", "new"] and h.job(jid)["priority"] == 5
    h.cli("schedule", "add", "nightly", "--every", "1d", "--", "echo", "a", check=True)
    p = h.cli("schedule", "edit", "nightly", "stray", "--every", "2d")
    assert p.returncode == EXIT_USAGE and "after --" in p.stderr, p.stderr
    shown = h.cli_json("schedule", "show", "nightly")
    assert "stray" not in str(shown) and "172800" not in str(shown)


def test_state_filters_take_commas_as_well_as_repeats(harness):
    h = harness
    h.start()
    held = add(h, "--hold", "--", "true")
    queued = add(h, "--delay", "1h", "--", "true")
    done = add(h, "--", "true")
    h.wait_state(done, "done")
    for line in (["--state", "queued,held"], ["--state", "queued", "--state", "held"], ["--state", "held, queued"]):
        listed = h.cli_json("ls", *line)
        assert sorted(j["id"] for j in listed["jobs"]) == [held, queued], line
    rows = h.cli("ls", "--state", "queued,held", check=True).stdout
    shown = [r.split()[:2] for r in rows.splitlines()[1:-1]]  # between the header and the footer
    assert sorted(shown) == sorted([[str(queued), "queued"], [str(held), "held"]]), rows
    p = h.cli("ls", "--state", "queued,bogus")
    assert p.returncode == EXIT_USAGE and "bogus" in p.stderr
    assert h.cli_json("prune", "--dry-run", "--older-than", "0", "--state", "done,failed")["would_prune"] == 1
    res = h.cli_json("cancel", "--state", "queued,held")
    assert sorted(j["id"] for j in res["jobs"]) == [held, queued]


def test_daemon_stop_says_how_many_running_jobs_it_stopped_and_queued_again(harness):
    h = harness
    h.start()
    jid = add(h, "--", "sleep", "2")
    h.wait_state(jid, "running")
    p = h.cli("daemon", "stop", check=True)
    assert p.stdout == (f"sloth daemon stopped (pid {h.daemon.pid}); 1 running job(s) stopped and queued again, "
                        "not failed (`sloth daemon stop --keep-jobs` leaves them running)\n"), p.stdout
    assert h.cli_json("show", str(jid))["jobs"][0]["state"] == "queued"  # what it said is what happened
    h.start()
    h.wait_state(jid, "done")
    shown = h.cli("show", str(jid), check=True).stdout  # the run cut short is not counted, said plainly
    assert re.search(r"^  attempts  1/3 \(2 runs; 1 not counted: stopped with the daemon\)$", shown, re.M), shown
    assert "not counted, and `sloth retry` starts the count again" in " ".join(h.cli("show", "--help").stdout.split())


def test_retry_of_a_done_job_points_to_restart(harness):
    h = harness
    h.start()
    jid = add(h, "--", "true")
    h.wait_state(jid, "done")
    p = h.cli("retry", str(jid))
    assert p.returncode == 6 and f"`sloth restart {jid}`" in p.stderr, p.stderr
    other = add(h, "--", "false")
    h.wait_state(other, "failed", timeout_s=60)
    p = h.cli("retry", str(jid), str(other))  # one retried, the done one left alone: told how to run it again
    assert p.stdout == f"job {other} queued again\n" and f"`sloth restart {jid}`" in p.stderr, p.stderr


def test_plain_sloth_shows_the_day_at_a_glance_and_where_help_is(harness):
    h = harness
    p = h.cli()  # no daemon yet: read, none started, nothing made
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("daemon   not running") and "`sloth --help`" in p.stdout, p.stdout
    assert len(p.stdout.splitlines()) < 10 and not h.socket.exists()
    h.start()
    jid = add(h, "--", "sleep", "30")
    h.wait_state(jid, "running")
    p = h.cli(check=True)
    assert re.search(rf"^running +{jid} .*sleep 30", p.stdout, re.M), p.stdout
    assert p.stdout.splitlines()[-1] == "every command: `sloth --help`; every job: `sloth ls`"
    assert "Usage" not in p.stdout + p.stderr


def test_wait_says_when_a_failed_try_is_tried_again_and_why_a_job_waits(harness):
    h = harness
    h.start()
    (jid,) = h.cli_json("add", "--max-attempts", "2", "--", "sh", "-c", "sleep 0.3; exit 1")["ids"]
    with Terminal(SLOTH + ["wait", str(jid)], h.env, h.home) as t:  # backoff after the first try: 2s
        t.read_until(rf"job {jid} will be tried again in \d\S* \(try 2/2; the last: exit 1")
        assert t.wait() == 5
    gated = add(h, "--when", "disk>=100T", "--", "true")  # a condition that never holds here
    with Terminal(SLOTH + ["wait", str(gated)], h.env, h.home) as t:
        t.read_until(rf"job {gated} queued for \d\S* · waiting for 100T free", timeout_s=20)
        t.type(b"\x03")
        assert t.wait() == 130
        shown = [ln for ln in t.screen() if ln.strip()]
    assert shown == [f"stopped waiting for job {gated} after {shown[-1].split(' after ')[1].split(':')[0]}: "
                     "it is queued and carries on"], shown


def test_add_wait_names_its_job_once_and_counts_never_read_as_ids(harness):
    h = harness
    h.start()
    with Terminal(SLOTH + ["add", "--wait", "--", "sleep", "30"], h.env, h.home) as t:
        jid = int(t.read_until(r"^(\d+)\r?\n").group(1))
        t.read_until(rf"job {jid} running for \d")
        t.type(b"\x03")
        assert t.wait() == 130
        shown = [ln for ln in t.screen() if ln.strip()]
    assert shown[0] == str(jid) and re.fullmatch(
        rf"stopped waiting for job {jid} after \d\S*: it is running and carries on", shown[1]), shown
    assert len(shown) == 2, shown


def test_ls_rows_fit_the_terminal_and_show_keeps_the_whole_reason(harness):
    h = harness
    h.start()
    deep = h.home / ("a-folder-with-a-rather-long-name-" * 3).rstrip("-")
    deep.mkdir()
    jid = add(h, "--cwd", str(deep), "--when", "disk>=100T", "--", "sh", "-c", "echo " + "x" * 120)
    full = h.wait_for(lambda: h.job(jid).get("wait_reason"), what="its reason")
    assert len(full) > 60 and str(deep) in full
    with Terminal(SLOTH + ["ls"], h.env, h.home, cols=100) as t:
        assert t.wait() == 0
        lines = t.text.replace("\r\n", "\n").rstrip("\n").split("\n")
    row = next(ln for ln in lines if ln.startswith(f"{jid} "))
    assert all(len(ln) < 100 for ln in lines), lines  # none wraps
    assert "waiting for 100T free in" in row and "…" in row, row
    assert row.rstrip().endswith("…")  # the command, cut to fit
    with Terminal(SLOTH + ["ls", "--watch"], h.env, h.home, cols=100) as t:
        t.read_until(r"\d+ queued")
        t.type(b"\x03")
        t.wait()
        shown = t.screen()
    assert all(len(ln) < 100 for ln in shown) and any(ln.startswith(f"{jid} ") and "…" in ln for ln in shown), shown
    piped = h.cli("ls", check=True).stdout  # piped: the command as it was (60 wide), WHEN cut the same
    assert "…" in next(ln for ln in piped.splitlines() if ln.startswith(f"{jid} "))
    assert full in h.cli("show", str(jid), check=True).stdout  # whole in show


def test_edit_takes_the_options_of_add_and_the_job_runs_by_them(harness):
    h = harness
    h.start()
    jid = add(h, "--hold", "--max-attempts", "3", "--", "sleep", "30")
    p = h.cli("edit", str(jid), "--timeout", "1s", "--max-attempts", "1", "--when", "disk>=1K", check=True)
    assert p.stdout == f"job {jid} edited: max-attempts 3 -> 1, timeout (none) -> 1s, when (none) -> disk>=1K\n"
    for bad, said in ((["--needs", "gpu=1"], "no resource 'gpu'"), (["--slots", "2"], "would never start"),
                      (["--when", "moonlight"], "moonlight"), (["--shell", "--", "echo 'open"], "sh can read"),
                      (["--shell"], "give it after --"), (["--mem", "lots"], "--mem")):
        p = h.cli("edit", str(jid), *bad)  # refused as add refuses it, nothing changed
        assert p.returncode == EXIT_USAGE and said in p.stderr, (bad, p.stderr)
    assert h.job(jid)["timeout_s"] == 1.0 and h.job(jid)["gate"] == {"when": ["disk>=1K"]}
    h.cli("edit", str(jid), "--when", "none", "--shell", "--", "sleep 30 && echo never", check=True)
    h.cli("release", str(jid), check=True)
    job = h.wait_state(jid, "failed")  # the edited timeout ended it, and its one try was spent
    assert "timed out" in job["message"] or "timeout" in job["message"], job["message"]
    assert job["gate"] is None and job["command"] == ["/bin/sh", "-c", "sleep 30 && echo never"]
    p = h.cli("edit", str(jid), "--timeout", "5s")
    assert p.returncode == 6 and f"sloth restart {jid}" in p.stderr


def test_a_lane_made_by_add_goes_when_it_is_empty_and_has_no_settings(harness):
    h = harness
    h.start()
    h.cli("lane", "set", "kept", "-c", "2", "--create", check=True)  # its own setting: it stays
    held = add(h, "--lane", "scratch", "--hold", "--", "true")
    assert "scratch" in h.cli("status", check=True).stdout and "scratch" in h.cli_json("lane", "ls")["lanes"]
    h.cli("release", str(held), check=True)
    h.wait_state(held, "done")
    for i in range(3):
        h.wait_state(add(h, "--lane", f"once-{i}", "--", "true"), "done")
    status = h.cli("status", check=True).stdout
    lanes_line = next(ln for ln in status.splitlines() if ln.startswith("lanes"))
    assert lanes_line.split()[1::2] == ["default", "kept"], status  # no pile of lanes made in passing
    assert sorted(h.cli_json("lane", "ls")["lanes"]) == ["default", "kept"]
    assert [j["id"] for j in h.cli_json("ls", "--lane", "scratch")["jobs"]] == [held]  # its jobs still found
    h.cli("prune", "--older-than", "0", "--lane", "once-0", check=True)
    assert h.cli_json("ls", "--lane", "once-0")["total"] == 0  # no job at all: still a name it knows
    h.cli("pause", "scratch", check=True)  # named, it is still a lane; paused, it has a setting: listed
    assert "scratch" in h.cli_json("lane", "ls")["lanes"]
    p = h.cli("ls", "--lane", "nosuch")
    assert p.returncode == 4 and "nosuch" in p.stderr
    h.stop()
    assert sorted(h.cli_json("lane", "ls")["lanes"]) == ["default", "kept", "scratch"]  # read from the file alike

"""`sloth wait` as a person meets it (issue 22): on a real terminal (a pty
that is the command's controlling terminal) through the real daemon; piped;
with no id; and what a waiter on many jobs costs the daemon (frames)."""

from __future__ import annotations

import re
import sys

import pytest

from sloth_daemon.cli.client import Client
from sloth_daemon.errors import EXIT_JOB_FAILED, EXIT_NOT_FOUND
from tests.support.harness import Harness
from tests.support.terminal import Terminal

pytestmark = pytest.mark.acceptance
SLOTH = [sys.executable, "-m", "sloth_daemon"]


def add(h: Harness, *args: str, **kw) -> list[int]:
    return h.cli_json("add", *args, **kw)["ids"]


def on_screen(lines: list[str]) -> list[str]:
    return [ln for ln in lines if ln.strip()]


def test_one_job_on_a_terminal_has_a_live_line_then_its_outcome_and_a_summary(harness):
    harness.start()
    (jid,) = add(harness, "--", "sleep", "2.5")
    with Terminal(SLOTH + ["wait", str(jid)], harness.env, harness.home) as t:
        t.read_until(rf"job {jid} running for \d")  # the live line, for one job too, with its elapsed time
        assert t.wait() == 0
        shown = on_screen(t.screen())
    assert shown[0] == f"job {jid} done (exit 0)", shown
    assert re.fullmatch(rf"waited \d\S* for job {jid}", shown[-1]), shown  # no bare count to read as an id
    assert len(shown) == 2, shown  # the live line erased, nothing else left behind
    assert t.text.endswith("\n")


def test_several_jobs_on_a_terminal_each_outcome_as_it_happens_and_a_summary(harness):
    harness.start()
    harness.cli("lane", "set", "default", "-c", "3", check=True)
    quick, bad, slow = add(harness, "--max-attempts", "1", "--stdin", input="true\nsh -c 'exit 5'\nsleep 3\n")
    with Terminal(SLOTH + ["wait", str(quick), str(bad), str(slow)], harness.env, harness.home) as t:
        t.read_until(rf"job {quick} done \(exit 0\)")
        t.read_until(rf"job {bad} failed: exit 5")
        assert harness.job(slow)["state"] == "running"  # told while another still runs
        t.read_until(r"\d/3 ended · \d done")  # the live line of several
        assert t.wait() == EXIT_JOB_FAILED
        shown = on_screen(t.screen())
    assert {f"job {quick} done (exit 0)", f"job {bad} failed: exit 5", f"job {slow} done (exit 0)"} <= set(shown)
    assert re.fullmatch(r"waited \d\S* for 3 jobs: 2/3 done, 1 failed", shown[-1]), shown
    assert not [ln for ln in shown if "ended ·" in ln], shown  # no live line left on the screen


def test_ctrl_c_ends_the_wait_on_a_clean_line_with_130_and_the_job_carries_on(harness):
    harness.start()
    (jid,) = add(harness, "--", "sleep", "60")
    with Terminal(SLOTH + ["wait", str(jid)], harness.env, harness.home) as t:
        t.read_until(rf"job {jid} running for \d")
        t.type(b"\x03")  # Ctrl-C, as typed: the terminal sends SIGINT and echoes ^C
        assert t.wait() == 130
        shown = on_screen(t.screen())
    assert not [ln for ln in shown if "^C" in ln or "running for" in ln], shown
    assert re.fullmatch(rf"stopped waiting for job {jid} after \d\S*: it is running and carries on", shown[-1]), shown
    assert t.text.endswith("\n")
    assert harness.job(jid)["state"] == "running"


def test_piped_wait_prints_one_plain_line_per_outcome(harness):
    harness.start()
    ok, bad = add(harness, "--max-attempts", "1", "--stdin", input="true\nsh -c 'echo oops; exit 3'\n")
    p = harness.cli("wait", str(ok), str(bad))
    assert p.returncode == EXIT_JOB_FAILED and p.stderr == ""
    assert sorted(p.stdout.splitlines()) == sorted([f"job {ok} done (exit 0)", f"job {bad} failed: exit 3",
                                                    "  | oops"])
    assert "\x1b" not in p.stdout


def test_wait_with_no_id_waits_for_the_latest_job_and_says_so(harness):
    harness.start()
    p = harness.cli("wait")
    assert p.returncode == EXIT_NOT_FOUND and "there are no jobs yet" in p.stderr, p.stderr
    add(harness, "--", "true")
    (latest,) = add(harness, "--", "sh", "-c", "sleep 0.5; exit 4")
    p = harness.cli("wait", "--json")
    assert p.stderr == f"waiting for job {latest} (the latest)\n"
    assert p.returncode == EXIT_JOB_FAILED and f'"id": {latest}' in p.stdout


def test_a_waiter_on_many_jobs_hears_few_frames_and_every_outcome(harness):
    """Coalesced: a frame of many jobs per window, not one per change (three
    a job: claimed, started, done)."""
    harness.start()
    ids = harness.add_many([{"command": ["true"]} for _ in range(300)])
    frames, states = 0, {}
    with Client(harness.socket, timeout_s=120) as c:
        for ev in c.stream("wait", ids=ids, batched=True):
            frames += 1
            if ev["kind"] in ("jobs", "states"):
                states.update({j["id"]: j["state"] for j in ev["jobs"]})
            elif ev["kind"] == "end":
                final = ev["result"]["jobs"]
    assert [j["id"] for j in final] == ids and {j["state"] for j in final} == {"done"}
    assert set(states.values()) == {"done"}  # every outcome was told before the end
    assert frames < 100, frames  # 300 jobs at ~2-10 ms each, one frame per 0.1 s: ~10-30


def test_waiting_on_held_jobs_says_they_are_held(harness):
    """A held job starts only when released: the wait names it held (one
    job, several, and the Ctrl-C summary), never an empty summary."""
    harness.start()
    held, other = add(harness, "--hold", "--stdin", input="true\ntrue\n")
    with Terminal(SLOTH + ["wait", str(held), str(other)], harness.env, harness.home) as t:
        t.read_until(r"0/2 ended · 0 done · 2 held")
        t.type(b"\x03")
        assert t.wait() == 130
        shown = on_screen(t.screen())
    assert re.fullmatch(r"stopped waiting for 2 jobs after \d\S*: 2 held; they carry on", shown[-1]), shown
    with Terminal(SLOTH + ["wait", str(held)], harness.env, harness.home) as t:
        t.read_until(rf"job {held} held for \d\S* \(until `sloth release {held}`\)")
        t.type(b"\x03")
        assert t.wait() == 130
        shown = on_screen(t.screen())
    assert re.fullmatch(rf"stopped waiting for job {held} after \d\S*: it is held and carries on", shown[-1]), shown


def test_add_hold_wait_is_refused_rather_than_waiting_forever(harness):
    harness.start()
    p = harness.cli("add", "--hold", "--wait", "--", "true")
    assert p.returncode == 2 and "--hold" in p.stderr and "--wait" in p.stderr and "hint:" in p.stderr, p.stderr
    assert harness.cli_json("ls")["total"] == 0


def test_piped_wait_on_a_held_job_says_once_why_nothing_happens(harness):
    """Piped, a wait on a held job would print nothing until someone
    releases it: it says so once on stderr, then the outcome as usual."""
    import select
    import subprocess

    harness.start()
    (held,) = add(harness, "--hold", "--", "echo", "hi")
    p = subprocess.Popen(SLOTH + ["wait", str(held)], env=harness.env, cwd=harness.home, text=True,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert select.select([p.stderr], [], [], 30)[0], "nothing said on stderr"
        assert p.stderr.readline() == f"sloth: job {held} is held: it starts only after `sloth release {held}`\n"
        harness.cli("release", str(held), check=True)
        out, err = p.communicate(timeout=30)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 0 and out == f"job {held} done (exit 0)\n" and err == ""


def test_add_wait_streams_its_wait_on_the_commits_connection(harness):
    """`add --wait` costs the daemon one connection, not two (issue 30:
    the round trip's second connect and accept), and tells the same."""
    harness.start()
    before = harness.call("status")["server"]["connections"]
    p = harness.cli("add", "--wait", "--", "true")
    after = harness.call("status")["server"]["connections"]
    assert after - before == 2, after - before  # add --wait's one, and this status call's own
    assert p.returncode == 0 and p.stdout.split() == [str(harness.call("latest")["id"])], p.stdout + p.stderr
    assert "done" in p.stderr
    bad = harness.cli("add", "--wait", "--", "false")
    assert bad.returncode == EXIT_JOB_FAILED and "failed" in bad.stderr


def test_a_wait_asks_for_what_it_shows_and_still_waits_on_a_daemon_from_before_fields(harness, tmp_path):
    """`sloth wait` asks the daemon for the fields it shows (a tenth of the
    bytes on a sweep); `--json` prints jobs whole, so it asks for every
    field. A daemon from before ``fields`` (one not restarted since an
    upgrade: here the real daemon with round 4's table of what `wait`
    takes) refuses it, and the wait asks again without: same output."""
    old = tmp_path / "old"
    old.mkdir()
    (old / "sitecustomize.py").write_text(
        "from sloth_daemon import protocol\n"
        "protocol.OPS['wait'] = (frozenset({'ids'}), frozenset({'batched'}))\n")
    for env in ({}, {"PYTHONPATH": str(old)}):
        harness.start(env=env)
        ok, bad = add(harness, "--max-attempts", "1", "--stdin", input="true\nsh -c 'echo why >&2; exit 3'\n")
        p = harness.cli("wait", str(ok), str(bad))
        assert p.returncode == EXIT_JOB_FAILED, p.stderr
        # each outcome, and the failure's log tail (its attempts field: the log's name)
        assert p.stdout in (f"job {ok} done (exit 0)\njob {bad} failed: exit 3\n  | why\n",
                            f"job {bad} failed: exit 3\n  | why\njob {ok} done (exit 0)\n"), p.stdout
        p = harness.cli("wait", "--json", str(ok))
        whole = p.stdout[p.stdout.index("{"):]
        assert '"command"' in whole and '"runner"' in whole and '"lane"' in whole, whole  # every field
        harness.stop()


def test_a_wait_still_waits_on_a_daemon_that_has_fields_but_not_every_one_it_asks_for(harness, tmp_path):
    """A daemon from after ``fields`` but before a job field the CLI came to
    show (not restarted since an upgrade: here the real daemon without
    ``tries``) refuses the field by name, and the wait asks again without
    ``fields``, as it does a daemon from before them: the same lines."""
    old = tmp_path / "old"
    old.mkdir()
    (old / "sitecustomize.py").write_text(
        "from sloth_daemon.daemon import streams\n"
        "streams.WIRE_FIELDS = tuple(f for f in streams.WIRE_FIELDS if f != 'tries')\n")
    harness.start(env={"PYTHONPATH": str(old)})
    ok, bad = add(harness, "--max-attempts", "1", "--stdin", input="true\nsh -c 'echo why >&2; exit 3'\n")
    refused = harness.cli("wait", str(ok))
    p = harness.cli("wait", str(ok), str(bad))
    assert p.returncode == EXIT_JOB_FAILED, p.stderr
    assert p.stdout in (f"job {ok} done (exit 0)\njob {bad} failed: exit 3\n  | why\n",
                        f"job {bad} failed: exit 3\n  | why\njob {ok} done (exit 0)\n"), p.stdout
    assert refused.returncode == 0 and refused.stdout == f"job {ok} done (exit 0)\n", refused.stderr

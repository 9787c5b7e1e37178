"""Issue 30, "show the truth": `status` and `ls` say what each job is doing.

- a job waiting on its conditions is named in `status`, its reason said once
  (was: `waiting  waiting for load below 0.01 (now 1.93)`, no job id);
- a running job paused on request reads `paused` in `status` and `ls`, and
  the counts say it is paused, not running;
- a job just started (its process not recorded yet: that is written a
  second into the run) has WAITED and RAN in `ls` as `show` has them.

The real CLI and daemon, driven as a person would.
"""

from __future__ import annotations

import re

import pytest

from tests.support.harness import TEST_CONFIG

pytestmark = pytest.mark.acceptance


def test_status_names_the_jobs_a_condition_holds_back_and_says_why_once(make_harness):
    h = make_harness(TEST_CONFIG)
    h.start()
    ids = [h.cli_json("add", "--when", "load<0.0001", "--", "true")["ids"][0] for _ in range(2)]
    h.wait_for(lambda: all(h.job(i).get("wait_reason") for i in ids), 20, "the jobs told why they wait")
    lines = [ln for ln in h.cli("status", check=True).stdout.splitlines() if ln.startswith("waiting")]
    assert len(lines) == 1 and "waiting for" not in lines[0], lines
    assert re.fullmatch(rf"waiting  jobs {ids[0]}, {ids[1]} for load below 0\.0001 \(now [0-9.]+\)", lines[0]), lines


def test_a_paused_job_reads_paused_not_running_in_status_and_ls(make_harness):
    h = make_harness(TEST_CONFIG)
    h.start()
    jid = h.cli_json("add", "--", "sleep", "30")["ids"][0]
    h.wait_state(jid, "running")
    h.cli("pause", "--job", str(jid), check=True)
    h.wait_for(lambda: h.job(jid)["paused"], 20, "the job paused")
    st = h.cli("status", check=True).stdout
    row = next(ln for ln in st.splitlines() if re.match(rf"\w+ +{jid} ", ln) and not ln.startswith("jobs"))
    assert row.split()[0] == "paused" and "running" not in row, st
    assert re.search(r"^jobs +1 paused$", st, re.M), st
    ls = h.cli("ls", check=True).stdout
    row = next(ln for ln in ls.splitlines() if ln.split()[:1] == [str(jid)])
    assert "paused" in row and "running" not in row, ls
    assert ls.splitlines()[-1] == "1 paused", ls
    h.cli("resume", "--job", str(jid), check=True)
    h.wait_for(lambda: not h.job(jid)["paused"], 20, "the job continued")
    assert re.search(r"^jobs +1 running$", h.cli("status", check=True).stdout, re.M)
    h.cli("cancel", str(jid), check=True)


def test_ls_times_a_job_in_its_first_second_as_show_does(make_harness):
    """Its process is recorded a second into the run: until then `ls` read
    WAITED and RAN as `-` while `show` had them from the claim."""
    h = make_harness(TEST_CONFIG)
    h.start()
    jid = h.cli_json("add", "--", "sleep", "30")["ids"][0]
    seen = h.wait_for(lambda: (j := h.cli_json("ls")["jobs"][0])["state"] == "running" and j, 20, "running")
    assert seen["runner"] is None or not seen["runner"].get("started_at"), "too late to see the first second"
    assert seen["waited_s"] is not None and seen["ran_s"] is not None, seen
    row = next(ln for ln in h.cli("ls", check=True).stdout.splitlines() if ln.split()[:1] == [str(jid)])
    assert " - " not in row, row
    h.cli("cancel", str(jid), check=True)

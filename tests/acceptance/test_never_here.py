"""Issue 28, items 1-3 and 15, and issue 30's paused queue: a job that can
never be satisfied where it may run never reserves anything (it is held,
with the reason, and the command that made it impossible says so), and why
a queued job waits is said alike by `ls`, `show` and `--json`. Through the
real daemon, its keeper and the CLI; item 1 on a real PostgreSQL queue
shared by two daemons.
"""

from __future__ import annotations

import json
import time

import pytest

from tests.support.harness import TEST_CONFIG, Harness, on_one_queue

pytestmark = pytest.mark.acceptance


def ls_line(h: Harness, job_id: int) -> str:
    out = h.cli("ls", "-a", check=True).stdout
    return next((ln for ln in out.splitlines() if ln.split()[:1] == [str(job_id)]), "")


def shown(h: Harness, job_id: int) -> str:
    return h.cli("show", str(job_id), check=True).stdout


def json_job(h: Harness, job_id: int) -> dict:
    jobs = json.loads(h.cli("ls", "-a", "--json", check=True).stdout)["jobs"]
    return next(j for j in jobs if j["id"] == job_id)


def reload_with(h: Harness, config: str) -> str:
    (h.home / "config.toml").write_text(config)
    p = h.cli("daemon", "reload", check=True)
    return p.stdout + p.stderr


# ------------------------------------------------------------ item 2
def test_a_reload_that_takes_resources_away_holds_what_can_never_run_and_the_rest_runs(make_harness):
    base = TEST_CONFIG + "default_concurrency = 4\n"
    h = make_harness(base + '[resources]\ngpu = ["0", "1"]\nlicence = 1\n')
    h.start()
    busy = h.add("sleep", "2", needs={"gpu": 1})  # holds gpu 0: the two-gpu job below must wait
    lic = h.add("sleep", "2", needs={"licence": 1})
    h.wait_state(busy, "running")
    h.wait_state(lic, "running")
    big = h.add("true", needs={"gpu": 2})
    lic2 = h.add("true", needs={"licence": 1})
    h.wait_for(lambda: h.job(big)["wait_reason"], 10, "the two-gpu job to wait")
    said = reload_with(h, base + '[resources]\ngpu = ["0"]\n')  # one gpu left; no licence at all
    assert f"job {big}" in said and "gpu" in said, said
    assert f"job {lic2}" in said and "licence" in said, said
    for jid, words in ((big, "gpu"), (lic2, "licence")):
        job = h.wait_state(jid, "held", timeout_s=10)
        assert words in job["wait_reason"], job
        assert words in ls_line(h, jid), ls_line(h, jid)
        assert words in shown(h, jid)
    small = h.add("true", needs={"gpu": 1})  # once busy ends: the reserved gpu is free for it
    h.wait_state(small, "done", timeout_s=20)
    assert h.job(big)["state"] == "held"


# ------------------------------------------------------------ item 3
def test_a_lane_that_shrinks_below_a_jobs_slots_holds_it_and_the_lane_runs_on(harness):
    h = harness
    h.start()
    h.cli("lane", "set", "build", "-c", "3", "--create", check=True)
    jid = int(h.cli("add", "--lane", "build", "--slots", "3", "--hold", "--", "true", check=True).stdout)
    p = h.cli("lane", "set", "build", "-c", "2", check=True)
    assert f"job {jid}" in p.stdout + p.stderr and "3 slots" in p.stdout + p.stderr, (p.stdout, p.stderr)
    p = h.cli("release", str(jid))  # refused, with why: it would never start
    assert p.returncode != 0 and "stays held" in p.stderr and "3 slots" in p.stderr, (p.stdout, p.stderr)
    job = h.job(jid)
    assert job["state"] == "held" and "3 slots" in job["wait_reason"], job
    assert "3 slots" in ls_line(h, jid) and "3 slots" in shown(h, jid)
    later = int(h.cli("add", "--lane", "build", "--", "true", check=True).stdout)
    h.wait_state(later, "done", timeout_s=15)
    # a queued one (not held by the user) is held by the shrink itself, and the command says so
    p = h.cli("lane", "set", "build", "-c", "3", check=True)  # it fits again: the stale reason goes, and is said
    assert f"job {jid} can run now" in p.stdout, p.stdout
    assert h.job(jid)["state"] == "held" and not h.job(jid)["wait_reason"]
    h.cli("pause", "build", check=True)
    queued = int(h.cli("add", "--lane", "build", "--slots", "3", "--", "true", check=True).stdout)
    p = h.cli("lane", "set", "build", "-c", "1", check=True)  # a lane set resumes a paused lane
    assert f"job {queued}:" in p.stdout or f", {queued}:" in p.stdout, p.stdout
    assert h.wait_state(queued, "held")["wait_reason"]
    h.wait_state(h.add("true", lane="build"), "done", timeout_s=15)


# ------------------------------------------------------------ item 15
def test_a_lanes_when_says_why_its_jobs_wait_in_ls_show_and_json(make_harness):
    h = make_harness(TEST_CONFIG + '[lanes.night]\nwhen = ["disk>=900000T"]\n')
    h.start()
    jid = h.add("true", lane="night")
    other = h.add("true")
    h.wait_state(other, "done")
    # ls's WHEN is cut to fit a row (issue 30): it names the lane; show and --json have the whole reason
    h.wait_for(lambda: "lane night: waiting" in ls_line(h, jid), 10, "ls to say why")
    assert "900000T" in shown(h, jid)
    assert "900000T" in (json_job(h, jid)["wait_reason"] or "")


def test_a_lanes_when_this_machine_cannot_observe_is_refused(make_harness):
    h = make_harness(TEST_CONFIG)
    h.start(env={"PATH": "/usr/bin:/bin"})  # no logind: idle cannot be observed
    (h.home / "config.toml").write_text(TEST_CONFIG + '[lanes.quiet]\nwhen = ["idle=10m"]\n')
    p = h.cli("daemon", "reload")
    assert p.returncode != 0 and "idle" in p.stderr and "quiet" in p.stderr, (p.stdout, p.stderr)
    assert "quiet" not in h.cli("lane", "ls", check=True).stdout  # nothing changed
    h.stop()
    h.start(env={"PATH": "/usr/bin:/bin"})  # started with it: a job of that lane is refused at add
    p = h.cli("add", "--lane", "quiet", "--", "true")
    assert p.returncode != 0 and "idle" in p.stderr and "quiet" in p.stderr, (p.stdout, p.stderr)
    assert h.call("list")["total"] == 0


# ------------------------------------------------------ issue 30: paused
def test_a_job_added_to_a_paused_queue_or_lane_says_so_and_shows_paused(harness):
    h = harness
    h.start()
    h.cli("pause", check=True)
    p = h.cli("add", "--", "echo", "x", check=True)
    jid = int(p.stdout)
    assert "paused" in p.stderr and "sloth resume" in p.stderr, p.stderr
    assert "paused" in ls_line(h, jid), ls_line(h, jid)
    assert "paused" in shown(h, jid)
    assert (json_job(h, jid)["wait_reason"] or "").startswith("paused")
    h.cli("resume", check=True)
    h.wait_state(jid, "done")
    h.cli("lane", "set", "video", "-c", "1", "--create", check=True)
    h.cli("pause", "video", check=True)
    p = h.cli("add", "--lane", "video", "--", "true", check=True)
    vid = int(p.stdout)
    assert "lane video is paused" in p.stderr and "sloth resume video" in p.stderr, p.stderr
    assert "paused" in ls_line(h, vid) and "paused" in shown(h, vid)
    quiet = h.cli("add", "--", "true", check=True)  # the default lane is not paused: nothing said
    assert "paused" not in quiet.stderr
    h.wait_state(int(quiet.stdout), "done")
    h.stop()  # read without a daemon: still paused, and said
    assert "paused" in ls_line(h, vid)


# ------------------------------------------------------------ item 1
@pytest.mark.postgres
def test_on_a_shared_queue_a_job_the_target_can_never_run_is_refused_or_held(make_harness, pg_fresh):
    """Two daemons on one PostgreSQL queue. m2 publishes its resources with
    its machine row, so m1 refuses `--on m2 --needs gpu=2` once m2 has one
    gpu; a job queued while m2 still had two is held by m2 when its reload
    takes one away, and m2's one-gpu jobs (placed there or anywhere) run."""
    url = pg_fresh()
    base = TEST_CONFIG + 'poll_s = "1s"\ndefault_concurrency = 4\n'
    m1, m2 = on_one_queue(make_harness, url, {"m1": f'{base}[resources]\ngpu = ["0"]\n',
                                              "m2": f'{base}[resources]\ngpu = ["0", "1"]\n'})
    big = int(m1.cli("add", "--on", "m2", "--needs", "gpu=2", "--hold", "--", "true", check=True).stdout)
    said = reload_with(m2, f'host = "m2"\n{base}[resources]\ngpu = ["0"]\n')
    assert f"job {big}" in said, said
    p = m1.cli("add", "--on", "m2", "--needs", "gpu=2", "--", "true")
    assert p.returncode != 0 and "m2" in p.stderr and "1 gpu" in p.stderr, (p.stdout, p.stderr)
    m1.cli("release", str(big), check=True)
    m1.wait_for(lambda: (j := m1.job(big))["state"] == "held" and j["wait_reason"], 20, "m2 to hold it again")
    assert "gpu" in m1.job(big)["wait_reason"]
    ids = [int(m1.cli("add", "--on", "m2", "--needs", "gpu=1", "--", "true", check=True).stdout),
           int(m2.cli("add", "--anywhere", "--needs", "gpu=1", "--", "true", check=True).stdout)]
    for jid in ids:
        m1.wait_state(jid, "done", timeout_s=30)
    st = m2.call("status")["conditions"]["resources"]["gpu"]
    assert st["free"] == ["0"], st
    time.sleep(0.2)
    assert m1.job(big)["state"] == "held"

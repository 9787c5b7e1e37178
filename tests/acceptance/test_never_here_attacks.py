"""A hostile reviewer's attacks on issue 28's never-here rule (round 4, X1):
what another machine on a shared queue may write in its host row, and the
reasons a held job shows staying true. Through the real daemon and CLI."""

from __future__ import annotations

import time

import pytest

from tests.support.harness import TEST_CONFIG, on_one_queue

pytestmark = pytest.mark.acceptance

# The daemon under 1 GiB of address space: a list of a billion tokens fails
# at once, instead of after the shared machine's RAM.
LIMITED = ["prlimit", f"--as={1 << 30}", "--"]


@pytest.mark.postgres
def test_a_hostile_machines_published_resources_cannot_break_or_stall_an_add(make_harness, pg_fresh):
    """Another machine on the shared queue wrote its hosts.resources: JSON
    nested past Python's recursion limit, a count of a billion tokens, a
    count that is not a number. An add placed there is judged (or, where
    nothing can be read, not judged) in a moment, the daemon keeps serving,
    and `sloth db status` still lists the machines."""
    import psycopg

    url = pg_fresh()
    (m1,) = on_one_queue(make_harness, url, {"m1": f'{TEST_CONFIG}poll_s = "1s"\n[resources]\ngpu = ["0"]\n'},
                         wrap=LIMITED)
    hostile = {"deep": "[" * 100_000, "huge": '{"gpu": 1000000000}', "yes": '{"gpu": true}',
               "few": '{"gpu": 1}'}
    with psycopg.connect(url, autocommit=True) as c:
        for name, text in hostile.items():
            c.execute("INSERT INTO sloth.hosts (name, worker, pid, boot_id, version, started_at, last_seen, resources)"
                      " VALUES (%s, 'w', 1, 'b', '0', sloth.now(), sloth.now() + 3600, %s)", (name, text))
    for name in hostile:
        t0 = time.monotonic()
        p = m1.cli("add", "--on", name, "--needs", "gpu=1", "--", "true")
        assert p.returncode == 0, (name, p.stdout, p.stderr)
        assert time.monotonic() - t0 < 10, name
    p = m1.cli("add", "--on", "few", "--needs", "gpu=2", "--", "true")  # what reads as resources is judged
    assert p.returncode != 0 and "few" in p.stderr and "1 gpu" in p.stderr, (p.stdout, p.stderr)
    p = m1.cli("db", "status")
    assert p.returncode == 0 and "deep" in p.stdout, (p.stdout, p.stderr)
    assert m1.call("ping") is not None


def _reload(h, config: str) -> str:
    (h.home / "config.toml").write_text(config)
    p = h.cli("daemon", "reload", check=True)
    return p.stdout + p.stderr


def test_a_held_jobs_reason_is_judged_again_when_the_daemon_starts_with_more(make_harness):
    """Held because the machine had one gpu; the daemon is restarted with
    two (config.toml edited while it was down, or a restart instead of a
    reload). `ls` and `show` no longer say it can never run, and a second
    restart with one gpu says it again."""
    base = TEST_CONFIG + "default_concurrency = 4\n"
    two, one = base + '[resources]\ngpu = ["0", "1"]\n', base + '[resources]\ngpu = ["0"]\n'
    h = make_harness(two)
    h.start()
    big = int(h.cli("add", "--needs", "gpu=2", "--hold", "--", "true", check=True).stdout)
    assert f"job {big}" in _reload(h, one)
    assert "1 gpu" in h.job(big)["wait_reason"]
    h.stop()
    (h.home / "config.toml").write_text(two)
    h.start()
    job = h.job(big)
    assert job["state"] == "held" and not job["wait_reason"], job
    assert "1 gpu" not in h.cli("show", str(big), check=True).stdout
    h.stop()
    (h.home / "config.toml").write_text(one)
    h.start()
    assert "1 gpu" in (h.job(big)["wait_reason"] or "")


def test_a_held_job_moved_to_a_lane_where_it_fits_no_longer_says_it_never_can(harness):
    """Held for its 3 slots in a lane of 2; `sloth edit --lane` moves it to
    a lane of 4: the reason that named the old lane goes (a release runs it)."""
    h = harness
    h.start()
    h.cli("lane", "set", "build", "-c", "3", "--create", check=True)
    h.cli("lane", "set", "big", "-c", "4", "--create", check=True)
    jid = int(h.cli("add", "--lane", "build", "--slots", "3", "--hold", "--", "true", check=True).stdout)
    h.cli("lane", "set", "build", "-c", "2", check=True)
    assert "lane 'build'" in h.job(jid)["wait_reason"]
    h.cli("edit", str(jid), "--lane", "big", check=True)
    job = h.job(jid)
    assert job["lane"] == "big" and job["state"] == "held" and not job["wait_reason"], job
    assert "lane 'build'" not in h.cli("show", str(jid), check=True).stdout
    h.cli("release", str(jid), check=True)
    h.wait_state(jid, "done", timeout_s=15)


def test_what_a_reload_or_lane_set_says_it_held_is_what_it_changed(make_harness):
    """A job held long ago for want of a gpu is not said again as "held"
    by every later reload, nor by a `lane set` of a lane it is not in (a
    lane's slots change nothing of its needs)."""
    base = TEST_CONFIG + "default_concurrency = 4\n"
    one = base + '[resources]\ngpu = ["0"]\n'
    h = make_harness(base + '[resources]\ngpu = ["0", "1"]\n')
    h.start()
    big = int(h.cli("add", "--needs", "gpu=2", "--hold", "--", "true", check=True).stdout)
    assert f"job {big}" in _reload(h, one)
    assert f"job {big}" not in _reload(h, one + "# touched\n")
    p = h.cli("lane", "set", "other", "-c", "2", "--create", check=True)
    assert f"job {big}" not in p.stdout + p.stderr, p.stdout
    assert "1 gpu" in h.job(big)["wait_reason"]


@pytest.mark.postgres
def test_a_job_placed_by_a_tag_is_judged_by_every_machine_of_the_tag(make_harness, pg_fresh):
    """m1 (one gpu) and m2 (two) are both tagged gpus. `m1 add --on gpus
    --needs gpu=2` was refused by m1's own resources alone, though m2 of the
    tag can run it; it is queued and m2 runs it. A need no machine of the
    tag meets is still refused."""
    url = pg_fresh()
    base = TEST_CONFIG + 'poll_s = "1s"\ntags = ["gpus"]\n'
    m1, m2 = on_one_queue(make_harness, url, {"m1": f'{base}[resources]\ngpu = ["0"]\n',
                                              "m2": f'{base}[resources]\ngpu = ["0", "1"]\n'})
    p = m1.cli("add", "--on", "gpus", "--needs", "gpu=2", "--", "true")
    assert p.returncode == 0, (p.stdout, p.stderr)
    job = m1.wait_state(int(p.stdout), "done", timeout_s=30)
    assert "m2" in job["worker"], job
    p = m1.cli("add", "--on", "gpus", "--needs", "gpu=3", "--", "true")
    assert p.returncode != 0 and "m1" in p.stderr and "m2" in p.stderr and "2 gpu" in p.stderr, (p.stdout, p.stderr)


@pytest.mark.postgres
def test_a_paused_machine_says_paused_only_of_the_jobs_it_alone_runs(make_harness, pg_fresh):
    """m1 is paused (its pauses are its own). A job m1 adds for m2 is not
    said to wait for `sloth resume` (m2 runs it), nor shown paused by m1's
    `ls` while it waits its turn on m2; m1's own job is."""
    url = pg_fresh()
    base = TEST_CONFIG + 'poll_s = "1s"\n'
    m1, m2 = on_one_queue(make_harness, url, {"m1": base, "m2": base})
    m1.cli("pause", check=True)
    busy = int(m1.cli("add", "--on", "m2", "--", "sleep", "3", check=True).stdout)
    m1.wait_state(busy, "running", timeout_s=20)
    p = m1.cli("add", "--on", "m2", "--", "true", check=True)
    assert "paused" not in p.stderr, p.stderr
    theirs = int(p.stdout)
    mine = int(m1.cli("add", "--", "true", check=True).stdout)
    lines = {int(ln.split()[0]): ln for ln in m1.cli("ls", check=True).stdout.splitlines()[1:] if ln[:1].isdigit()}
    assert "paused" not in lines[theirs] and "paused" in lines[mine], lines
    assert not (m1.job(theirs)["wait_reason"] or "").startswith("paused")
    m1.wait_state(theirs, "done", timeout_s=30)

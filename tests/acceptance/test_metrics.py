"""`sloth metrics` and the daemon's metrics_file (docs/metrics.md), against
a real daemon's real runs: read by the Prometheus client library's own
parsers and by `promtool check metrics`; counters that survive a prune and
a restart (or say, by ``_created``, that they began again); the file
written after a run, and left alone at rest."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from prometheus_client.openmetrics.parser import text_string_to_metric_families as openmetrics_families
from prometheus_client.parser import text_string_to_metric_families as prometheus_families

from tests.support.harness import TEST_CONFIG

pytestmark = pytest.mark.acceptance


def samples(text: str, *, openmetrics: bool = True) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """(sample name, sorted labels) -> value, every family parsed by prometheus_client."""
    parse = openmetrics_families if openmetrics else prometheus_families
    return {(s.name, tuple(sorted(s.labels.items()))): s.value for f in parse(text) for s in f.samples}


def metrics_harness(make_harness, home, *, base: str = TEST_CONFIG):
    prom = home / "textfile" / "sloth.prom"
    prom.parent.mkdir()
    h = make_harness(base + f'max_attempts = 1\nmetrics_file = "{prom}"\n')
    return h, prom


def test_metrics_count_a_real_daemons_runs_and_parse_with_prometheus_own_parsers(make_harness, home):
    h, prom = metrics_harness(make_harness, home)
    h.start()
    ok, bad, gpu = h.add("true"), h.add("false"), h.add("sleep", "0.3", lane="gpu")
    for jid, state in ((ok, "done"), (bad, "failed"), (gpu, "done")):
        h.wait_state(jid, state)
    held = h.add("true", hold=True)
    # a ping nobody answers (loopback's discard port refuses): its messages wait in the outbox, retried later
    pinged = int(h.cli("add", "--lane", "pings", "--ping", "http://127.0.0.1:9/p", "--", "true", check=True).stdout)
    h.wait_state(pinged, "done")
    p = h.cli("metrics", check=True)
    got = samples(p.stdout)
    assert p.stdout.endswith("# EOF\n")
    assert got[("sloth_runs_total", (("lane", "default"), ("outcome", "done")))] == 1
    assert got[("sloth_runs_total", (("lane", "default"), ("outcome", "failed")))] == 1
    assert got[("sloth_runs_total", (("lane", "gpu"), ("outcome", "done")))] == 1
    assert got[("sloth_runs_created", (("lane", "default"), ("outcome", "done")))] > 1e9
    # the histogram: the gpu run took 0.3 s (started to ended), the others a few ms
    assert got[("sloth_run_duration_seconds_count", (("lane", "gpu"),))] == 1
    # started (as the daemon recorded it, a moment after the spawn under load) to ended: about 0.3 s
    assert 0.2 <= got[("sloth_run_duration_seconds_sum", (("lane", "gpu"),))] < 5
    assert got[("sloth_run_duration_seconds_bucket", (("lane", "gpu"), ("le", "0.1")))] == 0
    assert got[("sloth_run_duration_seconds_bucket", (("lane", "gpu"), ("le", "1.0")))] == 1
    assert got[("sloth_run_duration_seconds_count", (("lane", "default"),))] == 2
    assert got[("sloth_queue_jobs", (("lane", "default"), ("state", "held")))] == 1
    assert got[("sloth_keeper_starts_total", ())] >= 1 and got[("sloth_keeper_lost_total", ())] == 0
    assert ("sloth_clock_jumps_total", (("kind", "slept"),)) in got
    assert got[("sloth_outbox_messages", (("state", "pending"),))] >= 1  # its start and its end, not delivered
    assert got[("sloth_outbox_messages", (("state", "failed"),))] == 0
    # the same numbers in Prometheus's text format, and promtool's lint finds nothing
    p = h.cli("metrics", "--format", "prometheus", check=True)
    assert samples(p.stdout, openmetrics=False)[("sloth_runs_total", (("lane", "gpu"), ("outcome", "done")))] == 1
    if shutil.which("promtool"):
        lint = subprocess.run(["promtool", "check", "metrics"], input=p.stdout, capture_output=True, text=True)
        assert lint.returncode == 0, lint.stdout + lint.stderr
    # a bad format: a clear error, nothing printed
    bad_format = h.cli("metrics", "--format", "json")
    assert bad_format.returncode == 2 and "openmetrics, prometheus" in bad_format.stderr and not bad_format.stdout
    h.call("release", ids=[held])
    h.wait_state(held, "done")


@pytest.mark.skipif(not shutil.which("promtool"), reason="promtool is not installed (apt-get install prometheus)")
def test_the_metrics_file_passes_promtool(make_harness, home):
    h, prom = metrics_harness(make_harness, home)
    h.start()
    h.wait_state(h.add("true"), "done")
    h.wait_for(lambda: prom.exists() and 'outcome="done"} 1' in prom.read_text(), 10, "the metrics file")
    lint = subprocess.run(["promtool", "check", "metrics"], stdin=prom.open(), capture_output=True, text=True)
    assert lint.returncode == 0, lint.stdout + lint.stderr


def test_the_metrics_file_follows_runs_and_is_left_alone_at_rest(make_harness, home):
    # clocks compared once a minute: a stall of a loaded machine is a jump, and a jump a change to write
    h, prom = metrics_harness(make_harness, home, base=TEST_CONFIG.replace('clock_check_s = "1s"',
                                                                           'clock_check_s = "60s"'))
    h.start()
    h.wait_for(prom.exists, 10, "the file written at start")
    assert oct(prom.stat().st_mode & 0o777) == "0o644"  # node_exporter runs as another user
    h.wait_state(h.add("true"), "done")
    done = ("sloth_runs_total", (("lane", "default"), ("outcome", "done")))

    def count() -> float:
        return samples(prom.read_text(), openmetrics=False).get(done, 0)

    h.wait_for(lambda: count() == 1, 10, "the file updated after the run")
    h.wait_state(h.add("true"), "done")
    h.wait_for(lambda: count() == 2, 15, "the file updated after the second run (within the 5 s gap)")
    time.sleep(0.5)  # the last write's trailing edge
    before = prom.stat()
    time.sleep(2.5)  # at rest: two and a half clock checks, nothing changes
    after = prom.stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    assert not [n for n in os.listdir(prom.parent) if n != prom.name]  # no temporary file left


def test_counters_survive_prune_and_restart_and_read_without_a_daemon(make_harness, home):
    h, prom = metrics_harness(make_harness, home)
    h.start()
    for jid in (h.add("true"), h.add("true"), h.add("false")):
        h.wait_state(jid, "done", "failed")
    key = ("sloth_runs_total", (("lane", "default"), ("outcome", "done")))
    first = samples(h.cli("metrics", check=True).stdout)
    h.cli("prune", "--older-than", "0", check=True)
    assert h.call("list")["total"] == 0
    pruned = samples(h.cli("metrics", check=True).stdout)
    assert pruned[key] == first[key] == 2  # the history is gone, the count is not
    assert pruned[("sloth_runs_created",) + key[1:]] == first[("sloth_runs_created",) + key[1:]]
    started = first[("sloth_daemon_start_time_seconds", ())]
    h.stop()
    p = h.cli("metrics", check=True)  # no daemon: read from the queue file, read-only
    assert "no daemon is running" in p.stderr
    offline = samples(p.stdout)
    assert offline[key] == 2 and ("sloth_daemon_start_time_seconds", ()) not in offline
    h.start()
    again = samples(h.cli("metrics", check=True).stdout)
    assert again[key] == 2
    # what the daemon counts itself begins again, and says so
    assert again[("sloth_daemon_start_time_seconds", ())] > started
    assert again[("sloth_keeper_starts_created", ())] > first[("sloth_keeper_starts_created", ())]


def test_a_bad_metrics_file_setting_is_refused_and_an_unwritable_one_only_logged(make_harness, home):
    h = make_harness(TEST_CONFIG + 'metrics_file = "relative/sloth.prom"\n', "bad")
    p = h.cli("config")
    assert p.returncode != 0 and "metrics_file must be an absolute path" in p.stderr
    gone = home / "no-such-folder" / "sloth.prom"
    h2 = make_harness(TEST_CONFIG + f'metrics_file = "{gone}"\n', "gone")
    h2.start()
    h2.wait_state(h2.add("true"), "done")
    h2.wait_for(lambda: "metrics_file" in h2.log_text(), 10, "the failure logged")
    assert h2.call("ping") and not gone.parent.exists()


@pytest.mark.postgres
def test_metrics_of_a_daemon_on_a_postgresql_queue(make_harness, pg_url):
    h = make_harness(TEST_CONFIG + f'max_attempts = 1\nqueue_url = "{pg_url}"\n', "pg")
    h.start()
    for jid, state in ((h.add("true"), "done"), (h.add("false"), "failed")):
        h.wait_state(jid, state)
    got = samples(h.cli("metrics", check=True).stdout)
    assert got[("sloth_runs_total", (("lane", "default"), ("outcome", "done")))] == 1
    assert got[("sloth_runs_total", (("lane", "default"), ("outcome", "failed")))] == 1
    h.cli("prune", "--older-than", "0", check=True)
    h.stop()
    offline = samples(h.cli("metrics", check=True).stdout)  # read-only from the database, no daemon
    assert offline[("sloth_runs_total", (("lane", "default"), ("outcome", "done")))] == 1


def test_a_metrics_file_naming_a_fifo_or_a_link_is_left_as_it_is_and_only_logged(make_harness, home):
    """A rename over the path would put a file in the place of the FIFO (or
    of the link, or of /dev/null for a daemon run as root): the daemon
    writes only a regular file, says why not, and keeps serving."""
    fifo = home / "sloth.prom"
    os.mkfifo(fifo)
    h = make_harness(TEST_CONFIG + f'metrics_file = "{fifo}"\n', "fifo")
    h.start()
    h.wait_state(h.add("true"), "done")
    h.wait_for(lambda: "is a FIFO, not a regular file" in h.log_text(), 10, "the refusal logged")
    assert h.call("ping") and os.path.exists(fifo) and os.stat(fifo).st_mode & 0o170000 == 0o010000
    assert [p.name for p in home.iterdir() if "sloth-tmp" in p.name] == []  # no temporary file left


def test_a_renewal_at_rest_neither_resets_the_counters_nor_rewrites_the_file(make_harness, home):
    """The daemon renews itself at rest (renewal.py): a new process, one
    daemon to its users. Its own counters (keeper starts, clock jumps) began
    again at 0 and the metrics file was rewritten at every renewal, so a
    file "left alone at rest" was not, and rate() saw a counter reset."""
    h, prom = metrics_harness(make_harness, home, base=TEST_CONFIG.replace('clock_check_s = "1s"',
                                                                           'clock_check_s = "60s"')
                              + 'keeper_linger_s = "200ms"\n')
    h.daemon_env["SLOTH_RENEW_GROWTH_KB"] = "0"  # renew at every rest
    h.start()
    h.wait_state(h.add("true"), "done")
    starts = ("sloth_keeper_starts_total", ())
    h.wait_for(lambda: h.daemon_log.read_text(errors="replace").count("renewed at rest") >= 1, 20, "a renewal")
    h.wait_ready(h.daemon)
    before = stamp(prom)
    first = samples(h.cli("metrics", check=True).stdout)
    assert first[starts] == 1, first  # the keeper of the first run, counted by the process before
    h.wait_state(h.add("true"), "done")  # a second keeper: the next process counts on from 1
    h.wait_for(lambda: h.daemon_log.read_text(errors="replace").count("renewed at rest") >= 2, 20, "a renewal")
    h.wait_ready(h.daemon)
    assert samples(h.cli("metrics", check=True).stdout)[starts] == 2
    h.wait_for(lambda: samples(prom.read_text(), openmetrics=False).get(starts) == 2, 15, "the file says 2")
    written = stamp(prom)
    assert written != before  # a change was written, once
    h.wait_for(lambda: h.daemon_log.read_text(errors="replace").count("renewed at rest") >= 2, 5, "at rest")
    time.sleep(1.5)
    assert stamp(prom) == written  # nothing changed since: left alone


def stamp(path: Path) -> tuple[int, int, int]:
    """A file as written: each write replaces it (a new inode), but ext4 may
    give a later one the number of one freed before it (CI saw the inode of
    two writes back, 3 bytes shorter): the inode with its mtime and size."""
    st = path.stat()
    return st.st_ino, st.st_mtime_ns, st.st_size

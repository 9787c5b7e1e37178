"""Watchdogs and retry rules (issue 33 item 5), on the real daemon and
keeper through the real CLI, on both engines where the queue is written
(the rules column, the backoff, the history's words).

--stall and --fail-on are the keeper's (keeper/watchdog.py): they end a
tree that ignores SIGTERM (SIGKILL after kill_grace_s), and they keep
watching while no daemon runs. Each failed try's history line names the
rule that retried it or not (daemon/worker/outcomes.py: retry_verdict).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import psutil
import pytest

from tests.support.engines import ENGINES, QUICK, add_id, started_on
from tests.support.harness import Harness, alive

pytestmark = pytest.mark.acceptance

@pytest.fixture(params=ENGINES)
def h(request, make_harness) -> Harness:
    """A started daemon with quick retries, on a SQLite file or a PostgreSQL queue."""
    return started_on(request, make_harness)


add = add_id


def ends(h: Harness, job: int) -> list[str]:
    """The history lines of its failed tries and of its end."""
    return [f"{e['kind']} {e['attempt']}: {e['message']}" for e in h.events(job) if e["kind"] in ("failed", "done")]


def pids_in(path: Path) -> list[int]:
    return [int(x) for x in path.read_text().split()] if path.exists() else []


# A tree that ignores SIGTERM: the shell and its sleeping child (an ignored
# signal stays ignored across exec). Its pids are written down first.
def deaf_tree(pids: Path, first: str = "echo started") -> str:
    return f"trap '' TERM; {first}; sleep 300 & echo $$ $! > {pids}; wait"


def test_a_stalled_tree_that_ignores_sigterm_is_killed_and_its_tries_say_why(h, tmp_path):
    pids = tmp_path / "pids"
    t0 = time.monotonic()
    job = add(h, "--stall", "1s", "--max-attempts", "2", "--backoff", "100ms", "-s", deaf_tree(pids))
    failed = h.wait_state(job, "failed", timeout_s=40)
    took = time.monotonic() - t0
    assert failed["attempts"] == 2
    lines = ends(h, job)
    assert lines[0].startswith("failed 1: stalled: no output for 1s; retry rule: stall retries "
                               "(retry_on: signal,stall,timeout); retry 2/2 in 0.1s"), lines
    assert lines[1].startswith("failed 2: stalled: no output for 1s; retry rule: stall retries"), lines
    assert lines[1].endswith("no attempts left"), lines
    got = pids_in(pids)
    assert len(got) == 2 and not any(alive(p) for p in got)  # SIGTERM ignored: SIGKILL after the grace
    assert took < 30, took
    shown = h.cli("show", str(job), check=True).stdout
    assert "watch     stall 1s" in shown and "retries   backoff 100ms..backoff_cap_s" in shown


def test_output_keeps_a_stall_away_and_a_fail_on_line_ends_the_run_unretried(h, tmp_path):
    # prints every 0.3 s for 2 s: --stall 1s never fires; then the pattern
    ticking = add(h, "--stall", "1s", "--max-attempts", "1", "-s",
                  "for i in 1 2 3 4 5 6 7; do echo tick $i; sleep 0.3; done")
    assert h.wait_state(ticking, "done", "failed", timeout_s=30)["state"] == "done"
    pids = tmp_path / "pids"
    job = add(h, "--fail-on", r"loss: (nan|inf)", "--max-attempts", "3", "-s",
              deaf_tree(pids, "echo 'epoch 1 loss: 0.3'; sleep 0.2; printf 'epoch 2 loss: nan\\n'"))
    failed = h.wait_state(job, "failed", timeout_s=30)
    assert failed["attempts"] == 1, ends(h, job)  # a match is not retried by default
    assert ends(h, job) == [
        "failed 1: matched --fail-on 'loss: (nan|inf)': epoch 2 loss: nan; "
        "not retried: match is not in retry_on (signal,stall,timeout; --retry-on match asks)"]
    assert not any(alive(p) for p in pids_in(pids))
    # asked to: retried
    again = add(h, "--fail-on", "boom", "--retry-on", "match", "--max-attempts", "2", "-s", "echo boom; sleep 300")
    assert h.wait_state(again, "failed", timeout_s=30)["attempts"] == 2
    assert "retry rule: match retries (--retry-on match)" in ends(h, again)[0]


def test_a_matching_line_fails_a_run_that_exits_at_once_and_so_does_its_last_unfinished_line(h):
    """`echo FATAL` with --fail-on FATAL was done, exit 0: the line was read as the root exited (the
    keeper's last read of its pipe), and the kill the match asked for found nothing to kill; a last
    line with no newline was never matched at all."""
    at_once = add(h, "--fail-on", "FATAL", "--max-attempts", "1", "--", "echo", "FATAL: disk full")
    unfinished = add(h, "--fail-on", "FATAL", "--max-attempts", "1", "--", "printf", "ok\\nFATAL: no newline")
    fine = add(h, "--fail-on", "FATAL", "--max-attempts", "1", "--", "echo", "all good")
    for job, line in ((at_once, "FATAL: disk full"), (unfinished, "FATAL: no newline")):
        assert h.wait_state(job, "done", "failed", timeout_s=30)["state"] == "failed", ends(h, job)
        assert ends(h, job) == [f"failed 1: matched --fail-on 'FATAL': {line}; "
                                "not retried: match is not in retry_on (signal,stall,timeout; --retry-on match asks)"]
    assert h.wait_state(fine, "done", "failed", timeout_s=30)["state"] == "done"


def test_exit_codes_timeouts_and_backoff_name_their_rule(h):
    usage = add(h, "--max-attempts", "3", "--no-retry-exit", "2", "--", "sh", "-c", "exit 2")
    h.wait_state(usage, "failed", timeout_s=30)
    assert ends(h, usage) == ["failed 1: exit 2; not retried: exit 2 is in --no-retry-exit"]
    typo = add(h, "--max-attempts", "3", "--", "sh", "-c", "exit 127")
    h.wait_state(typo, "failed", timeout_s=30)
    assert ends(h, typo) == ["failed 1: exit 127 (command not found); not retried: exit 127 is in the default "
                             "--no-retry-exit 126,127"]
    only = add(h, "--max-attempts", "3", "--retry-exit", "75", "--", "sh", "-c", "exit 1")
    h.wait_state(only, "failed", timeout_s=30)
    assert ends(h, only) == ["failed 1: exit 1; not retried: exit 1 is not in --retry-exit 75"]
    flaky = add(h, "--max-attempts", "2", "--backoff", "1s..1s", "--", "sh", "-c", "exit 1")
    h.wait_state(flaky, "failed", timeout_s=30)
    assert ends(h, flaky) == [
        "failed 1: exit 1; retry rule: exit 1 retries (default: every exit code but 126,127); retry 2/2 in 1s",
        "failed 2: exit 1; retry rule: exit 1 retries (default: every exit code but 126,127); no attempts left"]
    slow = add(h, "--timeout", "300ms", "--no-retry-on", "timeout", "--max-attempts", "3", "--", "sleep", "30")
    h.wait_state(slow, "failed", timeout_s=30)
    assert ends(h, slow) == ["failed 1: timed out after 0.3s; not retried: timeout is in --no-retry-on"]


def test_a_memory_kill_is_not_retried_by_default(make_harness):
    h = make_harness(QUICK)
    h.start()
    alloc = "b = bytearray(500 * 1024 * 1024); print('allocated', len(b))"
    job = add(h, "--mem", "100M", "--max-attempts", "3", "--", sys.executable, "-c", alloc)
    failed = h.wait_state(job, "failed", timeout_s=30)
    assert failed["attempts"] == 1, ends(h, job)
    assert ends(h, job)[0].endswith("exceeded --mem 100M; not retried: mem is not in retry_on "
                                    "(signal,stall,timeout; --retry-on mem asks)"), ends(h, job)


def test_config_retry_on_sets_the_default(make_harness):
    h = make_harness(QUICK + 'retry_on = ["mem", "match"]\n')
    h.start()
    job = add(h, "--fail-on", "boom", "--max-attempts", "2", "-s", "echo boom; sleep 300")
    assert h.wait_state(job, "failed", timeout_s=30)["attempts"] == 2
    assert "retry rule: match retries (retry_on: match,mem)" in ends(h, job)[0]
    slow = add(h, "--timeout", "300ms", "--max-attempts", "3", "--", "sleep", "30")
    h.wait_state(slow, "failed", timeout_s=30)
    assert ends(h, slow) == ["failed 1: timed out after 0.3s; not retried: timeout is not in retry_on "
                             "(match,mem; --retry-on timeout asks)"]


def test_the_keeper_ends_a_stalled_run_while_no_daemon_runs(make_harness, tmp_path):
    h = make_harness(QUICK)
    h.start()
    pids = tmp_path / "pids"
    job = add(h, "--stall", "2s", "--max-attempts", "1", "-s", deaf_tree(pids))
    h.wait_state(job, "running")
    h.wait_for(lambda: len(pids_in(pids)) == 2, what="the tree's pids")
    keeper = h.keeper_pid()
    h.kill9()  # the daemon only: the keeper keeps the run and its watch
    gone = time.monotonic() + 20
    while time.monotonic() < gone and any(alive(p) for p in pids_in(pids)):
        time.sleep(0.1)
    assert not any(alive(p) for p in pids_in(pids)), "the stall was not acted on without a daemon"
    assert psutil.pid_exists(keeper)
    h.start()
    failed = h.wait_state(job, "failed", timeout_s=30)
    assert "stalled: no output for 2s" in failed["message"]


@pytest.mark.parametrize("args, says", [
    (("--fail-on", "(a|aa)*b"), "--fail-on '(a|aa)*b': a repeated group"),
    (("--fail-on", ".*.*.*x"), "may take too long on one line"),
    (("--fail-on", "(unclosed"), "is not a regular expression"),
    (("--fail-on", r"(a)\1"), "backreferences are not taken"),
    (("--retry-on", "oom"), "--retry-on unknown end(s): 'oom'"),
    (("--retry-on", "mem", "--no-retry-on", "mem"), "in --no-retry-on too"),
    (("--backoff", "10m..5s"), "is longer than the cap"),
    (("--backoff", "5s.."), "give BASE..CAP"),
    (("--stall", "soon"), "--stall"),
])
def test_bad_rules_are_refused_at_add_and_nothing_is_queued(harness, args, says):
    h = harness
    h.start()
    p = h.cli("add", *args, "--", "true")
    assert p.returncode == 2 and says in p.stderr, p.stderr
    assert h.call("list")["jobs"] == []


def test_a_paused_run_is_not_stalled_and_its_stall_clock_starts_afresh(make_harness, tmp_path):
    h = make_harness(QUICK)
    h.start()
    go = tmp_path / "go"
    job = add(h, "--stall", "1s", "--max-attempts", "1", "-s",
              f"while [ ! -e {go} ]; do echo tick; sleep 0.2; done; echo finished")
    h.wait_for(lambda: "tick" in h.cli("logs", str(job)).stdout, what="its first tick")
    h.cli("pause", "--job", str(job), check=True)
    time.sleep(2.5)  # paused longer than --stall: no output, by our doing
    assert h.job(job)["state"] == "running"
    h.cli("resume", "--job", str(job), check=True)
    go.touch()
    assert h.wait_state(job, "done", "failed", timeout_s=30)["state"] == "done", ends(h, job)

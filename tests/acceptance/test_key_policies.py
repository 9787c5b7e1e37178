"""Issue 33, item 4: `--key K --on-dup keep|replace|append|fail`, through
the real CLI and daemon, and race free: two processes adding one key 1,000
times each leave what the policy says -- on SQLite (one daemon), and on
PostgreSQL with two daemons on one queue, each process talking to its own."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from sloth_daemon.errors import EXIT_CONFLICT, EXIT_USAGE
from tests.support.harness import on_one_queue

pytestmark = pytest.mark.acceptance
ADDS = 1000  # per process

# One process: ADDS adds of one held job with the key, over its own connection; a line of JSON each.
ADDER = """
import json, sys
from sloth_daemon.cli.client import Client
sock, policy, n, env, cwd = sys.argv[1], sys.argv[2], int(sys.argv[3]), json.loads(sys.argv[4]), sys.argv[5]
with Client(sock, timeout_s=60) as c:
    for i in range(n):
        try:
            ids = c.call("add", jobs=[{"command": ["true"], "key": "K", "on_dup": policy, "hold": True}],
                         common={"env": env, "cwd": cwd})["ids"]
            print(json.dumps({"id": ids[0]}), flush=True)
        except Exception as e:
            print(json.dumps({"error": getattr(e, "code", repr(e))}), flush=True)
"""


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def daemons(request, make_harness):
    """Two daemons on one PostgreSQL queue, or (SQLite: one daemon per file) one, twice."""
    if request.param == "sqlite":
        h = make_harness()
        h.start()
        return [h, h]
    if os.environ.get("SLOTH_SKIP_PG", "") not in ("", "0"):
        pytest.skip("SLOTH_SKIP_PG is set")
    return on_one_queue(make_harness, request.getfixturevalue("pg_url"), {"a": "", "b": ""})


def race(daemons, policy: str) -> list[dict]:
    """Two processes, ADDS adds each, at once; every answer."""
    procs = [subprocess.Popen([sys.executable, "-c", ADDER, str(h.socket), policy, str(ADDS), json.dumps(h.env),
                               str(h.home)], stdout=subprocess.PIPE, text=True, env=h.env) for h in daemons]
    try:
        outs = [p.communicate(timeout=600)[0] for p in procs]
    finally:
        for p in procs:
            p.kill()
            p.wait()
    answers = [json.loads(line) for out in outs for line in out.splitlines()]
    assert len(answers) == 2 * ADDS
    return answers


def keyed(h) -> list[dict]:
    return [j for j in h.call("list", states=["held", "blocked", "queued", "running", "cancelled", "done",
                                              "failed"], limit=10_000)["jobs"] if j["key"] == "K"]


def test_keep_leaves_one_job_and_every_add_is_told_its_id(daemons):
    answers = race(daemons, "keep")
    jobs = keyed(daemons[0])
    assert len(jobs) == 1 and {a.get("id") for a in answers} == {jobs[0]["id"]}


def test_fail_leaves_one_job_and_refuses_every_other_add(daemons):
    answers = race(daemons, "fail")
    jobs = keyed(daemons[0])
    assert len(jobs) == 1
    assert sum("id" in a for a in answers) == 1
    assert [a["error"] for a in answers if "error" in a] == ["illegal_transition"] * (2 * ADDS - 1)


def test_replace_leaves_the_last_one_waiting_and_every_other_cancelled(daemons):
    answers = race(daemons, "replace")
    jobs = keyed(daemons[0])
    assert len(jobs) == 2 * ADDS and len({a["id"] for a in answers}) == 2 * ADDS
    waiting = [j for j in jobs if j["state"] != "cancelled"]
    assert len(waiting) == 1 and waiting[0]["state"] == "held"
    assert all("replaced" in j["message"] for j in jobs if j["state"] == "cancelled")


def test_append_leaves_one_chain_of_every_job(daemons):
    answers = race(daemons, "append")
    jobs = {j["id"]: j for j in keyed(daemons[0])}
    assert len(jobs) == 2 * ADDS and set(jobs) == {a["id"] for a in answers}
    before = {i: j["after_any"] for i, j in jobs.items()}
    heads = [i for i, b in before.items() if not b]
    assert len(heads) == 1 and all(len(b) <= 1 for b in before.values())
    after = {b[0]: i for i, b in before.items() if b}
    assert len(after) == 2 * ADDS - 1  # no job has two followers: one line, no fork
    walk, seen = heads[0], 1
    while walk in after:
        walk, seen = after[walk], seen + 1
    assert seen == 2 * ADDS


def test_each_policy_says_on_stderr_what_it_did(daemons):
    h = daemons[0]
    first = int(h.cli("add", "--key", "k2", "--hold", "--", "true", check=True).stdout)
    p = h.cli("add", "--key", "k2", "--", "true", check=True)
    assert int(p.stdout) == first and f"already queued as job {first} (held)" in p.stderr
    p = h.cli("add", "--key", "k2", "--on-dup", "append", "--", "true", check=True)
    second = int(p.stdout)
    assert f"job {second} added after job {first} (held)" in p.stderr and "--on-dup append" in p.stderr
    p = h.cli("add", "--key", "k2", "--on-dup", "replace", "--hold", "--", "true", check=True)
    third = int(p.stdout)
    assert f"cancelled jobs {first}, {second}" in p.stderr and "--on-dup replace" in p.stderr
    p = h.cli("add", "--key", "k2", "--on-dup", "fail", "--", "true")
    assert p.returncode == EXIT_CONFLICT and f"job {third} has key 'k2' and is held (--on-dup fail)" in p.stderr
    assert "nothing was queued" in p.stderr
    p = h.cli("add", "--on-dup", "fail", "--", "true")
    assert p.returncode == EXIT_USAGE and "give --key too" in p.stderr
    p = h.cli("add", "--key", "k3", "--on-dup", "sometimes", "--", "true")
    assert p.returncode == EXIT_USAGE and "--on-dup must be one of keep, replace, append, fail" in p.stderr


def test_replace_ends_a_running_job_before_the_new_one_starts(daemons):
    h = daemons[0]
    marks = h.home / "marks"
    old = int(h.cli("add", "--key", "srv", "--shell", "--", f"echo start >> {marks}; sleep 60; echo end >> {marks}",
                    check=True).stdout)
    h.wait_state(old, "running")
    h.wait_for(lambda: marks.exists(), what="the old run started")
    p = h.cli("add", "--key", "srv", "--on-dup", "replace", "--shell", "--", f"echo new >> {marks}", check=True)
    new = int(p.stdout)
    assert f"job {old} runs: it is ended first" in p.stderr
    h.wait_state(new, "done")
    old_job = h.job(old)
    assert old_job["state"] == "cancelled" and f"replaced by job {new}" in old_job["message"]
    assert marks.read_text() == "start\nnew\n"  # ended (no "end"), and the new one ran after it

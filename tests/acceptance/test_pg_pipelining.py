"""A daemon on a PostgreSQL queue pipelines a burst as it does on SQLite
(issue 34 item 3: unclaim and plain claims on PostgreSQL, a turn's claims
and outcomes in one transaction): a burst of short jobs in one slot, each
run once and never two at a time, the keeper holding the next ones. The
real daemon, keeper and server (tests/support/machines.py); the jobs note
their own start and end from inside (test_pipeline.py's NOTING_JOB)."""

from __future__ import annotations

import os
from collections import Counter

import pytest

from tests.acceptance.test_pipeline import NOTING_JOB
from tests.support.machines import Machines, Network

pytestmark = [pytest.mark.acceptance, pytest.mark.postgres]


@pytest.fixture(scope="module")
def network():
    if os.environ.get("SLOTH_SKIP_PG", "") not in ("", "0"):
        pytest.skip("SLOTH_SKIP_PG is set")
    net = Network(1, netns=False)
    try:
        yield net
    finally:
        net.close()


def test_a_burst_on_postgresql_is_pipelined_and_runs_each_job_once_one_at_a_time(network, tmp_path):
    n = 120
    with Machines(network, 1, config_of=lambda i: "[lanes]\ndefault = 1\n") as ms:
        ms.start()
        h = ms[0]
        h.call("pause")
        ids = h.add_many([{"command": ["sh", "-c", NOTING_JOB], "env": {**h.env, "D": str(tmp_path)}}
                          for _ in range(n)])
        h.call("resume")
        h.wait_for(lambda: h.call("status")["counts"].get("done", 0) == n, timeout_s=120, what=f"{n} jobs done")
        for i in ids:
            job = h.job(i)
            assert (job["state"], job["attempts"]) == ("done", 1), job
            kinds = [e["kind"] for e in h.events(i)]
            assert kinds.count("claimed") == 1 and kinds[-1] == "done", kinds
        lines = [ln.split() for ln in (tmp_path / "rec").read_text().splitlines()]
        assert [ln for ln in lines if ln[0] == "overlap"] == []
        starts = {int(ln[1]): int(ln[2]) for ln in lines if ln[0] == "s"}
        ends = {int(ln[1]): int(ln[2]) for ln in lines if ln[0] == "e"}
        assert sorted(starts) == sorted(ends) == sorted(ids) and len(lines) == 2 * n  # once each
        spans = sorted((starts[i], ends[i]) for i in ids)
        assert all(b[0] >= a[1] for a, b in zip(spans, spans[1:]))  # one at a time, as seen from inside
        st = h.call("status")["pipeline"]
        assert st["enabled"] and st["held"] > 0  # the keeper held next jobs: what this test is about


def test_a_daemon_killed_holding_a_batch_of_claims_loses_none_and_each_is_re_issued_once(tmp_path):
    """kill -9 of a machine (daemon, keeper, jobs) while its keeper holds a
    batch of successors claimed in one statement (claim_many): another
    machine takes every one of them once their leases run out, each job is
    done, none is issued more than twice (the crashed claim and the one
    after it), none runs twice at once, and a job the crashed machine held
    but never started is re-issued and runs once."""
    if os.environ.get("SLOTH_SKIP_PG", "") not in ("", "0"):
        pytest.skip("SLOTH_SKIP_PG is set")
    n = 150
    job = ('exec 8>>"$D/job-$SLOTH_JOB_ID.lock"; flock -n 8 || echo "overlap $SLOTH_JOB_ID" >> "$D/rec"; '
           'echo "s $SLOTH_JOB_ID" >> "$D/rec"; sleep 0.01; echo "e $SLOTH_JOB_ID" >> "$D/rec"')
    net = Network(2, netns=False)
    try:
        with Machines(net, 2, config_of=lambda i: 'lease_s = "3s"\n[lanes]\ndefault = 1\n') as ms:
            ms.start()
            a, b = ms[0], ms[1]
            b.call("pause")  # a takes the burst first, and holds a batch
            ids = a.add_many([{"command": ["sh", "-c", job], "env": {**a.env, "D": str(tmp_path)}, "place": "*"}
                              for _ in range(n)])
            held = a.wait_for(lambda: [p["id"] for p in a.call("status").get("pending", [])], timeout_s=60,
                              what="a batch held in a's keeper")
            a.crash()
            b.call("resume")
            b.wait_for(lambda: b.call("status")["counts"].get("done", 0) == n, timeout_s=120,
                       what=f"{n} jobs done")
            lines = [ln.split() for ln in (tmp_path / "rec").read_text().splitlines()]
            assert [ln for ln in lines if ln[0] == "overlap"] == []
            starts = Counter(int(ln[1]) for ln in lines if ln[0] == "s")
            for i in ids:
                got = b.job(i)
                kinds = [e["kind"] for e in b.events(i)]
                assert got["state"] == "done" and 1 <= starts[i] <= 2 and got["attempts"] <= 2, (got, kinds)
                assert kinds.count("claimed") == 1 and kinds.count("reclaimed") <= 1, kinds
            reissued = [i for i in ids if "reclaimed" in [e["kind"] for e in b.events(i)]]
            # a's batch taken over once its leases ran out (one may have started and ended on a in the
            # moment between the status read and the kill: it is done once, as any job)
            assert set(held) & set(reissued) and any(starts[i] == 1 for i in set(held) & set(reissued))
    finally:
        net.close()


def test_a_chain_claimed_deep_for_short_jobs_gives_back_what_turns_out_long_to_the_other_machine(tmp_path):
    """Two machines, one slot each, a lane of `true` (chains 64 deep), then
    64 jobs of 45 ms: each is young enough to keep its successors, so the
    machine that claimed them held all 64 for 2.9 s while the other's slot
    stood idle (63 to 1). Once its lane's runs are heard longer, a chain
    gives back what it holds beyond depth_cap: both machines run them."""
    if os.environ.get("SLOTH_SKIP_PG", "") not in ("", "0"):
        pytest.skip("SLOTH_SKIP_PG is set")
    net = Network(2, netns=False)
    try:
        with Machines(net, 2, config_of=lambda i: 'lease_s = "3s"\n[lanes]\ndefault = 1\n') as ms:
            ms.start()
            a = ms[0]
            a.add_many([{"command": ["true"], "place": "*"} for _ in range(300)])
            a.wait_for(lambda: a.call("status")["counts"].get("done", 0) == 300, timeout_s=60, what="300 true done")
            ids = a.add_many([{"command": ["sleep", "0.045"], "place": "*"} for _ in range(64)])
            a.wait_for(lambda: a.call("status")["counts"].get("done", 0) == 364, timeout_s=60, what="64 more done")
            ran_on = Counter(next(e["message"] for e in a.events(i) if e["kind"] == "claimed").split(":")[1]
                             for i in ids)
            assert len(ran_on) == 2 and min(ran_on.values()) >= 16, ran_on
            for i in ids:
                assert (a.job(i)["state"], a.job(i)["attempts"]) == ("done", 1)
    finally:
        net.close()

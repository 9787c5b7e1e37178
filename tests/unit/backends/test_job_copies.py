"""What a restart (a new job made from an old one) copies, on both engines,
now that the session's branches added columns independently: each column
of ``jobs`` is either copied (it says what the job is) or fresh (it says
how a run went), and a key's unfinished jobs -- the head and those added
behind it with --on-dup -- keep a restart of the same key out."""

from __future__ import annotations

from sloth_daemon.backends import rules
from sloth_daemon.backends.contract import Handle
from tests.support.queues import is_pg, sql

MEMBER = {"index": 2, "value": "b", "args": {"lr": "0.1"}}


def test_a_restart_is_the_same_job_again_an_array_member_with_its_values_a_placed_job_where_it_was(q):
    spec = {"command": ["train"], "member": MEMBER, "place": "gpu-box", "ping": "https://example.com/p",
            "rules": {"stall_s": 60}, "needs": {"gpu": 1}, "keep_awake": True}
    old = q.enqueue_many([spec], handle=Handle("sweep"))[0]
    q.cancel(old)
    new = q.restart([old]).jobs[0]
    was, now = q.get(old).to_dict(), new.to_dict()
    # the run's $SLOTH_ARRAY_* come from member; place says where it may run
    assert now["member"] == MEMBER and now["place"] == "gpu-box"
    assert (now["tell"], now["rules"], now["gate"], now["keep_awake"]) == (
        was["tell"], was["rules"], was["gate"], was["keep_awake"])
    assert now["batch"] is None  # docs/batches.md: a restarted job is a new job outside the batch


def test_every_column_of_a_job_is_either_copied_by_a_restart_or_said_to_be_the_run_s_own(q):
    if is_pg(q):
        cols = {r[0] for r in sql(q, "SELECT column_name FROM information_schema.columns"
                                     " WHERE table_schema = 'sloth' AND table_name = 'jobs'")}
    else:
        cols = {r[1] for r in sql(q, "PRAGMA table_info(jobs)")}
    said = set(rules.RESTART_COPIES) | set(rules.RESTART_FRESH) | ({"env"} if not is_pg(q) else set())
    assert cols - said == set(), "a new column: say whether a restart copies it (backends/rules.py)"
    assert not set(rules.RESTART_COPIES) & set(rules.RESTART_FRESH)


def test_a_restart_waits_its_turn_behind_a_job_appended_to_its_key(q):
    head = q.enqueue_many([{"command": ["x"], "key": "k"}])[0]
    claimed = q.claim("w")
    assert claimed is not None and claimed.id == head
    behind = q.enqueue_many([{"command": ["x"], "key": "k", "on_dup": "append"}])[0]
    q.complete(head, claimed.token)
    assert q.get(behind).state.value == "queued"
    out = q.restart([head])
    assert out.jobs == [] and out.skipped and f"job {behind}" in out.skipped[0][1]
    assert [r[0] for r in sql(q, "SELECT id FROM jobs WHERE key = 'k' ORDER BY id")] == [head, behind]


def test_an_add_its_key_keeps_out_leaves_the_unfinished_job_as_it_was_channels_and_rules_alike(q):
    """--on-dup keep: "nothing new was queued; the unfinished job stands" --
    the second add's --ping is not attached to the first add's job, as its
    rules are not (in one batch too)."""
    first = q.enqueue_many([{"command": ["x"], "key": "k"}])[0]
    again = {"command": ["y"], "key": "k", "ping": "https://example.com/p", "rules": {"stall_s": 60}}
    assert q.enqueue_many([again]) == [first]
    assert q.enqueue_many([{"command": ["z"], "key": "j"}, again | {"key": "j"}]) == [first + 1, first + 1]
    for jid in (first, first + 1):
        assert (q.get(jid).tell, q.get(jid).rules) == (None, None)
    assert q.outbox_counts()["pending"] == 0


def test_an_edit_of_the_prerequisites_keeps_the_key_s_turn_so_two_jobs_of_a_key_never_run_side_by_side(q):
    """`sloth edit B --after ...` replaces the prerequisites the user gave,
    not the turn --on-dup append gave B behind the key's running job."""
    head = q.enqueue_many([{"command": ["x"], "key": "k"}])[0]
    assert q.claim("w").id == head
    behind = q.enqueue_many([{"command": ["x"], "key": "k", "on_dup": "append"}])[0]
    other = q.enqueue_many([{"command": ["y"]}])[0]
    q.edit(behind, {"after": [], "after_any": []})
    assert q.get(behind).state.value == "blocked" and q.get(behind).after_any == [head]
    edited = q.edit(behind, {"after": [other]})
    assert edited.changes == [f"after {head}(any) -> {head}(any),{other}"]
    assert q.claim("w2").id == other and q.claim("w3") is None  # the key's job still runs: behind waits

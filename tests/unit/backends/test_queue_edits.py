"""The queue edits of issue 22 (edit, bump, hold, unhold), on both engines:
one transaction each, one event saying what changed, bad input refused with
nothing changed, the claim order and the dependency rules kept.

Contract tests: each runs against SQLite and PostgreSQL on a ManualClock.
"""

from __future__ import annotations

import pytest

from sloth_daemon.errors import BadRequest, FieldError, IllegalTransition, JobNotFound
from sloth_daemon.models import JobState
from tests.support.queues import is_pg, sql

HELD, QUEUED, BLOCKED, CANCELLED = JobState.HELD, JobState.QUEUED, JobState.BLOCKED, JobState.CANCELLED


def order(q, **kw) -> list[int]:
    out = []
    while (j := q.claim("w", **kw)) is not None:
        out.append(j.id)
    return out


def last_event(q, jid):
    return q.events(jid)[-1]


def unchanged(q, jid):
    """Everything observable of a job, to compare before and after a refused request."""
    return q.get(jid), q.events(jid), q.prereqs(jid)


# ----------------------------------------------------------------- edit
def test_edit_changes_fields_in_one_event_that_says_what_changed(q):
    jid = q.enqueue(["echo", "a"], priority=0, label="old")
    res = q.edit(jid, {"priority": 5, "lane": "work", "label": "new", "command": ["echo", "b"]})
    job = q.get(jid)
    assert (job.priority, job.lane, job.label, job.command, job.state) == (5, "work", "new", ["echo", "b"], QUEUED)
    assert res.job == job
    ev = last_event(q, jid)
    assert ev.kind == "edited"
    assert ev.message.startswith("edited: command 'echo a' -> 'echo b', lane default -> work, priority 0 -> 5")
    assert "label old -> new" in ev.message
    assert [e.kind for e in q.events(jid)].count("edited") == 1
    assert "work" in q.lane_rows()  # the new lane is registered, as an add's is


def test_edit_that_changes_nothing_writes_nothing(q):
    jid = q.enqueue(["true"], priority=2)
    before = unchanged(q, jid)
    res = q.edit(jid, {"priority": 2})
    assert res.changes == [] and not res.to_dict()["changed"]
    assert unchanged(q, jid) == before


def test_edit_start_time_and_shell_command(q, clock):
    jid = q.enqueue(["true"])
    q.edit(jid, {"not_before": 500.0, "command": ["/bin/sh", "-c", "echo hi | wc -c"], "shell": True})
    job = q.get(jid)
    assert job.not_before == 500 and job.shell and job.command[2] == "echo hi | wc -c"
    assert q.claim("w") is None  # delayed now
    assert "start now -> " in last_event(q, jid).message
    clock.set(500)
    assert q.claim("w").id == jid


@pytest.mark.parametrize("state", ["running", "done", "cancelled"])
def test_edit_refuses_a_job_that_started_or_ended_and_says_restart(q, state):
    jid = q.enqueue(["true"])
    if state != "cancelled":
        j = q.claim("w")
        if state == "done":
            q.complete(jid, j.token)
    else:
        q.cancel(jid)
    before = unchanged(q, jid)
    with pytest.raises(IllegalTransition) as e:
        q.edit(jid, {"priority": 9})
    assert f"job {jid} is {state}" in e.value.message and "sloth restart" in e.value.hint
    assert unchanged(q, jid) == before


@pytest.mark.parametrize("changes, err", [
    ({}, BadRequest), ({"priority": "high"}, FieldError), ({"priority": True}, FieldError),
    ({"lane": ""}, FieldError), ({"command": []}, FieldError), ({"command": "echo"}, FieldError),
    ({"state": "done"}, BadRequest), ({"key": "k"}, BadRequest), ({"not_before": float("nan")}, FieldError),
    ({"after": "3"}, BadRequest), ({"after": [0]}, BadRequest), ({"shell": True}, BadRequest),
    ({"priority": 2**63}, FieldError), ("garbage", BadRequest), ({"after": list(range(1, 1002))}, FieldError),
])
def test_edit_bad_fields_change_nothing(q, changes, err):
    jid = q.enqueue(["true"])
    before = unchanged(q, jid)
    with pytest.raises(err):
        q.edit(jid, changes)
    assert unchanged(q, jid) == before


def test_edit_changes_the_settings_add_gives_checked_as_add_checks_them(q):
    """Issue 30: every option of `sloth add` a waiting job takes, in one
    event, each said as a person gave it; a gate moves the job out of the
    plain claim (and its old reason goes); limits merge one by one."""
    (jid,) = q.enqueue_many([{"command": ["true"], "limits": {"nice": 5}}])
    res = q.edit(jid, {"timeout_s": 7200.0, "max_attempts": 5, "when": ["disk>=100T"], "limits": {"io": "idle"},
                       "retry_exit": [75], "keep_awake": True, "lease_s": 120.0})
    job = q.get(jid)
    assert (job.timeout_s, job.max_attempts, job.gate, job.retry_exit, job.keep_awake, job.lease_s) == (
        7200.0, 5, {"when": ["disk>=100T"]}, [75], True, 120.0)
    assert job.limits == {"io": "idle", "nice": 5} and res.job == job
    assert last_event(q, jid).message == ("edited: keep-awake no -> yes, lease 1m40s -> 2m, limits nice=5 -> io=idle,"
                                          "nice=5, max-attempts 3 -> 5, retry-exit (none) -> 75, timeout (none) -> 2h,"
                                          " when (none) -> disk>=100T")
    assert q.claim("w") is None  # gated now: the plain claim passes it by
    q.edit(jid, {"when": None})
    assert q.get(jid).gate is None and q.claim("w").id == jid
    other = q.enqueue(["true"], timeout_s=60.0)
    before = unchanged(q, other)
    assert q.edit(other, {"timeout_s": 60.0}).changes == [] and unchanged(q, other) == before


def test_edit_changes_watchdogs_and_retry_rules_one_by_one(q):
    """--stall, --fail-on, --retry-on, --backoff: an edit of one keeps the
    others, each change said as its option; a bad one changes nothing."""
    (jid,) = q.enqueue_many([{"command": ["true"], "rules": {"fail_on": "loss: nan", "stall_s": 600.0}}])
    res = q.edit(jid, {"rules": {"stall_s": 1200.0, "retry_on": ["mem"]}})
    assert q.get(jid).rules == {"fail_on": "loss: nan", "stall_s": 1200.0, "retry_on": ["mem"]} == res.job.rules
    assert res.changes == ["retry-on (none) -> mem", "stall 10m -> 20m"]
    before = unchanged(q, jid)
    with pytest.raises((BadRequest, FieldError)):
        q.edit(jid, {"rules": {"fail_on": "("}})
    assert unchanged(q, jid) == before


@pytest.mark.parametrize("changes", [{"max_attempts": 0}, {"timeout_s": -1}, {"when": ["moonlight"]},
                                     {"limits": {"nice": 40}}, {"slots": 0}, {"place": "bad name!"},
                                     {"keep_awake": "yes"}, {"lease_s": 0.001}, {"rules": {"stall_s": -1}}])
def test_edit_bad_settings_change_nothing(q, changes):
    jid = q.enqueue(["true"])
    before = unchanged(q, jid)
    with pytest.raises((BadRequest, FieldError)):
        q.edit(jid, changes)
    assert unchanged(q, jid) == before


def test_edit_unknown_or_bad_id(q):
    with pytest.raises(JobNotFound):
        q.edit(999, {"priority": 1})
    with pytest.raises(JobNotFound):
        q.edit("1", {"priority": 1})


def test_edit_is_compare_and_set(q):
    jid = q.enqueue(["true"])
    d = q.get(jid).to_dict()
    seen = {k: d[k] for k in ("state", "attempts", "updated_at", "command", "priority", "lane")}
    q.edit(jid, {"priority": 1}, expect=seen)  # as read: applied
    before = unchanged(q, jid)
    with pytest.raises(IllegalTransition, match="changed while it was being edited"):
        q.edit(jid, {"priority": 2}, expect=seen)  # written since
    assert unchanged(q, jid) == before
    with pytest.raises(BadRequest):
        q.edit(jid, {"priority": 2}, expect={"token": None})
    with pytest.raises(BadRequest):
        q.edit(jid, {"priority": 2}, expect=[1])


def test_edit_after_a_claim_is_refused_even_with_the_old_reading(q):
    """The claim that came between the client's read and its write wins."""
    jid = q.enqueue(["true"])
    seen = {"state": "queued", "attempts": 0}
    q.claim("w")
    with pytest.raises(IllegalTransition, match="is running"):
        q.edit(jid, {"command": ["false"]}, expect=seen)
    assert q.get(jid).command == ["true"]


def test_edit_after_blocks_and_unblocks_and_keeps_the_rules(q):
    a = q.enqueue(["a"])
    b = q.enqueue(["b"])
    c = q.enqueue_many([{"command": ["c"], "after": [a]}])[0]
    assert q.get(c).state == BLOCKED
    q.edit(b, {"after": [a]})  # queued -> blocked
    assert q.get(b).state == BLOCKED and q.get(b).after == [a]
    assert "after (nothing) -> " in last_event(q, b).message and "queued -> blocked" in last_event(q, b).message
    q.edit(c, {"after": []})  # blocked -> queued
    assert q.get(c).state == QUEUED and q.prereqs(c) == []
    # the new prerequisite's end settles the edited job
    j = q.claim("w")
    assert j.id == a
    q.complete(a, j.token)
    assert q.get(b).state == QUEUED
    assert [e.kind for e in q.events(b)][-1] == "ready"


def test_edit_after_refuses_cycles_unknown_ids_and_a_failed_prerequisite(q):
    a = q.enqueue(["a"])
    b = q.enqueue_many([{"command": ["b"], "after": [a]}])[0]
    c = q.enqueue_many([{"command": ["c"], "after": [b]}])[0]
    for bad, err in (([c], BadRequest), ([b], BadRequest), ([a], BadRequest), ([12345], JobNotFound)):
        before = unchanged(q, a)
        with pytest.raises(err):
            q.edit(a, {"after": bad})  # c and b wait for a (down the chain); a cannot wait for itself
        assert unchanged(q, a) == before
    x = q.enqueue(["x"])
    q.cancel(x)
    with pytest.raises(IllegalTransition, match="would never run"):
        q.edit(c, {"after": [x]})
    assert q.get(c).after == [b] and q.get(c).state == BLOCKED
    q.edit(c, {"after_any": [x]})  # whatever its result: fine, and nothing else to wait for
    assert q.get(c).state == QUEUED


# ----------------------------------------------------------------- bump
def test_bump_moves_jobs_to_the_front_of_their_lane_first_named_first(q):
    ids = [q.enqueue([f"j{i}"], priority=p) for i, p in enumerate([0, 0, 3, 0, 1])]
    other = q.enqueue(["other"], lane="else", priority=50)
    res = q.bump([ids[3], ids[1]])
    assert [j.id for j in res.jobs] == [ids[3], ids[1]]
    assert q.get(ids[3]).priority == 5 and q.get(ids[1]).priority == 4
    assert last_event(q, ids[3]).message == "bumped to the front of lane default: priority 0 -> 5"
    assert order(q, lanes=["default"]) == [ids[3], ids[1], ids[2], ids[4], ids[0]]
    assert q.get(other).priority == 50  # other lanes are not its business


def test_bump_first_job_changes_nothing_but_says_so(q):
    a = q.enqueue(["a"], priority=9)
    q.enqueue(["b"])
    q.bump([a])
    assert q.get(a).priority == 9
    assert "first already" in last_event(q, a).message


def test_bump_a_delayed_job_makes_it_due_now(q, clock):
    a = q.enqueue(["a"])
    late = q.enqueue(["late"], not_before=1000)
    q.bump([late])
    assert q.get(late).not_before == 0
    assert "due now" in last_event(q, late).message
    assert order(q) == [late, a]


def test_bump_skips_running_refuses_unknown(q):
    a = q.enqueue(["a"])
    b = q.enqueue(["b"])
    q.claim("w")
    res = q.bump([a, b])
    assert [j.id for j in res.jobs] == [b] and res.skipped[0][0] == a and "is running" in res.skipped[0][1]
    before = unchanged(q, b)
    with pytest.raises(JobNotFound):
        q.bump([b, 999])
    assert unchanged(q, b) == before


def test_bump_puts_a_job_before_held_ones_too(q):
    h = q.enqueue(["h"], priority=4)
    q.hold([h])
    a = q.enqueue(["a"])
    q.bump([a])
    q.unhold([h])
    assert order(q) == [a, h]


# ----------------------------------------------------------------- hold
def test_hold_keeps_jobs_from_claims_until_released_in_their_place(q):
    a, b, c = (q.enqueue([n]) for n in "abc")
    res = q.hold([a, b])
    assert [j.state for j in res.jobs] == [HELD, HELD]
    assert q.get(a).state == HELD and last_event(q, a).kind == "held"
    assert q.next_due_at() == 0  # c only
    assert order(q) == [c]
    assert q.next_due_at(exclude_ids=[c]) is None  # held jobs are never due
    assert q.counts()["held"] == 2
    assert q.lane_counts()["default"]["held"] == 2 and q.lane_busy("default")
    res = q.unhold([b, a])
    assert {j.state for j in res.jobs} == {QUEUED}
    assert last_event(q, a).kind == "released" and "queued" in last_event(q, a).message
    assert order(q) == [a, b]  # kept their place (priority, due time, id)


def test_held_jobs_are_in_no_claim_index(q):
    """As blocked ones: the claim's partial indexes never see them."""
    if is_pg(q):
        defs = [r[0] for r in sql(q, "SELECT indexdef FROM pg_indexes WHERE schemaname = 'sloth'"
                                     " AND indexname IN ('jobs_ready', 'jobs_due', 'jobs_lease')")]
    else:
        defs = [r[0] for r in sql(q, "SELECT sql FROM sqlite_master WHERE name IN ('jobs_ready', 'jobs_due', 'jobs_lease')")]
    assert defs and all("held" not in d for d in defs)
    q.enqueue_many([{"command": ["x"], "hold": True}] * 50)
    assert q.claim("w") is None


def test_hold_and_release_a_blocked_job_follow_its_prerequisites(q):
    a = q.enqueue(["a"])
    b = q.enqueue_many([{"command": ["b"], "after": [a]}])[0]
    q.hold([b])
    assert q.get(b).state == HELD
    q.unhold([b])
    assert q.get(b).state == BLOCKED and "waits for job" in last_event(q, b).message
    q.hold([b])
    j = q.claim("w")
    q.complete(a, j.token)
    assert q.get(b).state == HELD  # its prerequisite is done, but it is held
    q.unhold([b])
    assert q.get(b).state == QUEUED


def test_a_held_job_whose_prerequisite_fails_is_cancelled(q):
    a = q.enqueue(["a"], max_attempts=1)
    b = q.enqueue_many([{"command": ["b"], "after": [a]}])[0]
    q.hold([b])
    j = q.claim("w")
    q.fail(a, j.token, message="boom")
    assert q.get(b).state == CANCELLED


def test_a_held_prerequisite_counts_as_unfinished(q):
    a = q.enqueue(["a"])
    q.hold([a])
    b = q.enqueue_many([{"command": ["b"], "after": [a]}])[0]
    assert q.get(b).state == BLOCKED
    q.edit(b, {"after": [a]})  # unchanged: no write
    assert q.get(b).state == BLOCKED


def test_hold_by_lane_takes_only_what_it_applies_to(q):
    a = q.enqueue(["a"], lane="v")
    b = q.enqueue(["b"], lane="v")
    other = q.enqueue(["o"])
    j = q.claim("w", lanes=["v"])
    assert j.id == a
    res = q.hold(lane="v")
    assert [x.id for x in res.jobs] == [b] and res.skipped == []
    assert q.get(other).state == QUEUED and q.get(a).state == JobState.RUNNING
    res = q.unhold(lane="v")
    assert [x.id for x in res.jobs] == [b] and q.get(b).state == QUEUED


def test_hold_names_running_and_finished_jobs_it_left_alone(q):
    a = q.enqueue(["a"])
    b = q.enqueue(["b"])
    q.claim("w")
    res = q.hold([a, b])
    assert [j.id for j in res.jobs] == [b] and [s[0] for s in res.skipped] == [a]
    assert q.hold([b]).jobs[0].state == HELD  # held already: as asked
    with pytest.raises(JobNotFound):
        q.hold([b, 999])
    with pytest.raises(BadRequest):
        q.hold()
    with pytest.raises(BadRequest):
        q.hold([b], lane="default")


def test_add_held_keeps_its_key_and_is_cancellable(q):
    a = q.enqueue_many([{"command": ["a"], "key": "k", "hold": True}])[0]
    assert q.get(a).state == HELD and q.events(a)[0].kind == "held"
    assert q.enqueue_many([{"command": ["again"], "key": "k"}]) == [a]  # an active key: the same job
    with pytest.raises(FieldError):
        q.enqueue_many([{"command": ["x"], "hold": "yes"}])
    q.cancel(a)
    assert q.get(a).state == CANCELLED


def test_add_held_with_prerequisites_and_in_a_batch(q):
    ids = q.enqueue_many([{"command": ["a"]}, {"command": ["b"], "after_previous": "after", "hold": True},
                          {"command": ["c"], "hold": True}])
    assert [q.get(i).state for i in ids] == [QUEUED, HELD, HELD]
    q.unhold(ids[1:])
    assert [q.get(i).state for i in ids] == [QUEUED, BLOCKED, QUEUED]


def test_listing_shows_held_jobs_and_filters_on_them(q):
    a = q.enqueue(["a"])
    h = q.enqueue_many([{"command": ["h"], "hold": True}])[0]
    lst = q.listing(now=0)
    assert [j.id for j in lst.jobs] == [a, h] and lst.counts["held"] == 1
    only = q.listing(states=["held"], now=0)
    assert [j.id for j in only.jobs] == [h] and only.total == 1


def test_edit_a_held_job_keeps_it_held(q):
    h = q.enqueue_many([{"command": ["h"], "hold": True}])[0]
    q.edit(h, {"priority": 3, "lane": "x"})
    assert q.get(h).state == HELD and q.get(h).lane == "x"
    assert q.claim("w") is None


# ------------------------------------------------------- a claim racing edits
def test_edits_racing_claims_on_two_connections_never_edit_a_claimed_job(make_queue):
    """Two handles on one queue (two daemons of a shared queue, or a daemon
    and the library): one claims while the other edits. An edit lands wholly
    before a claim (the claim runs the edited command) or is refused."""
    import threading

    editor, claimer = make_queue(), make_queue()
    ids = editor.enqueue_many([{"command": ["old"]} for _ in range(60)])
    claimed: dict[int, list[str]] = {}
    answers: dict[int, object] = {}

    def claim_all() -> None:
        while len(claimed) < len(ids):
            j = claimer.claim("w")
            if j is not None:
                claimed[j.id] = j.command

    def edit_all() -> None:
        for jid in reversed(ids):  # from the end: the two meet in the middle
            try:
                answers[jid] = editor.edit(jid, {"command": ["new"]}, expect={"state": "queued", "attempts": 0})
            except IllegalTransition as e:
                answers[jid] = e

    threads = [threading.Thread(target=claim_all), threading.Thread(target=edit_all)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert len(claimed) == len(ids) and len(answers) == len(ids)
    for jid in ids:
        kinds = [e.kind for e in editor.events(jid)]
        if isinstance(answers[jid], IllegalTransition):
            assert claimed[jid] == ["old"] and "edited" not in kinds
        else:
            assert claimed[jid] == ["new"] and kinds.index("edited") < kinds.index("claimed")

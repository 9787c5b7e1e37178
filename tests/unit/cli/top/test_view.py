"""What `sloth top` shows, from the daemon's answers and a fixed ``now``
(cli/top/view.py, keys.py): no terminal, no daemon."""

from __future__ import annotations

from sloth_daemon.cli.top import view
from sloth_daemon.cli.top.keys import BY_NAME
from sloth_daemon.durations import local_time

NOW = 1_800_000_000.0


def job(jid: int = 1, state: str = "queued", **kw) -> dict:
    d = {"id": jid, "state": state, "lane": "default", "priority": 0, "command": ["make", "test"], "label": None,
         "message": "", "not_before": NOW - 5, "attempts": 0, "after": [], "after_any": [], "wait_reason": None,
         "paused": False, "runner": None, "updated_at": NOW - 5, "created_at": NOW - 5, "gate": None,
         "tokens": None, "limits": None, "keep_awake": False}
    d.update(kw)
    return d


LANES = {"default": {"concurrency": 2, "running": 2, "queued": 3, "blocked": 0, "paused": False},
         "video": {"concurrency": 1, "running": 0, "queued": 1, "blocked": 0, "paused": True}}


def test_why_each_job_waits():
    why = lambda j, paused_all=False: view.why_waits(j, LANES, paused_all, NOW)
    assert why(job(state="held")) == "held (`sloth release 1`)"
    assert why(job(state="held", wait_reason="needs gpu, none here")) == "held: needs gpu, none here"
    assert why(job(state="blocked", after=[3, 4])) == "after jobs 3, 4"
    assert why(job(state="blocked", after_any=[7])) == "after any of 7"
    assert why(job(not_before=NOW + 300)) == "delayed: starts in 5m"
    assert why(job(not_before=NOW + 4, attempts=1)) == "retry: starts in 4s"
    assert why(job(wait_reason="waiting for mains power")) == "waiting for mains power"
    assert why(job(lane="video")) == "paused (lane video)"
    assert why(job(), paused_all=True) == "paused (everything)"
    assert why(job()) == "lane default full (2/2)"
    assert view.why_waits(job(), {"default": dict(LANES["default"], running=1)}, False, NOW) == "due: next to start"


def test_progress_and_time_left_when_the_job_says_them_and_nothing_when_not():
    assert view.progress_text(job(state="running"), NOW) == ("", "")
    p = {"fraction": 0.42, "source": "line", "eta_s": 130.0, "at": NOW - 10}
    assert view.progress_text(job(state="running", progress=p), NOW) == ("████░░░░░░  42%", "2m left")
    est = dict(p, source="estimate", fraction=1.7)  # capped; an estimate says it is one
    assert view.progress_text(job(state="running", progress=est), NOW) == ("██████████ 100%", "~2m left")


def test_running_rows_show_elapsed_usage_and_what_it_runs_under():
    j = job(state="running", runner={"started_at": NOW - 65, "pid": 9}, gate={"when": ["ac"], "needs": {"gpu": 1}},
            tokens={"gpu": ["0"]}, limits={"mem": 1 << 30})
    ((jid, row),) = view.running_rows([j], {1: (150.0, 200 << 20)}, NOW)
    assert jid == 1
    assert row[:2] == ("1", "1m5s") and row[4:6] == ("150%", "200M")
    assert row[7] == f"when ac needs gpu:1 gpu=0 mem {1 << 30}"
    assert row[8] == "make test"


def test_schedules_due_within_a_day_with_a_countdown_then_the_blocked_and_paused():
    waiting = job(9, wait_reason="waiting for mains power", created_at=NOW - 3600)
    scheds = [
        {"name": "later", "spec": "every 2d", "next_run": NOW + 2 * 86400, "last_job": None},
        {"name": "soon", "spec": "every 1h", "next_run": NOW + 125, "last_job": None, "last_state": "done"},
        {"name": "first", "spec": "at 03:30", "next_run": NOW + 3 * 3600 + 7, "last_job": None},
        {"name": "stuck", "spec": "at 03:30", "next_run": NOW + 80000, "last_job": 9, "last_slot": NOW - 3600},
        {"name": "off", "spec": "every 1h", "next_run": None, "last_job": None, "paused": True},
    ]
    rows = view.schedule_rows(scheds, {9: waiting}, NOW)
    assert [n for n, _ in rows] == ["soon", "first", "stuck", "off"]
    assert rows[0][1][1:] == ("in 2:05", "every 1h", "last: done")
    assert rows[1][1][1] == "in 3:00:07"
    since = local_time(NOW - 3600)
    assert rows[2][1][1] == "blocked" and rows[2][1][3].startswith(f"no run since {since}")
    assert rows[2][1][3].endswith(": waiting for mains power")
    assert rows[3][1][1] == "paused"


def test_the_filter_by_lane_state_label_and_words():
    f = view.Filter.parse("lane:video state:running,queued label:nightly BACKUP")
    assert (f.lane, f.states, f.label, f.words) == ("video", {"running", "queued"}, "nightly", ["backup"])
    hit = job(lane="video", label="nightly", command=["backup.sh", "/home"])
    assert f.matches(hit)
    assert not f.matches(dict(hit, lane="default"))
    assert not f.matches(dict(hit, state="failed"))
    assert not f.matches(dict(hit, command=["rsync"]))
    assert not view.Filter.parse("  ")
    assert view.Filter.parse(f.text()) == f


def test_header_says_who_answers_power_sleep_and_pause():
    st = {"pid": 42, "uptime_s": 3700, "version": "1.2", "paused_all": True, "counts": {"running": 1, "queued": 4},
          "last_jump": {"kind": "slept", "at": NOW - 60, "describe": "slept 2h"}}
    first, second = view.header_lines(st, "daemon", (False, 37.0), NOW)
    assert first == "daemon up 1h1m, pid 42, version 1.2"
    assert second.startswith("on battery 37%  ·  last slept ") and "slept 2h" in second
    assert "PAUSED" in second and second.endswith("1 running 4 queued")
    first, second = view.header_lines({"counts": {}}, "no daemon: reading q.db read-only", None, NOW)
    assert first == "no daemon: reading q.db read-only" and second == "no sleep seen"


def test_each_key_sends_the_op_the_cli_would():
    running, held = job(state="running", paused=True), job(state="held", priority=3)
    assert BY_NAME["cancel"].request(running) == ("cancel", {"id": 1})
    assert BY_NAME["kill"].request(running) == ("kill", {"ids": [1]})
    assert BY_NAME["pause"].request(running) == ("resume_jobs", {"ids": [1]})
    assert BY_NAME["pause"].request(dict(running, paused=False)) == ("pause_jobs", {"ids": [1]})
    assert BY_NAME["hold"].request(held) == ("release", {"ids": [1]})
    assert BY_NAME["hold"].request(job()) == ("hold", {"ids": [1]})
    assert BY_NAME["up"].request(held) == ("edit", {"id": 1, "changes": {"priority": 4}, "expect": {"priority": 3}})
    assert BY_NAME["cancel"].destructive and BY_NAME["kill"].destructive and not BY_NAME["bump"].destructive
    assert not BY_NAME["kill"].applies(held) and BY_NAME["retry"].applies(job(state="failed"))


def test_cost_lines_when_an_attempt_has_one():
    d = {"job": job(state="done"), "attempts": [{"attempt": 1, "cost": {"cpu_s": 1.25, "peak_rss_bytes": 200 << 20,
                                                                        "wall_s": 3.0, "ended": "exit 0",
                                                                        "covers": "cgroup"}}]}
    assert view.cost_lines(d) == ["  cost", "  attempt 1: cpu 1.2s, peak 200M, wall 3s, exit 0 (cgroup)"]
    assert view.cost_lines({"job": job()}) == []

"""The timeline's data and its text picture on a real queue and a fake
clock (issue 31): runs from the history (a retry's two runs, the failure
marked), waits shaded (from the add to the claim, after a failure, still
waiting), the machine's sleep and the daemon's downtime as labelled gaps;
the page's data can carry no markup out of its script."""

from __future__ import annotations

import json
import re
import time

import pytest

from sloth_daemon.backends import timeline
from sloth_daemon.cli.timeline import page, text
from sloth_daemon.errors import BadRequest

H = 3600.0


@pytest.fixture(autouse=True)
def utc(monkeypatch):
    """The picture is in local time: here, UTC."""
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


@pytest.mark.backends("sqlite")
def test_a_night_on_a_fake_clock_its_runs_waits_sleep_and_downtime(q, clock):
    clock.set(0.0)
    up = q.machine_up("lap")
    a = q.enqueue(["make", "backup"], lane="backup")
    clock.set(600.0)
    job = q.claim("w")
    clock.set(1200.0)
    q.fail(job.id, job.token, message="exit 1", exit_code=1)  # retried: a wait, then a second run
    clock.set(1500.0)
    job = q.claim("w")
    clock.set(1800.0)
    q.complete(job.id, job.token, message="exit 0", exit_code=0)
    q.machine_seen(up)
    clock.set(2 * H + 1800.0)
    q.machine_slept("lap", 2 * H, "machine slept 7200s")  # 00:30 -> 02:30
    q.machine_seen(up, ended="stopped: signal SIGTERM")
    clock.set(3 * H)
    q.machine_up("lap")  # down 02:30 -> 03:00
    b = q.enqueue(["sh", "-c", "exit 3"], max_attempts=1)
    job = q.claim("w")
    clock.set(3 * H + 60)
    q.fail(job.id, job.token, message="exit 3", exit_code=3)
    q.enqueue(["sleep", "9"], not_before=4 * H)  # still waiting at the end
    clock.set(4 * H)

    data = timeline.gather(q, since=0.0, now=4 * H)
    runs = {j["id"]: [(r["start"], r["end"], r["outcome"]) for r in j["runs"]] for j in data["jobs"]}
    assert runs[a] == [(600.0, 1200.0, "failed"), (1500.0, 1800.0, "done")]
    assert runs[b] == [(3 * H, 3 * H + 60, "failed")]
    waits = {j["id"]: [(w["start"], w["end"], w["why"]) for w in j["waits"]] for j in data["jobs"]}
    assert waits[a] == [(0.0, 600.0, "queued"), (1200.0, 1500.0, "retry")]
    assert waits[b + 1] == [(3 * H + 60, 4 * H, "queued")]
    assert data["downtime"] == [{"host": "lap", "start": 2 * H + 1800.0, "end": 3 * H,
                                 "why": "stopped (signal SIGTERM)"}]
    assert [m["kind"] for m in data["machine"]] == ["up", "sleep", "up"]
    assert "env" not in data["jobs"][0]  # a job's environment stays out of the picture

    drawn = text.draw(data, by_job=False, width=96, colour=False, unicode=True)
    lines = drawn.splitlines()
    assert all(len(ln) <= 96 for ln in lines), drawn
    machine = next(ln for ln in lines if ln.startswith("machine"))
    assert "slept 2h" in machine and "z" in machine  # the sleep, labelled in its gap
    assert "╌" in machine  # the downtime (too narrow for its label here: listed below)
    backup = next(ln for ln in lines if ln.startswith("backup"))
    assert "█" in backup and "✗" in backup and "░" in backup
    assert re.search(r"z 00:30–02:30 +2h  the machine slept \(lap\)", drawn), drawn
    assert re.search(r"╌ 02:30–03:00 +30m  the daemon was down: stopped \(signal SIGTERM\) \(lap\)", drawn), drawn
    assert "2 failed" in lines[0] + lines[1] and "slept 2h" in lines[0] + lines[1]
    plain = text.draw(data, by_job=True, width=40, colour=False, unicode=False)  # 80 columns at least, ASCII
    assert max(len(ln) for ln in plain.splitlines()) == 80 and "#" in plain and "X" in plain
    assert f"#{b} sh -c 'exit 3'" in plain
    painted = text.draw(data, by_job=False, width=96, colour=True, unicode=True)
    assert "\x1b[31m✗\x1b[0m" in painted and "\x1b[" not in drawn


@pytest.mark.backends("sqlite")
def test_a_daemon_that_died_unseen_is_down_until_now_when_none_runs(q, clock):
    clock.set(0.0)
    up = q.machine_up("lap")
    clock.set(60.0)
    q.machine_seen(up)  # its last stamp; then kill -9
    clock.set(H)
    data = timeline.gather(q, since=0.0, now=H, down_hosts=["lap"])
    assert data["downtime"] == [{"host": "lap", "start": 60.0, "end": H, "why": "not running (last seen then)",
                                 "open": True}]
    assert timeline.gather(q, since=0.0, now=H)["downtime"] == []  # a daemon answering: it runs


@pytest.mark.parametrize("bad", [0, -5, "1h", True, float("nan"), 91 * 86400])
def test_a_bad_window_is_refused_clearly(bad):
    with pytest.raises(BadRequest, match="since_s"):
        timeline.window({"since_s": bad}, 1000.0)
    with pytest.raises(BadRequest, match="lane"):
        timeline.window({"lane": 7}, 1000.0)


def test_the_pages_data_cannot_close_its_script_or_open_markup():
    hostile = {"command": ["sh", "-c", "echo '</script><img src=x onerror=alert(1)>' <!-- \u2028"]}
    out = page.script_json(hostile)
    assert "<" not in out and ">" not in out and "&" not in out and "\u2028" not in out
    assert json.loads(out) == hostile
    whole = page.render({"since": 0, "until": 1, "lane": "</title><b>", "jobs": [hostile], "machine": [],
                         "downtime": []}, by_job=False)
    assert "</title><b>" not in whole and "&lt;/title&gt;&lt;b&gt;" in whole
    assert whole.count("</script>") == 3  # the collector's, the data's and the drawing script's own ends


@pytest.mark.backends("sqlite")
def test_the_daemons_answer_pauses_after_each_page_and_keeps_the_newest_when_capped(q, clock, monkeypatch):
    clock.set(1000.0)
    q.enqueue_many([{"command": ["true", str(i)]} for i in range(250)])
    steps = timeline.answering(q, {"since_s": 600}, clock)
    pauses = 0
    while True:
        try:
            next(steps)
            pauses += 1  # the daemon's handler gives the event loop a turn here
        except StopIteration as done:
            answer = done.value
            break
    assert pauses == 2 and len(answer["jobs"]) == 250 and not answer["capped"]
    assert [j["id"] for j in answer["jobs"]] == sorted(j["id"] for j in answer["jobs"])
    monkeypatch.setattr(timeline, "MAX_JOBS", 120)
    capped = timeline.gather(q, since=0.0, now=1000.0)
    assert capped["capped"] and [j["id"] for j in capped["jobs"]] == list(range(131, 251))  # the newest

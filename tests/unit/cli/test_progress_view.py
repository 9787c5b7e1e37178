"""How far jobs are and what runs cost, as the commands say it
(cli/progress_view.py), and the estimates a listing is given
(backends/attempt_rules.with_run_facts), on plain job objects."""

from __future__ import annotations

import json

import pytest

from sloth_daemon.backends.attempt_rules import with_run_facts
from sloth_daemon.cli.progress_view import batch_summary, check_columns, columns, cost_text, progress_text

COST = {"cpu_s": 1.0, "peak_rss_bytes": 200 << 20, "wall_s": 60.0, "ended": "exit 0", "covers": "rusage"}


def job(i: int, state: str, **kw: object) -> dict:
    return {"id": i, "state": state, "attempts": 1, "command": ["make"], "label": None, "key": None,
            "runner": None, "updated_at": 1000.0, **kw}


def test_progress_and_time_left_read_plainly() -> None:
    assert progress_text({"fraction": 0.42, "source": "line", "eta_s": 75}) == "42%, 1m15s left"
    assert progress_text({"fraction": 0.5, "source": "tqdm", "eta_s": None}) == "50%"
    assert progress_text({"fraction": 0.4, "source": "estimate", "eta_s": 60}) == "~40%, about 1m left (estimate)"
    assert progress_text({"fraction": 0.99, "source": "estimate", "eta_s": 0}) == "~99%, longer than usual (estimate)"
    assert progress_text(None) == ""
    assert cost_text(COST) == "cpu 1s, peak 200M, wall 1m: exit 0 (rusage)"


def test_a_batch_in_one_line() -> None:
    jobs = ([job(i, "done", cost=COST) for i in range(12)] + [job(20, "failed"), job(21, "failed")]
            + [job(30, "running", progress={"fraction": 0.5, "source": "line", "eta_s": 60.0})]
            + [job(40 + i, "queued") for i in range(25)])
    assert batch_summary(jobs) == "12/40 done, 2 failed, 1 running, 25 queued, about 26m left"
    assert batch_summary(jobs, slots=5) == "12/40 done, 2 failed, 1 running, 25 queued, about 6m left"
    # a running job that says nothing and has no past: time left unknown, not guessed
    assert batch_summary([job(1, "running"), job(2, "queued")]) == "0/2 done, 1 running, 1 queued"
    assert batch_summary([job(1, "done"), job(2, "done")]) == "2/2 done"


def test_ls_columns() -> None:
    jobs = [job(1, "running", progress={"fraction": 0.25, "source": "file", "eta_s": None}), job(2, "done", cost=COST)]
    assert [h for h, _ in columns(jobs)] == ["PROGRESS"]
    picked = columns(jobs, check_columns(["cpu", "MEM", "wall"]))
    assert [h for h, _ in picked] == ["PROGRESS", "CPU", "PEAK", "WALL"]
    assert [[cell(j) for _, cell in picked] for j in jobs] == [["25%", "-", "-", "-"], ["-", "1s", "200M", "1m"]]
    assert columns([job(2, "done")]) == []
    with pytest.raises(ValueError, match="unknown column"):
        check_columns(["cpu", "colour"])


def test_a_running_job_that_says_nothing_is_estimated_from_its_like() -> None:
    asked: list[tuple] = []

    def run_times(column: str, value: str, *, prefix: bool = False) -> list[float]:
        asked.append((column, value, prefix))
        return {("label", "nightly"): [100.0, 120.0, 500.0]}.get((column, value), [])

    jobs = [job(1, "running", label="nightly", runner={"started_at": 1030.0}),
            job(2, "running", label="nightly", runner={"started_at": 1000.0}),
            job(3, "running", key="schedule:backup:17", runner={"started_at": 1000.0}),
            job(4, "running", progress={"fraction": 0.25, "source": "line", "eta_s": None, "at": 1.0},
                runner={"started_at": 1000.0})]
    with_run_facts(jobs, lambda ids: {1: [{"attempt": 1, "cost": COST}]}, run_times, now=1060.0)
    assert jobs[0]["progress"] == {"fraction": 0.25, "source": "estimate", "eta_s": 90.0, "at": 1060.0}
    assert jobs[1]["progress"]["eta_s"] == 60.0
    assert jobs[2].get("progress") is None  # nothing like it ran: no estimate
    assert jobs[3]["progress"]["eta_s"] == 180.0  # a quarter in a minute: three more
    assert jobs[0]["cost"] == COST and jobs[1]["cost"] is None
    assert asked.count(("label", "nightly", False)) == 1  # one read per like, however many jobs share it
    assert ("key", "schedule:backup:", True) in asked and ("command", json.dumps(["make"]), False) in asked

"""Human output: aligned tables, relative times, colour only on a tty without NO_COLOR."""

from __future__ import annotations

import io
import re
import time

import pytest

from sloth_daemon.cli import render
from sloth_daemon.models import STATE_NAMES

ANSI = re.compile(r"\x1b\[[0-9;]*m")


def job(**kw):
    now = time.time()
    base = {
        "id": 1, "command": ["echo", "hi"], "state": "queued", "lane": "default", "priority": 0,
        "attempts": 0, "max_attempts": 3, "not_before": now, "created_at": now, "updated_at": now,
        "lease_until": None, "timeout_s": None, "cwd": "/tmp", "key": None, "label": None,
        "shell": False, "runner": None, "message": "", "finished_at": None, "exit_code": None,
    }
    base.update(kw)
    return base


class Tty(io.StringIO):
    def isatty(self):
        return True


def test_table_columns_line_up_and_last_column_is_not_padded():
    out = render.table(["ID", "STATE", "COMMAND"], [["1", "queued", "a"], ["1234", "done", "long command"]])
    lines = out.splitlines()
    assert lines[0] == "ID    STATE   COMMAND"
    assert lines[1] == "1     queued  a"
    assert lines[2] == "1234  done    long command"
    starts = {ln.index(w) for ln, w in zip(lines, ["COMMAND", "a", "long"])}
    assert len(starts) == 1  # the last column starts at the same offset in every row
    assert all(ln == ln.rstrip() for ln in lines)


def test_table_with_wide_cells_widens_the_header():
    out = render.table(["A", "B"], [["wide-cell", "x"]]).splitlines()
    assert out[0].index("B") == out[1].index("x") == len("wide-cell") + 2


def test_job_rows_table_from_real_shaped_jobs(monkeypatch):
    monkeypatch.setenv("NO_COLOR", "1")
    now = time.time()
    jobs = [
        job(id=1, state="queued", not_before=now + 300),
        job(id=22, state="done", attempts=1, finished_at=now - 3 * 3600, lane="video", priority=5),
        job(id=333, state="running", attempts=2, runner={"started_at": now - 65}),
        job(id=4, state="failed", attempts=3, finished_at=now - 10, label="nightly",
            command=["/bin/sh", "-c", "make all"], shell=True),
    ]
    rows, states = render.job_rows(jobs)
    text = render.table(render.JOB_HEADERS, rows, states)
    lines = text.splitlines()
    assert lines[0].split() == render.JOB_HEADERS
    col = lines[0].index("COMMAND")
    assert all(len(ln) > col for ln in lines[1:])
    assert "in 5m" in lines[1] or "in 4m" in lines[1]
    assert "3h ago" in lines[2]
    assert "running 1m" in lines[3]
    assert "[nightly] make all" in lines[4]
    assert states == ["queued", "done", "running", "failed"]
    assert not ANSI.search(text)


def test_queued_and_due_is_shown_as_due():
    now = time.time()
    assert render.when(job(not_before=now - 5), now) == "due"


def test_long_commands_are_cut_with_an_ellipsis():
    text = render.command_text(job(command=["echo", "x" * 200]))
    assert len(text) == 60 and text.endswith("…")
    assert render.command_text(job(command=["echo", "x" * 200]), None).endswith("x")


def test_commands_are_quoted_like_a_shell_would():
    assert render.command_text(job(command=["echo", "a b", "c'd"])) == "echo 'a b' 'c'\"'\"'d'"


def test_colour_only_on_a_tty_and_never_with_no_color(monkeypatch):
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm")
    assert render.use_colour(Tty())
    assert not render.use_colour(io.StringIO())  # a pipe or file: no escapes
    monkeypatch.setenv("NO_COLOR", "")  # present at all means no colour (no-color.org)
    assert not render.use_colour(Tty())
    monkeypatch.delenv("NO_COLOR")
    monkeypatch.setenv("TERM", "dumb")
    assert not render.use_colour(Tty())


def test_paint_on_a_tty_colours_the_state(monkeypatch):
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm")
    monkeypatch.setattr(render.sys, "stdout", Tty())
    assert render.paint("failed", "failed") == "\x1b[31mfailed\x1b[0m"
    monkeypatch.setenv("NO_COLOR", "1")
    assert render.paint("failed", "failed") == "failed"


def test_show_job_lists_history_with_attempts_and_messages(monkeypatch):
    monkeypatch.setenv("NO_COLOR", "1")
    now = time.time()
    j = job(id=7, state="queued", attempts=1, not_before=now + 2, key="k1", timeout_s=7200,
            message="exit 3; retry 2/3 in 2s")
    events = [
        {"job_id": 7, "at": now - 1, "kind": "claimed", "attempt": 1, "message": "by w"},
        {"job_id": 7, "at": now, "kind": "failed", "attempt": 1, "message": "exit 3; retry 2/3 in 2s"},
    ]
    text = render.show_job(j, events)
    assert text.startswith("job 7  queued")
    assert "  timeout   2h" in text and "  key       k1" in text
    assert "claimed (attempt 1)  by w" in text
    assert "failed (attempt 1)  exit 3; retry 2/3 in 2s" in text
    assert re.search(r"due .*\(in [12](\.\d)?s\)", text)
    assert not ANSI.search(text)


@pytest.mark.parametrize("state", list(STATE_NAMES))
def test_every_state_has_a_colour(state, monkeypatch):
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm")
    monkeypatch.setattr(render.sys, "stdout", Tty())
    assert ANSI.search(render.paint(state, state))

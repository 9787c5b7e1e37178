"""`ls --since`: the --at forms, backwards."""

from __future__ import annotations

import datetime as dt

import pytest

from sloth_daemon.durations import parse_since
from sloth_daemon.errors import BadRequest

NOW = dt.datetime(2026, 12, 2, 10, 30, 0).timestamp()  # a Wednesday, local time


def at(*args: int) -> float:
    return dt.datetime(*args).timestamp()


@pytest.mark.parametrize("text, want", [
    ("12h", NOW - 12 * 3600), ("30m", NOW - 1800), ("1d12h", NOW - 36 * 3600), ("90", NOW - 90),
    ("yesterday 18:00", at(2026, 12, 1, 18, 0)), ("yesterday", at(2026, 12, 1, 0, 0)),
    ("today 9:00", at(2026, 12, 2, 9, 0)), ("9:00", at(2026, 12, 2, 9, 0)), ("18:00", at(2026, 12, 1, 18, 0)),
    ("9pm", at(2026, 12, 1, 21, 0)), ("mon 9:00", at(2026, 11, 30, 9, 0)), ("wed 9:00", at(2026, 12, 2, 9, 0)),
    ("wed 11:00", at(2026, 11, 25, 11, 0)), ("2026-12-01T09:30", at(2026, 12, 1, 9, 30)),
    ("2026-11-30", at(2026, 11, 30, 0, 0)), ("12h ago", NOW - 12 * 3600), ("1h30m  AGO", NOW - 5400),
])
def test_forms(text, want):
    assert parse_since(text, NOW) == pytest.approx(want)


@pytest.mark.parametrize("text", ["tomorrow 9:00", "today 11:00", "2027-01-01", "soonish", "25:00", "", "ago", "9:00 ago"])
def test_refused(text):
    with pytest.raises(BadRequest) as e:
        parse_since(text, NOW)
    assert "--since" in e.value.message and e.value.hint

"""Durations read like 30s, 5m, 2h, 1h30m; a bare number is seconds; bad ones say how to fix."""

from __future__ import annotations

import datetime as dt
import math

import pytest

from sloth_daemon import durations
from sloth_daemon.durations import format_duration, parse_at, parse_duration, relative, resolve_at
from sloth_daemon.errors import EXIT_USAGE, BadRequest


@pytest.mark.parametrize(
    "text, seconds",
    [
        ("30s", 30), ("5m", 300), ("2h", 7200), ("1h30m", 5400), ("90", 90), ("1d", 86400),
        ("1w", 604800), ("250ms", 0.25), ("1.5h", 5400), ("0", 0), ("0s", 0), (" 2m ", 120),
        ("1H", 3600), ("1h 30m", 5400), ("1d12h", 129600), ("0.5", 0.5), (90, 90), (2.5, 2.5),
        ("5 minutes", 300), ("5mins", 300), ("1 hour 30 mins", 5400), ("2hrs", 7200), ("3 days", 259200),
        ("10 sec", 10), ("+10m", 600), ("1week", 604800), ("500 milliseconds", 0.5),
    ],
)
def test_parses(text, seconds):
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize(
    "text",
    ["", "   ", "5x", "m", "s5", "1h30", "h1", "-5s", "-5", "1.2.3s", "5 minutez", "1e3", "nan", "+", "++5",
     "inf", "30s!", "1h-30m", "0x10", "½h", True, False, -1, float("nan"), float("inf")],
)
def test_rejects_with_a_hint(text):
    with pytest.raises(BadRequest) as ei:
        parse_duration(text, what="--delay")
    e = ei.value
    assert e.exit_code == EXIT_USAGE
    assert "--delay" in e.message and "\n" not in e.message
    assert e.hint


def test_unparsable_text_hint_lists_units():
    with pytest.raises(BadRequest) as ei:
        parse_duration("5x")
    assert "30s" in ei.value.hint and "5m" in ei.value.hint


@pytest.mark.parametrize(
    "seconds, text",
    [(0.25, "250ms"), (5, "5s"), (1.5, "1.5s"), (42, "42s"), (300, "5m"), (330, "5m30s"),
     (3600, "1h"), (5400, "1h30m"), (86400, "1d"), (129600, "1d12h"), (-300, "5m")],
)
def test_format(seconds, text):
    assert format_duration(seconds) == text


@pytest.mark.parametrize("text", ["30s", "5m", "2h", "1h30m", "1d12h", "45s"])
def test_format_round_trips_through_parse(text):
    assert format_duration(parse_duration(text)) == text


def test_relative_future_past_and_now():
    now = 1_000_000.0
    assert relative(now + 300, now) == "in 5m"
    assert relative(now - 3 * 3600, now) == "3h ago"
    assert relative(now + 0.4, now) == "now"
    assert relative(None, now) == "-"


def test_parse_at_hh_mm_is_today_or_tomorrow():
    now = dt.datetime(2026, 3, 10, 12, 0).timestamp()
    later = parse_at("13:30", now)
    assert dt.datetime.fromtimestamp(later) == dt.datetime(2026, 3, 10, 13, 30)
    earlier = parse_at("11:00", now)
    assert dt.datetime.fromtimestamp(earlier) == dt.datetime(2026, 3, 11, 11, 0)


def test_parse_at_iso_with_and_without_offset():
    assert parse_at("2026-12-01T09:30") == dt.datetime(2026, 12, 1, 9, 30).timestamp()
    assert parse_at("2026-12-01T09:30:00+00:00") == dt.datetime(
        2026, 12, 1, 9, 30, tzinfo=dt.timezone.utc).timestamp()


@pytest.mark.parametrize("text", ["25:00", "tomorow", "12:61", "2026-13-01", "", "13pm", "mon 25:00",
                                  "someday", "today 11:00"])
def test_parse_at_rejects(text):
    now = dt.datetime(2026, 3, 10, 12, 0).timestamp()
    with pytest.raises(BadRequest) as ei:
        parse_at(text, now)
    assert ei.value.hint


TUESDAY_NOON = dt.datetime(2026, 3, 10, 12, 0)


@pytest.mark.parametrize("text, want, noted", [
    ("13:30", dt.datetime(2026, 3, 10, 13, 30), False),
    ("11:00", dt.datetime(2026, 3, 11, 11, 0), True),  # passed: tomorrow, and it says so
    ("9pm", dt.datetime(2026, 3, 10, 21, 0), False),
    ("tomorrow 08:00", dt.datetime(2026, 3, 11, 8, 0), False),
    ("Tomorrow", dt.datetime(2026, 3, 11, 0, 0), False),
    ("today 13:00", dt.datetime(2026, 3, 10, 13, 0), False),
    ("mon 9:00", dt.datetime(2026, 3, 16, 9, 0), False),
    ("friday 5pm", dt.datetime(2026, 3, 13, 17, 0), False),
    ("tue 13:00", dt.datetime(2026, 3, 10, 13, 0), False),
    ("tue 9:00", dt.datetime(2026, 3, 17, 9, 0), True),  # today's has passed: next week
    ("+10m", dt.datetime(2026, 3, 10, 12, 10), False),
    ("2026-12-01 09:30", dt.datetime(2026, 12, 1, 9, 30), False),
])
def test_resolve_at_forms(text, want, noted):
    t, note = resolve_at(text, TUESDAY_NOON.timestamp())
    assert dt.datetime.fromtimestamp(t) == want
    assert bool(note) == noted
    if noted:
        assert "has passed" in note and f"{want:%H:%M}" in note


def test_results_are_finite_floats():
    v = parse_duration("10")
    assert isinstance(v, float) and math.isfinite(v)


def _by_re(s: str) -> float | None:
    """parse_duration's reading as it was, with re: the reference the plain scanner must equal."""
    import re

    part = rf"([0-9]+(?:\.[0-9]+)?)({durations.UNIT_WORDS})"
    if re.fullmatch(r"[0-9]+(\.[0-9]+)?", s):
        return float(s)
    pos, v = 0, 0.0
    for m in re.finditer(part, s):
        if m.start() != pos:
            break
        v += float(m.group(1)) * durations._unit(m.group(2))
        pos = m.end()
    return None if pos != len(s) or not s else v


def test_durations_are_read_without_re_exactly_as_with_it():
    """Issue 30: `ls --since 12h` must not import re (a third of its time);
    the scanner that replaced the pattern reads every text as it did:
    20,000 random texts of digits, dots, unit letters and odd characters."""
    import random

    rnd = random.Random(30)
    alphabet = "0123456789..msecondhurwkaiyl ²٣x+-"
    texts = ["", "90", "1h30m", "1.5h", "1.h", "5mins", "5ms", "2hrs", "3milliseconds", "1d12h", "12", "0.5",
             *("".join(rnd.choice(alphabet) for _ in range(rnd.randint(1, 9))) for _ in range(20_000))]
    for t in texts:
        assert durations._seconds(t) == _by_re(t), t
    assert [durations.is_unit_word(w) for w in ("MINS", "h", "hr", "hrss", "")] == [True, True, True, False, False]

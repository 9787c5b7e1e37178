"""Durations like ``30s``, ``5m``, ``2h``, ``1d12h``; times shown local and relative."""

from __future__ import annotations

import time

from sloth_daemon.errors import BadRequest

# Every duration and time that enters the queue is bounded: past these a
# value means nothing to a person, and time.localtime()/datetime cannot show
# it (a `--delay 99999999999d` was once accepted and then broke `sloth show`).
MAX_DURATION_S = 100 * 365 * 86400.0  # 100 years
MAX_TIME = 253402300799.0  # 9999-12-31T23:59:59Z, the last second datetime can show
_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
# Longest spelling first: the alternation takes the first that matches.
UNIT_WORDS = ("milliseconds?|ms|seconds?|secs?|s|minutes?|mins?|m|hours?|hrs?|h|days?|d|weeks?|w")
# Each spelling, longest first: a duration is read without re (whose import
# is most of what `ls --since 12h` would add to the interpreter's start).
_WORDS = tuple(sorted({w.replace("?", "") for w in UNIT_WORDS.split("|")}
                      | {w.replace("s?", "") for w in UNIT_WORDS.split("|") if w.endswith("s?")},
                      key=len, reverse=True))


def is_unit_word(word: str) -> bool:
    """``mins``, ``h``, ``seconds`` ...: a word that ends a duration."""
    return word.lower() in _WORDS


def _number_end(s: str, i: int) -> int:
    """Where the number at ``s[i:]`` ends (``[0-9]+(.[0-9]+)?``); ``i`` if none starts there."""
    j = i
    while j < len(s) and "0" <= s[j] <= "9":
        j += 1
    if i < j and j + 1 < len(s) and s[j] == "." and "0" <= s[j + 1] <= "9":
        j += 1
        while j < len(s) and "0" <= s[j] <= "9":
            j += 1
    return j


def _seconds(s: str) -> float | None:
    """``90`` -> 90.0, ``1h30m`` -> 5400.0 (``s`` lower case, no spaces); None if it is no duration."""
    if s and _number_end(s, 0) == len(s):
        return float(s)
    i, v = 0, 0.0
    while i < len(s):
        j = _number_end(s, i)
        word = next((w for w in _WORDS if s.startswith(w, j)), None) if j > i else None
        if word is None:
            return None
        v, i = v + float(s[i:j]) * _unit(word), j + len(word)
    return v if s else None


def _unit(word: str) -> float:
    return _UNITS["ms"] if word.startswith(("ms", "milli")) else _UNITS[word[0]]


def parse_duration(text: str | int | float, *, what: str = "duration") -> float:
    """``"90"`` / ``90`` -> 90.0 s; ``"1h30m"``, ``"1 hour 30 mins"`` -> 5400.0;
    a leading ``+`` is allowed (``+10m``). Raises BadRequest."""
    if isinstance(text, bool):
        raise BadRequest(f"bad {what}: {text!r}")
    if isinstance(text, (int, float)):
        v = float(text)
    else:
        s = text.strip().lower().replace(" ", "")
        s = s[1:] if s.startswith("+") and len(s) > 1 and s[1].isdigit() else s
        got = _seconds(s)
        if got is None:
            raise BadRequest(
                f"bad {what}: {text!r}",
                hint="Use a number of seconds or units like 30s, 5m, 2h, 1d, 1h30m.",
            )
        v = got
    if v != v or v in (float("inf"), float("-inf")) or v < 0:  # not finite (math.isfinite, without importing math)
        raise BadRequest(f"bad {what}: {text!r} (must be a finite, non-negative duration)")
    if v > MAX_DURATION_S:
        raise BadRequest(f"bad {what}: {text!r} is longer than 100 years",
                         hint="Use a shorter duration, e.g. 30s, 5m, 2h, 7d.")
    return v


def format_duration(seconds: float) -> str:
    s = abs(seconds)
    if s < 1:
        return f"{s * 1000:.0f}ms"
    if s < 60:
        return f"{s:.0f}s" if s >= 10 else f"{s:.1f}s".replace(".0s", "s")
    if s < 3600:
        m, r = divmod(int(s), 60)
        return f"{m}m{r}s" if r and m < 10 else f"{m}m"
    if s < 86400:
        h, r = divmod(int(s), 3600)
        return f"{h}h{r // 60}m" if r >= 60 and h < 10 else f"{h}h"
    d, r = divmod(int(s), 86400)
    return f"{d}d{r // 3600}h" if r >= 3600 and d < 10 else f"{d}d"


def relative(t: float | None, now: float | None = None) -> str:
    """``"in 5m"`` / ``"3h ago"`` / ``"now"``."""
    if t is None:
        return "-"
    now = time.time() if now is None else now
    d = t - now
    if abs(d) < 1:
        return "now"
    return f"in {format_duration(d)}" if d > 0 else f"{format_duration(d)} ago"


def local_time(t: float | None) -> str:
    if t is None:
        return "-"
    try:
        lt = time.localtime(t)
    except (OverflowError, OSError, ValueError):  # a time no calendar can show
        return f"@{t:.0f}"
    if time.strftime("%Y-%m-%d", lt) == time.strftime("%Y-%m-%d"):
        return time.strftime("%H:%M:%S", lt)
    return time.strftime("%Y-%m-%d %H:%M", lt)


TYPE_CHECKING = False
if TYPE_CHECKING:  # typing itself is not imported at run time: `sloth add` pays for every import
    import datetime as dt


def parse_at(text: str, now: float | None = None) -> float:
    """``--at``: see :func:`resolve_at`; the time only."""
    return resolve_at(text, now)[0]


_DAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
_CLOCK = r"([0-9]{1,2})(?::([0-9]{2}))?(?::([0-9]{2}))?\s*(am|pm)?"
AT_HINT = ("Use HH:MM (9:30, 9pm), a day and a time (tomorrow 08:00, mon 9:00), "
           "+DURATION (+10m) or an ISO time (2026-12-01T09:30).")


def resolve_at(text: str, now: float | None = None) -> tuple[float, str]:
    """``--at`` as local wall time. Forms: ``HH:MM[:SS]`` or ``9pm`` (today,
    or tomorrow if that has passed: the note says so); ``tomorrow [TIME]``;
    ``today TIME`` (an error once past); ``mon..sun`` or ``monday..sunday
    [TIME]`` (the next such day whose time is still to come); a day alone
    means its start (00:00); ``+DURATION``; ``now``; an ISO date or
    date-time (local unless it has an offset). Returns (epoch seconds, a
    note for the user or ""). Raises BadRequest."""
    import datetime as dt

    now = time.time() if now is None else now
    s = " ".join(text.strip().lower().split())
    if s.startswith("+"):
        return now + parse_duration(s, what="--at"), ""
    if s == "now":
        return now, ""
    try:
        form = _day_form(s)
        if form is not None:
            return _when(form[0], form[1], dt.datetime.fromtimestamp(now), now)
        t = dt.datetime.fromisoformat(text.strip()).timestamp()
    except (ValueError, OverflowError, OSError):
        raise BadRequest(f"bad --at: {text!r}", hint=AT_HINT) from None
    if not 0 <= t <= MAX_TIME:
        raise BadRequest(f"bad --at: {text!r} is before 1970 or after 9999", hint=AT_HINT)
    return t, (f"{text.strip()} is in the past: the job is due now" if t < now - 1 else "")


def _day_form(s: str) -> tuple[str, str | None] | None:
    """(day word: "", today, tomorrow or mon..sun; clock text or None), or
    None when ``s`` is not a day/clock form (then it may be ISO)."""
    import re

    head, _, rest = s.partition(" ")
    if head in ("today", "tomorrow"):
        return head, rest or None
    if head[:3] in _DAYS and head in _day_names(head[:3]):
        return head[:3], rest or None
    if re.fullmatch(_CLOCK, s) and (":" in s or s.endswith(("am", "pm"))):
        return "", s
    return None


def _day_names(short: str) -> tuple[str, ...]:
    full = {"mon": "monday", "tue": "tuesday", "wed": "wednesday", "thu": "thursday", "fri": "friday",
            "sat": "saturday", "sun": "sunday"}[short]
    return (short, full, full[:4])  # mon, monday, mond / tues, thur ...


def _clock(text: str | None) -> tuple[int, int, int]:
    """(hour, minute, second) of ``9:30``, ``21:05:10``, ``9pm``, ``12am``; None is midnight."""
    import re

    if text is None:
        return 0, 0, 0
    m = re.fullmatch(_CLOCK, text)
    if not m:
        raise ValueError(text)
    hour = int(m.group(1))
    if m.group(4):
        if not 1 <= hour <= 12:
            raise ValueError(text)
        hour = hour % 12 + (12 if m.group(4) == "pm" else 0)
    return hour, int(m.group(2) or 0), int(m.group(3) or 0)


def _when(day: str, clock: str | None, base: "dt.datetime", now: float) -> tuple[float, str]:
    import datetime as dt

    h, mi, sec = _clock(clock)
    t = base.replace(hour=h, minute=mi, second=sec, microsecond=0)  # ValueError for 25:00
    if day == "tomorrow":
        return (t + dt.timedelta(days=1)).timestamp(), ""
    if day == "today":
        if t.timestamp() <= now and clock is not None:
            raise BadRequest(f"today {clock} has passed", hint="Drop `today` to mean tomorrow at that time.")
        return max(t.timestamp(), now), ""
    if day:  # a weekday
        t += dt.timedelta(days=(_DAYS.index(day) - base.weekday()) % 7)
    if t.timestamp() > now:
        return t.timestamp(), ""
    t += dt.timedelta(days=7 if day else 1)
    what = f"{day} {clock or ''}".strip() if day else str(clock)
    return t.timestamp(), f"{what} has passed today: the job waits until {t:%a %Y-%m-%d %H:%M}"


SINCE_HINT = ("Use a duration back from now (12h, 30m, 2d), a time (18:00, 9pm: the latest one past), "
              "a day and a time (yesterday 18:00, mon 9:00) or an ISO time (2026-12-01T09:30).")


def parse_since(text: str, now: float | None = None) -> float:
    """``ls --since``: a moment in the past, in the forms of ``--at`` turned
    backwards: a duration is that long ago (``12h``); ``HH:MM``/``9pm`` and
    a weekday (with or without a time) are the latest such moment that has
    passed; ``yesterday [TIME]``, ``today TIME``; an ISO date or date-time.
    Raises BadRequest (a moment still to come is refused too)."""
    now = time.time() if now is None else now
    s = " ".join(text.strip().lower().split())
    try:  # a duration back from now: 12h, or as said, 12h ago (the help's "12h (ago)")
        return now - parse_duration(s[:-len(" ago")] if s.endswith(" ago") else s, what="--since")
    except BadRequest:
        pass
    import datetime as dt

    try:
        head, _, rest = s.partition(" ")
        base = dt.datetime.fromtimestamp(now)
        if head == "yesterday":
            t = _at_clock(base - dt.timedelta(days=1), rest or None).timestamp()
        else:
            form = _day_form(s)
            if form is not None:
                day, clock = form
                t = _at_clock(base, clock).timestamp()
                if day and day not in ("today", "tomorrow"):  # a weekday: back to the latest one
                    back = dt.timedelta(days=(base.weekday() - _DAYS.index(day)) % 7)
                    t = (_at_clock(base, clock) - back).timestamp()
                    if t > now:
                        t -= 7 * 86400
                elif day == "tomorrow":
                    raise ValueError(s)
                elif not day and t > now:  # a time alone: the latest one past, today's or yesterday's
                    t = (_at_clock(base, clock) - dt.timedelta(days=1)).timestamp()
            else:
                t = dt.datetime.fromisoformat(text.strip()).timestamp()
    except (ValueError, OverflowError, OSError):
        raise BadRequest(f"bad --since: {text!r}", hint=SINCE_HINT) from None
    if t > now + 1:
        raise BadRequest(f"bad --since: {text!r} is still to come", hint=SINCE_HINT)
    return max(t, 0.0)


def _at_clock(day: "dt.datetime", clock: str | None) -> "dt.datetime":
    h, mi, sec = _clock(clock)
    return day.replace(hour=h, minute=mi, second=sec, microsecond=0)

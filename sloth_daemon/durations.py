"""Durations like ``30s``, ``5m``, ``2h``, ``1d12h``; times shown local and relative."""

from __future__ import annotations

import math
import re
import time

from .errors import BadRequest

# Every duration and time that enters the queue is bounded: past these a
# value means nothing to a person, and time.localtime()/datetime cannot show
# it (a `--delay 99999999999d` was once accepted and then broke `sloth show`).
MAX_DURATION_S = 100 * 365 * 86400.0  # 100 years
MAX_TIME = 253402300799.0  # 9999-12-31T23:59:59Z, the last second datetime can show
_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_PART = re.compile(r"([0-9]+(?:\.[0-9]+)?)(ms|s|m|h|d|w)")


def parse_duration(text: str | int | float, *, what: str = "duration") -> float:
    """``"90"`` / ``90`` -> 90.0 s; ``"1h30m"`` -> 5400.0. Raises BadRequest."""
    if isinstance(text, bool):
        raise BadRequest(f"bad {what}: {text!r}")
    if isinstance(text, (int, float)):
        v = float(text)
    else:
        s = text.strip().lower().replace(" ", "")
        if re.fullmatch(r"[0-9]+(\.[0-9]+)?", s):
            v = float(s)
        else:
            pos, v = 0, 0.0
            for m in _PART.finditer(s):
                if m.start() != pos:
                    break
                v += float(m.group(1)) * _UNITS[m.group(2)]
                pos = m.end()
            if pos != len(s) or not s:
                raise BadRequest(
                    f"bad {what}: {text!r}",
                    hint="Use a number of seconds or units like 30s, 5m, 2h, 1d, 1h30m.",
                )
    if not math.isfinite(v) or v < 0:
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


def parse_at(text: str, now: float | None = None) -> float:
    """``--at``: ISO date-time (local unless it has an offset) or ``HH:MM``
    (today, or tomorrow if already past). Raises BadRequest."""
    import datetime as dt

    now = time.time() if now is None else now
    s = text.strip()
    m = re.fullmatch(r"([0-9]{1,2}):([0-9]{2})(?::([0-9]{2}))?", s)
    try:
        if m:
            base = dt.datetime.fromtimestamp(now)
            t = base.replace(hour=int(m.group(1)), minute=int(m.group(2)),
                             second=int(m.group(3) or 0), microsecond=0)
            if t.timestamp() <= now:
                t += dt.timedelta(days=1)
            return t.timestamp()
        at = dt.datetime.fromisoformat(s).timestamp()
    except (ValueError, OverflowError, OSError):
        raise BadRequest(
            f"bad --at: {text!r}", hint="Use HH:MM, or an ISO time like 2026-12-01T09:30."
        ) from None
    if not 0 <= at <= MAX_TIME:
        raise BadRequest(f"bad --at: {text!r} is before 1970 or after 9999",
                         hint="Use HH:MM, or an ISO time like 2026-12-01T09:30.")
    return at

"""When a schedule's slots fall: pure functions of its recipe and a time.

A slot is a whole second (epoch). ``--every D``: anchor + k * D, wall time
(a laptop that slept through three slots finds three due, not none). A
cron expression (five fields; @hourly, @daily, @weekly, @monthly, @yearly)
is matched against local wall time in the recipe's zone -- the daemon's
local zone unless ``tz`` names one -- and each matching local time is
turned into an instant by the DST rule:

* a local time that does not exist (the hour skipped in spring) fires once,
  at the first valid instant after it (the moment the clocks jump);
* a local time that exists twice (the hour repeated in autumn) fires once,
  at its first occurrence.

Matching wall times are found by cronsim (healthchecks.io's; Debian cron's
rules for day-of-month with day-of-week), run on naive times so that the
rule above is ours alone and the same for every expression.
"""

from __future__ import annotations

import os
from bisect import bisect_left, bisect_right
from datetime import date, datetime, time, timedelta, timezone, tzinfo
from typing import TYPE_CHECKING, Any, Iterator

if TYPE_CHECKING:
    from cronsim import CronSim

from sloth_daemon.daemon.schedules.recipe import Recipe
from sloth_daemon.errors import FieldError

ALIASES = {"@hourly": "0 * * * *", "@daily": "0 0 * * *", "@midnight": "0 0 * * *", "@weekly": "0 0 * * 0",
           "@monthly": "0 0 1 * *", "@yearly": "0 0 1 1 *", "@annually": "0 0 1 1 *"}
SHIFT_S = 3 * 3600  # more than any DST shift: the reach of a search that may cross one
_MIN = timedelta(minutes=1)


# cronsim (and calendar) and zoneinfo (and sysconfig) are loaded when a
# schedule is first read or made, not by a daemon that has none (docs/idle.md).
def _cron(expr: str, start: datetime, *, reverse: bool = False) -> "CronSim":
    from cronsim import CronSim

    return CronSim(expr, start, reverse=reverse)


def _zone_named(name: str) -> tzinfo | None:
    """The zone ``name``, or None if there is none of that name."""
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        return None


def expression(cron: str) -> str:
    """The five fields of ``cron`` (an alias spelled out); FieldError if it is not one."""
    expr = ALIASES.get(cron.lower(), cron)
    if len(expr.split()) != 5:
        raise FieldError("cron", f"{cron!r} is not a five-field cron expression",
                         hint='minute hour day-of-month month day-of-week, e.g. "30 2 * * 1-5"; or @daily.')
    from cronsim import CronSimError

    try:
        _cron(expr, datetime(2000, 1, 1))
    except (CronSimError, ValueError) as e:
        raise FieldError("cron", f"{cron!r}: {e}", hint='e.g. "0 3 * * *", "*/15 9-17 * * 1-5", @hourly.') from None
    return expr


def zone(name: str | None) -> tzinfo:
    """The zone ``name`` (zoneinfo), or this machine's local zone for None."""
    if name is None:
        return local_zone()
    if (z := _zone_named(name)) is None:
        raise FieldError("tz", f"unknown time zone {name!r}", hint="A zoneinfo name, e.g. Europe/Berlin, UTC.")
    return z


LOCALTIME = "/etc/localtime"  # the local zone's file; $SLOTH_LOCALTIME names another (a container, a test)
_LOCAL: dict[tuple[Any, ...], tzinfo] = {}  # local_key() -> the zone it means (the latest only)


def local_key() -> tuple[Any, ...]:
    """Where the local zone comes from, as it is now: $TZ, and the zone
    file's target and identity. Another key is another zone: `timedatectl
    set-timezone` (a new symlink) or a file copied over is seen at the next
    look (Scheduler.zone_check, at each clock check), as systemd's timers do."""
    path = os.environ.get("SLOTH_LOCALTIME") or LOCALTIME
    try:
        st = os.stat(path)
        ident: tuple[Any, ...] | None = (os.path.realpath(path), st.st_ino, st.st_mtime_ns, st.st_size)
    except OSError:
        ident = None
    return os.environ.get("TZ", ""), path, ident


def local_zone() -> tzinfo:
    """$TZ if it names a zone, else the zone file (/etc/localtime), else UTC:
    read again whenever local_key() changes."""
    key = local_key()
    z = _LOCAL.get(key)
    if z is None:
        _LOCAL.clear()
        z = _LOCAL[key] = _read_local(key[0].lstrip(":"), key[1])
    return z


def _read_local(tz: str, path: str) -> tzinfo:
    if tz and (z := _zone_named(tz)) is not None:
        return z
    from zoneinfo import ZoneInfo

    try:
        with open(path, "rb") as f:
            return ZoneInfo.from_file(f)
    except (OSError, ValueError):
        return timezone.utc


def local_name() -> str | None:
    """The local zone's name (what --tz would say), fixed in a schedule made
    on a shared queue: $TZ, the name the zone file links to, /etc/timezone;
    "UTC" with no zone file; None if it has no name (a copied file)."""
    tz, path, ident = local_key()
    names = [tz.lstrip(":")]
    if ident is not None and "/zoneinfo/" in ident[0]:
        names.append(ident[0].split("/zoneinfo/", 1)[1])
    if path == LOCALTIME:  # Debian's name of it, beside the file
        try:
            with open("/etc/timezone") as f:
                names.append(f.read().strip())
        except OSError:
            pass
    for name in names:
        if name and _zone_named(name) is not None:
            return name
    return "UTC" if ident is None and not tz else None


def check(recipe: Recipe) -> None:
    """FieldError unless the recipe's cron expression and zone are good and
    it has a slot at all (cronsim looks 50 years ahead)."""
    zone(recipe.tz)  # also beside --every: a bad zone is refused when given, not at a later --cron
    if recipe.cron is not None:
        expression(recipe.cron)
        if next_after(recipe, 946684800) is None:
            raise FieldError("cron", f"{recipe.cron!r} never matches a date")


def next_after(recipe: Recipe, t: int) -> int | None:
    """The first slot later than ``t`` (None: none in 50 years)."""
    if recipe.every_s is not None:
        p = recipe.every_s
        return recipe.anchor + ((t - recipe.anchor) // p + 1) * p
    return next(_cron_forward(recipe, t), None)


def latest(recipe: Recipe, since: int, now: int, most: int) -> tuple[list[int], int]:
    """The due slots in [since, now]: the latest ``most`` of them (oldest
    first) and how many there are in all (``count``: a day at a time)."""
    if since > now:
        return [], 0
    if recipe.every_s is not None:
        p = recipe.every_s
        first = recipe.anchor + -((recipe.anchor - since) // p) * p  # the first slot >= since
        last = recipe.anchor + ((now - recipe.anchor) // p) * p
        n = 0 if last < first else (last - first) // p + 1
        return [last - i * p for i in range(min(n, most))][::-1], n
    back: list[int] = []
    for s in _cron_back(recipe, now):
        if s < since or len(back) == most:
            break
        back.append(s)
    return back[::-1], len(back) if len(back) < most else count(recipe, since, now)


def count(recipe: Recipe, since: int, now: int) -> int:
    """How many cron slots fall in [since, now], in time bounded by the days
    between (one match of the day and one bisection each), not by the slots:
    a year away with "* * * * *" is 366 days, not 525,600 steps (issue 28.4).
    A day on which the zone's offset changes is counted slot by slot, by the
    DST rule (each instant once)."""
    z = zone(recipe.tz)
    cs = _cron(expression(recipe.cron or ""), datetime(2000, 1, 1))
    minutes = sorted(h * 60 + m for h in cs.hours for m in cs.minutes)  # the wall times of a day, in minutes
    first, last = _naive(since, z), _naive(now, z)
    day, n = first.date(), 0
    offset = _offset(day, z)
    while day <= last.date():
        nxt = day + timedelta(days=1)
        after = _offset(nxt, z)
        if day.month in cs.months and cs.match_day(day):
            if after != offset:  # DST changes this day: each wall time to its instant, once
                n += len({t for t in (instant(datetime.combine(day, time(m // 60, m % 60)), z) for m in minutes)
                          if since <= t <= now})
            else:
                lo = 0 if day > first.date() else first.hour * 60 + first.minute + (first.second > 0)
                hi = 1439 if day < last.date() else last.hour * 60 + last.minute
                n += max(0, bisect_right(minutes, hi) - bisect_left(minutes, lo))
        day, offset = nxt, after
    return n


def _offset(day: date, z: tzinfo) -> timedelta | None:
    return datetime.combine(day, time(), tzinfo=z).utcoffset()


# ------------------------------------------------------------------- cron
def _cron_forward(recipe: Recipe, t: int) -> Iterator[int]:
    """Slots later than ``t``, in order (each instant once)."""
    z = zone(recipe.tz)
    reach = SHIFT_S if _shifts(z, t) else 0
    last = t
    for naive in _cron(expression(recipe.cron or ""), _naive(t - reach, z)):
        s = instant(naive, z)
        if s > last:
            last = s
            yield s


def _cron_back(recipe: Recipe, t: int) -> Iterator[int]:
    """Slots at or before ``t``, latest first (each instant once)."""
    z = zone(recipe.tz)
    reach = SHIFT_S if _shifts(z, t) else 0
    last = t + 1
    for naive in _cron(expression(recipe.cron or ""), _naive(t + reach + 1, z), reverse=True):
        s = instant(naive, z)
        if s < last:
            last = s
            yield s


def _naive(t: int, z: tzinfo) -> datetime:
    return datetime.fromtimestamp(t, z).replace(tzinfo=None)


def _shifts(z: tzinfo, t: int) -> bool:
    """Whether the zone's offset changes within SHIFT_S of ``t``."""
    a, b = (datetime.fromtimestamp(t + d, z).utcoffset() for d in (-SHIFT_S, SHIFT_S))
    return a != b


def instant(naive: datetime, z: tzinfo) -> int:
    """The epoch second a local wall time means, by the DST rule (module
    docstring): the first of two, or the first valid one after a gap."""
    while _imaginary(naive, z):
        naive += _MIN
    return int(naive.replace(tzinfo=z, fold=0).timestamp())


def _imaginary(naive: datetime, z: tzinfo) -> bool:
    aware = naive.replace(tzinfo=z, fold=0)
    return aware.astimezone(timezone.utc).astimezone(z).replace(tzinfo=None) != naive


def describe(recipe: Recipe) -> str:
    """The schedule in words: "every 1h", "At 03:00 every day (Europe/Berlin)"."""
    from sloth_daemon.durations import format_duration

    if recipe.every_s is not None:
        return f"every {format_duration(recipe.every_s)}"
    words = _cron(expression(recipe.cron or ""), datetime(2000, 1, 1)).explain()
    return f"{words} ({recipe.tz or 'local time'})"

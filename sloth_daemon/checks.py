"""The checks every number and string crossing into the queue goes through,
and which of them each field of a job gets (:func:`fields`).

spec.JobSpec.parse builds a job from these for the queue; `sloth add`
(submit.py) runs the same before it sends anything, so a bad option is
refused by the client in the daemon's words, named as the user typed it.
Nothing of typing at run time: every `sloth add` imports this module
(spec.py, with its NamedTuples, is the daemon's).
"""

from __future__ import annotations

import math

from sloth_daemon.durations import MAX_DURATION_S, MAX_TIME, format_duration
from sloth_daemon.errors import BadRequest, FieldError
from sloth_daemon.protocol import dumps, encode_basestring_ascii as _encode_str
from sloth_daemon.text import is_bytes_text, is_utf8, whole_number

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Mapping, Sequence, TypeVar

    _F = TypeVar("_F", float, None)  # number(v, name, 0.0) is a float; with None, maybe None
    _S = TypeVar("_S", str, None)
    # id(env) -> (env, its JSON): a batch usually shares one environment object.
    EnvCache = dict[int, tuple[Any, str]]

FIELDS = frozenset({
    "command", "max_attempts", "lease_s", "not_before", "priority", "lane", "key",
    "cwd", "env", "timeout_s", "label", "shell",
    "after", "after_any", "after_previous", "retry_exit", "no_retry_exit", "place",
    "when", "on_lost", "needs", "slots",
    "hold",  # queued held (`add --hold`): see hold_flag
    "member", "on_dup",  # an array member's values; the key policy (issue 33)


    "keep_awake", "limits",
    "ping", "webhook", "webhook_on", "mail_to", "mail_on",  # who is told (tell_json; docs/telling.md)


    "rules",  # watchdogs and retry rules (rules_json): JobSpec.parse reads it
})
MAX_PREREQS = 1000  # prerequisites per job
PREVIOUS = ("after", "after_any")  # after_previous: how a job waits for the one before it in its batch
DEFAULT_MAX_ATTEMPTS = 3  # when neither the job nor the daemon's settings say
DEFAULT_LEASE_S = 60.0
# The bounds of every whole number a user sets, declared once: config.toml
# (config.py), the job fields of `sloth add` and `sloth lane set` (whose 0
# is not a concurrency but a pause: lanes.py) all check against these. The
# 64-bit ones are what SQLite, PostgreSQL's bigint and the keeper's wire carry.
INT64_MAX = 2**63 - 1
MAX_CONCURRENCY = 10_000
# The job states as models.JobState has them (tests/unit/test_codebase.py checks they agree): here
# so that `ls --state S` reads a state without importing models (dataclasses, enum).
STATE_NAMES = ("blocked", "queued", "held", "running", "done", "failed", "cancelled")


def state_name(text: str) -> str:
    """The state a filter names (``claimed``, schema v1-v3's word, is ``running``); ValueError if none."""
    if text == "claimed":
        return "running"
    if text not in STATE_NAMES:
        raise ValueError(text)
    return text


# The settings of config.toml whose values are durations (written 30s, 5m; kept in seconds).
DURATION_KEYS = frozenset({"lease_s", "backoff_cap_s", "retention_s", "kill_grace_s", "clock_check_s",
                           "hook_timeout_s", "poll_s", "conditions_check_s", "keeper_linger_s",
                           "idle_exit_s", "dormant_after_s"})
BOUNDS = {
    "max_attempts": (1, INT64_MAX),
    "concurrency": (1, MAX_CONCURRENCY),  # a lane's slots: [lanes], default_concurrency, `lane set -c`
    "log_cap_bytes": (1024, INT64_MAX),
}
# The shortest lease that can be renewed safely. It is renewed a third into
# it; its keeper fences the job (SIGTERM) a margin and a lead before it ends
# (runs.trust_until, runs.term_lead): at 3 s that leaves 1 s between the
# renewal and the fence, for one refused renewal retried and a busy loop
# (runs.RENEW_SPARE_S; tests/unit/test_keeper_logic.py checks the sum). At
# 1 s nothing was left: every run was fenced before its renewal, run again.
MIN_LEASE_S = 3.0
LEASE_HINT = ("A lease is renewed a third into it, and its job is ended shortly before it runs out; "
              "a shorter one cannot be renewed in time.")


def fields(s: Mapping[str, Any], max_attempts: int, lease_s: float,
           env_cache: EnvCache | None = None, place: str = "") -> tuple[Any, ...]:
    """Validate one job object (as sent by a client): its values in the
    order of JobSpec's fields, the defaults filled in; the later groups (prerequisites, holds, gate) only
    if it has any of them (a tuple, not a dict: this runs per job of a
    batch). Raises BadRequest."""
    unknown = set(s) - FIELDS
    if unknown:
        raise BadRequest(f"unknown job field(s): {', '.join(sorted(unknown))}")
    env = s.get("env")
    shell = s.get("shell", False)
    if not isinstance(shell, bool):  # a truthy string would silently mean "yes"
        raise FieldError("shell", "must be true or false")
    return (
        command_json(s.get("command")),
        integer(s.get("max_attempts"), "max_attempts", max_attempts, lo=BOUNDS["max_attempts"][0]),
        lease(s.get("lease_s"), "lease_s", lease_s),
        number(s.get("not_before"), "not_before", None, lo=0, hi=MAX_TIME),
        integer(s.get("priority"), "priority", 0),
        text(s.get("lane"), "lane", "default", nonempty=True),
        text(s.get("key"), "key", None, nonempty=True),
        path_text(s.get("cwd"), "cwd"),
        None if env is None else env_json(env, env_cache if env_cache is not None else {}),
        duration(s.get("timeout_s"), "timeout_s", None),
        text(s.get("label"), "label", None),
        shell,
        place_name(s.get("place"), place),
        *(() if _DEP_FIELDS.isdisjoint(s) and _HOLD_FIELDS.isdisjoint(s) and GATE_FIELDS.isdisjoint(s)
          and _ADD_FIELDS.isdisjoint(s) else _waits(s)),
        *(() if _HOLD_FIELDS.isdisjoint(s) and GATE_FIELDS.isdisjoint(s) and _ADD_FIELDS.isdisjoint(s) else _holds(s)),
        *(() if GATE_FIELDS.isdisjoint(s) and _ADD_FIELDS.isdisjoint(s) else (gate_json(s),)),
        *(() if _ADD_FIELDS.isdisjoint(s) else (member_json(s.get("member")), on_dup(s.get("on_dup")))),
    )


# Issue 33: an array member's values, and what an add does when its key is taken.
_ADD_FIELDS = frozenset({"member", "on_dup"})
ON_DUP = ("keep", "replace", "append", "fail")
MAX_MEMBER_TEXT = 4096  # a value of --each/--range/--grid, and its name


def member_json(v: Any) -> str | None:
    """An array member as stored: {"index": n >= 1, "value": text, "args":
    {name: text}} (names are identifiers: SLOTH_ARG_<NAME>); None: not a member."""
    if v is None:
        return None
    if not isinstance(v, dict) or set(v) - {"index", "value", "args"}:
        raise FieldError("member", "must be an object {index, value, args}")
    index, value, args = v.get("index"), v.get("value", ""), v.get("args") or {}
    if isinstance(index, bool) or not isinstance(index, int) or not 1 <= index <= 2**31:
        raise FieldError("member", "index must be a whole number from 1")
    if not isinstance(args, dict) or not all(
            isinstance(k, str) and k.isidentifier() and k.isascii() and isinstance(x, str) for k, x in args.items()):
        raise FieldError("member", "args must map names (letters, digits, _) to text")
    if not isinstance(value, str) or any(len(t) > MAX_MEMBER_TEXT for t in (value, *args, *args.values())):
        raise FieldError("member", f"values are text of at most {MAX_MEMBER_TEXT} characters")
    for t in (value, *args.values()):  # each is a variable of the run's environment: what exec can take
        if "\x00" in t:
            raise FieldError("member", f"value {t!r} holds a NUL byte, which no environment variable can")
        if not is_bytes_text(t):
            raise FieldError("member", f"value {t!r} holds a character no byte stands for")
    return dumps({"index": index, "value": value, "args": args})  # \u-escaped: a value need not be UTF-8


def member_environment(member: dict[str, Any] | None) -> dict[str, str]:
    """The variables an array member runs with (the worker adds them to its run's):
    SLOTH_ARRAY_INDEX, SLOTH_ARRAY_VALUE (what ``{}`` stood for), SLOTH_ARG_<NAME>."""
    if not member:
        return {}
    return {"SLOTH_ARRAY_INDEX": str(member["index"]), "SLOTH_ARRAY_VALUE": member["value"],
            **{f"SLOTH_ARG_{k.upper()}": v for k, v in member["args"].items()}}


def on_dup(v: Any) -> str:
    """What an add does when an unfinished job has its key (see backends/rules.py: on_dup)."""
    if v is None:
        return "keep"
    if v not in ON_DUP:
        raise FieldError("on_dup", f"must be one of {', '.join(ON_DUP)}, got {v!r}")
    return str(v)


def hold_flag(v: Any) -> bool:
    """A job's ``hold``: true queues it held (kept from being claimed until
    `sloth release`); None -> False."""
    if v is None:
        return False
    if not isinstance(v, bool):
        raise FieldError("hold", "must be true or false")
    return v


_HOLD_FIELDS = frozenset({"hold", "keep_awake", "limits"})


def _holds(s: Mapping[str, Any]) -> tuple[Any, ...]:
    """The job's holds: queued held (``hold``, `add --hold`), and what the
    keeper holds for the run (issue 24): hold, keep_awake, limits_json."""
    keep = s.get("keep_awake", False)
    if not isinstance(keep, bool):
        raise FieldError("keep_awake", "must be true or false")
    return hold_flag(s.get("hold")), keep, limits_json(s.get("limits"))


# Resource limits (`sloth add --mem 2G --cpus 1.5 --nice 10 --io idle`):
# name -> (bounds or choices). Which mechanism applies each is the daemon's
# to say (keeper/resource_limits.py probe); these are what any of them can take.
MIN_MEM = 1 << 20
IO_NAMES = ("idle", "best-effort")
LIMIT_NAMES = ("mem", "cpus", "nice", "io")


def limits_json(v: Any) -> str | None:
    """{"mem": bytes, "cpus": n, "nice": n, "io": class} checked, as stored
    JSON (keys sorted); None or {} -> None."""
    if v is None or v == {}:
        return None
    if not isinstance(v, dict):
        raise FieldError("limits", f"must be an object of {', '.join(LIMIT_NAMES)}")
    unknown = set(v) - set(LIMIT_NAMES)
    if unknown:
        raise FieldError("limits", f"unknown limit(s): {', '.join(sorted(map(str, unknown)))}")
    out: dict[str, Any] = {}
    if "mem" in v:
        out["mem"] = integer(v["mem"], "mem", None, lo=MIN_MEM)
    if "cpus" in v:
        out["cpus"] = number(v["cpus"], "cpus", None, lo=0.01, hi=4096)
    if "nice" in v:
        n = integer(v["nice"], "nice", None, lo=-20)
        if n > 19:
            raise FieldError("nice", f"must be from -20 to 19, got {n}")
        out["nice"] = n
    if "io" in v:
        out["io"] = io_class(v["io"])
    return dumps(out) if out else None


def io_class(v: Any) -> str:
    """idle, best-effort or best-effort:N (N from 0, most, to 7); ``be`` for best-effort."""
    if not isinstance(v, str):
        raise FieldError("io", f"must be idle, best-effort or best-effort:N, got {v!r}")
    name, _, level = v.partition(":")
    name = "best-effort" if name == "be" else name
    if name not in IO_NAMES or (level and (name != "best-effort" or level not in "01234567" or len(level) != 1)):
        raise FieldError("io", f"{v!r} is not an io class", hint="Give idle, best-effort or best-effort:0..7 "
                         "(realtime needs root and is not offered).")
    return f"{name}:{level}" if level else name


_SIZE_UNITS = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def size_of(text_: str) -> int | None:
    """``2G``, ``512M``, ``1.5g``, ``100MB``, ``2GiB``, ``4096`` -> bytes
    (K, M, G, T are powers of 1024); None if it is not a size."""
    t = text_.strip().lower() if isinstance(text_, str) else ""
    t = t.removesuffix("ib").removesuffix("b") if t not in ("b", "") else ""
    num, unit = (t[:-1], t[-1]) if t and t[-1] in _SIZE_UNITS else (t, "")
    try:
        value = float(num)
    except ValueError:
        return None
    if not math.isfinite(value) or value < 0 or value * _SIZE_UNITS[unit] >= 2**62:
        return None
    return int(value * _SIZE_UNITS[unit])


def parse_size(text_: str, what: str) -> int:
    """A limit's size (``--mem 2G``): size_of's forms, more than 0 bytes."""
    n = size_of(text_)
    if not n:
        raise BadRequest(f"{what} {text_!r}: give a size like 512M or 2G")
    return n


def format_size(n: int) -> str:
    """Bytes as parse_size reads them back: 2147483648 -> 2G, 1536M."""
    for unit in ("T", "G", "M", "K"):
        size = _SIZE_UNITS[unit.lower()]
        if n >= size and n % size == 0:
            return f"{n // size}{unit}"
    return f"{n}B" if n < 1024 else f"{n / (1 << 20):.1f}M"


ANYWHERE = "*"  # what a client sends for `--anywhere`
_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")
MAX_NAME = 64


def place_name(v: Any, default: str) -> str:
    """Where a job may run: a host's or a tag's name (place names), ``*``
    for anywhere (stored as ""); None -> ``default``."""
    if v is None:
        return default
    if v == ANYWHERE or v == "":
        return ""
    if not isinstance(v, str):
        raise FieldError("place", f"must be a host or tag name, got {v!r}")
    return host_name(v, "place")


def host_name(v: str, name: str) -> str:
    """A host or tag name: 1 to 64 letters, digits, '.', '_' or '-' (it is
    part of a worker's name, sloth-daemon:HOST:PID:INSTANCE)."""
    if not 1 <= len(v) <= MAX_NAME or not set(v) <= _NAME_CHARS:
        raise FieldError(name, f"{v!r} is not a host or tag name",
                         hint=f"Names are 1 to {MAX_NAME} letters, digits, '.', '_' or '-'.")
    return v


_DEP_FIELDS = frozenset({"after", "after_any", "after_previous", "retry_exit", "no_retry_exit"})
GATE_FIELDS = frozenset({"when", "on_lost", "needs", "slots"})


def _waits(s: Mapping[str, Any]) -> tuple[Any, ...]:
    """The round-2 fields of a spec: prerequisites and exit-code rules
    (after, after_any, after_previous, retry_exit_json, no_retry_exit_json)."""
    after, after_any = ids(s.get("after"), "after"), ids(s.get("after_any"), "after_any")
    both = set(after) & set(after_any)
    if both:
        raise BadRequest(f"job {min(both)} is in both after and after_any; name it in one")
    prev = s.get("after_previous")
    if prev is not None and prev not in PREVIOUS:
        raise BadRequest(f"after_previous must be one of {', '.join(PREVIOUS)}, got {prev!r}")
    return (after, after_any, prev, exit_codes(s.get("retry_exit"), "retry_exit"),
            exit_codes(s.get("no_retry_exit"), "no_retry_exit"))


def ids(v: Any, name: str) -> tuple[int, ...]:
    """A list of job ids (deduplicated, order kept); None -> ()."""
    if v is None:
        return ()
    if not isinstance(v, list):
        raise BadRequest(f"{name} must be a list of at most {MAX_PREREQS} job ids")
    for i in v:
        if isinstance(i, bool) or not isinstance(i, int) or not 1 <= i < 2**63:
            raise BadRequest(f"{name}: {i!r} is not a job id")
    out = tuple(dict.fromkeys(v))
    if len(out) > MAX_PREREQS:  # refused, never cut: a job never silently waits for fewer than it was told
        raise FieldError(name, f"names {len(out)} jobs; a job may wait for at most {MAX_PREREQS}",
                         hint=f"Split the list: a job waits for at most {MAX_PREREQS} others through --after, "
                              "and as many through --after-any (a job --after the last of a --chain waits for "
                              "the whole chain).")
    return out


def exit_codes(v: Any, name: str) -> str | None:
    """A list of exit codes 1..255, stored as JSON; None -> None."""
    if v is None:
        return None
    if not isinstance(v, list) or len(v) > 255:
        raise BadRequest(f"{name} must be a list of exit codes")
    for c in v:
        if isinstance(c, bool) or not isinstance(c, int) or not 1 <= c <= 255:
            raise BadRequest(f"{name}: {c!r} is not an exit code from 1 to 255")
    return dumps(sorted(set(v)))


MAX_ARG_BYTES = 128 * 1024 - 1  # Linux's MAX_ARG_STRLEN, less the NUL: execve refuses a longer argument (E2BIG)


def command_json(cmd: Any) -> str:
    """The stored form of an argv: a non-empty list of strings without NUL,
    each standing for bytes (arguments need not be UTF-8, see text.py)."""
    if not isinstance(cmd, (list, tuple)) or not cmd:
        raise FieldError("command", "must be a non-empty list of strings")
    for a in cmd:  # one plain loop: this runs per job of a batch
        if not isinstance(a, str):
            raise FieldError("command", "must be a non-empty list of strings")
        if "\x00" in a:
            raise FieldError("command", "arguments cannot contain NUL bytes")
        if not is_bytes_text(a):
            raise FieldError("command", f"argument {a!r} holds a character no byte stands for")
        if len(a) > MAX_ARG_BYTES // 4 and len(a.encode("utf-8", "surrogateescape")) > MAX_ARG_BYTES:
            raise FieldError("command", f"has an argument of {len(a.encode('utf-8', 'surrogateescape'))} bytes "
                             f"({a[:40]!r}...): exec takes at most 128 KiB in one argument, so it could never "
                             "start", "Put the data in a file and pass its name (or feed it on stdin).")
    return _json_strings(cmd)


def _json_strings(args: Sequence[str]) -> str:
    """json.dumps(list(args)) for a list of str, byte for byte, at a third of the
    cost (json.dumps builds a new encoder per call; it was 40% of enqueue)."""
    return "[" + ", ".join(map(_encode_str, args)) + "]"


def env_json(env: Any, cache: EnvCache) -> str:
    """Validate and serialise a job environment, once per distinct object."""
    hit = cache.get(id(env))
    if hit is not None and hit[0] is env:
        return hit[1]
    if not (isinstance(env, dict)
            and all(isinstance(k, str) and isinstance(v, str) for k, v in env.items())):
        raise FieldError("env", "must be an object of string to string")
    if any(not k or "=" in k or "\x00" in k or "\x00" in v or not (is_bytes_text(k) and is_bytes_text(v))
           for k, v in env.items()):
        # os.execve would refuse them when the job starts
        raise FieldError("env", "names must be non-empty without '=' or NUL; values without NUL")
    out = dumps(env)
    cache[id(env)] = (env, out)
    return out


def number(v: Any, name: str, default: _F, *, lo: float | None = None, hi: float | None = None) -> float | _F:
    """A finite number (int or float, not bool) in [lo, hi]; None -> default."""
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise FieldError(name, f"must be a finite number, got {v!r}")
    try:
        f = float(v)
    except OverflowError:  # an int too large for a float (JSON allows any size)
        raise FieldError(name, f"is out of range: {v!r}") from None
    if not math.isfinite(f):
        raise FieldError(name, f"must be a finite number, got {v!r}")
    if lo is not None and f < lo:
        raise FieldError(name, f"must be at least {lo:g}, got {v!r}")
    if hi is not None and f > hi:
        raise FieldError(name, f"must be at most {hi:g}, got {v!r}")
    return f


def duration(v: Any, name: str, default: _F) -> float | _F:
    """A number of seconds, at least 1 ms and at most 100 years; None -> default."""
    f = number(v, name, default, hi=MAX_DURATION_S)
    if f is not None and f < 0.001:
        raise FieldError(name, f"must be at least 1ms, got {v!r}",
                         hint="Leave the option out for the default (no timeout, or the configured lease).")
    return f


def lease(v: Any, name: str, default: _F) -> float | _F:
    """A lease length: a duration of at least MIN_LEASE_S; None -> default."""
    f = duration(v, name, default)
    if f is not None and f < MIN_LEASE_S:
        raise FieldError(name, f"must be at least {format_duration(MIN_LEASE_S)}, got {format_duration(f)}",
                         hint=LEASE_HINT)
    return f


def integer(v: Any, name: str, default: int | None, *, lo: int | None = None) -> int:
    """A 64-bit integer (not bool), at least ``lo``; None -> default."""
    if v is None:
        return default  # type: ignore[return-value]
    if isinstance(v, bool) or not isinstance(v, int):
        raise FieldError(name, f"must be an integer, got {v!r}")
    if not -(2**63) <= v < 2**63:
        raise FieldError(name, f"is out of range: {v!r}")
    if lo is not None and v < lo:
        raise FieldError(name, f"must be at least {lo}, got {v!r}")
    return v


def text(v: Any, name: str, default: _S, *, nonempty: bool = False) -> str | _S:
    """A name (lane, key, label): UTF-8 text without NUL, non-empty if
    asked; None -> default. Names are text: a byte that is not UTF-8 is refused."""
    if v is None:
        return default
    if not isinstance(v, str) or (nonempty and not v):
        raise FieldError(name, f"must be a{' non-empty' if nonempty else ''} string, got {v!r}")
    if "\x00" in v:
        raise FieldError(name, "cannot contain NUL bytes")
    if not is_utf8(v):
        raise FieldError(name, f"must be UTF-8 text, got {v!r}",
                         hint="Names (lane, key, label) are text; only paths and commands may hold other bytes.")
    return v


def path_text(v: Any, name: str) -> str | None:
    """A path: bytes without NUL, carried as a str (surrogateescape); None -> None."""
    if v is None:
        return None
    if not isinstance(v, str) or not v:
        raise FieldError(name, f"must be a non-empty string, got {v!r}")
    if "\x00" in v:
        raise FieldError(name, "cannot contain NUL bytes")
    if not is_bytes_text(v):
        raise FieldError(name, f"{v!r} holds a character no byte stands for")
    return v



# ------------------------------------------------------------------ gates
# A job's gate: what must hold on the machine before it may start (``when``:
# run conditions), what a condition lost while it runs does (``on_lost``),
# the named resources it takes (``needs``) and the lane slots it counts as
# (``slots``). Stored as one canonical JSON text (the same options give the
# same text, so jobs that wait alike are one group: daemon/conditions.py).
ON_LOST = ("continue", "pause", "stop")
MAX_WHEN = 16
MAX_NEEDS = 16
MAX_TOKENS = 1024  # of one resource, on one machine
_RES_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789_")
WHEN_HINT = ("Conditions: ac, battery>=40, idle=10m, online, unmetered, disk>=5G, load<2 "
             "(give --when once per condition; all must hold).")

def gate_json(s: Mapping[str, Any]) -> str | None:
    """The stored gate of a job object: canonical JSON, or None when it has
    none (no conditions, no needs, one slot)."""
    when = when_list(s.get("when"))
    lost = s.get("on_lost")
    if lost is not None and lost not in ON_LOST:
        raise FieldError("on_lost", f"must be one of {', '.join(ON_LOST)}, got {lost!r}")
    needs = needs_map(s.get("needs"))
    slots = integer(s.get("slots"), "slots", 1, lo=1)
    if slots > BOUNDS["concurrency"][1]:
        raise FieldError("slots", f"must be at most {BOUNDS['concurrency'][1]}, got {slots}")
    if lost not in (None, "continue") and not when:
        raise FieldError("on_lost", "applies to --when conditions; this job has none",
                         hint="Add --when CONDITION, or leave --on-lost out.")
    gate: dict[str, Any] = {}
    if when:
        gate["when"] = when
        if lost not in (None, "continue"):
            gate["on_lost"] = lost
    if needs:
        gate["needs"] = needs
    if slots != 1:
        gate["slots"] = slots
    return dumps(gate, compact=True) if gate else None


def when_list(v: Any) -> list[str]:
    """Run conditions, each in its canonical spelling, sorted, deduplicated."""
    if v is None:
        return []
    if isinstance(v, str) or not isinstance(v, list) or len(v) > MAX_WHEN:
        raise FieldError("when", f"must be a list of at most {MAX_WHEN} conditions", hint=WHEN_HINT)
    return sorted({condition(c) for c in v})


def condition(c: Any) -> str:
    """One condition, checked and canonical (``battery >= 40`` -> ``battery>=40``,
    ``disk>=5120M`` -> ``disk>=5G``, ``idle=600`` -> ``idle=10m``)."""
    if not isinstance(c, str) or len(c) > 64:
        raise FieldError("when", f"{c!r} is not a condition", hint=WHEN_HINT)
    t = c.replace(" ", "").lower()
    if t in ("ac", "online", "unmetered"):
        return t
    name, op, value = _split_condition(t)
    if (name, op) == ("battery", ">="):
        pct = whole_number(value)
        if pct is None or not 0 <= pct <= 100:
            raise FieldError("when", f"{c!r}: battery>= takes a percentage from 0 to 100", hint=WHEN_HINT)
        return f"battery>={pct}"
    if (name, op) == ("idle", "="):
        from sloth_daemon.durations import parse_duration

        secs = parse_duration(value, what=f"--when {c}")
        if not 1 <= secs <= 7 * 86400:
            raise FieldError("when", f"{c!r}: idle= takes a duration from 1s to 7d", hint=WHEN_HINT)
        return f"idle={format_duration(round(secs))}"
    if (name, op) == ("disk", ">="):
        return f"disk>={_size_text(size_bytes(value, c))}"
    if (name, op) == ("load", "<"):
        try:
            f = float(value)
        except ValueError:
            f = math.nan
        if not (math.isfinite(f) and 0 < f <= 10_000):
            raise FieldError("when", f"{c!r}: load< takes a number above 0, e.g. load<2", hint=WHEN_HINT)
        return f"load<{f:g}"
    raise FieldError("when", f"{c!r} is not a condition sloth knows", hint=WHEN_HINT)


def _split_condition(t: str) -> tuple[str, str, str]:
    for op in (">=", "<", "="):
        name, sep, value = t.partition(op)
        if sep and name.isalpha():
            return name, op, value
    return t, "", ""


def size_bytes(text: str, shown: str) -> int:
    """A condition's size (``disk>=5G``): size_of's forms."""
    n = size_of(text)
    if n is None:
        raise FieldError("when", f"{shown!r}: give a size such as disk>=5G (K, M, G, T)", hint=WHEN_HINT)
    return n


def _size_text(n: int) -> str:
    for unit, k in (("T", 1024**4), ("G", 1024**3), ("M", 1024**2), ("K", 1024)):
        if n >= k and n % k == 0:
            return f"{n // k}{unit}"
    return str(n)


def resource_name(v: Any, field: str = "needs") -> str:
    """A resource's name: 1-32 lower-case letters, digits or '_', a letter
    first (it becomes SLOTH_<NAME> in the job's environment)."""
    if not isinstance(v, str) or not 1 <= len(v) <= 32 or not set(v) <= _RES_CHARS or not v[0].isalpha():
        raise FieldError(field, f"{v!r} is not a resource name",
                         hint="Names are lower-case letters, digits and '_', a letter first (gpu, licence).")
    return v


GPU_MEM = "gpu-mem"  # --needs gpu-mem=20G: GPU memory free on each GPU it is given (daemon/gpus.py)
MILLI = 1000  # a token is 1000 milli-shares: --needs gpu=0.5 is 500 of them (integers: no float drift)
MAX_GPU_MEM = 1 << 50  # 1 PiB


def needs_map(v: Any) -> dict[str, int | float]:
    """Resource -> how many tokens of it (a whole count from 1, or a share
    of one token below 1 in at most 3 decimals, e.g. gpu=0.5: milli-shares,
    kept as the float it reads as), and ``gpu-mem`` (bytes; without a gpu
    need it takes one GPU shared by memory alone: daemon/resources.py),
    sorted by name."""
    if v is None:
        return {}
    if not isinstance(v, dict) or len(v) > MAX_NEEDS:
        raise FieldError("needs", f"must be an object of at most {MAX_NEEDS} resource names to counts")
    out: dict[str, int | float] = {}
    for name, n in sorted(v.items(), key=lambda kv: str(kv[0])):
        if name == GPU_MEM:
            size = n if isinstance(n, int) and not isinstance(n, bool) else size_of(n) if isinstance(n, str) else None
            if not size or not 0 < size <= MAX_GPU_MEM:
                raise FieldError("needs", f"gpu-mem={n!r}: give a size like 20G (at most 1P)",
                                 hint="E.g. --needs gpu-mem=20G: a GPU with 20G of its memory free.")
            out[name] = size
            continue
        resource_name(name)
        out[name] = _token_count(name, n)
    return out


def _token_count(name: str, n: Any) -> int | float:
    """A whole count (1..MAX_TOKENS) or a share of one token (0.001..0.999)."""
    if isinstance(n, float) and n.is_integer():
        n = int(n)
    if isinstance(n, int) and not isinstance(n, bool) and 1 <= n <= MAX_TOKENS:
        return n
    milli = share_milli(n)
    if milli is None:
        raise FieldError("needs", f"{name}={n!r}: a count from 1 to {MAX_TOKENS}, or a share of one below 1"
                                  " in at most 3 decimals", hint="E.g. --needs gpu=1, or --needs gpu=0.5.")
    return milli / MILLI


def share_milli(n: Any) -> int | None:
    """A share below one token (0.5, "0.25") in milli-shares (500, 250);
    None if it is none (0, 1 or more, more than 3 decimals, not a number)."""
    from decimal import Decimal, InvalidOperation

    if isinstance(n, bool) or not isinstance(n, (int, float, str)) or (isinstance(n, str) and len(n) > 16):
        return None
    try:
        d = Decimal(repr(n) if isinstance(n, float) else str(n).strip()) * MILLI
    except (InvalidOperation, ValueError):
        return None
    if not d.is_finite() or d != d.to_integral_value() or not 0 < d < MILLI:
        return None
    return int(d)
# Who is told of a job's runs (issue 32, docs/telling.md): its channels,
# stored with the job (jobs.tell) so that the transition that causes a
# message writes it (the outbox, in the same transaction).
TELL_FIELDS = frozenset({"ping", "webhook", "webhook_on", "mail_to", "mail_on"})
TELL_EVENTS = ("started", "done", "failed", "retrying", "cancelled", "missed")
TELL_DEFAULT_ON = {"ping": TELL_EVENTS, "webhook": ("done", "failed", "cancelled", "missed"),
                   "mail": ("failed", "missed")}  # mail: failures only by default (chronic's rule)
MAX_CHANNELS = 8
MAX_URL = 2048
TELL_HINT = "Events: " + ", ".join(TELL_EVENTS) + "."


def tell_json(s: Mapping[str, Any]) -> str | None:
    """The stored channels of a job object (``ping``, ``webhook`` with
    ``webhook_on``, ``mail_to`` with ``mail_on``): canonical JSON, a list of
    {"kind", "url" or "to", "on"}; None when it has none."""
    out: list[dict[str, Any]] = []
    for url in _many(s.get("ping"), "ping"):
        out.append({"kind": "ping", "url": tell_url(url, "ping"), "on": list(TELL_EVENTS)})
    on = tell_events(s.get("webhook_on"), "webhook_on", TELL_DEFAULT_ON["webhook"])
    for url in _many(s.get("webhook"), "webhook"):
        out.append({"kind": "webhook", "url": tell_url(url, "webhook"), "on": on})
    to = [mail_address(a) for a in _many(s.get("mail_to"), "mail_to")]
    if to:
        out.append({"kind": "mail", "to": to, "on": tell_events(s.get("mail_on"), "mail_on", TELL_DEFAULT_ON["mail"])})
    if len(out) > MAX_CHANNELS:
        raise FieldError("ping", f"at most {MAX_CHANNELS} channels a job, got {len(out)}")
    return dumps(out, compact=True) if out else None


def _many(v: Any, name: str) -> list[Any]:
    if v is None:
        return []
    if isinstance(v, str):
        return [v]
    if not isinstance(v, list) or len(v) > MAX_CHANNELS:
        raise FieldError(name, f"must be a text or a list of at most {MAX_CHANNELS}")
    return v


def tell_url(v: Any, name: str) -> str:
    """An http(s) URL to tell: no spaces or controls, a host, at most MAX_URL."""
    if not isinstance(v, str) or not v or len(v) > MAX_URL or any(c <= " " or c == "\x7f" for c in v):
        raise FieldError(name, "must be an http:// or https:// URL without spaces, at most 2048 characters")
    from urllib.parse import urlsplit

    try:
        u = urlsplit(v)
        u.port  # noqa: B018 - a bad port raises here
    except ValueError as e:
        raise FieldError(name, f"is not a URL: {e}") from None
    if u.scheme not in ("http", "https") or not u.hostname:
        raise FieldError(name, "must be an http:// or https:// URL with a host",
                         hint="For example https://hc-ping.com/<uuid>.")
    return v


def tell_events(v: Any, name: str, default: tuple[str, ...]) -> list[str]:
    """Which events a channel is told of, in TELL_EVENTS order."""
    if v is None:
        return list(default)
    words = v.split(",") if isinstance(v, str) else v
    if not isinstance(words, list) or not words:
        raise FieldError(name, "must be a list of events", hint=TELL_HINT)
    got = {w.strip() if isinstance(w, str) else w for w in words}
    bad = [w for w in got if w not in TELL_EVENTS]
    if bad:
        raise FieldError(name, f"names an unknown event {bad[0]!r}", hint=TELL_HINT)
    return [e for e in TELL_EVENTS if e in got]


def mail_address(v: Any) -> str:
    """One recipient: ``user@host``, no spaces, commas or controls (it goes in a header)."""
    if (not isinstance(v, str) or len(v) > 254 or v.count("@") != 1 or v.startswith("@") or v.endswith("@")
            or any(c <= " " or c in ",;<>\"\x7f" for c in v)):
        raise FieldError("mail_to", f"{v!r} is not a mail address (user@host)")
    return v


def merge_tell(own: str | None, more: str) -> str:
    """A job's channels and its lane's (or schedule's), each once, at most MAX_CHANNELS."""
    import json

    chans = json.loads(own) if own else []
    for ch in json.loads(more):
        if ch not in chans:
            chans.append(ch)
    if len(chans) > MAX_CHANNELS:
        raise FieldError("ping", f"at most {MAX_CHANNELS} channels a job, its lane's included; got {len(chans)}")
    return dumps(chans, compact=True)


# ---------------------------------------------------------------- watchdogs and retry rules (issue 33 item 5)
# A job's "rules" object: {"stall_s", "fail_on", "retry_on", "no_retry_on", "backoff_s", "backoff_cap_s"}
# (docs/watchdogs.md). The ends that are no exit code, by the names --retry-on takes:
RETRY_CAUSES = ("timeout", "stall", "match", "mem", "signal")
# Which of them are retried when neither the job nor config.toml's retry_on says (docs/watchdogs.md: why).
DEFAULT_RETRY_ON = ("timeout", "stall", "signal")
RULE_NAMES = ("stall_s", "fail_on", "retry_on", "no_retry_on", "backoff_s", "backoff_cap_s")


def merged_rules(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """An edit's rules over a job's (or a schedule's): each option on its own
    (`--stall 20m` keeps `--fail-on`), but --backoff is its BASE and CAP
    together: a BASE alone has the default cap, as `sloth add --backoff BASE`
    (never the old cap, which a larger base would then exceed)."""
    out = {**old, **new}
    if "backoff_s" in new and "backoff_cap_s" not in new:
        out.pop("backoff_cap_s", None)
    return out
# --fail-on is matched per output line, in the keeper's event loop, by Python's backtracking re: a
# pattern is refused at add unless its worst case on one line is bounded (fail_on_pattern).
FAIL_ON_MAX_CHARS = 200
FAIL_ON_LINE_BYTES = 512  # of each output line, the first this many are matched (the rest of a longer line not)
FAIL_ON_MAX_COST = 1 << 22  # the worst-case steps of one line's search fail_on_pattern allows (~tens of ms)


def rules_json(v: Any) -> str | None:
    """A job's watchdogs and retry rules checked, as stored JSON (keys
    sorted); None or {} -> None. Raises FieldError naming the rule."""
    if v is None or v == {}:
        return None
    if not isinstance(v, dict):
        raise FieldError("rules", f"must be an object of {', '.join(RULE_NAMES)}")
    unknown = set(v) - set(RULE_NAMES)
    if unknown:
        raise FieldError("rules", f"unknown rule(s): {', '.join(sorted(map(str, unknown)))}")
    out: dict[str, Any] = {}
    for k in ("stall_s", "backoff_s", "backoff_cap_s"):
        if v.get(k) is not None:
            out[k] = duration(v[k], k, None)
    if "backoff_s" in out and "backoff_cap_s" in out and out["backoff_s"] > out["backoff_cap_s"]:
        raise FieldError("backoff_s", f"the base ({format_duration(out['backoff_s'])}) is longer than the cap "
                         f"({format_duration(out['backoff_cap_s'])})", hint="Give --backoff BASE..CAP, e.g. 5s..10m.")
    if v.get("fail_on") is not None:
        out["fail_on"] = fail_on_pattern(v["fail_on"])
    for k in ("retry_on", "no_retry_on"):
        if v.get(k) is not None:
            out[k] = retry_causes(v[k], k)
    if set(out.get("retry_on", ())) & set(out.get("no_retry_on", ())):
        raise FieldError("retry_on", "names "
                         f"{', '.join(sorted(set(out['retry_on']) & set(out['no_retry_on'])))} in --no-retry-on too")
    return dumps(out) if out else None


def retry_causes(v: Any, name: str) -> list[str]:
    """A list of RETRY_CAUSES names (sorted, each once)."""
    if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
        raise FieldError(name, f"must be a list of {', '.join(RETRY_CAUSES)}")
    bad = [x for x in v if x not in RETRY_CAUSES]
    if bad:
        raise FieldError(name, f"unknown end(s): {', '.join(map(repr, bad))}",
                         hint=f"Ends that are no exit code: {', '.join(RETRY_CAUSES)} (exit codes: --retry-exit).")
    return sorted(set(v))


def fail_on_pattern(v: Any) -> str:
    """A --fail-on regular expression, refused unless its search of one
    output line (at most FAIL_ON_LINE_BYTES) is bounded: at most
    FAIL_ON_MAX_CHARS long; no backreferences; a repeat (* + ? {m,n}) only
    of one character (a letter, ``.``, ``[...]``, ``\\d``...) or, for ``?``,
    of a group; and the product of the choices its repeats and alternations
    leave, times the line's length, within FAIL_ON_MAX_COST. Python's re
    backtracks, and the keeper matches in its own event loop: a pattern such
    as ``(a|aa)*b`` or ``.*.*.*x`` would stop it for minutes on one line."""
    v = text(v, "fail_on", None, nonempty=True)
    if len(v) > FAIL_ON_MAX_CHARS:
        raise FieldError("fail_on", f"is {len(v)} characters; at most {FAIL_ON_MAX_CHARS}")
    import re

    try:
        parsed = _re_parse(v)
        re.compile(v)
    except (re.error, RecursionError, OverflowError) as e:
        raise FieldError("fail_on", f"{v!r} is not a regular expression: {e}") from None
    cost = FAIL_ON_LINE_BYTES * _pattern_cost(parsed, v)
    if cost > FAIL_ON_MAX_COST:
        raise FieldError("fail_on", f"{v!r} may take too long on one line: its repeats and alternatives allow "
                         f"~{cost:.2g} steps per line, at most {FAIL_ON_MAX_COST:.2g}",
                         hint="Use at most one unbounded * or + (bound the others: \\d{1,8}), "
                              "e.g. --fail-on 'loss: nan' or 'error.*fatal'.")
    return v


def _re_parse(v: str) -> Any:
    try:
        from re import _parser  # type: ignore[attr-defined]  # 3.11+
    except ImportError:  # 3.10
        import sre_parse as _parser
    return _parser.parse(v)


def _pattern_cost(items: Any, pattern: str) -> int:
    """Worst-case choices of one match attempt (see fail_on_pattern); raises FieldError."""
    try:
        from re import _constants as c  # type: ignore[attr-defined]
    except ImportError:  # 3.10
        import sre_constants as c
    single = {c.LITERAL, c.NOT_LITERAL, c.ANY, c.IN, c.CATEGORY}
    repeats = {c.MAX_REPEAT, c.MIN_REPEAT, *((c.POSSESSIVE_REPEAT,) if hasattr(c, "POSSESSIVE_REPEAT") else ())}
    cost = 1
    for op, av in items:
        if op in (c.GROUPREF, c.GROUPREF_EXISTS):
            raise FieldError("fail_on", f"{pattern!r}: backreferences are not taken (they make a search unbounded)")
        if op in repeats:
            lo, hi, body = av
            width = FAIL_ON_LINE_BYTES if hi == c.MAXREPEAT else min(hi, FAIL_ON_LINE_BYTES)
            if len(body) == 1 and body[0][0] in single:
                cost *= width + 1
            elif hi <= 1:
                cost *= 2 * _pattern_cost(body, pattern)
            else:
                raise FieldError("fail_on", f"{pattern!r}: a repeated group (such as (ab)+ or (a|b)*) is not taken: "
                                 "it can make a search of one line take minutes",
                                 hint="Repeat single characters only: [ab]+, \\w*, .{0,20}.")
        elif op is c.SUBPATTERN:
            cost *= _pattern_cost(av[-1], pattern)
        elif op is c.BRANCH:
            cost *= sum(_pattern_cost(b, pattern) for b in av[1])
        elif op in (c.ASSERT, c.ASSERT_NOT):
            cost *= _pattern_cost(av[1], pattern)
        elif op is getattr(c, "ATOMIC_GROUP", None):  # (?>...), 3.11+: backtracks inside all the same
            cost *= _pattern_cost(av, pattern)
        elif op not in single and op is not c.AT:  # fail closed: a construct not weighed here is not taken
            raise FieldError("fail_on", f"{pattern!r}: {str(op).lower()} is not taken in --fail-on")
        if cost > FAIL_ON_MAX_COST:
            return cost
    return cost

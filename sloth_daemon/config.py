"""Effective settings: built-in defaults, overridden by the TOML config file.

:class:`Settings` is a frozen dataclass with one typed field per setting;
where each value came from is kept apart, in ``sources`` (for ``sloth config``).
"""

from __future__ import annotations

import dataclasses
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from sloth_daemon.text import mask, remember
import json

from sloth_daemon.checks import (
    BOUNDS, DEFAULT_RETRY_ON, DURATION_KEYS, LEASE_HINT, MAX_TOKENS, MIN_LEASE_S, RETRY_CAUSES, limits_json,
    parse_size, resource_name, when_list,
)
from sloth_daemon.checks import TELL_FIELDS, size_of, tell_json
from sloth_daemon.durations import format_duration, parse_duration
from sloth_daemon.errors import BadRequest, ConfigError, SlothError


@dataclass(frozen=True)
class Settings:
    lease_s: float = 60.0  # lease per claim; heartbeats every lease/3
    max_attempts: int = 3
    backoff_cap_s: float = 300.0
    default_concurrency: int = 1  # slots of a lane not listed in [lanes], `default` included
    log_cap_bytes: int = 4 * 1024 * 1024  # per attempt; head and tail kept past it
    retention_s: float = 7 * 86400.0  # finished jobs older than this are pruned
    kill_grace_s: float = 10.0  # SIGTERM -> SIGKILL
    clock_check_s: float = 5.0  # how often the clocks are compared (sleep detection)
    notify: tuple[str, ...] = ("failed",)  # desktop notification on: failed, done, drained
    # ends that are no exit code retried by default (checks.RETRY_CAUSES; a job's --retry-on/--no-retry-on win)
    retry_on: tuple[str, ...] = DEFAULT_RETRY_ON
    on_finish: str = ""  # a shell command run when a job ends, the job as JSON on stdin
    hook_timeout_s: float = 30.0  # an on_finish command still running after this is killed
    # One queue for several machines (a PostgreSQL URL; SLOTH_QUEUE_URL wins): see queue_target.
    queue_url: str = ""  # "": the SQLite file in the data dir
    host: str = ""  # this machine's name on a shared queue ("": its hostname)
    tags: tuple[str, ...] = ()  # names `sloth add --on NAME` may use for this machine too
    listen: bool = True  # LISTEN/NOTIFY wakeups (false: poll only, e.g. PgBouncer in transaction mode)
    poll_s: float = 5.0  # a shared queue is looked at this often besides its wakeups
    conditions_check_s: float = 30.0  # how often run conditions are looked at while jobs wait on them
    keeper_linger_s: float = 5.0  # the keeper exits once it has held no run this long (docs/idle.md)
    idle_exit_s: float = 0.0  # the daemon exits after this long with nothing to do; 0: never (docs/idle.md)
    dormant_after_s: float = 600.0  # ... goes dormant (~9 MB, woken by a command or a slot); 0: never
    metrics_file: str = ""  # the daemon keeps its metrics there for node_exporter ("": none; docs/metrics.md)
    lanes: Mapping[str, int] = field(default_factory=dict)  # only the lanes the file names
    # [lanes.NAME] tables: what the keeper holds for every job of the lane
    # that does not say otherwise (mem, cpus, nice, io as checks.limits_json
    # takes them; keep_awake), e.g. {"gpu": {"limits": {"mem": 2147483648}}}
    lane_holds: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    lane_when: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # [lanes.NAME] when = [...]
    # [resources]: name -> its tokens (gpu = ["0", "1"]; licence = 3 is ["0", "1", "2"]); a name the
    # file leaves out may be found on the machine (daemon/resources.py: gpu from nvidia-smi -L)
    resources: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    # [resources.NAME] tables (docs/gpus.md): name -> shares (per token), order (preferred tokens first),
    # and for gpu: outside_max (bytes others' processes may use of a GPU it still gives out), check_s
    resource_opts: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    # [tell]: how pings, webhooks and mail are sent (TELL_KEYS; docs/telling.md); [lanes.NAME] ping,
    # webhook, webhook_on, mail_to, mail_on: the channels every job of the lane tells (checks.tell_json text)
    tell: Mapping[str, Any] = field(default_factory=dict)
    lane_tell: Mapping[str, str] = field(default_factory=dict)
    file: Path | None = None
    # setting name (or "lanes.NAME") -> "default" | "file PATH"
    sources: Mapping[str, str] = field(default_factory=dict)

    def concurrency(self, lane: str) -> int:
        return self.lanes.get(lane, self.default_concurrency)

    def source(self, name: str) -> str:
        return self.sources.get(name, "default")

    def as_dict(self) -> dict[str, Any]:
        return {
            "file": str(self.file) if self.file else None,
            "settings": {k: {"value": _public(k, getattr(self, k)), "source": self.source(k)} for k in SETTING_NAMES},
            "lanes": {k: {"concurrency": self.concurrency(k), "source": self._lane_source(k)}
                      for k in sorted({"default", *self.lanes})},
            "resources": {k: {"tokens": list(v), "source": self.source(f"resources.{k}")}
                          for k, v in sorted(self.resources.items())},
            "resource_opts": {k: dict(v) for k, v in sorted(self.resource_opts.items())},
            **({"tell": tell_public(self.tell)} if self.tell else {}),
        }

    def _lane_source(self, lane: str) -> str:
        if lane in self.lanes:
            return self.source(f"lanes.{lane}")
        return f"default_concurrency ({self.source('default_concurrency')})"


# The scalar settings, in declaration order; their types come from the dataclass.
TABLES = ("lanes", "lane_when", "resources", "resource_opts", "tell", "lane_tell", "file", "sources")
SETTING_NAMES: tuple[str, ...] = tuple(
    f.name for f in dataclasses.fields(Settings) if f.name not in TABLES)
POSITIVE_DURATIONS = frozenset({"lease_s", "clock_check_s", "hook_timeout_s", "poll_s", "conditions_check_s"})
MACHINE_KEYS = frozenset({"queue_url", "host", "tags", "listen"})  # read at start: a reload names them
QUEUE_URL_ENV = "SLOTH_QUEUE_URL"
URL_SCHEMES = ("postgresql://", "postgres://")
NOTIFY_EVENTS = ("failed", "done", "drained")
# Each whole-number setting's bounds: checks.BOUNDS, shared with `sloth add` and `sloth lane set`.
INT_BOUNDS = {"max_attempts": BOUNDS["max_attempts"], "default_concurrency": BOUNDS["concurrency"],
              "log_cap_bytes": BOUNDS["log_cap_bytes"]}


CONFIG_MAX_BYTES = 1 << 20  # a config is a few hundred bytes; a link to /dev/zero is not read to its end


def load(path: Path, text: str | None = None) -> Settings:
    """Read ``path`` if it exists (a link to a regular file is followed: a
    dotfiles repository's). Raises ConfigError naming the file and key, or
    what else than a regular file is there (paths.py: never blocks).
    ``text``: the file's contents as read before (a renewed daemon's: daemon/renewal.py)."""
    from sloth_daemon.safefile import NotRegular, read_file

    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - 3.10
        import tomli as tomllib  # type: ignore[import-not-found,no-redef,unused-ignore]
    try:
        data = tomllib.loads(read_file(path, CONFIG_MAX_BYTES, follow=True).decode("utf-8") if text is None else text)
    except FileNotFoundError:
        return Settings(file=path)
    except NotRegular as e:
        raise ConfigError(f"config {e}", hint=f"Put a TOML file there (`sloth config --example > {path}` "
                                               "writes one), or remove it for the defaults.") from None
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise ConfigError(f"cannot read config {path}: {e}") from e
    return from_mapping(data, path)


def from_mapping(data: Mapping[str, Any], path: Path) -> Settings:
    """Settings from a parsed config file's top-level table."""
    src = f"file {path}"
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    # No built-in {"default": 1}: it made `default_concurrency` apply to every
    # lane except the one most jobs run in (issue 14, item 10).
    lanes: dict[str, int] = {}
    holds: dict[str, dict[str, Any]] = {}
    tables_out: dict[str, Any] = {}
    for key, raw in data.items():
        if key == "lanes":
            tables = {k: v for k, v in raw.items() if isinstance(v, dict)} if isinstance(raw, dict) else {}
            lane_when: dict[str, tuple[str, ...]] = {}
            lane_tell: dict[str, str] = {}
            for lane, table in tables.items():
                if told := _lane_tell(path, lane, table):
                    lane_tell[lane] = told
                table = {k: v for k, v in table.items() if k not in TELL_FIELDS}
                if "when" in table:  # run conditions every job of the lane waits for (daemon/worker/gates.py)
                    lane_when[lane] = _lane_when(path, lane, table["when"])
                    table = {k: v for k, v in table.items() if k != "when"}
                held, n = _lane_table(path, lane, table)
                if held:
                    holds[lane] = held
                if n is not None:
                    lanes[lane] = n
                    sources[f"lanes.{lane}"] = src
            if lane_when:
                tables_out["lane_when"] = lane_when
            if lane_tell:
                tables_out["lane_tell"] = lane_tell
            for lane, n in _lanes(path, {k: v for k, v in raw.items() if k not in tables}).items():
                lanes[lane] = n
                sources[f"lanes.{lane}"] = src
            continue
        if key == "tell":
            tables_out["tell"] = tell_table(path, raw)
            continue
        if key == "resources":
            plain, tables_out["resource_opts"] = _resource_tables(path, raw)
            tables_out["resources"] = _resources(path, plain)
            sources.update((f"resources.{name}", src) for name in tables_out["resources"])
            continue
        if key not in SETTING_NAMES:
            raise ConfigError(f"{path}: unknown setting {key!r}{_did_you_mean(key)}",
                              hint=f"Known settings: {', '.join(sorted(SETTING_NAMES))}, and a [lanes] table.")
        values[key] = _coerce(path, key, raw)
        sources[key] = src
    return Settings(**values, lanes=lanes, lane_holds=holds, **tables_out, file=path, sources=sources)


LANE_TABLE_KEYS = ("concurrency", "keep_awake", "mem", "cpus", "nice", "io", "when",
                   "ping", "webhook", "webhook_on", "mail_to", "mail_on")
# [tell]: how messages go out (docs/telling.md). Secrets: webhook_secret (or
# webhook_secret_file, read when a webhook is signed) and smtp_password (or
# smtp_password_file), never shown (tell_public), never on a command line.
TELL_KEYS = {"timeout_s": "duration", "retry_for_s": "duration", "ca_file": "path",
             "webhook_secret": "secret", "webhook_secret_file": "path",
             "mail_from": "text", "sendmail": "path", "smtp_host": "text", "smtp_port": "port",
             "smtp_starttls": "bool", "smtp_user": "text", "smtp_password": "secret", "smtp_password_file": "path"}


def tell_table(path: Path, raw: Any) -> dict[str, Any]:
    """``[tell]``, each key checked by its kind (TELL_KEYS)."""
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: [tell] must be a table", hint=f"It takes {', '.join(TELL_KEYS)}.")
    out: dict[str, Any] = {}
    for key, v in raw.items():
        kind = TELL_KEYS.get(key)
        if kind is None:
            raise ConfigError(f"{path}: [tell]: unknown key {key!r}", hint=f"It takes {', '.join(TELL_KEYS)}.")
        if kind == "duration":
            try:
                v = parse_duration(v, what=f"tell.{key}")
            except BadRequest as e:
                raise ConfigError(f"{path}: {e.message}", hint=e.hint) from None
            if v <= 0:
                raise ConfigError(f"{path}: tell.{key} must be more than 0")
        elif kind == "bool" and not isinstance(v, bool):
            raise ConfigError(f"{path}: tell.{key} must be true or false")
        elif kind == "port" and (isinstance(v, bool) or not isinstance(v, int) or not 0 < v < 65536):
            raise ConfigError(f"{path}: tell.{key} must be a port number")
        elif kind in ("text", "secret", "path") and (not isinstance(v, str) or not v or "\x00" in v
                                                      or "\n" in v or "\r" in v):
            raise ConfigError(f"{path}: tell.{key} must be a non-empty line of text")
        out[key] = str(Path(v).expanduser()) if kind == "path" else v
    return out


def tell_public(tell: Mapping[str, Any]) -> dict[str, Any]:
    """[tell] as `sloth config` shows it: its secrets as ***."""
    return {k: "***" if TELL_KEYS.get(k) == "secret" else v for k, v in tell.items()}


def _lane_tell(path: Path, lane: str, table: dict[str, Any]) -> str | None:
    """``[lanes.NAME]`` ping, webhook, webhook_on, mail_to, mail_on: the lane's channels (checks.tell_json)."""
    told = {k: v for k, v in table.items() if k in TELL_FIELDS}
    try:
        return tell_json(told) if told else None
    except BadRequest as e:
        raise ConfigError(f"{path}: [lanes.{lane}]: {e.message}", hint=e.hint) from None


def _lane_table(path: Path, lane: str, table: dict[str, Any]) -> tuple[dict[str, Any], int | None]:
    """``[lanes.NAME]``: concurrency, keep_awake, mem ("2G"), cpus, nice, io.
    Returns (what the keeper holds for its jobs, its concurrency or None)."""
    if unknown := set(table) - set(LANE_TABLE_KEYS):
        raise ConfigError(f"{path}: [lanes.{lane}]: unknown key(s) {', '.join(sorted(unknown))}",
                          hint=f"A lane's table takes {', '.join(LANE_TABLE_KEYS)}.")
    n = _whole(path, f"lanes.{lane}", table["concurrency"], BOUNDS["concurrency"]) if "concurrency" in table else None
    held: dict[str, Any] = {}
    if "keep_awake" in table:
        if not isinstance(table["keep_awake"], bool):
            raise ConfigError(f"{path}: [lanes.{lane}] keep_awake must be true or false")
        held["keep_awake"] = table["keep_awake"]
    raw = {k: table[k] for k in ("mem", "cpus", "nice", "io") if k in table}
    try:
        if isinstance(raw.get("mem"), str):
            raw["mem"] = parse_size(raw["mem"], "mem")
        text = limits_json(raw)
    except SlothError as e:
        raise ConfigError(f"{path}: [lanes.{lane}]: {e.message}") from None
    if text is not None:
        held["limits"] = json.loads(text)
    return held, n


def _did_you_mean(key: str) -> str:
    """``; did you mean max_attempts?`` for ``max_atempts`` (text.near: the
    CLI's rule for a mistyped word), or ""."""
    from sloth_daemon.text import near

    close = near(str(key), [*SETTING_NAMES, "lanes"])
    return f"; did you mean {close[0]}?" if close else ""


def _lanes(path: Path, raw: Any) -> dict[str, int]:
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: [lanes] must be a table of lane = concurrency")
    return {lane: _whole(path, f"lanes.{lane}", n, BOUNDS["concurrency"]) for lane, n in raw.items()}


def _lane_when(path: Path, lane: str, raw: Any) -> tuple[str, ...]:
    """``[lanes.NAME] when = ["ac", ...]``: run conditions (checks.when_list's spellings)."""
    try:
        return tuple(when_list(raw))
    except BadRequest as e:
        raise ConfigError(f"{path}: lanes.{lane}.when: {e.message}", hint=e.hint) from None


def _resources(path: Path, raw: Any) -> dict[str, tuple[str, ...]]:
    """[resources]: ``name = ["a", "b"]`` (named tokens) or ``name = N`` (N anonymous ones)."""
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: [resources] must be a table of name = count or name = [tokens]")
    out: dict[str, tuple[str, ...]] = {}
    for name, v in raw.items():
        try:
            resource_name(name, "resources")
        except BadRequest as e:
            raise ConfigError(f"{path}: resources.{name}: {e.message}", hint=e.hint) from None
        if isinstance(v, list) and all(isinstance(t, str) and t and "," not in t and "@" not in t and len(t) <= 64
                                       for t in v) \
                and len(set(v)) == len(v) and len(v) <= MAX_TOKENS:
            out[name] = tuple(v)
        elif isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= MAX_TOKENS:
            out[name] = tuple(str(i) for i in range(v))
        else:
            raise ConfigError(f"{path}: resources.{name} must be a count from 0 to {MAX_TOKENS} or a list of"
                              " distinct token names (no commas or @)", hint='E.g. gpu = ["0", "1"] or licence = 3.')
    return out


RESOURCE_TABLE_KEYS = ("tokens", "shares", "order")
GPU_TABLE_KEYS = ("outside_max", "check_s")
MAX_SHARES = 100


def _resource_tables(path: Path, raw: Any) -> tuple[Any, dict[str, dict[str, Any]]]:
    """[resources] split into its plain form (name = tokens) and the options of its tables."""
    if not isinstance(raw, dict):
        return raw, {}
    plain, opts = {}, {}
    for name, v in raw.items():
        if not isinstance(v, dict):
            plain[name] = v
            continue
        try:
            resource_name(name, "resources")
        except BadRequest as e:
            raise ConfigError(f"{path}: resources.{name}: {e.message}", hint=e.hint) from None
        t = _resource_table(path, name, v)
        if "tokens" in t:
            plain[name] = t.pop("tokens")
        opts[name] = t
    return plain, opts


def _resource_table(path: Path, name: str, table: dict[str, Any]) -> dict[str, Any]:
    """``[resources.gpu]``: tokens (as ``gpu = ...`` takes them; left out:
    found on the machine), shares = N jobs per token for a whole need,
    order = the tokens given first; gpu also outside_max ("1G": what
    processes outside sloth may use of a GPU it still gives out; 0 by
    default) and check_s (how often nvidia-smi is asked while GPU jobs run
    or wait on it)."""
    known = RESOURCE_TABLE_KEYS + (GPU_TABLE_KEYS if name == "gpu" else ())
    out: dict[str, Any] = {}
    for key, v in table.items():
        where = f"{path}: resources.{name}.{key}"
        if key not in known:
            raise ConfigError(f"{path}: resources.{name}: unknown key {key!r}", hint=f"Known: {', '.join(known)}.")
        if key == "tokens":
            out[key] = v  # checked with the plain form (_resources)
        elif key == "shares":
            out[key] = _whole(path, f"resources.{name}.shares", v, (1, MAX_SHARES))
        elif key == "order":
            if not isinstance(v, list) or not all(isinstance(t, str) and t for t in v) or len(v) > MAX_TOKENS:
                raise ConfigError(f"{where} must be a list of token names", hint='E.g. order = ["1", "0"].')
            out[key] = tuple(dict.fromkeys(v))
        elif key == "outside_max":
            n = v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else size_of(v) if isinstance(v, str) \
                else None
            if n is None:
                raise ConfigError(f"{where} must be a size (0, 500M, 2G)", hint='E.g. outside_max = "1G".')
            out[key] = n
        else:
            try:
                out[key] = parse_duration(v, what=f"resources.{name}.{key}")
            except BadRequest as e:
                raise ConfigError(f"{where}: {e.message}") from None
            if not 0.1 <= out[key] <= 3600:
                raise ConfigError(f"{where} must be from 0.1s to 1h")
    return out


def _whole(path: Path, key: str, raw: Any, bounds: tuple[int, int]) -> int:
    """A whole number within ``bounds`` (checks.BOUNDS), else ConfigError."""
    lo, hi = bounds
    if isinstance(raw, bool) or not isinstance(raw, int) or not lo <= raw <= hi:
        shown = f"a {len(str(raw))}-digit number" if isinstance(raw, int) and len(str(raw)) > 24 else repr(raw)
        raise ConfigError(f"{path}: {key} must be a whole number from {lo} to {hi}, got {shown}",
                          hint=_zero_hint(key) if raw == 0 else None)
    return raw


def _zero_hint(key: str) -> str | None:
    """A lane of 0 slots is refused (it would never run a job, and `sloth
    resume` could not undo it); what the user wants is a pause, which is
    what `lane set LANE -c 0` does: say so."""
    import shlex

    if key == "default_concurrency":
        return "To hold every job back, pause them all: `sloth pause` (until `sloth resume`)."
    if not key.startswith("lanes."):
        return None
    lane = shlex.quote(key.removeprefix("lanes."))
    return (f"To hold the lane's jobs back, pause it: `sloth pause {lane}` (what `sloth lane set {lane} -c 0` "
            "does); it stays paused across restarts until `sloth resume`.")


def _coerce_telling(path: Path, key: str, raw: Any) -> Any:
    """notify (a list of events) and on_finish (a shell command)."""
    if key == "notify":
        if not isinstance(raw, list) or any(v not in NOTIFY_EVENTS for v in raw):
            raise ConfigError(f"{path}: notify must be a list of {', '.join(NOTIFY_EVENTS)}, got {raw!r}",
                              hint='e.g. notify = ["failed", "drained"]; notify = [] turns them off.')
        return tuple(dict.fromkeys(raw))
    if not isinstance(raw, str) or "\x00" in raw:
        raise ConfigError(f"{path}: on_finish must be a shell command (a string), got {raw!r}")
    return raw


def _metrics_file(path: Path, raw: Any) -> str:
    """An absolute path (``~`` expanded) to a file in a folder that exists, or "" for none."""
    if not isinstance(raw, str) or "\x00" in raw:
        raise ConfigError(f"{path}: metrics_file must be a path (a string), got {raw!r}")
    if not raw:
        return ""
    p = Path(raw).expanduser()
    if not p.is_absolute() or raw.endswith("/"):
        raise ConfigError(f"{path}: metrics_file must be an absolute path to a file, got {raw!r}",
                          hint='e.g. metrics_file = "/var/lib/node_exporter/textfile/sloth.prom"')
    return str(p)


def _coerce_machine(path: Path, key: str, raw: Any) -> Any:
    """queue_url, host, tags and listen."""
    from sloth_daemon.spec import host_name

    if key == "listen":
        if not isinstance(raw, bool):
            raise ConfigError(f"{path}: listen must be true or false, got {raw!r}")
        return raw
    if key == "queue_url":
        if isinstance(raw, str):
            remember(raw)  # before any message can quote it
        if not isinstance(raw, str) or raw and not raw.lower().startswith(URL_SCHEMES):
            raise ConfigError(f"{path}: queue_url must be a postgresql:// URL (or \"\"), got {_public(key, raw)!r}",
                              hint='e.g. queue_url = "postgresql://me@db.lan/sloth"; leave it out for the local file.')
        return raw
    names = raw if key == "tags" else [raw]
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise ConfigError(f"{path}: {key} must be {'a list of names' if key == 'tags' else 'a name'}, got {raw!r}")
    try:
        checked = [host_name(n, key) for n in names if n or key == "tags"]
    except BadRequest as e:
        raise ConfigError(f"{path}: {key}: {e.message}", hint=e.hint) from None
    return tuple(dict.fromkeys(checked)) if key == "tags" else (checked or [""])[0]


def _coerce(path: Path, key: str, raw: Any) -> Any:
    if key == "metrics_file":
        return _metrics_file(path, raw)
    if key in ("notify", "on_finish"):
        return _coerce_telling(path, key, raw)
    if key == "retry_on":
        if not isinstance(raw, list) or any(v not in RETRY_CAUSES for v in raw):
            raise ConfigError(f"{path}: retry_on must be a list of {', '.join(RETRY_CAUSES)}, got {raw!r}",
                              hint='e.g. retry_on = ["timeout", "stall", "signal"] (the default); docs/watchdogs.md.')
        return tuple(sorted(set(raw)))
    if key in MACHINE_KEYS:
        return _coerce_machine(path, key, raw)
    if key in DURATION_KEYS:
        try:
            v = parse_duration(raw, what=key)
        except BadRequest as e:
            raise ConfigError(f"{path}: {e.message}", hint=e.hint) from None
        if key in POSITIVE_DURATIONS and v <= 0:
            raise ConfigError(f"{path}: {key} must be more than 0")
        if key == "lease_s" and v < MIN_LEASE_S:
            raise ConfigError(f"{path}: lease_s must be at least {format_duration(MIN_LEASE_S)}, "
                              f"got {format_duration(v)}", hint=LEASE_HINT)
        return v
    return _whole(path, key, raw, INT_BOUNDS[key])


def changes(old: Settings, new: Settings) -> list[str]:
    """What a reload changes, one line per setting or lane: ``max_attempts: 3 -> 5``."""
    out = [f"{k}: {_shown(_public(k, getattr(old, k)))} -> {_shown(_public(k, getattr(new, k)))}"
           + (" (takes effect when the daemon restarts)" if k in MACHINE_KEYS else "")
           for k in SETTING_NAMES if getattr(old, k) != getattr(new, k)]
    for lane in sorted(set(old.lanes) | set(new.lanes)):
        a, b = old.concurrency(lane), new.concurrency(lane)
        if lane not in new.lanes:
            out.append(f"lanes.{lane}: removed from the file ({a} -> default {b})")
        elif lane not in old.lanes:
            out.append(f"lanes.{lane}: added ({a} -> {b})")
        elif a != b:
            out.append(f"lanes.{lane}: {a} -> {b}")
    for lane in sorted(set(old.lane_when) | set(new.lane_when)):
        if old.lane_when.get(lane) != new.lane_when.get(lane):
            out.append(f"lanes.{lane}.when: {list(old.lane_when.get(lane, ()))} -> {list(new.lane_when.get(lane, ()))}")
    if old.tell != new.tell:
        out.append(f"tell: {tell_public(old.tell)} -> {tell_public(new.tell)}")
    for lane in sorted(set(old.lane_tell) | set(new.lane_tell)):
        if old.lane_tell.get(lane) != new.lane_tell.get(lane):
            out.append(f"lanes.{lane}: its channels changed (for jobs added from now on)")
    for name in sorted(set(old.resources) | set(new.resources)):
        was, now = old.resources.get(name), new.resources.get(name)
        if was is None:
            out.append(f"resources.{name}: added ({_shown(now)})")
        elif was != now:
            out.append(f"resources.{name}: " + ("removed" if now is None else f"{_shown(was)} -> {_shown(now)}")
                       + " (held tokens stay held)")
    for name in sorted(set(old.resource_opts) | set(new.resource_opts)):
        before, after = dict(old.resource_opts.get(name, {})), dict(new.resource_opts.get(name, {}))
        if before != after:
            out.append(f"resources.{name}: {before} -> {after}")
    return out


def queue_target(settings: Settings, data_db: Path, environ: Mapping[str, str] | None = None) -> str | Path:
    """Where the queue is: $SLOTH_QUEUE_URL, else queue_url, else the SQLite
    file ``data_db``. Raises ConfigError for a variable that is no URL, and
    StorageError for a URL where psycopg is not installed."""
    import os

    env = os.environ if environ is None else environ
    url = env.get(QUEUE_URL_ENV, "") or settings.queue_url
    remember(url)  # every message of this process masks its password from now on
    if url and not url.lower().startswith(URL_SCHEMES):
        raise ConfigError(f"{QUEUE_URL_ENV} must be a postgresql:// URL, got {_public('queue_url', url)!r}")
    if url:
        from sloth_daemon.backends import require_psycopg

        require_psycopg()
    return url or data_db


def _public(key: str, v: Any) -> Any:
    """A setting as shown: a URL's password masked."""
    if key != "queue_url" or not isinstance(v, str):
        return v
    return mask(v)


def _shown(v: Any) -> str:
    """A value in a person's words: a list as ``a, b`` (``(none)``), a text quoted (so '' shows)."""
    if isinstance(v, (list, tuple)):
        return ", ".join(map(str, v)) or "(none)"
    return repr(v) if isinstance(v, str) else str(v)


EXAMPLE = """\
# sloth config: every key is optional. Durations: seconds or 30s, 5m, 2h, 7d.
# `sloth daemon reload` (or SIGHUP) applies changes without a restart.
lease_s = "1m"
max_attempts = 3
backoff_cap_s = "5m"
log_cap_bytes = 4194304
retention_s = "7d"
kill_grace_s = "10s"
clock_check_s = "5s"
default_concurrency = 1
notify = ["failed"]     # desktop notifications (notify-send / osascript): failed, done, drained
on_finish = ""          # e.g. "~/bin/job-done": a shell command, the job as JSON on stdin
hook_timeout_s = "30s"  # on_finish still running after this is killed
retry_on = ["timeout", "stall", "signal"]  # ends retried besides exit codes: also mem, match (docs/watchdogs.md)

# One queue for several machines (PostgreSQL; `sloth db migrate` once):
# queue_url = "postgresql://me@db.lan/sloth"   # or SLOTH_QUEUE_URL
# host = "laptop"        # this machine's name there (default: its hostname)
# tags = ["gpu"]         # `sloth add --on gpu` runs here (or on any machine with the tag)
# listen = true          # false behind PgBouncer in transaction mode: poll only
# poll_s = "5s"

conditions_check_s = "30s"  # run conditions (--when) are looked at this often while jobs wait on them
keeper_linger_s = "5s"      # the keeper (it owns running jobs) exits once it has held none this long
idle_exit_s = 0             # e.g. "10m": the daemon exits after this long with nothing to do (0: never)
dormant_after_s = "10m"     # then it holds only its socket (~9 MB) until a command or a slot (0: never)
# metrics_file = "/var/lib/node_exporter/textfile/sloth.prom"  # kept up to date for node_exporter

[lanes]
default = 1
# gpu = 1
# downloads = 4
# [lanes.render]           # a lane as a table: its concurrency and run conditions
# concurrency = 2
# when = ["ac", "idle=10m"]

# [lanes.backup]           # every job of the lane pings, and mails its failures (docs/telling.md)
# ping = "https://hc-ping.com/<uuid>"
# mail_to = ["me@example.org"]

# [tell]                   # how pings, webhooks and mail go out (docs/telling.md)
# timeout_s = "10s"        # one delivery, all of it; retried up to retry_for_s (24h), then kept failed
# webhook_secret_file = "~/.config/sloth/webhook.key"   # X-Sloth-Signature: HMAC-SHA256 of the body
# smtp_host = "smtp.example.org"   # else the local sendmail; STARTTLS, smtp_user, smtp_password_file

# [resources]              # named resources, this machine's own (`sloth add --needs gpu=1`)
# gpu = ["0", "1"]         # default: the GPUs `nvidia-smi -L` lists
# licence = 3              # three anonymous tokens
# [resources.gpu]          # or gpu as a table (docs/gpus.md)
# shares = 2               # two `--needs gpu=1` jobs per GPU (--needs gpu=0.5 asks a share itself)
# order = ["1", "0"]       # GPUs given first
# outside_max = "1G"       # a GPU whose processes outside sloth use more is not given out (default 0)
"""


def file_differs(in_force: Mapping[str, Any], file: Settings) -> bool:
    """Whether ``file`` (config.toml as it is now) says other than the
    settings in force (``in_force``: Settings.as_dict of the daemon's, as
    `sloth config` is answered): then a reload would change something."""
    now = json.loads(json.dumps(file.as_dict()))
    return any(json.loads(json.dumps(in_force.get(k))) != now[k]
               for k in ("settings", "lanes", "resources", "resource_opts"))


def machine_name(settings: Settings) -> str:
    """This machine's name on a shared queue (the daemon's, and what its
    jobs record as their origin): config's ``host``, else the hostname as a
    name (its first label if it has odd characters)."""
    import os

    name = settings.host or os.uname().nodename
    if name and all(c.isalnum() and c.isascii() or c in "._-" for c in name) and len(name) <= 64:
        return name
    return "".join(c if c.isascii() and (c.isalnum() or c in "._-") else "-" for c in name.split(".")[0])[:64] \
        or "localhost"

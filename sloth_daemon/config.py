"""Effective settings: built-in defaults, overridden by the TOML config file.

Each value remembers where it came from, for ``sloth config``.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .durations import parse_duration
from .errors import BadRequest, ConfigError

DEFAULTS: dict[str, Any] = {
    "lease_s": 60.0,  # lease per claim; heartbeats every lease/3
    "max_attempts": 3,
    "backoff_cap_s": 300.0,
    "default_concurrency": 1,  # slots of a lane not listed in [lanes]
    "log_cap_bytes": 4 * 1024 * 1024,  # per attempt; head and tail kept past it
    "retention_s": 7 * 86400.0,  # finished jobs older than this are pruned
    "kill_grace_s": 10.0,  # SIGTERM -> SIGKILL
    "clock_check_s": 5.0,  # how often the clocks are compared (sleep detection)
}
DURATION_KEYS = {"lease_s", "backoff_cap_s", "retention_s", "kill_grace_s", "clock_check_s"}
INT_KEYS = {"max_attempts": 1, "default_concurrency": 1, "log_cap_bytes": 1024}


@dataclass
class Settings:
    values: dict[str, Any] = field(default_factory=lambda: dict(DEFAULTS))
    sources: dict[str, str] = field(default_factory=lambda: {k: "default" for k in DEFAULTS})
    lanes: dict[str, int] = field(default_factory=lambda: {"default": 1})
    lane_sources: dict[str, str] = field(default_factory=lambda: {"default": "default"})
    file: Path | None = None

    def __getattr__(self, name: str) -> Any:
        try:
            return self.__dict__["values"][name]
        except KeyError:
            raise AttributeError(name) from None

    def concurrency(self, lane: str) -> int:
        return self.lanes.get(lane, self.values["default_concurrency"])

    def as_dict(self) -> dict[str, Any]:
        return {
            "file": str(self.file) if self.file else None,
            "settings": {k: {"value": v, "source": self.sources[k]} for k, v in self.values.items()},
            "lanes": {k: {"concurrency": v, "source": self.lane_sources[k]} for k, v in self.lanes.items()},
        }


def load(path: Path) -> Settings:
    """Read ``path`` if it exists. Raises ConfigError naming the file and key."""
    s = Settings(file=path)
    if not path.exists():
        return s
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - 3.10
        import tomli as tomllib
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise ConfigError(f"cannot read config {path}: {e}") from e
    src = f"file {path}"
    for key, raw in data.items():
        if key == "lanes":
            if not isinstance(raw, dict):
                raise ConfigError(f"{path}: [lanes] must be a table of lane = concurrency")
            for lane, n in raw.items():
                if isinstance(n, bool) or not isinstance(n, int) or n < 1:
                    raise ConfigError(f"{path}: lanes.{lane} must be a whole number >= 1, got {n!r}")
                s.lanes[lane] = n
                s.lane_sources[lane] = src
            continue
        if key not in DEFAULTS:
            raise ConfigError(
                f"{path}: unknown setting {key!r}",
                hint=f"Known settings: {', '.join(sorted(DEFAULTS))}, and a [lanes] table.",
            )
        s.values[key] = _coerce(path, key, raw)
        s.sources[key] = src
    if "default" not in s.lane_sources or s.lane_sources["default"] == "default":
        s.lanes["default"] = s.lanes.get("default", 1)
    return s


def _coerce(path: Path, key: str, raw: Any) -> Any:
    if key in DURATION_KEYS:
        try:
            v = parse_duration(raw, what=key)
        except BadRequest as e:
            raise ConfigError(f"{path}: {e.message}", hint=e.hint) from None
        if key in ("lease_s", "clock_check_s") and v <= 0:
            raise ConfigError(f"{path}: {key} must be more than 0")
        return v
    lo = INT_KEYS[key]
    if isinstance(raw, bool) or not isinstance(raw, int) or raw < lo:
        raise ConfigError(f"{path}: {key} must be a whole number >= {lo}, got {raw!r}")
    return raw


EXAMPLE = """\
# sloth config: every key is optional. Durations: seconds or 30s, 5m, 2h, 7d.
lease_s = "1m"
max_attempts = 3
backoff_cap_s = "5m"
log_cap_bytes = 4194304
retention_s = "7d"
kill_grace_s = "10s"
clock_check_s = "5s"
default_concurrency = 1

[lanes]
default = 1
# gpu = 1
# downloads = 4
"""

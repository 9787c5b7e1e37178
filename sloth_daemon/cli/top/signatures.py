"""Failures grouped by signature: what `sloth top` shows as "the day's
failures". A signature is the exit code and the log's last line with what
differs from run to run taken out: paths become ``<path>``, numbers
(hex ids, times, sizes, pids) ``<n>``, so "disk full writing /tmp/a/1.dat
after 12 s" and "... /tmp/b/7.dat after 3 s" are one signature counted
twice. Pure functions: no terminal, no daemon.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Iterable

# A path: absolute, ~ or ./.. relative, or a word with a slash in it
# (src/x.py), up to a space or a quote; before the numbers, so a path's
# digits go with it.
_PATH = re.compile(r"(?:(?<=\s)|(?<=^)|(?<=[=:('\"]))(?:~|\.{1,2})?/[^\s'\"),;:]*|\b[\w.-]+(?:/[\w.-]+)+")
# A number: 42, 3.5, 1,000, 03:12:55.120, 0x1f3a, a hex id such as 3fa9c2 (it has a digit)
_HEXISH = r"(?:0x[0-9a-f]+|[0-9a-f]*\d[0-9a-f]*)"
_NUMBER = re.compile(rf"\b{_HEXISH}(?:[.,:]{_HEXISH})*\b", re.IGNORECASE)
_SPACE = re.compile(r"\s+")
MAX_LINE = 200  # characters of a signature's line kept


def normalise(line: str) -> str:
    """``line`` with its paths and numbers replaced, spaces squeezed."""
    line = _PATH.sub("<path>", line.strip())
    line = _NUMBER.sub("<n>", line)
    return _SPACE.sub(" ", line)[:MAX_LINE]


def signature(exit_code: int | None, last_line: str) -> tuple[int | None, str]:
    return exit_code, normalise(last_line)


@dataclass
class FailureGroup:
    """One signature and the failed jobs that have it, newest first."""

    exit_code: int | None
    line: str  # normalised
    example: str  # the newest job's own last line, as it was
    ids: list[int] = field(default_factory=list)
    last_at: float = 0.0

    @property
    def count(self) -> int:
        return len(self.ids)

    def text(self) -> str:
        code = "exit ?" if self.exit_code is None else f"exit {self.exit_code}"
        return f"{code}: {self.line}" if self.line else f"{code} (printed nothing)"


def group(failures: Iterable[tuple[dict[str, Any], str]]) -> list[FailureGroup]:
    """``failures``: (job as the daemon sends it, its last log line).
    The groups, the largest first (then the most recent)."""
    groups: dict[tuple[int | None, str], FailureGroup] = {}
    for job, last in failures:
        key = signature(job.get("exit_code"), last)
        g = groups.get(key)
        if g is None:
            g = groups[key] = FailureGroup(key[0], key[1], last.strip())
        g.ids.append(job["id"])
        at = job.get("finished_at") or job.get("updated_at") or 0.0
        if at >= g.last_at:
            g.last_at, g.example = at, last.strip()
    return sorted(groups.values(), key=lambda g: (-g.count, -g.last_at))

"""How far a run is, as the run says it: a line ``SLOTH_PROGRESS 0.42`` or
``{"progress": 0.42}`` (Cronicle's convention) in its output, a tqdm bar
(``42%|####      | 42/100 [00:01<00:01, 40.00it/s]``), or the file named
in ``$SLOTH_PROGRESS_FILE`` holding such a line (docs/progress.md).

Costs little whatever the job prints: each chunk the keeper reads (up to
64 KiB) is searched for the three markers from its end (``bytes.rfind``,
C speed, no copy, no split into lines), and only the last line that holds
one is parsed: only the latest value matters. A line cut between two
reads is carried over (its last ``CARRY`` bytes at most). Sending is the
run table's: at most one ``progress`` event a run each ``SEND_EVERY_S``.
"""

from __future__ import annotations

import json
import re
import time
from typing import Any

import os

from sloth_daemon.safefile import open_file

PROGRESS_FILE_ENV = "SLOTH_PROGRESS_FILE"
SEND_EVERY_S = 1.0  # at most one progress event a run this often (the daemon writes each)
FILE_POLL_S = 1.0  # how often the keeper looks at the runs' progress files
FILE_READ_MAX = 4096  # the file's last bytes read: its last line is the value
CARRY = 512  # bytes of an unfinished line kept for the next read (a longer line is no progress line)
LINE_MAX = 512  # a progress line longer than this is not parsed

MARK_LINE = b"SLOTH_PROGRESS"
MARK_JSON = b'"progress"'
MARK_TQDM = b"%|"
_ENDS = (b"\n", b"\r")  # tqdm redraws its bar after a carriage return

_NUMBER = re.compile(rb"SLOTH_PROGRESS[ :=\t]+([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)(%?)")
_TQDM = re.compile(
    rb"(\d{1,3})%\|[^|]{0,200}\|\s*(\d+(?:\.\d+)?)([kMGTPEZY]?)/(\d+(?:\.\d+)?)([kMGTPEZY]?)"
    rb"(?:\s*\[[^<\]]*<([0-9:d ?]*))?")
_SCALE = {b"": 1, b"k": 1e3, b"M": 1e6, b"G": 1e9, b"T": 1e12, b"P": 1e15, b"E": 1e18, b"Z": 1e21, b"Y": 1e24}


def _fraction(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v <= 1:  # compared, not made a float:
        return None  # an int of 400 digits is no float (math.isfinite raised OverflowError); NaN compares False
    return float(v)


def _interval_s(text: bytes) -> float | None:
    """tqdm's time left ("01:05", "1:02:03", "2d 1:02:03") in seconds; None for "?"."""
    days, _, clock = text.strip().rpartition(b"d")
    try:
        parts = [int(p) for p in clock.strip(b" ,").split(b":")]
        if len(parts) > 3:  # h:m:s at most; more fields are no time tqdm writes (and 60**200 is no float)
            return None
        whole = sum(p * 60 ** i for i, p in enumerate(reversed(parts)))
        return float(whole + (int(days) * 86400 if days.strip() else 0))
    except (ValueError, OverflowError):
        return None


def parse_line(line: bytes, *, bare: bool = False) -> dict[str, Any] | None:
    """{"fraction", "source", "eta_s"} of one line that reports progress,
    else None. ``bare``: a plain number alone ("0.42", "42%") counts too
    (a progress file's content)."""
    line = line.strip()
    if not line or len(line) > LINE_MAX:
        return None
    if MARK_LINE in line:
        m = _NUMBER.search(line)
        v = (float(m.group(1)) / (100 if m.group(2) else 1)) if m else None
        return {"fraction": f, "source": "line", "eta_s": None} if (f := _fraction(v)) is not None else None
    if line.startswith(b"{") and MARK_JSON in line:
        try:
            d = json.loads(line)
        except ValueError:
            return None
        if not isinstance(d, dict) or (f := _fraction(d.get("progress"))) is None:
            return None
        return {"fraction": f, "source": "line", "eta_s": None}
    if MARK_TQDM in line:
        return _tqdm(line)
    if bare:
        return parse_line(b"SLOTH_PROGRESS " + line)
    return None


def _tqdm(line: bytes) -> dict[str, Any] | None:
    m = _TQDM.search(line)
    if m is None:
        return None
    n, total = float(m.group(2)) * _SCALE[m.group(3)], float(m.group(4)) * _SCALE[m.group(5)]
    f = _fraction(n / total) if total > 0 else _fraction(int(m.group(1)) / 100)
    if f is None:
        return None
    return {"fraction": f, "source": "tqdm", "eta_s": _interval_s(m.group(6)) if m.group(6) else None}


class ProgressMeter:
    """One run's progress as its output and its file say it: ``latest``
    (with ``at``, wall clock), and whether it changed since it was last
    taken (``take``). ``file``: the path given as $SLOTH_PROGRESS_FILE."""

    def __init__(self, file: str | None = None) -> None:
        self.file = file
        self.latest: dict[str, Any] | None = None
        self.changed = False
        self.carry = b""  # the last line of the last read, unfinished
        self._file_seen: tuple[int, int] | None = None  # (mtime_ns, size) last read

    def feed(self, data: bytes) -> bool:
        """Look at a chunk of output; True if it held a new value."""
        last_end = max(data.rfind(b"\n"), data.rfind(b"\r"))
        if last_end < 0:  # no line ends here: all of it belongs to the line being written
            if len(self.carry) + len(data) <= CARRY:
                self.carry += data
            else:
                self.carry = b""  # a line this long reports no progress
            return self._whole_bar()
        found = self._last_marked(data, last_end)
        if found is None and self.carry:  # the carried line ends in this chunk
            first_end = min(i for i in (data.find(b"\n"), data.find(b"\r")) if i >= 0)
            found = self.carry + data[:first_end] if first_end <= CARRY else None
        self.carry = data[last_end + 1:] if len(data) - last_end - 1 <= CARRY else b""
        return self._whole_bar() or (found is not None and self._set(parse_line(found)))

    def _whole_bar(self) -> bool:
        """The line being written, if it is a whole tqdm bar: tqdm writes its
        "\r" before each redraw, not after, so a bar is ended only by the next
        one (which may come seconds later); one that reaches its closing "]"
        (the rate: "[00:03<00:09, 3.2it/s]") is whole already. True if it held a new value."""
        bar = self.carry.rstrip()
        return MARK_TQDM in bar and bar.endswith(b"]") and self._set(parse_line(bar))

    def _last_marked(self, data: bytes, end: int) -> bytes | None:
        """The last finished line of ``data`` (up to ``end``) that holds a
        marker, or None (one in the carried line is the caller's)."""
        at = max(data.rfind(MARK_LINE, 0, end), data.rfind(MARK_JSON, 0, end), data.rfind(MARK_TQDM, 0, end))
        if at < 0:
            return None
        start = max(data.rfind(b"\n", 0, at), data.rfind(b"\r", 0, at)) + 1
        stop = min(i for i in (data.find(b"\n", at, end + 1), data.find(b"\r", at, end + 1)) if i >= 0)
        if start == 0 and self.carry:
            return (self.carry + data[:stop])[-LINE_MAX - 1:]
        return data[start:stop] if stop - start <= LINE_MAX else None

    def poll_file(self) -> bool:
        """Read the progress file if it changed since the last look; True if
        it held a new value. A file that is not there, not a regular file,
        or unreadable is no progress (never an error: it is the job's)."""
        if self.file is None:
            return False
        try:
            st = os.stat(self.file)
        except OSError:
            return False
        seen = (st.st_mtime_ns, st.st_size)
        if seen == self._file_seen:
            return False
        self._file_seen = seen
        try:
            data = _tail(self.file, FILE_READ_MAX)
        except OSError:
            return False
        lines = [x for x in data.replace(b"\r", b"\n").split(b"\n") if x.strip()]
        if not lines:
            return False
        got = parse_line(lines[-1], bare=True)
        if got is not None:
            got["source"] = "file"
        return self._set(got)

    def _set(self, got: dict[str, Any] | None) -> bool:
        if got is None:
            return False
        got["at"] = time.time()
        self.latest, self.changed = got, True
        return True

    def take(self) -> dict[str, Any] | None:
        """The latest value if it changed since the last take, else None."""
        if not self.changed:
            return None
        self.changed = False
        return self.latest


def _tail(path: str, cap: int) -> bytes:
    """The last ``cap`` bytes of the regular file at ``path``: never through
    a symlink, never waiting on a FIFO (safefile.open_file)."""
    fd = open_file(path, os.O_RDONLY)
    try:
        return os.pread(fd, cap, max(0, os.fstat(fd).st_size - cap))
    finally:
        os.close(fd)

"""What a run hands on (issue 33 item 3): the JSON a job wrote to the file
named in ``$SLOTH_RESULT``, read by the keeper once the run's whole tree has
ended (the keeper outlives the daemon: a result written while no daemon
runs is journalled with the run's outcome and recorded by the next one).

At most RESULT_CAP bytes, one JSON value, UTF-8. A file too big, not JSON,
a link or not a regular file is no result: the history says why and the
run's outcome stays as the run ended (a result is what a run hands on, not
how it ended; a job that must not pass without a valid result can exit
non-zero itself). The file is removed once read: the queue keeps it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from sloth_daemon.safefile import NotRegular, TooLarge, read_file

RESULT_CAP = 64 * 1024  # bytes of one attempt's result
RESULT_MAX_DEPTH = 100  # arrays and objects one in another: every reader (show --json, a dependent's
# $SLOTH_AFTER_RESULTS, a Python json.loads with its stack already in use) must be able to parse it back


def read_result(path: str | Path) -> tuple[str | None, str | None]:
    """(the result as compact JSON text, or None; what was wrong with the
    file, or None). No file: (None, None). Never raises."""
    try:
        data = read_file(path, RESULT_CAP)  # never follows a link, never waits on a FIFO
    except FileNotFoundError:
        return None, None
    except TooLarge:
        _remove(path)
        return None, f"result not kept: $SLOTH_RESULT is larger than {RESULT_CAP // 1024} KiB"
    except NotRegular as e:
        return None, f"result not kept: $SLOTH_RESULT {e.problem}"
    except OSError as e:
        return None, f"result not kept: cannot read $SLOTH_RESULT: {e.strerror or e}"
    _remove(path)
    try:
        value = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        return None, f"result not kept: $SLOTH_RESULT is not JSON ({_short(e)})"
    except RecursionError:
        return None, _TOO_DEEP
    if _depth(value) > RESULT_MAX_DEPTH:
        return None, _TOO_DEEP
    try:
        text = json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
        text.encode("utf-8")  # a lone surrogate ("\ud800") is kept \u-escaped, as the job wrote it
        return text, None
    except UnicodeEncodeError:
        return json.dumps(value, separators=(",", ":"), allow_nan=False), None
    except ValueError:  # NaN or Infinity: JSON does not have them (Python reads them)
        return None, "result not kept: $SLOTH_RESULT holds NaN or Infinity, which JSON does not have"


_TOO_DEEP = f"result not kept: $SLOTH_RESULT nests arrays and objects more than {RESULT_MAX_DEPTH} deep"


def _depth(value: object) -> int:
    """How deep arrays and objects nest in ``value`` (0: a scalar), without recursion."""
    deepest, todo = 0, [(value, 0)]
    while todo:
        v, d = todo.pop()
        if isinstance(v, (list, dict)):
            deepest = max(deepest, d + 1)
            todo += [(x, d + 1) for x in (v.values() if isinstance(v, dict) else v)]
    return deepest


def _short(e: Exception) -> str:
    s = str(e)
    return s if len(s) <= 120 else s[:120] + "..."


def _remove(path: str | Path) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass

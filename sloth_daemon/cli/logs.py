"""`sloth logs`: a job's output. It asks the daemon, or, when none
answers, reads the queue file read-only and says so on stderr
(connection.call_or_read); only `logs -f` needs a daemon, and starts one
if none runs (connection.connect). Its options are declared in
commands.py.

No Typer: the fast path runs it (commands.py), so it prints with
output.echo, returns its exit code and raises SlothError.
"""

from __future__ import annotations

import sys

from sloth_daemon import errors
from sloth_daemon.cli.connection import call_or_read, connect
from sloth_daemon.cli.output import echo
from sloth_daemon.cli.values import parse_id

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Optional


def logs(*, job_id: Optional[str], attempt: Optional[int], follow: bool, tail: Optional[int],
         path_only: bool) -> int:
    """`sloth logs [ID]`: the log of an attempt, its tail, its path, or
    followed live; no ID: the latest job of yours that ran (said on stderr). What the job
    printed goes to stdout; every note about it (nothing printed, no such
    file, never started) to stderr."""
    if job_id is None:
        from sloth_daemon.cli.latest import latest_job_id

        jid = latest_job_id(ran=True)
        echo(f"sloth: logs of the latest job that ran, {jid}", err=True)
    else:
        jid = parse_id(job_id)
    if tail is not None and tail < 0:
        raise errors.BadRequest(f"--tail must be at least 0, got {tail}", hint="e.g. `sloth logs 12 -n 20`.")
    args: dict[str, Any] = {"id": jid, **({"attempt": attempt} if attempt is not None else {})}
    if follow and not path_only:
        return _follow(args, through=attempt is None)
    res = call_or_read("logs", **args)
    if path_only:
        echo(res["path"])
        _say_missing(res, jid)
        return 0
    if res.get("stored") or "data" in res:  # a shared queue: it ran on another machine
        _stored(res, tail)
        return 0
    if tail is not None:
        data = _tail(res["path"], tail)
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()
        if not data and tail > 0:
            _say_missing(res, jid, empty=True)
        return 0
    _cat(res["path"], jid, res["attempt"])
    return 0


def _say_missing(res: dict[str, Any], jid: int, *, empty: bool = False) -> None:
    """On stderr: the attempt's log file does not exist (it printed
    nothing, or is still to start), or it is empty."""
    import os

    try:
        size: Optional[int] = os.stat(res["path"]).st_size
    except OSError:
        size = None
    if size is None:
        echo(f"sloth: {res['path']} does not exist: job {jid} attempt {res['attempt']} has printed "
                   "nothing (a log file is made at its first output)", err=True)
    elif empty and size == 0:
        echo(f"sloth: job {jid} attempt {res['attempt']} has printed nothing", err=True)


def _tail(path: str, n: int) -> bytes:
    """The last ``n`` lines of a log file as the job wrote them (as tail -n:
    long lines whole, escapes untouched); b"" if it is missing."""
    import os

    from sloth_daemon.safefile import open_file

    if n <= 0:
        return b""
    try:
        with os.fdopen(open_file(path), "rb") as f:  # never through a link, only a regular file
            pos = f.seek(0, os.SEEK_END)
            data = b""
            while pos > 0 and data.count(b"\n") <= n:  # n + 1 newlines: the last n lines are whole
                step = min(pos, 1 << 16)
                pos -= step
                f.seek(pos)
                data = f.read(step) + data
    except FileNotFoundError:
        return b""
    except OSError as e:
        raise errors.LogUnreadable(path, e) from None
    cut = len(data) - 1 if data.endswith(b"\n") else len(data)
    for _ in range(n):
        cut = data.rfind(b"\n", 0, cut)
        if cut < 0:
            return data
    return data[cut + 1:]


def _stored(res: dict[str, Any], tail: Optional[int]) -> None:
    """The copy of the log that the machine that ran it stored in the shared
    queue (from the daemon, or read directly when none runs here)."""
    data = res.get("data")
    if data is None:
        with connect(timeout_s=None) as c:
            data = "".join(ev["data"] for ev in c.stream("follow", id=res["id"], attempt=res["attempt"], live=False)
                           if ev.get("kind") == "log")
    raw = data.encode("utf-8", "surrogateescape")
    if tail is not None:
        raw = b"".join(raw.splitlines(keepends=True)[-tail:] if tail > 0 else [])
    sys.stdout.buffer.write(raw)
    sys.stdout.buffer.flush()


def _cat(path: str, jid: int, attempt: int) -> None:
    import os

    from sloth_daemon.safefile import open_file  # paths.open_log without pathlib: `sloth logs` is fast

    try:
        wrote = 0
        with os.fdopen(open_file(path), "rb") as f:  # never through a link, only a regular file
            while chunk := f.read(1 << 16):
                sys.stdout.buffer.write(chunk)
                wrote += len(chunk)
        sys.stdout.buffer.flush()
    except FileNotFoundError:  # the attempt has printed nothing (no output, no file)
        echo(f"sloth: job {jid} attempt {attempt} has printed nothing", err=True)
        return
    except BrokenPipeError:
        raise
    except OSError as e:
        raise errors.LogUnreadable(path, e) from None
    if not wrote:
        echo(f"sloth: job {jid} attempt {attempt} has printed nothing", err=True)


def _follow(args: dict[str, Any], *, through: bool) -> int:
    """Stream the log; attempt marks go to stderr. The exit code is the
    job's outcome once it is final (0 done, 5 otherwise)."""
    out = sys.stdout.buffer
    final, wrote = None, False
    with connect(timeout_s=None) as c:
        for ev in c.stream("follow", **args, all_attempts=through):
            kind = ev.get("kind")
            if kind == "log":
                out.write(ev["data"].encode("utf-8", "surrogateescape"))
                out.flush()
                wrote = wrote or bool(ev["data"])
            elif kind == "attempt":
                prev = f" (the last one {ev['previous']})" if ev.get("previous") else ""
                echo(f"sloth: --- attempt {ev['attempt']}{prev} ---", err=True)
            elif kind == "end":
                final = ev["result"]["job"]
    if final is not None and not wrote:  # as `sloth logs` says it: silence would look like a hang that ended
        echo(f"sloth: job {args['id']} has printed nothing" + (f" in attempt {args['attempt']}" if "attempt" in args
                                                               else ""), err=True)
    if final is None or final["state"] not in ("done", "failed", "cancelled"):
        return 0
    return 0 if final["state"] == "done" else errors.EXIT_JOB_FAILED

"""The keeper's contract, shared by the keeper (keeper/main.py) and the daemon's
client (keeper_client.py): the wire protocol, the journal's format, and the
trust rule (when a lapsed deadline fences a run and when it freezes it).

Wire: NDJSON over a Unix stream socket, every message with ``"v": 1``.
Request ``{"v", "id", "op", "args"}`` -> exactly one response ``{"v", "id",
"ok": true, "result"}`` or ``{"v", "id", "ok": false, "error": {"code",
"message", ...}}``. Events the keeper pushes on the daemon's connection:
``{"v", "event": {"kind", "key", ...}}``; a tap's log events also carry the
tap's ``id``. The ops are in ``OPS``; what each does is in keeper/server.py.
"""

from __future__ import annotations

import asyncio
import collections
import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sloth_daemon.clock import ClockReadings, SystemClocks
from sloth_daemon.safefile import open_file, read_file

log = logging.getLogger("sloth.keeper")

VERSION = 1
MAX_FRAME = 1 << 20  # per request line, in
SUSPEND_SLACK_S = 1.0  # boot minus awake clock growth that means "the machine slept"
JOURNAL_COMPACT_BYTES = 1 << 20
JOURNAL_READ_MAX = 64 << 20
CLOCKS = SystemClocks()

# op -> (required args, optional args)
OPS: dict[str, tuple[frozenset[str], frozenset[str]]] = {
    "hello": (frozenset({"role"}), frozenset({"pid", "name"})),
    "spawn": (frozenset({"key", "job_id", "attempt", "token", "argv", "log_path", "log_cap"}),
              frozenset({"env", "env_ref", "env_extra", "cwd", "timeout_s", "kill_grace_s", "trust_until",
                         "term_lead_s", "after", "keep_awake", "limits",
                         "watch", "result_path"})),  # feature "watch": keeper/watchdog.py, keeper/results.py
    "unspawn": (frozenset({"key"}), frozenset()),
    "trust": (frozenset({"items"}), frozenset()),
    "kill": (frozenset({"key"}), frozenset({"reason", "grace_s"})),
    "ack": (frozenset({"keys"}), frozenset()),
    "tap": (frozenset({"key"}), frozenset()),
    "bye": (frozenset(), frozenset()),
    # Feature "pause": stop (SIGSTOP) or continue (SIGCONT) runs' whole trees
    # on request; a paused run's timeout does not count; hello lists it
    # with "paused": true, so the next daemon learns it.
    "pause": (frozenset({"keys"}), frozenset()),
    "resume": (frozenset({"keys"}), frozenset()),
}
# only on the daemon's connection
DAEMON_OPS = frozenset({"spawn", "unspawn", "trust", "kill", "ack", "bye", "pause", "resume"})


class Refused(Exception):
    """A request we answer with an error; nothing was changed."""

    def __init__(self, code: str, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.wire = {"code": code, "message": message, **extra}


# ------------------------------------------------------------------ clocks
def clocks_now() -> ClockReadings:
    """Wall, awake and boot clocks read together; boot falls back to awake
    where there is no suspend-counting clock (then no sleep is ever seen)."""
    r = CLOCKS.read()
    return r if r.total is not None else ClockReadings(r.wall, r.awake, r.awake)


def boot_now() -> float:
    """The clock trust deadlines are on (counts suspend); same in every process."""
    return clocks_now().total  # type: ignore[return-value]


@dataclass(frozen=True)
class Trust:
    until: float  # boot clock
    boot_at: float  # boot and awake clocks when it was set
    awake_at: float


def trust_verdict(t: Trust, lead_s: float, now: ClockReadings) -> str:
    """What a run's trust deadline asks for now: "ok" before its SIGTERM
    point; "freeze" if the point was passed only because the machine slept
    (the awake time since the trust was set falls short of it: the daemon
    never had the chance to renew); else "term" (SIGTERM now, SIGKILL at
    ``until``) or "kill" (past ``until``). A stall of this process or of
    the daemon (SIGSTOP, swap storm) is no sleep: both clocks ran, it fences."""
    boot = now.total
    assert boot is not None
    if boot < t.until - lead_s:
        return "ok"
    awake_used = now.awake - t.awake_at
    slept = (boot - t.boot_at) - awake_used
    if slept > SUSPEND_SLACK_S and awake_used < (t.until - lead_s) - t.boot_at:
        return "freeze"
    return "kill" if boot >= t.until else "term"


def secs(s: float) -> str:
    return f"{s:.0f}s" if s >= 10 or s == int(s) else f"{s:.1f}s"


# --------------------------------------------------------------------- wire
def encode(msg: dict[str, Any]) -> bytes:
    try:
        return json.dumps(msg, separators=(",", ":"), ensure_ascii=False).encode() + b"\n"
    except UnicodeEncodeError:  # lone surrogates (log bytes that are not UTF-8): \u-escape them
        return json.dumps(msg, separators=(",", ":")).encode("ascii") + b"\n"


class Cork:
    """Frames queued in one pass of the event loop leave in one write: a
    burst's events, replies and spawns cost one syscall (and wake the other
    side once) instead of one each. Order is kept; ``close()`` closes
    after them; ``flush()`` before writing to the writer directly."""

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self.writer = writer
        self._frames: list[bytes] = []
        self._size = 0

    def put(self, frame: bytes) -> None:
        if not self._frames:
            asyncio.get_running_loop().call_soon(self.flush)
        self._frames.append(frame)
        self._size += len(frame)

    def flush(self) -> None:
        if self._frames:
            data = b"".join(self._frames)
            self._frames.clear()
            self._size = 0
            if not self.writer.is_closing():
                self.writer.write(data)

    def close(self) -> None:
        """Close the writer after what is queued (the transport sends its buffer first)."""
        self.flush()
        self.writer.close()

    def backlog(self) -> int:
        """Bytes not yet taken by the kernel: ours and the transport's."""
        return self._size + self.writer.transport.get_write_buffer_size()


def ok(req_id: Any, result: Any) -> dict[str, Any]:
    return {"v": VERSION, "id": req_id, "ok": True, "result": result}


def error(req_id: Any, e: Refused) -> dict[str, Any]:
    return {"v": VERSION, "id": req_id, "ok": False, "error": e.wire}


def parse(msg: Any) -> tuple[str, dict[str, Any]]:
    """Validate one decoded request: (op, args), or raise Refused."""
    if not isinstance(msg, dict):
        raise Refused("protocol", "frame must be a JSON object")
    rid = msg.get("id")
    if rid is not None and (isinstance(rid, bool) or not isinstance(rid, (int, str))):
        raise Refused("protocol", "id must be an integer or a string")
    if type(msg.get("v")) is not int or msg["v"] != VERSION:
        raise Refused("protocol", f"protocol version {msg.get('v')!r} is not supported (this keeper speaks v{VERSION})")
    op, args = msg.get("op"), msg.get("args", {})
    if not isinstance(op, str) or op not in OPS:
        raise Refused("protocol", f"unknown op {op!r}; known: {', '.join(sorted(OPS))}")
    if not isinstance(args, dict):
        raise Refused("protocol", "args must be a JSON object")
    required, optional = OPS[op]
    if missing := required - args.keys():
        raise Refused("bad_request", f"op {op!r} needs argument(s): {', '.join(sorted(missing))}")
    if unknown := args.keys() - required - optional:
        raise Refused("bad_request", f"op {op!r} does not take argument(s): {', '.join(sorted(unknown))}")
    return op, args


def text(a: dict[str, Any], name: str, *, nul_ok: bool = False) -> str:
    v = a.get(name)
    if not isinstance(v, str) or not v or (not nul_ok and "\0" in v):
        raise Refused("bad_request", f"{name} must be a non-empty string without NUL")
    return v


def number(a: dict[str, Any], name: str, default: float | None = None) -> float | None:
    v = a.get(name, default)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v < 1e12:  # also NaN, inf
        raise Refused("bad_request", f"{name} must be a number of seconds from 0 to 1e12")
    return float(v)


def whole(a: dict[str, Any], name: str, low: int = 0) -> int:
    v = a.get(name)
    if isinstance(v, bool) or not isinstance(v, int) or not low <= v < 2**63:
        raise Refused("bad_request", f"{name} must be a whole number >= {low}")
    return v


# What this keeper understands beyond protocol 1 (told in hello): env_ref,
# after (a spawn held until another run ends; unspawn; started events), and
# pause (the pause and resume ops; runs listed with paused, paused_at), and
# holds (spawn's keep_awake and limits, keeper/keep_awake.py, keeper/resource_limits.py; "note" events: what
# the history should say of a run while it runs, e.g. keep-awake unavailable),
# progress ("progress" events: {"key", "progress": {"fraction", "source",
# "eta_s", "at"}}, at most one a run a second; hello lists each run's latest
# as "progress"; an exited run's outcome carries its "cost": keeper/cost.py), and
# watch (spawn's watch: --stall and --fail-on, keeper/watchdog.py; result_path: what the run hands on, read
# into its outcome's "result", keeper/results.py).
FEATURES = ("env_ref", "after", "pause", "holds", "progress", "watch")
ENV_REFS_KEPT = 256  # environments remembered by ref; the daemon's client names at most half as many


class EnvCache:
    """Environments the daemon sent once under a ref (``env`` with
    ``env_ref``), so the next runs that share one send only the ref and
    their own few variables (``env_extra``): a job's environment is most of
    its spawn request, and a batch of jobs shares one. First in, first out,
    as the daemon's client names them; a ref not (or no longer) known is
    refused with ``unknown_env``, and the client sends the whole again."""

    def __init__(self) -> None:
        self.by_ref: collections.OrderedDict[str, dict[str, str]] = collections.OrderedDict()

    def resolve(self, a: dict[str, Any]) -> dict[str, str]:
        ref, env, extra = a.get("env_ref"), a.get("env"), a.get("env_extra") or {}
        if ref is not None and not isinstance(ref, str):
            raise Refused("bad_request", "env_ref must be a string")
        if env is not None:
            _check_env(env, "env")
            if ref is not None:
                self.by_ref[ref] = env
                self.by_ref.move_to_end(ref)
                while len(self.by_ref) > ENV_REFS_KEPT:
                    self.by_ref.popitem(last=False)
        elif ref is None:
            raise Refused("bad_request", "spawn needs env (or env_ref naming one sent before)")
        elif (env := self.by_ref.get(ref)) is None:
            raise Refused("unknown_env", f"no environment is known as {ref!r}; send it whole", retry=True)
        _check_env(extra, "env_extra")
        return {**env, **extra} if extra else env


def _check_env(env: Any, name: str) -> None:
    if not isinstance(env, dict) or not all(
            isinstance(k, str) and isinstance(v, str) and k and "=" not in k and "\0" not in k + v
            for k, v in env.items()):
        raise Refused("bad_request", f"{name} must map names (no '=', no NUL) to strings without NUL")


def spawn_command(a: dict[str, Any], envs: EnvCache) -> tuple[list[str], dict[str, str], str | None, str]:
    """(argv, env, cwd, log_path), checked. Paths stay strings: a pathlib
    Path made per spawn was a few percent of the keeper's time a job."""
    argv, cwd = a["argv"], a.get("cwd")
    if not isinstance(argv, list) or not argv or not all(isinstance(x, str) and "\0" not in x for x in argv):
        raise Refused("bad_request", "argv must be a non-empty list of strings without NUL")
    env = envs.resolve(a)
    if cwd is not None:
        cwd = text(a, "cwd")
    log_path = text(a, "log_path")
    if not os.path.isabs(log_path):
        raise Refused("bad_request", "log_path must be absolute")
    return argv, env, cwd, log_path


# ------------------------------------------------------------------ journal
class Journal:
    """Unacknowledged outcomes as JSON lines: one write each, no fsync (it
    must outlive processes, not power: a power cut kills the jobs too). An
    ack line follows; once nothing is unacknowledged the file is truncated.
    Never raises: an outcome it cannot write is held in memory only."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.torn = False  # a write failed mid-line: start the next on a line of its own
        self.failed = False  # an append failed since the caller last cleared it: something waits to be written
        self.fd = self._open()

    def _open(self) -> int | None:
        try:
            return open_file(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)  # never waits on a FIFO there
        except OSError as e:
            log.error("cannot open the journal %s: %s; outcomes are held in memory only", self.path, e.strerror or e)
            return None

    def append(self, rec: dict[str, Any]) -> bool:
        data = (b"\n" if self.torn else b"") + json.dumps({"v": VERSION, **rec}).encode() + b"\n"
        view = memoryview(data)
        try:
            while view and self.fd is not None:
                view = view[os.write(self.fd, view):]
        except OSError as e:
            log.error("cannot write the journal %s: %s", self.path, e.strerror or e)
        self.torn = bool(view)
        self.failed = self.failed or bool(view)
        return not view

    def reset(self, keep: list[dict[str, Any]]) -> None:
        """Truncate when nothing is kept; rewrite a large file with ``keep`` only."""
        try:
            if not keep and self.fd is not None:
                os.ftruncate(self.fd, 0)
                self.torn = False
            elif self.fd is not None and os.fstat(self.fd).st_size > JOURNAL_COMPACT_BYTES:
                tmp = self.path.with_name(self.path.name + ".new")
                tmp.unlink(missing_ok=True)
                with os.fdopen(open_file(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL), "wb") as f:
                    f.write(b"".join(json.dumps({"v": VERSION, "run": w}).encode() + b"\n" for w in keep))
                os.replace(tmp, self.path)
                os.close(self.fd)
                self.fd, self.torn = self._open(), False
        except OSError as e:
            log.error("cannot truncate or compact the journal %s: %s", self.path, e.strerror or e)


def read_journal(path: Path | str) -> list[dict[str, Any]]:
    """The outcomes a keeper journalled that were not acknowledged, oldest
    first, as ``hello`` lists runs. Torn or foreign lines are skipped (the
    writer may die mid-line). Raises OSError if the file exists but cannot
    be read; a missing file holds nothing."""
    try:
        data = read_file(path, JOURNAL_READ_MAX, head=True)  # a FIFO there is refused, not waited on
    except FileNotFoundError:
        return []
    held: dict[str, dict[str, Any]] = {}
    for line in data.split(b"\n"):
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if not isinstance(rec, dict) or rec.get("v") != VERSION:
            continue
        run, acked = rec.get("run"), rec.get("ack")
        if isinstance(run, dict) and isinstance(run.get("key"), str) and isinstance(run.get("outcome"), dict):
            held[run["key"]] = run
        elif isinstance(acked, list):
            for k in acked:
                if isinstance(k, str):
                    held.pop(k, None)
    return list(held.values())

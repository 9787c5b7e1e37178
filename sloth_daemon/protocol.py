"""The wire contract between the daemon and its clients.

Newline-delimited JSON over a Unix stream socket, one object per line. A
request line is at most ``MAX_FRAME`` bytes (the daemon reads untrusted input);
a line from the daemon at most ``MAX_RESPONSE`` (a listing of 100,000 jobs, or
a 256 KiB log chunk of binary output escaped to 6 bytes a byte, outgrows 1 MiB).
Every message carries ``v`` (the protocol version).

Versions: v2 is v1 plus the ops that add a batch of any size all or none
(``stage``, ``commit``, ``batch``); v3 adds ``scan``, the listing of
``list`` streamed (any number of jobs, a chunk per event). A request names the lowest version that
has its op, and the daemon answers in the version it was asked in, so a
client and a daemon of different releases still talk for everything both
know; only a newer op sent to an older daemon is refused ("version 2 is not
supported"), with the hint to restart the daemon.

A batch: ``stage`` holds jobs on this connection (validated, not queued);
``commit`` adds its own jobs to the staged ones and queues them all in one
transaction, recorded under the client's ``batch`` token; ``batch`` says
whether a token's batch was queued, and as which ids. The staged jobs live
only as long as the connection: a client or a daemon that dies before the
commit leaves nothing queued, and a client that lost the commit's answer
asks ``batch`` (on a new connection, to a new daemon if need be).

Request:   {"v": 1, "id": 7, "op": "add", "args": {...}}
Response:  {"v": 1, "id": 7, "ok": true, "result": {...}}
       or  {"v": 1, "id": 7, "ok": false, "error": {"code", "message", "hint"}}
Stream:    streaming ops ("wait", "follow", "subscribe", "scan") first send any number
           of {"v": 1, "id": 7, "event": {...}} lines, then exactly one response.

Every request gets exactly one response. A frame that cannot be parsed gets
an error response with ``id: null``; an over-size frame gets one and the
connection is closed (we cannot find where the next frame starts).
"""

from __future__ import annotations

from sloth_daemon import jsonlite
from sloth_daemon.errors import ProtocolError, SlothError

TYPE_CHECKING = False
if TYPE_CHECKING:  # not at run time: every `sloth add` imports this module
    from typing import Any

VERSION = 3  # the newest this code speaks
SUPPORTED_VERSIONS = (1, 2, 3)
MAX_FRAME = 1 << 20  # 1 MiB per request line
MAX_RESPONSE = 64 << 20  # per line from the daemon

# op -> (required args, optional args). Types are checked by the handlers;
# this table is the documentation of record and rejects unknown names early.
OPS: dict[str, tuple[frozenset[str], frozenset[str]]] = {
    "ping": (frozenset(), frozenset()),
    "status": (frozenset(), frozenset()),
    "add": (frozenset({"jobs"}), frozenset({"common"})),
    "list": (frozenset(), frozenset({"states", "lane", "limit", "offset", "finished_limit", "host"})),
    # "list" of any size (no "limit": all), streamed: events "head" then "jobs" (a chunk each)
    "scan": (frozenset(), frozenset({"states", "lane", "limit", "offset", "finished_limit", "host"})),
    # One job by "id" (the result has "job"), several by "ids" or a selection
    # ("lane", "states"): the result has "jobs" (and "skipped": [{id, why}]).
    "show": (frozenset(), frozenset({"id", "ids"})),
    "cancel": (frozenset(), frozenset({"id", "ids", "lane", "states"})),
    "retry": (frozenset(), frozenset({"id", "ids", "lane", "states"})),
    "restart": (frozenset({"ids"}), frozenset()),
    "kill": (frozenset({"ids"}), frozenset({"now"})),
    "pause": (frozenset(), frozenset({"lane"})),
    "resume": (frozenset(), frozenset({"lane"})),
    "lanes": (frozenset(), frozenset()),
    "lane_set": (frozenset({"lane", "concurrency"}), frozenset({"create"})),
    "lane_rm": (frozenset({"lane"}), frozenset()),
    "prune": (frozenset(), frozenset({"older_than_s", "states", "lane", "dry_run"})),
    "logs": (frozenset({"id"}), frozenset({"attempt"})),
    "wait": (frozenset({"ids"}), frozenset()),
    "follow": (frozenset({"id"}), frozenset({"attempt", "all_attempts", "live"})),
    "subscribe": (frozenset(), frozenset({"ids"})),
    "config": (frozenset(), frozenset()),
    "reload": (frozenset(), frozenset()),
    "shutdown": (frozenset(), frozenset({"keep_jobs"})),
    "stage": (frozenset({"jobs"}), frozenset({"common"})),
    "commit": (frozenset({"batch"}), frozenset({"jobs", "common"})),
    "batch": (frozenset({"batch"}), frozenset()),
}
# The first version that has each op (all others: 1).
OP_SINCE: dict[str, int] = {"stage": 2, "commit": 2, "batch": 2, "scan": 3}


class Request:
    """One parsed request; ``v`` is the version it was asked in (the answer
    uses the same). A plain class, not a dataclass: clients import this
    module, and dataclasses (with inspect) would double what it costs."""

    __slots__ = ("id", "op", "args", "v")

    def __init__(self, id: Any, op: str, args: dict[str, Any], v: int = VERSION) -> None:
        self.id, self.op, self.args, self.v = id, op, args, v

    def __repr__(self) -> str:
        return f"Request(id={self.id!r}, op={self.op!r}, args={self.args!r}, v={self.v})"


def encode(msg: dict[str, Any], limit: int = MAX_FRAME) -> bytes:
    try:
        data = jsonlite.dumps(msg, ensure_ascii=False, compact=True).encode("utf-8") + b"\n"
    except UnicodeEncodeError:  # lone surrogates (log bytes that are not UTF-8): \u-escape them
        data = jsonlite.dumps(msg, compact=True).encode("ascii") + b"\n"
    if len(data) > limit:
        raise ProtocolError(
            f"message of {len(data)} bytes is over the {limit}-byte frame limit",
            hint="Send fewer jobs per request (the CLI splits --stdin batches itself).",
        )
    return data


def request(req_id: Any, op: str, **args: Any) -> dict[str, Any]:
    """A request in the oldest version that has ``op``, so older daemons understand it."""
    return {"v": OP_SINCE.get(op, 1), "id": req_id, "op": op, "args": args}


# Answers: ``v`` is the request's version; an answer to a frame that could
# not be parsed uses v1, which every client reads.
def ok(req_id: Any, result: Any, v: int = VERSION) -> dict[str, Any]:
    return {"v": v, "id": req_id, "ok": True, "result": result}


def error(req_id: Any, err: SlothError, v: int = 1) -> dict[str, Any]:
    return {"v": v, "id": req_id, "ok": False, "error": err.to_dict()}


def event(req_id: Any, ev: dict[str, Any], v: int = VERSION) -> dict[str, Any]:
    return {"v": v, "id": req_id, "event": ev}


def parse_request(line: bytes) -> Request:
    """Decode and validate one request frame (without its newline).

    Raises ProtocolError with a message fit to send back.
    """
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ProtocolError(f"frame is not valid UTF-8 (byte {e.start})") from None
    try:
        msg = jsonlite.loads(text)
    except (ValueError, RecursionError) as e:
        raise ProtocolError(f"frame is not valid JSON: {str(e)[:120]}") from None
    if not isinstance(msg, dict):
        raise ProtocolError("frame must be a JSON object")
    req_id = msg.get("id")
    if req_id is not None and (isinstance(req_id, bool) or not isinstance(req_id, (int, str))):
        raise ProtocolError("id must be an integer or a string")
    v = msg.get("v")
    if type(v) is not int or v not in SUPPORTED_VERSIONS:  # not True, not 1.0
        raise ProtocolError(
            f"protocol version {v!r} is not supported (this daemon speaks v1 to v{VERSION})",
            hint="Use a client of the same sloth version as the daemon (`sloth daemon status`), "
                 "or restart the daemon after an upgrade: `sloth daemon stop && sloth daemon start`.",
        )
    op = msg.get("op")
    if not isinstance(op, str) or op not in OPS or OP_SINCE.get(op, 1) > v:
        raise ProtocolError(
            f"unknown op {op!r}", hint=f"Known ops: {', '.join(sorted(OPS))}."
        )
    args = msg.get("args", {})
    if not isinstance(args, dict):
        raise ProtocolError("args must be a JSON object")
    required, optional = OPS[op]
    missing = required - args.keys()
    if missing:
        raise ProtocolError(f"op {op!r} needs argument(s): {', '.join(sorted(missing))}")
    unknown = args.keys() - required - optional
    if unknown:
        raise ProtocolError(f"op {op!r} does not take argument(s): {', '.join(sorted(unknown))}")
    return Request(req_id, op, args, v)


def decode_response(line: bytes) -> dict[str, Any]:
    """Decode one line from the daemon (used by the client)."""
    try:
        msg = jsonlite.loads(line.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise ProtocolError(f"daemon sent an unreadable frame: {e}") from None
    if not isinstance(msg, dict) or msg.get("v") not in SUPPORTED_VERSIONS:
        raise ProtocolError(
            "daemon speaks another protocol version",
            hint="Restart the daemon after upgrading: `sloth daemon stop && sloth daemon start`.",
        )
    return msg

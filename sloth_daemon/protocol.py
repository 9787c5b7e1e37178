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
           (a job field's error also has "field" and "problem": the CLI names the option)
Stream:    streaming ops ("wait", "follow", "subscribe", "scan") first send any number
           of {"v": 1, "id": 7, "event": {...}} lines, then exactly one response.

Every request gets exactly one response. A frame that cannot be parsed gets
an error response with ``id: null``; an over-size frame gets one and the
connection is closed (we cannot find where the next frame starts).

The JSON of every frame is exactly what the json module writes and reads,
without importing the json package (dumps, loads, dumps_pretty,
pretty_stream):

json's Python layer compiles regular expressions when it is imported (for
whitespace and numbers), so importing it imports re: together over half
of what `python -c pass` costs, paid by every `sloth add`. The work itself
is done by its C accelerator, _json, which imports nothing; this calls it
the way json.dumps and json.loads do. Where _json is missing (another
Python), or a text does not parse, json itself is used, so the output and
every error are json's own (tests/unit/cli/test_fast_cli.py compares them).
"""

from __future__ import annotations

from sloth_daemon.errors import ProtocolError, SlothError

TYPE_CHECKING = False
if TYPE_CHECKING:  # not at run time: every `sloth add` imports this module
    from typing import Any

VERSION = 6  # the newest this code speaks
SUPPORTED_VERSIONS = (1, 2, 3, 4, 5, 6)
MAX_FRAME = 1 << 20  # 1 MiB per request line
MAX_RESPONSE = 64 << 20  # per line from the daemon

# op -> (required args, optional args). Types are checked by the handlers;
# this table is the documentation of record and rejects unknown names early.
OPS: dict[str, tuple[frozenset[str], frozenset[str]]] = {
    "ping": (frozenset(), frozenset()),
    "status": (frozenset(), frozenset()),
    "add": (frozenset({"jobs"}), frozenset({"common"})),
    "list": (frozenset(), frozenset({"states", "lane", "limit", "offset", "finished_limit", "host", "batch"})),
    # "list" of any size (no "limit": all), streamed: events "head" then "jobs" (a chunk each);
    # list's result and scan's head carry "paused": {"all": bool, "lanes": [...]} (newer daemons)
    "scan": (frozenset(), frozenset({"states", "lane", "limit", "offset", "finished_limit", "host", "batch"})),
    # One job by "id" (the result has "job"), several by "ids" or a selection
    # ("lane", "states"): the result has "jobs" (and "skipped": [{id, why}]).
    "show": (frozenset(), frozenset({"id", "ids"})),
    "cancel": (frozenset(), frozenset({"id", "ids", "lane", "states"})),
    "retry": (frozenset(), frozenset({"id", "ids", "lane", "states"})),
    "restart": (frozenset({"ids"}), frozenset()),
    "kill": (frozenset({"ids"}), frozenset({"now"})),
    "pause": (frozenset(), frozenset({"lane"})),
    "resume": (frozenset(), frozenset({"lane"})),
    # Running jobs' trees stopped (SIGSTOP) or continued: by "ids", every
    # running one of "lane", or (neither) every running one.
    "pause_jobs": (frozenset(), frozenset({"ids", "lane"})),
    "resume_jobs": (frozenset(), frozenset({"ids", "lane"})),
    "lanes": (frozenset(), frozenset()),
    "lane_set": (frozenset({"lane", "concurrency"}), frozenset({"create"})),
    "lane_rm": (frozenset({"lane"}), frozenset()),
    "prune": (frozenset(), frozenset({"older_than_s", "states", "lane", "dry_run"})),
    "logs": (frozenset({"id"}), frozenset({"attempt"})),
    # what an attempt handed on ($SLOTH_RESULT; docs/watchdogs.md): {id, attempt, attempts, found, result}
    "result": (frozenset({"id"}), frozenset({"attempt"})),
    # "batched": one "states" event of many jobs at a time (else a "state" event per job);
    # "fields": only these of each job (and always id, state), in the events and the response
    "wait": (frozenset({"ids"}), frozenset({"batched", "fields"})),
    # the newest job this machine queued: {"id": N or null}; "ran": the newest of those that has run
    "latest": (frozenset(), frozenset({"ran"})),
    "follow": (frozenset({"id"}), frozenset({"attempt", "all_attempts", "live"})),
    "subscribe": (frozenset(), frozenset({"ids"})),
    "config": (frozenset(), frozenset()),
    "reload": (frozenset(), frozenset()),
    "shutdown": (frozenset(), frozenset({"keep_jobs"})),
    "stage": (frozenset({"jobs"}), frozenset({"common"})),
    # "handle": {"name": str or null}: the jobs form a batch with a handle (issue 33)
    "commit": (frozenset({"batch"}), frozenset({"jobs", "common", "handle"})),
    "batch": (frozenset({"batch"}), frozenset()),
    # A batch with a handle by id or name (the newest of it): {"batch": {id, name, at, total,
    # counts, same_name?}, "ids": [its jobs' ids, in "states" only if given]} (issue 33)
    "batch_show": (frozenset({"batch"}), frozenset({"states"})),
    # The queue edits (issue 22; daemon/edit_ops.py): "edit" answers {job,
    # changes, changed}; the others {jobs, skipped}. New in the next version.
    "edit": (frozenset({"id", "changes"}), frozenset({"expect"})),
    "bump": (frozenset({"ids"}), frozenset()),
    "hold": (frozenset(), frozenset({"ids", "lane"})),
    "release": (frozenset(), frozenset({"ids", "lane"})),
    # Schedules (issue 23): "recipe" holds every_s | cron, tz, missed,
    # overlap, jitter_s and job (the add op's job object); edit's only what changes.
    "schedule_add": (frozenset({"name", "recipe"}), frozenset()),
    "schedule_edit": (frozenset({"name", "recipe"}), frozenset()),
    "schedule_ls": (frozenset(), frozenset()),
    "schedule_show": (frozenset({"name"}), frozenset({"limit"})),
    "schedule_pause": (frozenset({"name"}), frozenset()),
    "schedule_resume": (frozenset({"name"}), frozenset()),
    "schedule_rm": (frozenset({"name"}), frozenset()),
    "schedule_run": (frozenset({"name"}), frozenset()),
    # The metrics as text (issue 32): {"text": ...}; "format": "openmetrics" (default) or "prometheus".
    "metrics": (frozenset(), frozenset({"format"})),
    # The timeline of the last "since_s" seconds (issue 31; backends/timeline.py): jobs with their
    # runs and waits, the machine's sleeps and the daemon's time up, the downtime between.
    "timeline": (frozenset(), frozenset({"since_s", "lane"})),
    # The outbox (issue 32, daemon/telling/ops.py): "outbox" answers {messages, counts};
    # retry and drop (by message id) {changed, skipped}.
    "outbox": (frozenset(), frozenset({"states", "limit"})),
    "outbox_retry": (frozenset({"ids"}), frozenset()),
    "outbox_drop": (frozenset({"ids"}), frozenset()),
}
# The first version that has each op (all others: 1).
OP_SINCE: dict[str, int] = {"stage": 2, "commit": 2, "batch": 2, "scan": 3}
# Round 3 (v4): running jobs paused, the latest job, the queue edits, schedules.
OP_SINCE.update(dict.fromkeys(("pause_jobs", "resume_jobs", "latest", "edit", "bump", "hold", "release",
                               "schedule_add", "schedule_edit", "schedule_ls", "schedule_show", "schedule_pause",
                               "schedule_resume", "schedule_rm", "schedule_run"), 4))
# Round 4 (v5): "latest" means this machine's and takes "ran" (a daemon of v4 would answer another
# machine's job, or refuse "ran" as an unknown argument: it is told to restart instead).
OP_SINCE["latest"] = 5
# Round 4's features (v6): a daemon of v5 does not know these ops; asked with v6 it refuses the version,
# and the client says to restart it (an old daemon still running after an upgrade) instead of "unknown op".
OP_SINCE.update(dict.fromkeys(("timeline", "outbox", "outbox_retry", "outbox_drop", "metrics", "batch_show", "result"),
                              6))
# Round 4's fields in ops older than it (v6): a daemon of v5 refuses each in words of its own ("unknown
# job field(s): ping", "op 'commit' does not take argument(s): handle") that never say it is too old; a
# request that carries one is asked in v6 (args_since), so that daemon refuses the version and the client
# says to restart it. A request without them keeps its op's version: older daemons still take it.
ARG_SINCE: dict[tuple[str, str], int] = {("list", "batch"): 6, ("scan", "batch"): 6, ("commit", "handle"): 6}
JOB_FIELD_SINCE: dict[str, int] = dict.fromkeys(
    ("ping", "webhook", "webhook_on", "mail_to", "mail_on", "member", "on_dup", "rules"), 6)
RECIPE_FIELD_SINCE: dict[str, int] = {"expect_within_s": 6}
_JOB_OPS = frozenset({"add", "stage", "commit"})
_RECIPE_OPS = frozenset({"schedule_add", "schedule_edit"})


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
        data = dumps(msg, ensure_ascii=False, compact=True).encode("utf-8") + b"\n"
    except UnicodeEncodeError:  # lone surrogates (log bytes that are not UTF-8): \u-escape them
        data = dumps(msg, compact=True).encode("ascii") + b"\n"
    if len(data) > limit:
        raise ProtocolError(
            f"message of {len(data)} bytes is over the {limit}-byte frame limit",
            hint="Send fewer jobs per request (the CLI splits --stdin batches itself).",
        )
    return data


def request(req_id: Any, op: str, **args: Any) -> dict[str, Any]:
    """A request in the oldest version that has ``op`` and what ``args``
    carry (args_since), so older daemons understand it."""
    return {"v": max(OP_SINCE.get(op, 1), args_since(op, args)), "id": req_id, "op": op, "args": args}


def args_since(op: str, args: dict[str, Any]) -> int:
    """The first version whose daemon knows every argument of ``op`` in
    ``args``, the fields of the jobs (and a schedule's job) among them: a
    GPU need by share or by memory (gpu=0.5, gpu-mem) is v6's too. One
    look at each job's keys: an add of 10,000 jobs pays well under a millisecond."""
    v = max((ARG_SINCE.get((op, name), 1) for name in args), default=1)
    if op in _RECIPE_OPS and isinstance(recipe := args.get("recipe"), dict):
        v = max(v, _fields_since(recipe, RECIPE_FIELD_SINCE), _job_since(recipe.get("job")))
    elif op in _JOB_OPS:
        v = max(v, _job_since(args.get("common")), *map(_job_since, _items(args.get("jobs"))))
    elif op == "edit":  # `sloth edit --needs gpu=0.5`
        v = max(v, _job_since(args.get("changes")))
    return v


def _items(v: Any) -> list[Any]:
    return v if isinstance(v, list) else []


def _fields_since(d: dict[str, Any], since: dict[str, int]) -> int:
    return max((since[k] for k in d.keys() & since.keys()), default=1)


def _job_since(job: Any) -> int:
    if not isinstance(job, dict):
        return 1
    v = _fields_since(job, JOB_FIELD_SINCE) if not JOB_FIELD_SINCE.keys().isdisjoint(job) else 1
    needs = job.get("needs")
    if isinstance(needs, dict) and ("gpu-mem" in needs or any(type(n) is float for n in needs.values())):
        v = max(v, 6)
    return v


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
        msg = loads(text)
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
        msg = loads(line.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise ProtocolError(f"daemon sent an unreadable frame: {e}") from None
    if not isinstance(msg, dict) or msg.get("v") not in SUPPORTED_VERSIONS:
        raise ProtocolError(
            "daemon speaks another protocol version",
            hint="Restart the daemon after upgrading: `sloth daemon stop && sloth daemon start`.",
        )
    return msg


TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable, Iterable, Iterator

try:
    import _json
except ImportError:  # pragma: no cover - CPython has it
    _json = None  # type: ignore[assignment]

if _json is not None:
    encode_basestring, encode_basestring_ascii = _json.encode_basestring, _json.encode_basestring_ascii
else:  # pragma: no cover
    from json.encoder import encode_basestring, encode_basestring_ascii

_WS = " \t\n\r"  # what json skips around a value


def dumps(obj: Any, *, ensure_ascii: bool = True, compact: bool = False) -> str:
    """``json.dumps(obj, ensure_ascii=ensure_ascii)``, with
    ``separators=(",", ":")`` if ``compact``: the same text."""
    quote = encode_basestring_ascii if ensure_ascii else encode_basestring
    if isinstance(obj, str):
        return quote(obj)
    if _json is None:  # pragma: no cover
        import json

        return json.dumps(obj, ensure_ascii=ensure_ascii, separators=(",", ":") if compact else None)
    # A new encoder each time, as json's: its circular-reference marks start empty.
    encode = _json.make_encoder({}, _default, quote, None, ":" if compact else ": ", "," if compact else ", ",
                          False, False, True)
    return "".join(encode(obj, 0))


def dumps_pretty(obj: Any) -> str:
    """``json.dumps(obj, indent=2, sort_keys=True)``, the same text, for
    data read from JSON (no check for circular references): what every
    ``--json`` prints. json writes an indented text in Python, not C."""
    out: list[str] = []
    _pretty(obj, "\n", out)
    return "".join(out)


def pretty_stream(before: dict[str, Any], key: str, items: Iterable[Any],
                  after: Callable[[], dict[str, Any]]) -> Iterator[str]:
    """The text of ``dumps_pretty({**before, key: [*items], **after()})`` in
    pieces, one per item, for a list too long to hold (`sloth ls --json` of
    a million jobs): ``items`` is read as the pieces are taken, ``after`` is
    called once it is exhausted (what is known only at the end). Every key of
    ``before`` must sort before ``key``, every key of ``after()`` after it."""
    if any(k >= key for k in before):
        raise ValueError(f"keys of before must sort before {key!r}")
    yield _fields("{", before, ",") + "\n  " + _key(key) + ": ["
    n = 0
    for item in items:
        out = ["\n    " if n == 0 else ",\n    "]
        _pretty(item, "\n    ", out)
        n += 1
        yield "".join(out)
    rest = after()
    if any(k <= key for k in rest):
        raise ValueError(f"keys of after() must sort after {key!r}")
    yield _fields("\n  ]" if n else "]", rest, "", lead=",") + "\n}"


def _fields(start: str, d: dict[str, Any], end: str, *, lead: str = "") -> str:
    """``start``, then each ``"key": value`` of ``d`` at the first level of
    indent (each preceded by ``lead``, followed by ``end``)."""
    out = [start]
    for k, v in sorted(d.items()):
        out.append(lead + "\n  " + _key(k) + ": ")
        _pretty(v, "\n  ", out)
        out.append(end)
    return "".join(out)


def _pretty(o: Any, newline: str, out: list[str]) -> None:
    """Append ``o`` to ``out``; ``newline`` is a newline and the indent of
    ``o``'s own level. The tests of type are json's, in json's order."""
    plain = _PLAIN.get(type(o))
    if plain is not None:  # exactly a str, int, float, bool or None: what _scalar would write
        out.append(plain(o))
    elif type(o) is dict and o:
        _pretty_dict(o, newline, out)
    elif isinstance(o, (list, tuple)):
        _pretty_items(o, "[]", newline, out, None)
    elif isinstance(o, dict):
        _pretty_items(sorted(o.items()), "{}", newline, out, o)
    else:
        out.append(_scalar(o))


def _pretty_dict(o: dict[Any, Any], newline: str, out: list[str]) -> None:
    """A dict as _pretty_items writes it, faster for the many dicts of one
    set of keys (a listing's jobs): the keys' order and text are worked out
    once per set of keys and indent, not per dict."""
    plan = _PLANS.get((tuple(o), newline))
    if plan is None:
        plan = _plan(o, newline)
        if plan is None:  # keys that are not all text: sorted as json sorts them
            _pretty_items(sorted(o.items()), "{}", newline, out, o)
            return
    inner = newline + "  "
    for k, lead in plan:
        out.append(lead)
        v = o[k]
        plain = _PLAIN.get(type(v))
        if plain is not None:
            out.append(plain(v))
        else:
            _pretty(v, inner, out)
    out.append(newline + "}")


def _plan(o: dict[Any, Any], newline: str) -> list[tuple[str, str]] | None:
    if not all(type(k) is str for k in o):
        return None
    inner = newline + "  "
    plan = [(k, ("{" if i == 0 else ",") + inner + encode_basestring_ascii(k) + ": ") for i, k in enumerate(sorted(o))]
    if len(_PLANS) >= 64:
        _PLANS.clear()
    _PLANS[(tuple(o), newline)] = plan
    return plan


def _pretty_items(items: Any, brackets: str, newline: str, out: list[str], dct: Any) -> None:
    if not items:
        out.append(brackets)
        return
    inner = newline + "  "
    out.append(brackets[0])
    for i, item in enumerate(items):
        out.append(inner if i == 0 else "," + inner)
        if dct is not None:
            out.append(_key(item[0]) + ": ")
            item = item[1]
        _pretty(item, inner, out)
    out.append(newline + brackets[1])


def _scalar(o: Any) -> str:
    if isinstance(o, str):
        return encode_basestring_ascii(o)
    if o is None:
        return "null"
    if o is True or o is False:
        return "true" if o else "false"
    if isinstance(o, int):
        return int.__repr__(o)
    if isinstance(o, float):
        return _float(o)
    return _default(o)


_PLANS: dict[tuple[Any, str], list[tuple[str, str]]] = {}
_PLAIN: dict[type, Callable[[Any], str]] = {
    str: encode_basestring_ascii, int: int.__repr__, bool: lambda b: "true" if b else "false",
    type(None): lambda _: "null",
}


def _float(f: float) -> str:
    if f != f:
        return "NaN"
    if f in (float("inf"), float("-inf")):
        return "Infinity" if f > 0 else "-Infinity"
    return float.__repr__(f)


_PLAIN[float] = _float


def _key(k: Any) -> str:
    if isinstance(k, str):
        return encode_basestring_ascii(k)
    if isinstance(k, (bool, int, float)) or k is None:
        return encode_basestring_ascii(_scalar(k))
    raise TypeError(f"keys must be str, int, float, bool or None, not {k.__class__.__name__}")


def _default(o: Any) -> Any:
    raise TypeError(f"Object of type {o.__class__.__name__} is not JSON serializable")


def loads(text: str) -> Any:
    """``json.loads(text)`` for a str: the same value, or json's own error."""
    if _scan is not None:
        start = len(text) - len(text.lstrip(_WS))
        try:
            obj, end = _scan(text, start)
        except Exception:  # noqa: BLE001 - StopIteration, or a bad text: json says which, in its words
            pass
        else:
            if not text[end:].strip(_WS):
                return obj
    import json

    return json.loads(text)


class _Context:
    """What json's C scanner reads from a JSONDecoder, as json.loads's has it."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    array_hook = None  # read from Python 3.15 on
    parse_float = float
    parse_int = int
    memo: dict[str, str] = {}

    @staticmethod
    def parse_constant(name: str) -> float:
        return {"-Infinity": float("-inf"), "Infinity": float("inf"), "NaN": float("nan")}[name]


def _scanner() -> Callable[[str, int], tuple[Any, int]] | None:
    try:
        return _json.make_scanner(_Context())  # type: ignore[arg-type]  # it reads the attributes above
    except Exception:  # noqa: BLE001 - no _json, or one that wants more: json does the reading
        return None


_scan = _scanner()

"""JSON exactly as the json module writes and reads it, without importing
the json package.

json's Python layer compiles regular expressions when it is imported (for
whitespace and numbers), so importing it imports re: together over half
of what `python -c pass` costs, paid by every `sloth add`. The work itself
is done by its C accelerator, _json, which imports nothing; this calls it
the way json.dumps and json.loads do. Where _json is missing (another
Python), or a text does not parse, json itself is used, so the output and
every error are json's own (tests/unit/test_jsonlite.py compares them).
"""

from __future__ import annotations

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

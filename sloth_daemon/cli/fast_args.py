"""Reading a command line the way click does, for the options of the
commands the fast path knows (fast.py, fast_complete.py): a plain subset of
click's parser that gives up (None) where click would refuse the line or
read it in any but the plain way.
"""

from __future__ import annotations

from sloth_daemon.cli.commands import FLAG, INT, LIST, PATH

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Iterable, Optional

    from sloth_daemon.cli.commands import Option

    Parsed = tuple[dict[str, Any], list[str]]


def options(opts: Iterable[Option]) -> dict[str, tuple[str, str]]:
    """{"--lane": ("lane", VALUE), "-l": ("lane", VALUE), ...}: the options
    of a declared command (commands.py) that the fast path may take."""
    return {name: (o.dest, o.kind) for o in opts if o.fast for name in o.names}


def parse(args: list[str], options: dict[str, tuple[str, str]], *, interspersed: bool = True) -> Optional[Parsed]:
    """(options given, positional words) as click reads ``args``; None for
    anything click would refuse or read otherwise than plainly."""
    given: dict[str, Any] = {}
    words: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        i += 1
        if arg == "--":
            return given, words + args[i:]
        if arg[:1] != "-" or arg == "-":
            if not interspersed:
                return given, words + args[i - 1:]
            words.append(arg)
            continue
        name, eq, value = arg.partition("=") if arg.startswith("--") else (arg, "", "")
        spec = options.get(name)
        if spec is None or (spec[1] == FLAG and eq):
            return None  # unknown, -h/--help, -sw, -ldefault, --flag=x: Typer says what it makes of it
        if spec[1] != FLAG and not eq:
            if i == len(args):
                return None  # the value is missing
            value, i = args[i], i + 1
        if not _take(given, spec, value):
            return None
    return given, words


def _take(given: dict[str, Any], spec: tuple[str, str], value: str) -> bool:
    dest, kind = spec
    if kind == FLAG:
        given[dest] = True
    elif kind == LIST:
        given.setdefault(dest, []).append(value)
    elif kind == INT:
        try:
            given[dest] = int(value)
        except ValueError:
            return False
    elif kind == PATH:  # Typer hands it over as a Path: the same text in messages
        from pathlib import Path

        given[dest] = Path(value)
    else:
        given[dest] = value
    return True

"""Arrays and sweeps of `sloth add` (issue 33): one job per value of
``--each 'a b c'``, ``--each-file F`` (a value a line), ``--range 1-100``
(``1-100:5``: every fifth) or ``--grid 'lr=0.1,0.01 bs=32,64'`` (every
combination), each made from the command as a template, as GNU parallel
makes its commands:

  ``{}``      the value (a grid's: its values, blank-separated, in the order given)
  ``{name}``  a grid's value of ``name``
  ``{#}``     the member's index, from 1
  ``{{}}``    a literal ``{}`` (``{{#}}``, ``{{name}}`` likewise); any other
              braces (awk's ``{print $1}``) are left as they are

With no replacement string in it, the value of --each/--each-file/--range
is added as the command's last word (GNU parallel's rule); a grid's values
are then only in the environment. In a --shell line a value goes in as one
quoted sh word, so a value never changes the line's grammar (`sh -n`
checks the lines after substitution, as every --shell line is checked).
Each member also finds its values in its environment at run time:
SLOTH_ARRAY_INDEX, SLOTH_ARRAY_VALUE and SLOTH_ARG_<NAME> (the grid's names
upper-cased), kept per job (``member``), not as one stored environment each.

Expanded here, on the client, and handed on as ordinary jobs through
submit.py's all-or-none staging (frames under the 1 MiB limit, one
transaction): the sh -n check and the error that names the member are the
client's, and the daemon's contract stays "a list of jobs".

Imported by `sloth add` only when an array option is given.
"""

from __future__ import annotations

from sloth_daemon import errors

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Optional, Sequence

MAX_MEMBERS = 100_000  # jobs one array may make (a grid's product is checked before it is made)
MAX_FILE = 64 << 20  # bytes of --each-file read (/dev/zero is refused, not read to the end of memory)


def members(*, each: Optional[Sequence[str]], each_file: Optional[str], range_: Optional[str],
            grid: Optional[Sequence[str]], stdin_used: bool) -> Optional[list[dict[str, Any]]]:
    """The members the options ask for ({index, value, args} each), or None
    when none of them is given."""
    given = [n for n, v in (("--each", each), ("--each-file", each_file), ("--range", range_), ("--grid", grid))
             if v]
    if not given:
        return None
    if len(given) > 1:
        raise errors.BadRequest(f"{' and '.join(given)}: give one source of values",
                                hint="For every combination of several lists use --grid 'a=1,2 b=x,y'.")
    if grid:
        return _grid(grid)
    values = _each(each) if each else _file(str(each_file), stdin_used) if each_file else _range(str(range_))
    if not values:
        raise errors.BadRequest(f"{given[0]} gives no values: nothing was queued")
    _cap(len(values), given[0])
    return [{"index": i, "value": v, "args": {}} for i, v in enumerate(values, 1)]


def _cap(n: int, option: str) -> None:
    if n > MAX_MEMBERS:
        raise errors.BadRequest(f"{option} makes {n:,} jobs, over the {MAX_MEMBERS:,} one array may make; "
                                "nothing was queued", hint="Split it into several adds (each its own batch).")


def _each(words: Sequence[str]) -> list[str]:
    import shlex

    out: list[str] = []
    for w in words:
        try:
            out += shlex.split(w)
        except ValueError as e:
            raise errors.BadRequest(f"--each {w!r}: {e} (values are split as sh splits words)") from None
    return out


def _file(path: str, stdin_used: bool) -> list[str]:
    """One value per line (blank lines skipped); ``-``: standard input."""
    import sys

    if path == "-":
        if stdin_used:
            raise errors.BadRequest("--each-file - and --stdin both read standard input")
        data = sys.stdin.buffer.read(MAX_FILE + 1)
    else:
        try:
            with open(path, "rb") as f:
                data = f.read(MAX_FILE + 1)
        except OSError as e:
            raise errors.BadRequest(f"--each-file {path}: {e.strerror or e}") from None
    if len(data) > MAX_FILE:
        raise errors.BadRequest(f"--each-file {path}: over {MAX_FILE >> 20} MiB of values; nothing was queued",
                                hint="Split it into several adds (each its own batch).")
    # lines end at "\n" (and "\r\n") only, as GNU parallel's: str.splitlines also cut a value at a form
    # feed, U+0085 or U+2028, which are text in a value
    lines = (ln.removesuffix("\r") for ln in data.decode("utf-8", "surrogateescape").split("\n"))
    return [ln for ln in lines if ln.strip()]


def _range(text: str) -> list[str]:
    """``A-B`` (both included) or ``A-B:STEP``, whole numbers from 0."""
    import re

    # ASCII digits only (str.isdigit takes '²', which int() refuses), at most 18 (int() refuses 4,300)
    m = re.fullmatch(r"([0-9]{1,18})-([0-9]{1,18})(?::([0-9]{1,18}))?", text)
    a, b, s = (int(m.group(1)), int(m.group(2)), int(m.group(3) or 1)) if m else (1, 0, 0)
    if a > b or s < 1:
        raise errors.BadRequest(f"--range {text!r}: give FIRST-LAST or FIRST-LAST:STEP, e.g. 1-100 or 0-90:10")
    _cap((b - a) // s + 1, "--range")
    return [str(i) for i in range(a, b + 1, s)]


def _grid(specs: Sequence[str]) -> list[dict[str, Any]]:
    """Every combination of ``name=v1,v2`` lists (the first name varies slowest)."""
    import itertools

    axes: dict[str, list[str]] = {}
    for word in (w for spec in specs for w in spec.split()):
        name, eq, vals = word.partition("=")
        values = [v for v in vals.split(",") if v != ""]
        if not eq or not name.isidentifier() or not name.isascii() or not values:
            raise errors.BadRequest(f"--grid {word!r}: give NAME=V1,V2,... (a name of letters, digits and _)",
                                    hint="e.g. --grid 'lr=0.1,0.01 bs=32,64'.")
        if name.upper() in (n.upper() for n in axes):
            raise errors.BadRequest(f"--grid: {name} is given twice (names are told apart without case: "
                                    f"SLOTH_ARG_{name.upper()})")
        axes[name] = values
    n = 1
    for axis in axes.values():
        n *= len(axis)
    _cap(n, "--grid")
    return [{"index": i, "value": " ".join(combo), "args": dict(zip(axes, combo, strict=True))}
            for i, combo in enumerate(itertools.product(*axes.values()), 1)]


def grid_words(command: Optional[list[str]],
               grid: Optional[list[str]]) -> tuple[Optional[list[str]], Optional[list[str]]]:
    """`--grid lr=0.1,0.01 bs=32,64 -- CMD`: the shell made ``bs=32,64`` a
    word of its own, taken for the command's first; the NAME=V,... words
    before ``--`` go back to the grid. Returns (command, grid)."""
    if not grid or not command or "--" not in command:
        return command, grid
    cut = command.index("--")
    lead = command[:cut]
    axes = [w for w in lead if "=" in w and w.partition("=")[0].isidentifier()]
    if lead and len(axes) == len(lead):
        return command[cut + 1:], [*grid, *lead]
    if axes and lead[0] == axes[0]:  # `--grid a=1,2 b=3 --shell -- CMD`: the options after it were lost
        raise errors.BadRequest(f"{lead[0]} and the words after it up to -- were taken for the command: "
                                "options end at the first word that is not one",
                                hint="Put the other options before --grid, or quote the grid: "
                                     "--grid 'lr=0.1,0.01 bs=32,64'.")
    return command, grid


def expand(template: list[str], shell: bool, members: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One job per member: the template's replacement strings filled in
    (``template``: argv words, or one --shell line)."""
    import re

    from sloth_daemon.text import shell_word

    names = list(members[0]["args"]) if members else []
    keys = "|".join(["", "#", *map(re.escape, names)])
    pattern = re.compile(r"\{\{(" + keys + r")\}\}|\{(" + keys + r")\}")
    used = any(hit.group(2) is not None for w in template for hit in pattern.finditer(w))
    if shell:
        for w in template:
            _bare_only(w, [hit for hit in pattern.finditer(w) if hit.group(2) is not None])
    words = template if used or names else [*template, "{}"]

    def fill(word: str, m: dict[str, Any]) -> str:
        def one(hit: re.Match[str]) -> str:
            if hit.group(1) is not None:
                return "{" + hit.group(1) + "}"  # {{x}}: the literal {x}
            key = hit.group(2)
            text = str(m["index"]) if key == "#" else m["value"] if key == "" else m["args"][key]
            return shell_word(text) if shell else text
        return pattern.sub(one, word)

    out = []
    for m in members:
        argv = [fill(w, m) for w in words]
        if shell:
            out.append({"command": ["/bin/sh", "-c", " ".join(argv)], "shell": True, "member": m})
        else:
            out.append({"command": argv, "member": m})
    return out



def _bare_only(line: str, hits: list[Any]) -> None:
    """Refuse a --shell template with a replacement string inside quotes or
    a here-document: the value goes in as one single-quoted word, and inside
    "..." or '...' those quotes are text, so `echo "{}"` with the value
    `$(rm -rf ~)` would run it (GNU parallel's rule: {} is quoted already,
    write it bare). Contexts as sh reads them: '...', "..." (with $(...)
    inside it a new bare context), backslash escapes; a `<<` before a
    replacement string may open a here-document, whose body sh expands."""
    if not hits:
        return
    at = {hit.start(): hit.group(0) for hit in hits}
    stack = [""]  # "" bare, "'" or '"' quoted, "(" inside $(...)
    i = 0
    while i < len(line):
        ctx, ch = stack[-1], line[i]
        if i in at and ctx in ("'", '"'):
            raise errors.BadRequest(
                f"--shell: {at[i]} stands inside quotes in {line!r}: each value goes in quoted already, and "
                "inside quotes a value such as $(...) would run; nothing was queued",
                hint=f"Write {at[i]} bare: echo {at[i]}, not echo \"{at[i]}\" (as GNU parallel's {{}}).")
        if i in at and line.rfind("<<", 0, i) >= 0:
            raise errors.BadRequest(f"--shell: {at[i]} follows a here-document (<<) in {line!r}: sh expands "
                                    "$(...) in its body, where a value's quotes are text; nothing was queued",
                                    hint="Pass the value as a word instead (printf '%s\\n' {} | ...).")
        if ctx == "'":
            if ch == "'":
                stack.pop()
        elif ch == "\\":
            i += 1
        elif line.startswith("$(", i):
            stack.append("(")
            i += 1
        elif ctx == '"':
            if ch == '"':
                stack.pop()
        elif ch in "'\"":
            stack.append(ch)
        elif ch == ")" and ctx == "(":
            stack.pop()
        i += 1

"""Whether shell lines parse, before any is queued: `sh -n`, which reads
a script and runs nothing (`sloth add --stdin/--file`, and `--shell`).

Each line becomes a job of its own, run as ``/bin/sh -c LINE``, so each
must parse alone; two broken lines must not pass as one (``echo "a`` and
``b"``). One `sh -n` reads them all, each as the body of a function of its
own, in parentheses::

    _sloth_1() (
    LINE 1
    )
    _sloth_2() (
    ...

The closing parenthesis ends whatever grammar a line leaves open (an `if`
without `fi`, a `{` without `}`, `while` without `done`: the `)` is then a
syntax error) -- provided the line cannot close it itself, or let a quote
run on past it. So a line goes into the shared script only if a scan
(:func:`closed`) finds its quotes, backquotes, ``$(``, ``${`` and
parentheses all closed, no here-document and no stray ``)`` (a case
pattern); the scan says no whenever it is unsure. Any other line is read
by an `sh -n` of its own (few: such a line is usually the broken one).
When the shared script fails, sh's line number names the function,
and that line alone is read again to confirm it, with its own message.

Client side; no subprocess module (its import costs `sloth add` ~8 ms):
posix_spawn and two pipes.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Optional, Sequence

SH = "/bin/sh"  # what runs a --shell job (add.py, shell_lines.py)
_WORD_START = " \t;&|()<>"


def closed(line: str) -> bool:
    """True if ``line`` leaves no quote, substitution, here-document or
    continuation open: nothing of it can run on into the next line. False
    whenever the scan is unsure (the line is then checked on its own)."""
    stack: list[str] = []  # the closers expected: ' " ` ) }
    i, n = 0, len(line)
    while i < n:
        c, top = line[i], stack[-1] if stack else ""
        nxt = line[i + 1] if i + 1 < n else ""
        if top == "'":
            if c == "'":
                stack.pop()
        elif c == "\\":
            i += 1  # the next character is taken literally (a trailing one: a continuation)
            if i >= n:
                return False
        elif c == top and c in "\"`":
            stack.pop()
        elif c == '"' or c == "`":
            stack.append(c)
        elif c == "'" and top != '"':
            stack.append("'")
        elif c == "$" and nxt in "({":
            stack.append(")" if nxt == "(" else "}")
            i += 1
        elif top == '"':
            pass  # anything else is literal between double quotes
        elif c == "(":
            stack.append(")")
        elif c == ")":
            if top != ")":
                return False  # a case pattern's ), or a stray one: leave it to sh alone
            stack.pop()
        elif c == "}" and top == "}":
            stack.pop()
        elif c == "<" and nxt == "<":
            return False  # a here-document reads the lines after it
        elif c == "#" and (i == 0 or line[i - 1] in _WORD_START):
            if stack:
                return False  # a comment inside $( ... ): where does it end?
            break
        i += 1
    return not stack


def continues(line: str) -> bool:
    """True if ``line`` ends in a backslash that joins the next line to it
    (sh's line continuation): one not itself escaped, not between single
    quotes, not in a comment."""
    if not line.endswith("\\"):
        return False
    quote, i, n = "", 0, len(line)
    while i < n:
        c = line[i]
        if quote == "'":
            quote = "" if c == "'" else quote
        elif c == "\\":
            if i == n - 1:
                return True
            i += 1
        elif c == '"':
            quote = "" if quote else '"'
        elif c == "'" and not quote:
            quote = "'"
        elif c == "#" and not quote and (i == 0 or line[i - 1] in _WORD_START):
            return False
        i += 1
    return False


def logical_lines(text: str) -> list[tuple[int, str]]:
    """The lines of ``text`` as sh reads a script: a line that a backslash
    continues is one with the next (the backslash and the line break go,
    as in sh), numbered by its first line."""
    out: list[tuple[int, str]] = []
    start, parts = 0, []
    for n, ln in enumerate(text.splitlines(), 1):
        start = start or n
        if continues(ln):
            parts.append(ln[:-1])
            continue
        out.append((start, "".join(parts) + ln))
        start, parts = 0, []
    if parts:  # the last line continued into the end of the input
        out.append((start, "".join(parts)))
    return out


def first_error(lines: Sequence[str]) -> Optional[tuple[int, str]]:
    """(index, sh's message) of a line that does not parse on its own, or
    None if every one does."""
    together = [i for i, ln in enumerate(lines) if closed(ln)]
    alone = sorted(set(range(len(lines))) - set(together))
    found = next(((i, m) for i in alone if (m := parse_error(lines[i]) or _open_heredoc(lines[i])) is not None),
                 None)
    if not together:
        return found
    script = "".join(f"_sloth_{k}() (\n{lines[i]}\n)\n" for k, i in enumerate(together))
    msg = parse_error(script)
    if msg is None:
        return found
    shared = _confirmed(lines, together, msg)
    return min((f for f in (found, shared) if f is not None), default=None)


def _open_heredoc(line: str) -> Optional[str]:
    """A complaint if a here-document of ``line`` is still open at its end
    (sh -n takes it; the here-document would read nothing, and in --stdin or
    --file its body and end would be queued as jobs of their own), else None.
    A line that parses, followed by a lone ``(``, is a syntax error unless
    something reads that ``(`` as text: only an open here-document does."""
    if "<<" not in line or parse_error(line + "\n(") is not None:
        return None
    return (f"{SH}: 1: Syntax error: a here-document (<<) is left open: nothing on its line ends it, and each line "
            "of --stdin or --file is a job of its own")


def _confirmed(lines: Sequence[str], together: list[int], msg: str) -> Optional[tuple[int, str]]:
    """The line of the shared script that sh's ``msg`` names, read alone:
    (its index, its own message); the others in turn if it parses."""
    named = _function_of(msg, len(together))
    order = ([named] if named is not None else []) + [k for k in range(len(together)) if k != named]
    for k in order:  # confirm alone (the first of them, nearly always)
        own = parse_error(lines[together[k]])
        if own is not None:
            return together[k], own
    return None  # each parses alone: as each runs alone, each is fine


# What a shell's -n cannot see a script turn on as it runs, and that changes
# the grammar: bash's extglob (`shopt -s extglob` on one line, `!(x)` on the
# next runs; read without it, `(` is a syntax error), so bash reads with it.
_READ_AS = {"bash": ("-O", "extglob")}


def parse_error(script: str, sh: str = SH) -> Optional[str]:
    """The complaint of the shell ``sh`` about ``script`` (read with -n:
    nothing runs), or None."""
    data = (script if script.endswith("\n") else script + "\n").encode("utf-8", "surrogateescape")
    in_r, in_w = os.pipe()
    err_r, err_w = os.pipe()
    try:
        pid = os.posix_spawn(sh, [sh, *_READ_AS.get(os.path.basename(sh), ()), "-n"], dict(os.environ), file_actions=[
            (os.POSIX_SPAWN_DUP2, in_r, 0), (os.POSIX_SPAWN_DUP2, err_w, 2),
            (os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0),
            (os.POSIX_SPAWN_CLOSE, in_w), (os.POSIX_SPAWN_CLOSE, err_r)])
    except OSError:
        for fd in (in_r, in_w, err_r, err_w):
            os.close(fd)
        return None  # no /bin/sh to ask: the job will say so when it runs
    os.close(in_r)
    os.close(err_w)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(in_w, view):]
    except BrokenPipeError:
        pass  # sh stopped reading at the first error
    finally:
        os.close(in_w)
    chunks: list[bytes] = []
    with os.fdopen(err_r, "rb") as f:
        while len(chunks) < 64 and (chunk := f.read(4096)):
            chunks.append(chunk)
    _, status = os.waitpid(pid, 0)
    if os.waitstatus_to_exitcode(status) == 0:
        return None
    said = b"".join(chunks).decode("utf-8", "replace").strip().splitlines()
    return said[0] if said else f"{sh} -n exited {os.waitstatus_to_exitcode(status)}"


def _function_of(msg: str, count: int) -> Optional[int]:
    """Which function of the shared script sh's message names (dash: "sh:
    7: ...", bash: "sh: line 7: ..."), as an index; None if it names none."""
    import re

    m = re.search(r"(?:^|: )(?:line )?([0-9]+): ", msg)
    if not m:
        return None
    k = (int(m.group(1)) - 1) // 3
    return k if 0 <= k < count else count - 1


def message(msg: str) -> str:
    """sh's words without its name and line: ``Syntax error: Unterminated quoted string``."""
    import re

    return re.sub(r"^[^:]*: (?:line )?[0-9]+: ", "", msg)


# The shells whose `-c` script is read with their own -n before it is queued.
SHELLS = frozenset({"sh", "bash", "dash", "ksh", "zsh"})


def shell_script(argv: Sequence[str], cwd: Optional[str] = None) -> Optional[tuple[str, str]]:
    """(the shell's path, the script) of ``sh -c SCRIPT`` in any of its
    forms (``bash -lc``, ``bash -e -o pipefail -c``, ``/bin/sh -c``); None
    for any other command, or a shell that is not here (the job says so
    when it runs)."""
    if not argv or os.path.basename(argv[0]) not in SHELLS:
        return None
    i, script = 1, False
    while i < len(argv) and argv[i][:1] in "-+" and len(argv[i]) > 1 and argv[i] != "--":
        word = argv[i]
        if not word.startswith("--"):  # --norc, --login: no value
            script = script or (word[0] == "-" and "c" in word)
            i += "o" in word  # -o pipefail, +o: the option's value is the next word
        i += 1
    i += i < len(argv) and argv[i] == "--"  # `bash -c -- SCRIPT`: the end of the options, then the script
    if not script or i >= len(argv):
        return None
    path = program_path(argv[0], cwd)
    return (path, argv[i]) if path is not None else None


def program_path(word: str, cwd: Optional[str] = None) -> Optional[str]:
    """The file ``word`` runs as a program, run in ``cwd`` (a path, from
    there; or looked up in PATH, which a job takes from `sloth add`), or None."""
    if "/" in word:
        path = os.path.join(cwd or ".", word)
        return path if os.path.isfile(path) else None
    for folder in os.environ.get("PATH", os.defpath).split(os.pathsep):
        path = os.path.join(folder or ".", word)
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    return None


_SHELL_TEXT = frozenset(" \t\n|;&<>$`()")


def is_shell_line(word: str, cwd: Optional[str] = None) -> bool:
    """True if ``word``, given as a program, is a shell line instead (``ls |
    wc -l``, ``make && make install``, ``echo $HOME``), or what only a shell
    reads (``FOO=1``, an assignment; ``~/bin/x``, a tilde): it holds a blank
    or shell syntax, and no program has that name."""
    return (any(c in _SHELL_TEXT for c in word) or word.startswith("~") or is_assignment(word)) \
        and program_path(word, cwd) is None


def is_assignment(word: str) -> bool:
    """``NAME=VALUE``: a shell sets a variable for the command after it; exec runs no such program."""
    name, eq, _ = word.partition("=")
    return bool(eq) and name.isidentifier() and name.isascii()

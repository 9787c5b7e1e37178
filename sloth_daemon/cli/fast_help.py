"""`sloth CMD --help` without Typer: a command's help page rendered from
its declaration (commands.py), laid out as click lays out Typer's (usage
line, description with its \\b paragraphs kept, Arguments, Options with
value names, defaults and "required", wrapped to the terminal's width as
click's HelpFormatter does: min(columns, 80) - 2, at least 50).

Every declared command is rendered here; a group's page (`sloth lane
--help`, `sloth --help`) and anything else is Typer's. tests/unit/cli/
test_fast_help.py holds each page to Typer's own, so the two cannot drift.

Imported only for -h/--help on the fast path: the standard library only.
"""

from __future__ import annotations

from sloth_daemon.cli.commands import FLAG, INT, PATH, REQUIRED

TYPE_CHECKING = False
if TYPE_CHECKING:
    from textwrap import TextWrapper

    from sloth_daemon.cli.commands import Argument, Command, Option

HELP = ("-h", "--help")
_METAVAR = {INT: "<int>", PATH: "<path>"}  # click's name of each kind's type; the rest are <str>


def page(cmd: Command, width: int | None = None) -> str:
    """``cmd``'s help page, as Typer prints it (without the final newline)."""
    if width is None:
        import shutil

        width = max(min(shutil.get_terminal_size().columns, 80) - 2, 50)
    a = cmd.arg
    usage = "[OPTIONS]" + (f" {_usage_metavar(a)}" if a is not None else "")
    prefix = f"Usage: sloth {' '.join(cmd.path)} "
    if width >= len(prefix) + 20:
        out = [_fill(usage, width, prefix, " " * len(prefix))]
    else:  # click's usage for a narrow width: the arguments under the command
        out = [prefix, _fill(usage, width, " " * 11, " " * 11)]
    out += ["", _paragraphs(_cleandoc(cmd.help), width, "  "), ""]
    if a is not None:
        out += ["Arguments:", *_dl([_argument(a)], width)]
        out.append("")
    rows = [_option(o) for o in cmd.options if not o.hidden]
    out += ["Options:", *_dl([*rows, ("-h, --help", "Show this message and exit.")], width)]
    return "\n".join(out)


def _usage_metavar(a: Argument) -> str:
    var = a.metavar if a.metavar is not None else a.dest + ("..." if a.many else "")
    if a.metavar is None:
        return f"[{a.dest}]..." if a.many and not a.required else (
            f"[{a.dest}]" if not a.required else f"{{{a.dest}}}" + ("..." if a.many else ""))
    if var.startswith("["):
        return var
    return f"{{{var}}}" if a.required else f"[{var}]"


def _argument(a: Argument) -> tuple[str, str]:
    name = a.metavar if a.metavar is not None else a.dest + ("..." if a.many else "")
    return name, _with_extra(a.help or "", ["required"] if a.required else [])


def _option(o: Option) -> tuple[str, str]:
    names = ", ".join(sorted(o.names, key=lambda n: len(n) - len(n.lstrip("-"))))  # -l before --lane
    if o.kind != FLAG:
        names += " " + _METAVAR.get(o.kind, "<str>")
    extra = []
    if o.default is REQUIRED:
        extra.append("required")
    elif o.default is not None and not (o.kind == FLAG and not o.default):
        extra.append(f"default: {o.default}")
    return names, _with_extra(o.help or "", extra)


def _with_extra(help: str, extra: list[str]) -> str:
    if not extra:
        return help
    tail = f"[{'; '.join(extra)}]"
    return f"{help}  {tail}" if help else tail


def _dl(rows: list[tuple[str, str]], width: int) -> list[str]:
    """click's write_dl at indent 2: a definition list in two columns."""
    first_col = min(max(len(r[0]) for r in rows), 30) + 2
    text_width = max(width - first_col - 2, 10)
    out = []
    for first, second in rows:
        if not second:
            out.append(f"  {first}")
            continue
        lines = _paragraphs(second, text_width, "").splitlines()
        if len(first) <= first_col - 2:
            out.append(f"  {first}{' ' * (first_col - len(first))}{lines[0]}")
        else:
            out += [f"  {first}", f"{' ' * (first_col + 2)}{lines[0]}"]
        out += [f"{' ' * (first_col + 2)}{ln}" for ln in lines[1:]]
    return out


def _wrapper(width: int, initial: str, subsequent: str) -> TextWrapper:
    from textwrap import TextWrapper

    class Wrapper(TextWrapper):
        def _handle_long_word(self, chunks: list[str], line: list[str], cur: int, width: int) -> None:
            room = max(width - cur, 1)  # click's: cut a word too long for the line where it ends
            line.append(chunks[-1][:room])
            chunks[-1] = chunks[-1][room:]

    return Wrapper(width, initial_indent=initial, subsequent_indent=subsequent, replace_whitespace=False)


def _fill(text: str, width: int, initial: str, subsequent: str) -> str:
    return _wrapper(width, initial, subsequent).fill(text)


def _paragraphs(text: str, width: int, indent: str) -> str:
    """click's wrap_text(preserve_paragraphs=True): paragraphs split by a
    blank line are re-wrapped, one that starts with \\b is kept as written."""
    paragraphs: list[tuple[int, bool, str]] = []
    buf: list[str] = []
    first_indent: int | None = None
    for line in [*text.expandtabs().splitlines(), ""]:
        if line:
            if first_indent is None:
                first_indent = len(line) - len(line.lstrip())
                line = line.lstrip()
            buf.append(line)
            continue
        if buf:
            raw = buf[0].strip() == "\b"
            paragraphs.append((first_indent or 0, raw, "\n".join(buf[1:]) if raw else " ".join(buf)))
        buf, first_indent = [], None
    out = []
    for extra, raw, par in paragraphs:
        lead = indent + " " * extra
        out.append("\n".join(lead + ln for ln in par.splitlines()) if raw else _fill(par, width, lead, lead))
    return "\n\n".join(out)


def _cleandoc(text: str) -> str:
    """inspect.cleandoc (without importing inspect): tabs expanded, the
    lines after the first dedented, blank lines at either end dropped."""
    lines = text.expandtabs().split("\n")
    rest = [ln for ln in lines[1:] if ln.strip()]
    margin = min((len(ln) - len(ln.lstrip()) for ln in rest), default=0)
    lines = [lines[0].lstrip()] + [ln[margin:] for ln in lines[1:]]
    while lines and not lines[0].strip():
        lines.pop(0)
    while lines and not lines[-1].strip():
        lines.pop()
    return "\n".join(lines).partition("\f")[0]

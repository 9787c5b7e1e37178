"""A TAB of shell completion without the Typer app: job ids, lanes and
states, the words that ask the daemon (completers.py). Loading Typer and
every command to complete one word took ~150 ms a TAB.

Typer's completion (click's shell_completion) finds what the word being
completed is: after a command's option that takes a value, that option's
value; else the command's first argument still open. This does the same
from the commands, options and completers commands.py declares (the ones
Typer's app is built from), for the cases that ask the daemon, and answers
None for every other case (a command or option name, an option before the
command, `--`, a word with `=`, a value or argument with no completer, an
argument already given): Typer then completes it. The output is what Typer
prints for each shell; zsh, fish and PowerShell show help beside a value,
which Typer renders with rich, so those shells get ids (which have help)
from Typer, and lanes and states (which have none) from here.
tests/acceptance/test_fast_cli.py compares the output with Typer's for
each shell.
"""

from __future__ import annotations

import os

from sloth_daemon.cli.commands import FLAG, VALUE, find
from sloth_daemon.cli.fast_args import parse

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Callable, Optional

    from sloth_daemon.cli.commands import Command

    Item = tuple[str, Optional[str]]
    Table = dict[str, tuple[str, Optional[str]]]


def complete() -> Optional[int]:
    """Answer the completion request in the environment (``_SLOTH_COMPLETE``
    and the shell's variables): print it and return the exit code, or None
    to leave it to Typer."""
    shell = _shell(os.environ.get("_SLOTH_COMPLETE", ""))
    if shell is None:
        return None
    words = _words(shell)
    found = None if words is None else _completer(*words)
    if words is None or found is None:
        return None
    items = _items(found, words[1])
    if shell != "bash" and any(h for _, h in items):
        return None  # help beside a value: Typer renders it with rich
    return _print(shell, items)


def _shell(instruction: str) -> Optional[str]:
    """The shell of a `complete_SHELL` instruction; None for `source_SHELL`
    and anything else (Typer's to answer)."""
    what, _, shell = instruction.partition("_")
    if what != "complete" or shell not in ("bash", "zsh", "fish", "powershell", "pwsh"):
        return None
    return "powershell" if shell == "pwsh" else shell


def _words(shell: str) -> Optional[tuple[list[str], str]]:
    """(the words before the one being completed, without the program; that
    word), as Typer's completion class for ``shell`` reads them."""
    env = os.environ
    if shell == "bash":
        if not env.get("COMP_CWORD", "").isdigit() or "COMP_WORDS" not in env:
            return None
        words, cword = split_arg_string(env["COMP_WORDS"]), int(env["COMP_CWORD"])
        return words[1:cword], words[cword] if cword < len(words) else ""
    line = env.get("_TYPER_COMPLETE_ARGS", "")
    words = split_arg_string(line)
    if shell == "powershell":
        incomplete = env.get("_TYPER_COMPLETE_WORD_TO_COMPLETE", "")
        return (words[1:-1] if incomplete else words[1:]), incomplete
    args = words[1:]
    if args and not line.endswith(" "):
        return args[:-1], args[-1]
    return args, ""


def split_arg_string(line: str) -> list[str]:
    """Words as the shell would split them, a quote left open at the end
    taken as it is (click's split_arg_string, which Typer uses)."""
    import shlex

    lex = shlex.shlex(line, posix=True)
    lex.whitespace_split = True
    lex.commenters = ""
    out = []
    try:
        for token in lex:
            out.append(token)
    except ValueError:  # the line ends inside a quote or after a backslash
        out.append(lex.token)
    return out


def _completer(args: list[str], incomplete: str) -> Optional[str]:
    """The completer click would call for ``incomplete`` after ``args``; None
    when it is not one of ours or it takes more than this reads."""
    if "--" in args or "=" in incomplete or incomplete.startswith("-"):
        return None
    cmd = find(args)
    if cmd is None:
        return None
    rest, table = args[len(cmd.path):], options(cmd)
    if rest and rest[-1].startswith("-"):  # the value of this option?
        kind, done = table.get(rest[-1], (None, None))
        if kind != FLAG:
            return done  # its completer; None for an unknown option or one without
    return _argument(cmd, table, rest)


def options(cmd: Command) -> Table:
    """{name: (FLAG or VALUE, its completer or None)} for every option of
    ``cmd``, -h and --help too, as click's completion reads them."""
    table = {name: (FLAG if o.kind == FLAG else VALUE, o.complete) for o in cmd.options for name in o.names}
    table.update({"-h": (FLAG, None), "--help": (FLAG, None)})
    return table


def _argument(cmd: Command, table: Table, rest: list[str]) -> Optional[str]:
    """The completer of the command's argument if it takes another word."""
    if cmd.arg is None or cmd.arg.complete is None:
        return None
    parsed = parse(rest, {name: (name, kind) for name, (kind, _) in table.items()})
    if parsed is None or "-h" in parsed[0] or "--help" in parsed[0]:
        return None  # an unknown option (or one missing its value), or help
    return cmd.arg.complete if cmd.arg.many or not parsed[1] else None


def _items(completer: str, incomplete: str) -> list[Item]:
    """What the completer offers that starts with ``incomplete`` (Typer keeps
    only those), each with its help or None."""
    from sloth_daemon.cli import completers

    fn: Callable[[str], list] = getattr(completers, completer)
    out: list[Item] = []
    for c in fn(incomplete):
        value, help_ = c if isinstance(c, tuple) else (c, None)
        if value.startswith(incomplete):
            out.append((value, help_))
    return out


def _print(shell: str, items: list[Item]) -> int:
    """Print ``items`` the way Typer's completion class for ``shell`` does."""
    import sys

    values = [v for v, _ in items]
    if shell == "fish":
        action = os.environ.get("_TYPER_COMPLETE_FISH_ACTION", "")
        if action == "is-args":
            return 0 if values else 1  # Typer exits without printing
        text = "\n".join(values) if action == "get-args" else ""
    elif shell == "zsh":
        text = "_arguments '*: :((" + "\n".join(f'"{_zsh_escape(v)}"' for v in values) + "))'" if values \
            else "_files"
    elif shell == "powershell":
        text = "\n".join(f"{v}::: " for v in values)
    else:
        text = "\n".join(values)
    sys.stdout.write(text + "\n")
    sys.stdout.flush()
    return 0


def _zsh_escape(s: str) -> str:
    return s.replace('"', '""').replace("'", "''").replace("$", "\\$").replace("`", "\\`").replace(":", r"\\:")

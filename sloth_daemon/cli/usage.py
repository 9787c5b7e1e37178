"""What a mistyped word is offered: only a close match, or nothing.

Click offers any option its fuzzy ratio finds (`edit --shell` got
"Possible options: --help", `schedule add --at` "--lane, --tz"), and Typer
any command ("stauts": 'status', 'restart'). A suggestion is read as "you
meant this", so one is made only when the word is a slip of that one: a
letter or two wrong, missing, extra or swapped, or the start of it
(:func:`near`). Every command and group of the app is made of these two
classes (full.py, app.py), so every suggestion follows the one rule."""

from __future__ import annotations

from typing import Any, Iterable

from typer import _click
from typer.core import TyperCommand, TyperGroup, TyperOption

from sloth_daemon.text import for_terminal


def near(word: str, choices: Iterable[str]) -> list[str]:
    """The ``choices`` ``word`` is a slip of, the closest only: at most one
    edit (two past 5 letters, three past 10) of the name without its
    dashes, or its start (3 letters at least)."""
    typed = word.lstrip("-").lower()
    allowed = 1 if len(typed) <= 5 else 2 if len(typed) <= 10 else 3
    scored = []
    for c in set(choices):
        name = c.lstrip("-").lower()
        d = 0 if len(typed) >= 3 and name.startswith(typed) else _distance(typed, name)
        if d <= allowed:
            scored.append((d, c))
    best = min((d for d, _ in scored), default=0)
    return [c for d, c in sorted(scored) if d == best][:3]


def _distance(a: str, b: str) -> int:
    """Edits (insert, delete, replace, swap two neighbours) from ``a`` to ``b``."""
    if abs(len(a) - len(b)) > 3:
        return 4
    prev2: list[int] = []
    prev = list(range(len(b) + 1))
    for i in range(1, len(a) + 1):
        cur = [i] + [0] * len(b)
        for j in range(1, len(b) + 1):
            cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] != b[j - 1]))
            if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                cur[j] = min(cur[j], prev2[j - 2] + 1)
        prev2, prev = prev, cur
    return prev[-1]


def _offer(words: list[str]) -> str:
    return f" Did you mean {' or '.join(words)}?" if words else ""


def _options_of(ctx: _click.Context) -> list[str]:
    return [o for p in ctx.command.get_params(ctx) if isinstance(p, TyperOption)
            for o in (*p.opts, *p.secondary_opts) if o.startswith("--")]


def _parse(parse: Any, ctx: _click.Context, args: list[str]) -> list[str]:
    """``parse(ctx, args)``; a usage error's words as the rule of
    text.for_terminal has them (click prints these itself, not edge.echo:
    the word typed may hold anything)."""
    try:
        return parse(ctx, args)
    except _click.exceptions.NoSuchOption as e:
        raise _click.exceptions.NoSuchOption(
            e.option_name, for_terminal(f"No such option: {e.option_name}.")
            + _offer(near(e.option_name, _options_of(ctx))), ctx=ctx) from None
    except _click.exceptions.UsageError as e:
        e.message = for_terminal(e.message)
        raise


class Command(TyperCommand):
    """A command whose unknown option is offered only close matches."""

    def parse_args(self, ctx: _click.Context, args: list[str]) -> list[str]:
        return _parse(super().parse_args, ctx, args)


class Group(TyperGroup):
    """A group whose unknown option or command is offered only close matches."""

    def __init__(self, **kw: Any) -> None:
        super().__init__(**{**kw, "suggest_commands": False})

    def parse_args(self, ctx: _click.Context, args: list[str]) -> list[str]:
        return _parse(super().parse_args, ctx, args)

    def resolve_command(self, ctx: _click.Context, args: list[str]) -> Any:
        try:
            return super().resolve_command(ctx, args)
        except _click.exceptions.UsageError as e:
            if args and e.message.startswith("No such command"):
                e.message = for_terminal(e.message.rstrip(".") + ".") + _offer(near(args[0], self.list_commands(ctx)))
            raise

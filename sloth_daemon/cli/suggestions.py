"""What a mistyped word is offered: only a close match, or nothing.

Click offers any option its fuzzy ratio finds (`edit --shell` got
"Possible options: --help", `schedule add --at` "--lane, --tz"), and Typer
any command ("stauts": 'status', 'restart'). A suggestion is read as "you
meant this", so one is made only when the word is a slip of that one: a
letter or two wrong, missing, extra or swapped, or the start of it
(text.near). Every command and group of the app is made of these two
classes (typer_app.py), so every suggestion follows the one rule."""

from __future__ import annotations

from typing import Any

from typer import _click
from typer.core import TyperCommand, TyperGroup, TyperOption

from sloth_daemon.text import for_terminal, near


def _offer(words: list[str]) -> str:
    return f" Did you mean {' or '.join(words)}?" if words else ""


def _options_of(ctx: _click.Context) -> list[str]:
    return [o for p in ctx.command.get_params(ctx) if isinstance(p, TyperOption)
            for o in (*p.opts, *p.secondary_opts) if o.startswith("--")]


def _parse(parse: Any, ctx: _click.Context, args: list[str]) -> list[str]:
    """``parse(ctx, args)``; a usage error's words as the rule of
    text.for_terminal has them (click prints these itself, not output.echo:
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


class SuggestingCommand(TyperCommand):
    """A command whose unknown option is offered only close matches."""

    def parse_args(self, ctx: _click.Context, args: list[str]) -> list[str]:
        return _parse(super().parse_args, ctx, args)


class SuggestingGroup(TyperGroup):
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

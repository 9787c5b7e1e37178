"""The values a command is given, read as typed: job ids, durations,
comma lists, and the command after ``--`` of an edit. An error names the
option as the user typed it. No Typer (the fast path reads these too).

Imported by every `sloth add`: the standard library and errors only;
anything heavier is imported inside the function that needs it.
"""

from __future__ import annotations

from sloth_daemon import errors

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Sequence


def parse_id(text: str, what: str = "job", listed_by: str = "sloth ls") -> int:
    try:
        v = int(text)
    except ValueError:
        raise errors.BadRequest(f"bad {what} id {text!r}: ids are whole numbers (see `{listed_by}`)") from None
    if v < 1:
        raise errors.BadRequest(f"bad {what} id {text!r}: ids start at 1")
    return v


def comma_list(values: Sequence[str] | None) -> list[str] | None:
    """A repeatable option's values with commas taken as repeats too:
    ``--state queued,held --state done`` -> [queued, held, done]."""
    if not values:
        return None
    return [p.strip() for v in values for p in v.split(",") if p.strip()] or None


def command_after_dashes(words: list[str], usage: str) -> list[str]:
    """The words after the first (a job id, a schedule's name) of an edit:
    a new command, taken only from after ``--`` on the command line
    (``sys.argv``: both readers of it, fast and Typer, mix loose words into
    the same list). A stray word before ``--`` (`sloth edit 1 2 --priority
    5`) is refused, never made the job's command."""
    import sys

    argv = sys.argv[1:]
    after = len(argv) - argv.index("--") - 1 if "--" in argv else 0
    loose = words[1:len(words) - after]
    if loose:
        from sloth_daemon.text import shell_command

        raise errors.BadRequest(f"unexpected {shell_command(*loose)!r}: a new command comes after --; "
                                "nothing was changed", hint=f"e.g. `{usage} -- {shell_command(*loose)}`.")
    return list(words[1:])


def duration(text: str | None, what: str) -> float | None:
    if text is None:
        return None
    from sloth_daemon.durations import parse_duration

    return parse_duration(text, what=what)

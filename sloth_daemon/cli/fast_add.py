"""The plainest `sloth add`: ``sloth add [-w|--wait] [--] COMMAND ARGS...``
with nothing else on the line, the one a person types most (and a shell
loop of adds), queued without reading the command declarations.

The fast path (fast.py) offers every `add` line here first. A line is
taken only when it is plain -- no option but --wait/-w, a command whose
words and the caller's environment are valid as they are (what checks.py
would accept: tests/unit/cli/test_fast_add.py holds the two together),
not a shell line given as one word, not ``sh -c SCRIPT`` (both want the
full add's checks: shell_check.py), the folder readable, the request well
under a frame -- and None is answered for anything else, before anything
is sent: add.py then does it as always. What a plain line queues, prints
and exits with is what add.py would (the acceptance tests run a table of
lines through both against a real daemon): the same request (the commit
of submit.py, its errors, its asking again after a lost answer), the
same notes, the same wait.

What it saves is imports: the declarations of every command and their
parser, the options' readers, the checks and durations (~5 ms of a ~20 ms
`sloth add` on a quiet machine; docs/benchmarks.md, "one add").
"""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable, Optional

    from sloth_daemon.cli.client import Client

_WAIT = ("--wait", "-w")
# A plain request's text stays far below the 1 MiB frame (submit.frames then has nothing to split or refuse).
PLAIN_BYTES = 256 * 1024


def plain(args: list[str]) -> Optional[Callable[[], int]]:
    """What runs ``sloth add ARGS`` if the line is plain (see above), else None."""
    line = read(args)
    if line is None:
        return None
    words, wait = line
    try:
        cwd = os.getcwd()
    except OSError:  # gone or unreadable: add.caller_cwd says so
        return None
    env = dict(os.environ)
    if not (evident(words, env) and _no_shell_text(words, cwd)):
        return None
    return lambda: queue(words, wait, {"cwd": cwd, "env": env})


def read(args: list[str]) -> Optional[tuple[list[str], bool]]:
    """(the command, --wait) as fast_args.parse reads an `add` line whose only
    option is --wait/-w (add takes no option after its first word); None for
    any other option, or no command."""
    wait = False
    for i, arg in enumerate(args):
        if arg == "--":
            words = args[i + 1:]
            break
        if arg[:1] != "-" or arg == "-":
            words = args[i:]
            break
        if arg not in _WAIT:
            return None
        wait = True
    else:
        return None
    return (words, wait) if words else None


def evident(words: list[str], env: dict[str, str]) -> bool:
    """The command and environment pass checks.command_json and env_json as
    they are, by a look that imports nothing (an argument or a variable of
    the command line and the environment always does: no NUL, bytes each).
    Anything else is left to the full add, which names what is wrong."""
    strings = [*words, *env, *env.values()]
    if sum(map(len, strings)) > PLAIN_BYTES // 6:  # \u-escaped, every character could take 6 bytes
        return False
    if not all(s.isascii() and "\x00" not in s for s in strings):
        from sloth_daemon.text import is_bytes_text

        if not all("\x00" not in s and is_bytes_text(s) for s in strings):
            return False
    return all(k and "=" not in k for k in env)


def _no_shell_text(words: list[str], cwd: str) -> bool:
    """Neither a shell line given as one word nor a shell's script: add.check_shell has a word for each."""
    from sloth_daemon.cli.shell_check import is_shell_line, shell_script

    return not is_shell_line(words[0], cwd) and shell_script(words, cwd) is None


def queue(words: list[str], wait: bool, common: dict[str, Any]) -> int:
    """The commit (submit.py) of the one job, then what add.add tells: the notes
    on stderr, the id, and with --wait the wait on the commit's own connection."""
    from sloth_daemon.cli import submit as sub

    jobs = [{"command": words, "shell": False}]
    kept = sub.Kept(_connect) if wait else None
    res = sub.submit(jobs, common, [jobs], kept or _connect)
    if res.get("new_lanes"):
        from sloth_daemon.cli.add_options import tell_new_lanes

        tell_new_lanes(res)
    tell_waiting(res.get("waiting") or {})
    ids = list(res["ids"])
    if not wait:
        from sloth_daemon.cli.output import echo

        echo("\n".join(map(str, ids)))
        return 0
    from sloth_daemon.cli.wait import wait_for
    import sys

    return wait_for(ids, stream=sys.stderr, json_extra={"ids": ids}, before="\n".join(map(str, ids)),
                    client=kept.client if kept is not None else None)


def _connect() -> Client:
    """The daemon's socket as locate.py finds it; when nobody listens there,
    connection.connect, which starts the daemon and says so (as add does)."""
    from sloth_daemon.cli.client import Client
    from sloth_daemon.cli.locate import find_daemon
    from sloth_daemon.errors import DaemonNotRunning

    sock, lock = find_daemon()
    try:
        return Client(sock, timeout_s=30.0, lock_path=lock)
    except DaemonNotRunning:
        from sloth_daemon.cli.connection import connect

        return connect(start=True)


def tell_waiting(waiting: dict[str, str]) -> None:
    """On stderr, why the jobs just added will not start whatever they ask
    (``waiting``: lane -> why, Lanes.why: paused, or its `when` does not hold)."""
    from sloth_daemon.cli.output import echo

    said = []
    for lane, why in sorted(waiting.items()):
        if why == "paused":
            line = "the queue is paused: nothing starts until `sloth resume`"
        elif why.startswith("paused"):
            from sloth_daemon.text import shell_command, showable

            line = f"lane {showable(lane)} is paused: its jobs wait until `{shell_command('sloth', 'resume', lane)}`"
        else:
            from sloth_daemon.text import showable

            line = f"{showable(why)}: its jobs wait until that holds"
        if line not in said:
            said.append(line)
            echo(f"sloth: {line}", err=True)

"""Shell completion of job ids, lanes and states (`eval "$(_SLOTH_COMPLETE=source_bash sloth)"`).

Each callback asks the daemon (or reads the queue file when none answers)
with a short timeout, and never fails: a completion that raises prints a
traceback into the user's prompt. No Typer here: the fast path
(fast_complete.py) calls these for a TAB without loading the Typer app.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

STATES = ("blocked", "queued", "held", "running", "done", "failed", "cancelled")


def _ask(op: str, **args: Any) -> Any:
    from sloth_daemon import errors
    from sloth_daemon.cli.connection import paths

    try:
        from sloth_daemon.cli.client import Client
        from sloth_daemon.cli.locate import find_daemon

        sock, lock = find_daemon()
        with Client(sock, timeout_s=2.0, lock_path=lock) as c:
            return c.call(op, **args)
    except errors.DaemonNotRunning:
        from sloth_daemon.cli.offline import answer

        return answer(paths(), op, **args)


def job_ids(incomplete: str) -> list[tuple[str, str]]:
    """Active jobs and the last finished ones, each with its command as help."""
    try:
        res = _ask("list", limit=200, finished_limit=20)
    except Exception:  # noqa: BLE001 - never break the user's prompt
        return []
    from sloth_daemon.cli.render import command_text

    return [(str(j["id"]), f"{j['state']}: {command_text(j, 40)}") for j in res["jobs"]
            if str(j["id"]).startswith(incomplete)]


def lanes(incomplete: str) -> list[str]:
    try:
        names = _ask("lanes")["lanes"]
    except Exception:  # noqa: BLE001
        return []
    return [n for n in sorted(names) if n.startswith(incomplete)]


def states(incomplete: str) -> list[str]:
    return [s for s in STATES if s.startswith(incomplete)]

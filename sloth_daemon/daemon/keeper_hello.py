"""The keeper's hello, as the daemon reads it: a keeper of another sloth
version (another protocol) is named, with what to do, as a typed error;
never a raw, cut-off frame."""

from __future__ import annotations

import json
from typing import Any

from sloth_daemon.errors import SlothError
from sloth_daemon.keeper.wire import VERSION
from sloth_daemon.paths import Paths
from sloth_daemon.paths import open_regular


class KeeperVersionMismatch(SlothError):
    """A keeper of another sloth (another protocol version) holds this data
    dir: we cannot talk to it, and must not start a second keeper beside it."""

    code = "keeper_version"

    def __init__(self, socket_path: str, theirs: int, pid: int | None, runs: int | None) -> None:
        who = f"the keeper (pid {pid})" if pid else f"the keeper on {socket_path}"
        held = "the jobs it holds" if runs is None else f"the {runs} job(s) it holds"
        kill = f"`kill {pid}`" if pid else f"ending the process that listens on {socket_path}"
        super().__init__(
            f"{who} speaks keeper protocol v{theirs}, this sloth speaks v{VERSION}: it is another sloth "
            f"version's, still running {held}",
            hint=f"Wait for its jobs to end (it exits by itself once it holds none), then `sloth daemon start` "
                 f"again; or stop it now with {kill}: it ends its jobs, and this sloth's daemon gives them "
                 "back to the queue. Or start the sloth version that speaks its protocol.")
        self.theirs, self.pid = theirs, pid


def hello_answer(paths: Paths, line: bytes) -> dict[str, Any]:
    """The keeper's answer to hello; KeeperVersionMismatch if it speaks
    another version of the protocol (a keeper of another sloth)."""
    try:
        msg = json.loads(line.decode("utf-8"))
    except ValueError:
        msg = None
    if not isinstance(msg, dict) or type(msg.get("v")) is not int:
        raise ValueError(f"the keeper's answer is no sloth keeper frame: {line[:80]!r}")
    if msg["v"] != VERSION:
        result = msg.get("result")
        runs = result.get("runs") if isinstance(result, dict) else None
        raise KeeperVersionMismatch(str(paths.keeper_socket), msg["v"], _keeper_pid(paths),
                                    len(runs) if isinstance(runs, list) else None)
    return msg


def _keeper_pid(paths: Paths) -> int | None:
    """The pid a keeper wrote in its lock file (keeper/main.py), if readable."""
    try:
        with open_regular(paths.keeper_lock) as f:
            text = f.read(32).decode("ascii", "replace").strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None

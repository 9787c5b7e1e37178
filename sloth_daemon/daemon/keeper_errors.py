"""The keeper's errors, apart from its client (keeper_client.py): a daemon
at rest has no keeper and loads no client (docs/idle.md), yet says "no
keeper is connected" (supervision.py) and hears a log's follower fail
(streams.py)."""

from __future__ import annotations

from sloth_daemon.errors import SlothError


class KeeperError(SlothError):
    code = "keeper"
    hint = "See the keeper's log (keeper.log in sloth's log folder)."
    gone = False  # the keeper no longer holds the run asked about (it ended and was let go)


class RunGone(KeeperError):
    gone = True

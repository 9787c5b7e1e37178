"""The socket ops on lanes (cli/lane.py, and `sloth pause|resume [LANE]`
of cli/pause.py, on the client): ``pause``, ``resume``, ``lanes``,
``lane_set`` and ``lane_rm``. Handlers (handlers.py) adds them to its op
table.

Each checks its frame (untrusted) and asks the object that does the work:
the worker's Actions (a pause takes held successors back, a resume wakes
the loop, a lane removed only when it holds no job), or, for ``lane_set``,
the Worker (its conditions' part: jobs the lowered limit can never run are
held). Bad input is an error response and changes nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from sloth_daemon.checks import MAX_CONCURRENCY
from sloth_daemon.daemon.request_args import flag, lane_name, whole
from sloth_daemon.errors import BadRequest

if TYPE_CHECKING:
    from sloth_daemon.daemon.control import Control
    from sloth_daemon.daemon.worker.actions import Actions
    from sloth_daemon.daemon.worker.lanes import Lanes
    from sloth_daemon.daemon.worker.loop import Worker

Op = Callable[[dict[str, Any]], Any]


class LaneOps:
    """Collaborators: ``actions`` (the worker's Actions, which does the
    work), ``worker`` (lane_set; its status, the answer of pause and
    resume), ``lanes`` (the lanes known and paused) and ``control`` (the
    lanes' status as ``lanes`` shows it)."""

    def __init__(self, actions: "Actions", worker: "Worker", lanes: "Lanes", control: "Control") -> None:
        self.actions, self.worker, self.lanes, self.control = actions, worker, lanes, control

    def table(self, patiently: Callable[[Op], Op]) -> dict[str, Op]:
        """The ops by name, each writing one patiently (see Handlers._patiently)."""
        return {"pause": patiently(self.op_pause), "resume": patiently(self.op_resume), "lanes": self.op_lanes,
                "lane_set": patiently(self.op_lane_set), "lane_rm": patiently(self.op_lane_rm)}

    def op_pause(self, a: dict[str, Any]) -> dict[str, Any]:
        self.actions.pause(lane_name(a.get("lane")))
        return self.worker.status()

    def op_resume(self, a: dict[str, Any]) -> dict[str, Any]:
        self.actions.resume(lane_name(a.get("lane")))
        return self.worker.status()

    def op_lanes(self, a: dict[str, Any]) -> dict[str, Any]:
        return {"lanes": self.control.lane_status(), "paused_all": self.lanes.paused_all, "known": self.lanes.known()}

    def op_lane_set(self, a: dict[str, Any]) -> dict[str, Any]:
        lane = lane_name(a.get("lane"))
        if lane is None:
            raise BadRequest("lane must be a non-empty string")
        return self.worker.set_lane(lane, whole(a.get("concurrency"), "concurrency", 0, MAX_CONCURRENCY),
                                    create=flag(a.get("create", False), "create"))

    def op_lane_rm(self, a: dict[str, Any]) -> dict[str, Any]:
        lane = lane_name(a.get("lane"))
        if lane is None:
            raise BadRequest("lane must be a non-empty string")
        self.actions.remove_lane(lane)
        return {"removed": lane}

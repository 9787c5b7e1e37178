"""The socket ops of the queue edits (issue 22): ``edit``, ``bump``,
``hold`` and ``release``. Handlers (handlers.py) adds them to its op table.

Each checks its frame (untrusted), makes one queue transaction, then tells
the worker of every job it changed (watchers hear; the loop wakes, so a
released or bumped job is claimed at once). Bad input -- an unknown id, a
wrong type, a job that runs -- is an error response and changes nothing.

Answers: ``edit`` -> ``{"job", "changes": ["priority 0 -> 5", ...],
"changed"}``; the others -> ``{"jobs": [...], "skipped": [{id, why}]}``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from sloth_daemon.backends.edits import SETTINGS
from sloth_daemon.daemon.request_args import job_id, job_ids
from sloth_daemon.errors import BadRequest
from sloth_daemon.models import Batch, JobState

if TYPE_CHECKING:
    from sloth_daemon.daemon.control import Control
    from sloth_daemon.daemon.worker.gates import Gates
    from sloth_daemon.daemon.worker.lanes import Lanes
    from sloth_daemon.daemon.worker.loop import Worker
    from sloth_daemon.queue import Queue

Op = Callable[[dict[str, Any]], Any]
MAX_RELEASE = 1_000_000  # held jobs of a lane read to release them


class EditOps:
    """The four ops. Collaborators: the ``queue`` (one transaction each
    does the work), the daemon's ``control`` (a change of lane or settings
    checked as add checks it), the worker's ``gates`` (what this machine can
    never run stays held) and ``lanes`` (a lane named must exist), and the
    ``worker``, told of every job changed."""

    def __init__(self, queue: "Queue", control: "Control", gates: "Gates", lanes: "Lanes",
                 worker: "Worker") -> None:
        self.queue, self.control, self.gates, self.lanes, self.worker = queue, control, gates, lanes, worker

    def table(self, patiently: Callable[[Op], Op]) -> dict[str, Op]:
        """The ops by name, each writing one patiently (see Handlers._patiently)."""
        return {"edit": patiently(self.op_edit), "bump": patiently(self.op_bump),
                "hold": patiently(self.op_hold), "release": patiently(self.op_release)}

    def op_edit(self, a: dict[str, Any]) -> dict[str, Any]:
        """``id``, ``changes`` (command and shell, lane, priority, label,
        not_before, after, after_any, and the settings of `sloth add`:
        backends/edits.SETTINGS), ``expect`` (optional: fields of the
        job as the client read it; the edit is refused if one changed)."""
        jid = job_id(a.get("id"))
        changes, expect = a.get("changes"), a.get("expect")
        if not isinstance(changes, dict):
            raise BadRequest("changes must be an object of the fields to change")
        if expect is not None and not isinstance(expect, dict):
            raise BadRequest("expect must be an object (fields of the job as read)")
        job = None
        if not SETTINGS.isdisjoint(changes):  # checked here as add checks them; limits as applied here
            changes, job = self.control.settings_fit(self.queue.get(jid), changes)
        lane, lane_was = changes.get("lane"), None
        if isinstance(lane, str) and lane:
            job = job or self.queue.get(jid)
            self.control.lane_fits(job, lane)  # its slots, the lanes' limits: as at add
            lane_was = job.lane
        res = self.queue.edit(jid, changes, expect=expect)
        if res.changes:
            if lane_was not in (None, res.job.lane) and res.job.state is JobState.HELD:  # a lane it fits (lane_fits)
                self.gates.sweep([res.job.lane])  # why it could never run in the old one: said no more
            self.worker.side_change(res.job)
        return res.to_dict()

    def op_bump(self, a: dict[str, Any]) -> dict[str, Any]:
        """``ids``: to the front of their lanes, the first named first."""
        return self._told(self.queue.bump(job_ids(a.get("ids")))).to_dict()

    def op_hold(self, a: dict[str, Any]) -> dict[str, Any]:
        """``ids``, or ``lane``: every queued or blocked job of it."""
        ids, lane = self._selection(a)
        return self._told(self.queue.hold(ids, lane=lane)).to_dict()

    def op_release(self, a: dict[str, Any]) -> dict[str, Any]:
        """``ids``, or ``lane``: every held job of it. One this machine can
        never run as it is now (Gates.never) stays held, skipped with why."""
        ids, lane = self._selection(a)
        held = [self.queue.get(i) for i in ids] if ids is not None else \
            self.queue.jobs(lane=lane, states=["held"], limit=MAX_RELEASE)
        stay = {j.id: f"job {j.id} stays held: {why}" for j in held if (why := self.gates.never_job(j))}
        if not stay:
            return self._told(self.queue.unhold(ids, lane=lane)).to_dict()
        rest = [j.id for j in held if j.id not in stay]
        res = self.queue.unhold(rest) if rest else Batch([])
        return self._told(Batch(res.jobs, res.skipped + sorted(stay.items()))).to_dict()

    def _selection(self, a: dict[str, Any]) -> tuple[list[int] | None, str | None]:
        ids, lane = a.get("ids"), a.get("lane")
        if (ids is None) == (lane is None):
            raise BadRequest("name the jobs: ids, or a lane (not both)")
        if lane is not None:
            if not isinstance(lane, str) or not lane:
                raise BadRequest("lane must be a non-empty string")
            self.lanes.check(lane)  # LaneNotFound, naming the lanes there are
            return None, lane
        return job_ids(ids), None

    def _told(self, res: Batch) -> Batch:
        for job in res.jobs:
            self.worker.side_change(job)
        return res

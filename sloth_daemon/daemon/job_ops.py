"""The socket ops that change jobs (cli/cancel.py, retry.py, prune.py and pause.py on the
client): ``cancel``, ``retry``, ``restart``, ``kill``, ``prune``,
``pause_jobs`` and ``resume_jobs``. Handlers (handlers.py) adds them to its
op table.

Each checks its frame (untrusted) and asks the object that does the work:
the worker's Actions (worker/actions.py: one queue transaction, then the
worker's part: trees ended, watchers told, the loop woken), or, for
pause_jobs, the Worker (its conditions' part beside the pauser's). Bad
input is an error response and changes nothing.

Answers: one job by ``id`` -> ``{"job": ...}``; several -> ``{"jobs":
[...], "skipped": [{id, why}]}``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from sloth_daemon.daemon.request_args import flag, job_id, job_ids, lane_name, selection, states_arg
from sloth_daemon.errors import BadRequest

if TYPE_CHECKING:
    from sloth_daemon.config import Settings
    from sloth_daemon.daemon.worker.actions import Actions
    from sloth_daemon.daemon.worker.lanes import Lanes
    from sloth_daemon.daemon.worker.loop import Worker

Op = Callable[[dict[str, Any]], Any]


class JobOps:
    """Collaborators: ``actions`` (the worker's Actions, which does the
    work), ``worker`` (pause_jobs), ``lanes`` (a lane named must exist) and
    ``settings`` (the settings in force, asked per request: a reload
    replaces them)."""

    def __init__(self, actions: "Actions", worker: "Worker", lanes: "Lanes",
                 settings: "Callable[[], Settings]") -> None:
        self.actions, self.worker, self.lanes, self.settings = actions, worker, lanes, settings

    def table(self, patiently: Callable[[Op], Op]) -> dict[str, Op]:
        """The ops by name, each writing one patiently (see Handlers._patiently)."""
        return {"cancel": patiently(self.op_cancel), "retry": patiently(self.op_retry),
                "restart": patiently(self.op_restart), "kill": patiently(self.op_kill),
                "prune": patiently(self.op_prune), "pause_jobs": patiently(self.op_pause_jobs),
                "resume_jobs": patiently(self.op_resume_jobs)}

    async def op_cancel(self, a: dict[str, Any]) -> dict[str, Any]:
        if "id" in a:
            return {"job": (await self.actions.cancel(job_id(a.get("id")))).to_dict()}
        ids, lane, states = selection(a)
        return (await self.actions.cancel_many(ids, lane=lane, states=states)).to_dict()

    def op_retry(self, a: dict[str, Any]) -> dict[str, Any]:
        if "id" in a:
            return {"job": self.actions.retry(job_id(a.get("id")),
                                              kill_grace_s=self.settings().kill_grace_s).to_dict()}
        ids, lane, states = selection(a)
        return self.actions.retry_many(ids, lane=lane, states=states).to_dict()

    def op_restart(self, a: dict[str, Any]) -> dict[str, Any]:
        """Result: ``jobs`` (the new ones), ``skipped``, ``restarted``: [[old id, new id]]."""
        ids = job_ids(a.get("ids"))
        res = self.actions.restart(ids)
        skipped = {i for i, _ in res.skipped}
        done = [i for i in dict.fromkeys(ids) if i not in skipped]
        return {**res.to_dict(), "restarted": [[old, new.id] for old, new in zip(done, res.jobs, strict=True)]}

    async def op_kill(self, a: dict[str, Any]) -> dict[str, Any]:
        return (await self.actions.kill(job_ids(a.get("ids")), now=flag(a.get("now", False), "now"))).to_dict()

    def op_prune(self, a: dict[str, Any]) -> dict[str, Any]:
        older = a.get("older_than_s", self.settings().retention_s)
        if (isinstance(older, bool) or not isinstance(older, (int, float))
                or not 0 <= older < 1e15):  # also NaN, inf and ints too big for a float
            raise BadRequest("older_than_s must be a non-negative number of seconds")
        dry = flag(a.get("dry_run", False), "dry_run")
        n = self.actions.prune(float(older), states=states_arg(a.get("states")), lane=lane_name(a.get("lane")),
                               dry_run=dry)
        return {"would_prune" if dry else "pruned": n}

    async def op_pause_jobs(self, a: dict[str, Any], *, resume: bool = False) -> dict[str, Any]:
        if "ids" in a and "lane" in a:
            raise BadRequest("give ids or a lane, not both")
        ids = job_ids(a["ids"]) if "ids" in a else None
        lane = lane_name(a.get("lane"))
        if lane is not None:
            self.lanes.check(lane)
        return (await self.worker.pause_jobs(ids, lane=lane, resume=resume)).to_dict()

    async def op_resume_jobs(self, a: dict[str, Any]) -> dict[str, Any]:
        return await self.op_pause_jobs(a, resume=True)

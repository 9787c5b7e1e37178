"""What the keys of `sloth top` do to the selected job: one table, read by
the app (bindings, the request it sends) and by its `?` help. A
destructive action (it ends a run, or a job) asks first, and the answer
that is taken without a word is No.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

ACTIVE = ("queued", "held", "blocked", "running")
WAITING = ("queued", "held", "blocked")
ENDED = ("done", "failed", "cancelled")


@dataclass(frozen=True)
class Action:
    key: str
    name: str
    help: str
    states: tuple[str, ...]  # the job states it applies to ("paused": a running job paused)
    destructive: bool = False

    def request(self, job: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        """The daemon op and its arguments for ``job``."""
        jid, paused = job["id"], bool(job.get("paused"))
        name = self.name
        if name == "pause":
            return ("resume_jobs" if paused else "pause_jobs"), {"ids": [jid]}
        if name == "hold":
            return ("release" if job["state"] == "held" else "hold"), {"ids": [jid]}
        if name in ("up", "down"):
            p = job["priority"] + (1 if name == "up" else -1)
            return "edit", {"id": jid, "changes": {"priority": p}, "expect": {"priority": job["priority"]}}
        if name in ("cancel", "retry"):
            return name, {"id": jid}
        return name, {"ids": [jid]}  # kill, restart, bump

    def applies(self, job: dict[str, Any]) -> bool:
        return job["state"] in self.states

    def question(self, job: dict[str, Any], what: str) -> str:
        return f"{self.name.capitalize()} job {job['id']} ({what})?"


ACTIONS = (
    Action("c", "cancel", "cancel the job (a running one has its process tree ended)", ACTIVE, destructive=True),
    Action("k", "kill", "kill the running job now, not retried", ("running",), destructive=True),
    Action("r", "retry", "put a failed or cancelled job back in the queue", ("failed", "cancelled")),
    Action("R", "restart", "queue a finished job again, as a new job", ENDED),
    Action("p", "pause", "pause the running job (SIGSTOP), or resume it", ("running",)),
    Action("h", "hold", "hold a waiting job, or release a held one", WAITING),
    Action("b", "bump", "move a waiting job to the front of its lane", WAITING),
    Action("plus", "up", "priority + 1 (a job not started)", WAITING),
    Action("minus", "down", "priority - 1 (a job not started)", WAITING),
)
BY_NAME = {a.name: a for a in ACTIONS}
VIEW_KEYS = (
    ("tab", "next pane"), ("↑ ↓", "select a job (its history and log on the right)"),
    ("/", "filter: lane:L state:S label:X words (Enter applies, empty clears)"),
    ("?", "these keys"), ("q", "quit"),
)

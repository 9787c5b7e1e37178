"""The socket's outbox ops (cli/outbox.py on the client): ``outbox`` (the
pending and failed messages, their last errors; URLs masked), ``outbox_retry``
and ``outbox_drop`` (by message id). Handlers (daemon/handlers.py) adds
them to its op table."""

from __future__ import annotations

from typing import Any, Callable

from sloth_daemon.backends.contract import Outbox
from sloth_daemon.daemon.request_args import whole
from sloth_daemon.daemon.telling.sender import Sender
from sloth_daemon.errors import BadRequest

Op = Callable[[dict[str, Any]], Any]
STATES = ("pending", "failed", "sent")
MAX_SHOWN = 1000
MAX_IDS = 10_000  # per retry or drop: each is a write on the loop (100,000 held it 0.3 s)


class OutboxOps:
    """The outbox ops over the queue's ``outbox`` (and its reads' ``counts``,
    contract.Reads.outbox_counts); ``sender`` is woken by a retry."""

    def __init__(self, outbox: Outbox, sender: Sender | None, counts: Callable[[], dict[str, int]]) -> None:
        self.outbox, self.sender, self.counts = outbox, sender, counts

    def table(self, patiently: Callable[[Op], Op]) -> dict[str, Op]:
        return {"outbox": self.op_list, "outbox_retry": patiently(self.op_retry),
                "outbox_drop": patiently(self.op_drop)}

    def op_list(self, a: dict[str, Any]) -> dict[str, Any]:
        states = a.get("states") or ["pending", "failed"]
        if not isinstance(states, list) or any(s not in STATES for s in states):
            raise BadRequest(f"states must be a list of {', '.join(STATES)}")
        limit = whole(a.get("limit"), "limit", 1, MAX_SHOWN) if a.get("limit") is not None else 200
        return {"messages": [m.to_dict() for m in self.outbox.messages(states, limit)],
                "counts": self.counts()}

    def op_retry(self, a: dict[str, Any]) -> dict[str, Any]:
        ids = message_ids(a.get("ids"))
        done = self.outbox.retry(ids)
        if done and self.sender is not None:
            self.sender.wake()
        return {"changed": done, "skipped": [i for i in ids if i not in done]}

    def op_drop(self, a: dict[str, Any]) -> dict[str, Any]:
        ids = message_ids(a.get("ids"))
        done = self.outbox.drop(ids)
        return {"changed": done, "skipped": [i for i in ids if i not in done]}


def message_ids(v: Any) -> list[int]:
    """The outbox's message ids of a request (not job ids: the errors say so)."""
    if not isinstance(v, list) or not v:
        raise BadRequest("ids must be a non-empty list of message ids (see `sloth outbox ls`)")
    if len(v) > MAX_IDS:
        raise BadRequest(f"at most {MAX_IDS} message ids at once, got {len(v)}; nothing changed")
    for i in v:
        if isinstance(i, bool) or not isinstance(i, int):
            raise BadRequest(f"bad message id {i!r}: ids are whole numbers (see `sloth outbox ls`)")
        if not 1 <= i < 2**63:  # the engines' integers are 64-bit
            raise BadRequest(f"bad message id {i}: no message has it (see `sloth outbox ls`)")
    return v

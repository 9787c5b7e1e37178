"""`sloth outbox ls | retry | drop`: the messages (pings, webhooks, mail)
transitions caused that are not delivered yet, or that failed for good
with their last error (docs/telling.md). URLs are shown masked: their path
and query are the secret."""

from __future__ import annotations

from sloth_daemon.cli.connection import call
from sloth_daemon.cli.output import echo, emit_json

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Sequence


def outbox_ls(*, all_: bool, as_json: bool) -> int:
    """`sloth outbox ls` (its help and options: commands.py)."""
    res = call("outbox", states=["pending", "failed", "sent"] if all_ else ["pending", "failed"])
    if as_json:
        emit_json(res)
        return 0
    from sloth_daemon.cli import render
    from sloth_daemon.text import showable

    rows = [[str(m["id"]), m["state"], m["event"], _subject(m), _where(m["channel"]), str(m["tries"]),
             showable(m.get("last_error") or "")[:80]] for m in res["messages"]]
    if rows:
        echo(render.table(["ID", "STATE", "EVENT", "OF", "TO", "TRIES", "LAST ERROR"], rows))
    c = res["counts"]
    echo(f"{c['pending']} pending, {c['failed']} failed, {c['sent']} sent"
         + ("; `sloth outbox retry ID` sends a failed one again, `drop ID` forgets it" if c["failed"] else ""))
    return 0


def outbox_retry(*, ids: Sequence[str], as_json: bool) -> int:
    """`sloth outbox retry ID...`: failed (or waiting) messages due again now."""
    return _change("outbox_retry", ids, as_json, "due again")


def outbox_drop(*, ids: Sequence[str], as_json: bool) -> int:
    """`sloth outbox drop ID...`: forget messages not sent."""
    return _change("outbox_drop", ids, as_json, "dropped")


def _change(op: str, ids: Sequence[str], as_json: bool, what: str) -> int:
    from sloth_daemon.cli.values import comma_list, parse_id

    res = call(op, ids=[parse_id(i, "message", "sloth outbox ls") for i in comma_list(ids) or []])
    if as_json:
        emit_json(res)
        return 0 if not res["skipped"] else 1
    if res["changed"]:
        echo(f"{what}: {', '.join(map(str, res['changed']))}")
    if res["skipped"]:
        echo(f"not changed (sent, being sent now, or no such message): {', '.join(map(str, res['skipped']))}")
    return 0 if not res["skipped"] else 1


def _subject(m: dict[str, Any]) -> str:
    if m.get("job_id") is not None:
        return f"job {m['job_id']}" + (f" #{m['attempt']}" if m.get("attempt") else "")
    return f"schedule {m.get('schedule')}"


def _where(ch: dict[str, Any]) -> str:
    return f"{ch['kind']} " + str(ch.get("url") or ", ".join(ch.get("to", [])))

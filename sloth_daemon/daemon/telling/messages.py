"""What each outbox message says, made once it is due (pure: the sender
passes in the job, the log's tail and the settings).

- a ping speaks healthchecks.io's protocol: ``/start`` when a run starts,
  the URL itself on success, ``/<exit code>`` (or ``/fail``) on a failed
  run, ``/fail`` on a cancel or a schedule's missed window; ``?rid=`` one
  UUID per run (the same for its start and its end, on every machine and
  after every restart: derived from the queue, the job and the attempt);
  the log's last TAIL_CAP bytes as the body.
- a webhook POSTs JSON (``event``, ``key``, ``at``, ``job``: the job as
  ``show --json`` has it, URLs masked; ``schedule``, ``note``), signed
  ``X-Sloth-Signature: sha256=<hex>``, the HMAC-SHA256 of the body with
  ``[tell] webhook_secret`` (or the file ``webhook_secret_file``).
- a mail says what failed, why, and the log's tail.

Every one carries ``Idempotency-Key: sloth-<queue>-<key>`` (a mail its
Message-ID and X-Sloth-Key): a receiver that keeps the keys it has seen
drops a repeat (delivery is at least once: docs/telling.md).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import uuid
from dataclasses import dataclass, field
from email.message import EmailMessage
from typing import Any, Mapping
from urllib.parse import urlsplit, urlunsplit

from sloth_daemon.backends.contract import Message

TAIL_CAP = 10_000  # bytes of the log's end sent (healthchecks keeps 100 kB of a ping's body)
RID_SPACE = uuid.UUID("0b6f4cbb-3c1e-4c71-9d27-5a3f2d1c0e8a")  # uuid5's namespace for a run's rid
SIGNATURE = "X-Sloth-Signature"
KEY_HEADER = "Idempotency-Key"


@dataclass
class HttpRequest:
    """An HTTP request to make (http.request)."""

    method: str
    url: str
    body: bytes
    headers: dict[str, str] = field(default_factory=dict)


def idempotency_key(queue: str, m: Message) -> str:
    return f"sloth-{queue}-{m.key}"


def rid(queue: str, m: Message) -> str:
    """One UUID per run: its start and its end share it (healthchecks pairs them by it)."""
    what = f"{queue}:{m.job_id}:{m.attempt}" if m.job_id is not None else f"{queue}:{m.key}"
    return str(uuid.uuid5(RID_SPACE, what))


def ping(queue: str, m: Message, job: Mapping[str, Any] | None, tail: bytes, version: str) -> HttpRequest:
    u = urlsplit(m.channel["url"])
    path = u.path.rstrip("/")
    if m.event == "started":
        path += "/start"
    elif m.event in ("failed", "retrying"):
        code = m.exit_code
        path += f"/{code}" if isinstance(code, int) and 0 < code < 256 else "/fail"
    elif m.event in ("cancelled", "missed"):
        path += "/fail"
    query = "&".join(q for q in (u.query, f"rid={rid(queue, m)}") if q)
    url = urlunsplit((u.scheme, u.netloc, path, query, ""))
    body = m.note.encode() if m.event == "missed" else b"" if m.event == "started" else tail[-TAIL_CAP:]
    return HttpRequest("POST", url, body, {KEY_HEADER: idempotency_key(queue, m), "User-Agent": f"sloth/{version}",
                                       "Content-Type": "text/plain; charset=utf-8"})


def webhook(queue: str, m: Message, job: Mapping[str, Any] | None, secret: bytes | None, version: str) -> HttpRequest:
    body = json.dumps({"event": m.event, "key": m.key, "at": m.at, "attempt": m.attempt, "exit_code": m.exit_code,
                       "job": job,
                       "schedule": m.schedule, "note": m.note}, sort_keys=True).encode()
    headers = {KEY_HEADER: idempotency_key(queue, m), "User-Agent": f"sloth/{version}",
               "Content-Type": "application/json", "X-Sloth-Event": m.event}
    if secret:
        headers[SIGNATURE] = "sha256=" + hmac.new(secret, body, hashlib.sha256).hexdigest()
    return HttpRequest("POST", m.channel["url"], body, headers)


def mail(queue: str, m: Message, job: Mapping[str, Any] | None, tail: bytes, sender: str) -> EmailMessage:
    msg = EmailMessage()
    if m.job_id is not None:
        cmd = " ".join(job["command"]) if job else "(the job was pruned)"
        code = m.exit_code
        msg["Subject"] = _line(f"sloth: job {m.job_id} {m.event}" + (f" (exit {code})" if code else "")
                               + f": {cmd}")[:200]
        lines = [f"Job {m.job_id}, attempt {m.attempt}: {m.event}.", f"Command: {cmd}"]
        if job:
            lines += [f"Lane: {job.get('lane')}", f"Message: {job.get('message') or '-'}"]
        text = "\n".join(lines) + "\n\nThe log's last lines:\n\n" + tail[-TAIL_CAP:].decode("utf-8", "replace")
    else:
        msg["Subject"] = _line(f"sloth: schedule {m.schedule} missed its window")[:200]
        text = m.note + "\n"
    msg["From"] = sender
    msg["To"] = ", ".join(m.channel["to"])
    digest = hashlib.sha256(idempotency_key(queue, m).encode()).hexdigest()[:32]
    msg["Message-ID"] = f"<{digest}@sloth>"
    msg["X-Sloth-Key"] = idempotency_key(queue, m)
    msg.set_content(text)
    return msg


def _line(s: str) -> str:
    return "".join(c if c.isprintable() else " " for c in s)

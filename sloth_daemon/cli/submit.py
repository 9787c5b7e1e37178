"""How ``sloth add`` hands its jobs to the daemon: all of them, or none, and
it always says which.

1. Every job is checked here, with the queue's own rules (spec.py), before
   anything is sent or a daemon started; an error names the option as typed
   (``--timeout``, not ``timeout_s``) or the input line.
2. The jobs go in frames under the 1 MiB limit: all but the last are staged
   on the connection, the last commits them all in one transaction under a
   random batch token (protocol v2, see protocol.py).
3. If the commit's answer is lost (the daemon died, or stalled), the client
   asks again, on a new connection and if need be of a new daemon, whether
   that token's batch was queued, and reports what it was told. Only if no
   daemon can be asked does it say the outcome is unknown, and that it is
   all or nothing.

Client side only (imports no daemon code); kept light for ``sloth add``.
"""

from __future__ import annotations

import os

from sloth_daemon import protocol
from sloth_daemon.errors import (
    BadRequest, FieldError, IllegalTransition, PermissionDenied, ProtocolError, SlothError, StorageError, from_dict,
)

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing and contextlib are not imported at run time: `sloth add` pays for every import
    from contextlib import AbstractContextManager
    from typing import Any, Callable, Iterator, Protocol

    from sloth_daemon.checks import EnvCache

    class _Client(Protocol):
        def call(self, op: str, **args: Any) -> Any: ...

        def set_timeout(self, timeout_s: float | None) -> None: ...

        def close(self) -> None: ...

    Connect = Callable[[], AbstractContextManager[_Client]]

NOTHING = "nothing was queued"
# The job fields `sloth add` fills without an option of their own (--cwd
# only changes the folder, which is always sent).
NOT_OPTIONS = {"command": "the command", "env": "the environment", "cwd": "--cwd (or the current folder)",
               "backoff_cap_s": "--backoff's CAP"}


def option_names() -> dict[str, str]:
    """Job spec fields as a user of `sloth add` typed them: each field the
    options declared on `add` set (commands.py, ``Option.field``), by their
    long names ("--delay/--at"), and the fields no option sets alone."""
    from sloth_daemon.cli.commands import COMMANDS

    add = next(c for c in COMMANDS if c.path == ("add",))
    by_field: dict[str, list[str]] = {}
    for o in add.options:
        if o.field is not None:
            by_field.setdefault(o.field, []).append(o.names[0])
    return {**{f: "/".join(names) for f, names in by_field.items()}, **NOT_OPTIONS}


# Refusals of a commit that prove its transaction never happened (or was rolled back);
# a refused peer (PermissionDenied) is turned away before the daemon reads a byte.
_CERTAIN = (BadRequest, ProtocolError, IllegalTransition, StorageError, PermissionDenied)
COMMIT_TIMEOUT_S = 30.0
COMMIT_JOBS_PER_S = 20_000.0  # a slow disk's enqueue rate: a large commit gets its time


def with_note(e: SlothError, note: str) -> SlothError:
    """The same error (type, code, exit code, hint) with ``; note`` added."""
    out = from_dict({**e.to_dict(), "message": f"{e.message}; {note}"})
    out.__cause__ = e
    return out


# ------------------------------------------------------------------- checks
def check(jobs: list[dict[str, Any]], common: dict[str, Any], *, where: Callable[[int], str]) -> None:
    """Refuse the whole input if any job is invalid. ``where(i)`` names job
    ``i`` for the message ("line 3 of --file"; "" for a single command)."""
    cache: EnvCache = {}
    _check_one({**common, "command": ["-"]}, cache, "")  # the options, once
    for i, job in enumerate(jobs):
        _check_one(job if _only_own_fields(job) else {**common, **job}, cache, where(i))


def _only_own_fields(job: dict[str, Any]) -> bool:
    """A job that sets only its command (and shell, and an array member's
    values): its options were checked once."""
    return job.keys() <= {"command", "shell", "member"}


def _check_one(spec: dict[str, Any], cache: EnvCache, where: str) -> None:
    """The queue's own checks (checks.fields, as JobSpec.parse runs them);
    the daemon's defaults do not matter here, only whether a value is valid."""
    from sloth_daemon import checks  # here: a plain add (fast_add.py) needs none of it (0.3 us a job)

    try:
        if _only_own_fields(spec):
            checks.command_json(spec.get("command"))  # one job of thousands: only what varies
            checks.member_json(spec.get("member"))
            if not isinstance(spec.get("shell", False), bool):
                raise FieldError("shell", "must be true or false")
        else:
            checks.fields(spec, checks.DEFAULT_MAX_ATTEMPTS, checks.DEFAULT_LEASE_S, cache)
            if not checks.TELL_FIELDS.isdisjoint(spec):  # --ping, --webhook, --mail-to (docs/telling.md)
                checks.tell_json(spec)
            if spec.get("rules") is not None:
                checks.rules_json(spec["rules"])  # --stall, --fail-on ... (JobSpec.parse checks them apart)
    except FieldError as e:
        raise as_option(e, NOTHING, where) from None
    except BadRequest as e:
        raise with_note(e, NOTHING) from None


def as_option(e: FieldError, nothing: str, where: str = "") -> BadRequest:
    """A job field's error named as the option of `sloth add` (or edit, or a
    schedule's) that sets it (``--timeout``, not ``timeout_s``), and what was
    not done: whether this process's checks found it, or the daemon's."""
    text = f"{option_names().get(e.field, e.field)} {e.problem}"
    return BadRequest(f"{where + ': ' if where else ''}{text}; {nothing}", e.hint or None)


# ------------------------------------------------------------------- frames
def frames(jobs: list[dict[str, Any]], common: dict[str, Any], *,
           where: Callable[[int], str], limit: int = protocol.MAX_FRAME) -> list[list[dict[str, Any]]]:
    """Split into requests that each stay under the frame limit. A job too
    big for any frame is refused with what to do about it (not a hint about
    batches, which would not help)."""
    overhead = len(protocol.dumps(common, ensure_ascii=False).encode("utf-8", "surrogateescape")) + 4096
    if overhead > limit // 2:
        raise BadRequest(f"the environment and options of this `sloth add` take {overhead} bytes, over the "
                         f"{limit // 2} one request may spend on them; {NOTHING}",
                         hint="Unset large environment variables for this command, e.g. `env -u BIG sloth add ...`.")
    out: list[list[dict[str, Any]]] = []
    for i, part in _split(jobs, limit - overhead):
        if len(part) == 1 and _job_size(part[0]) > limit - overhead:
            _fits_alone(part[0], common, limit, where(i))
        out.append(part)
    return out


def _split(jobs: list[dict[str, Any]], budget: int) -> Iterator[tuple[int, list[dict[str, Any]]]]:
    """(index of the first job, jobs) per frame, each frame at most ``budget``
    bytes by _job_size's bound (a job over it goes alone)."""
    batch: list[dict[str, Any]] = []
    first = size = 0
    for i, j in enumerate(jobs):
        n = _job_size(j)
        if batch and size + n > budget:
            yield first, batch
            batch, size, first = [], 0, i
        batch.append(j)
        size += n
    if batch:
        yield first, batch


def _fits_alone(job: dict[str, Any], common: dict[str, Any], limit: int, where: str) -> None:
    try:
        protocol.encode(protocol.request(0, "commit", jobs=[job], common=common, batch="x" * 16), limit)
    except ProtocolError:
        n = sum(len(a) for a in job["command"])
        raise BadRequest(f"{where + ': ' if where else ''}the command is {n:,} bytes long, over the "
                         f"{limit:,} bytes one job may take; {NOTHING}",
                         hint="Pass large data through a file the job reads, not on its command line.") from None


def _job_size(job: dict[str, Any]) -> int:
    """An upper bound of a job's bytes in the frame, at a fifth of json.dumps's cost
    (it was 40% of the client's time for 50,000 --stdin lines). ASCII-escaped
    strings are never shorter than their UTF-8; 64 covers keys and punctuation."""
    q = protocol.encode_basestring_ascii

    member = job.get("member")
    return sum(len(q(a)) + 1 for a in job["command"]) + len(q(job.get("key") or "")) + len(
        q(job.get("label") or "")) + 64 + (0 if member is None else 64 + sum(
            len(q(t)) + 1 for t in (member["value"], *member["args"], *member["args"].values())))


# ------------------------------------------------------------------- submit
def submit(jobs: list[dict[str, Any]], common: dict[str, Any], parts: list[list[dict[str, Any]]],
           connect: Connect, handle: dict[str, Any] | None = None) -> dict[str, Any]:
    """Queue ``jobs`` (split into ``parts`` by frames()) all or none; return
    the commit's answer (``ids``, and ``new_lanes`` when the daemon said).
    Every error says whether anything was queued."""
    token = os.urandom(8).hex()  # secrets.token_hex(8), without importing secrets (hashlib, random)
    try:
        opened = connect()
    except SlothError as e:  # not running (and not to be started), busy, not answering
        raise with_note(e, NOTHING) from None
    try:
        with opened as client:
            _stage(client, parts[:-1], common)
            client.set_timeout(COMMIT_TIMEOUT_S + len(jobs) / COMMIT_JOBS_PER_S)
            return dict(client.call("commit", jobs=parts[-1], common=common, batch=token,
                                    **({"handle": handle} if handle is not None else {})))
    except _CERTAIN as e:
        raise with_note(e, NOTHING) from None
    except _NotSent as e:
        raise with_note(e.error, NOTHING) from None
    except SlothError as e:
        return _ask(token, len(jobs), e, connect)


class Kept:
    """Connections for ``submit`` whose last one is kept open after the
    commit's answer, for what the command does next on it (`add --wait`
    streams its wait there: no second connect, no second accept by the
    daemon). One that fails is closed as usual; ``client``: the one to use
    (None if none answered), which its user closes."""

    def __init__(self, connect: Connect) -> None:
        self.connect = connect
        self.client: _Client | None = None

    def __call__(self) -> "Kept":
        self.client = self.connect().__enter__()
        return self

    def __enter__(self) -> _Client:
        assert self.client is not None
        return self.client

    def __exit__(self, kind: object, *exc: object) -> None:
        if kind is not None and self.client is not None:
            self.client.close()
            self.client = None


class _NotSent(Exception):
    """The commit was never sent: staged jobs die with the connection."""

    def __init__(self, error: SlothError) -> None:
        self.error = error


def _stage(client: _Client, parts: list[list[dict[str, Any]]], common: dict[str, Any]) -> None:
    try:
        for part in parts:
            client.call("stage", jobs=part, common=common)
    except SlothError as e:
        raise _NotSent(e) from None


def _ask(token: str, n: int, lost: SlothError, connect: Connect) -> dict[str, Any]:
    """The commit's answer was lost: ask whether batch ``token`` was queued."""
    try:
        with connect() as client:
            res = client.call("batch", batch=token)
    except SlothError as e:
        raise from_dict({**e.to_dict(), "message": f"{lost.message}; the {n} job(s) were queued all or none, "
                         f"and no daemon could be asked which ({e.message})",
                         "hint": f"Once the daemon answers, `sloth ls --all` shows them (or not). {e.hint}"}) from None
    if res.get("queued"):
        return {"ids": list(res["ids"])}
    raise with_note(lost, NOTHING) from None

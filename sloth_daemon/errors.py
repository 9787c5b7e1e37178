"""Typed errors. Each carries a message (what went wrong) and a hint (the fix).

Every error has a stable ``code`` (sent over the socket) and an ``exit_code``
(used by the CLI). The CLI catches :class:`SlothError` once, at the edge.
Every subclass that names its own ``code`` is registered under it, so the
client rebuilds the same type from the wire (:func:`from_dict`).
"""

from __future__ import annotations

import errno as _errno
from sloth_daemon.text import mask
from sloth_daemon.text import shell_command, storable

TYPE_CHECKING = False
if TYPE_CHECKING:  # not at run time: `sloth add` pays for every import
    from typing import Any, ClassVar

# Named exit codes of the CLI (documented in the README).
EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_NOT_RUNNING = 3
EXIT_NOT_FOUND = 4
EXIT_JOB_FAILED = 5
EXIT_CONFLICT = 6
EXIT_UNAVAILABLE = 7  # a daemon is there but busy or not answering: try again, do not start another

ERRORS_BY_CODE: dict[str, type["SlothError"]] = {}


class SlothError(Exception):
    """Base of every error a user may see."""

    code: ClassVar[str] = "error"
    exit_code: ClassVar[int] = EXIT_ERROR
    hint = ""

    def __init_subclass__(cls, **kw: Any) -> None:
        super().__init_subclass__(**kw)
        if "code" in cls.__dict__:
            ERRORS_BY_CODE[cls.code] = cls

    def __init__(self, message: str, hint: str | None = None) -> None:
        # Messages quote paths and commands, whose bytes need not be UTF-8,
        # and a driver's errors, which may quote a password: made storable
        # and masked (text.py) here, once, so no error can fail to be
        # printed or sent, nor carry a secret wherever it goes.
        message = mask(storable(message))
        super().__init__(message)
        self.message = message
        if hint is not None:
            self.hint = mask(storable(hint))

    def to_dict(self) -> dict[str, str]:
        return {"code": self.code, "message": self.message, "hint": self.hint}


ERRORS_BY_CODE[SlothError.code] = SlothError


class JobNotFound(SlothError):
    code = "not_found"
    exit_code = EXIT_NOT_FOUND
    hint = "List jobs with `sloth ls --all` to see which ids exist."

    def __init__(self, job_id: object) -> None:
        super().__init__(f"no job with id {job_id}")
        self.job_id = job_id


class IllegalTransition(SlothError):
    """A state change that the job's current state does not allow."""

    code = "illegal_transition"
    exit_code = EXIT_CONFLICT
    hint = "See the job's state with `sloth show ID`."


class LaneNotFound(SlothError):
    """A lane name no config, job or `sloth lane set` ever made (a typo, most likely)."""

    code = "lane_not_found"
    exit_code = EXIT_NOT_FOUND

    def __init__(self, lane: str, known: list[str]) -> None:
        super().__init__(f"no lane named {lane!r}",
                         hint=f"Lanes: {', '.join(known) or 'none'}. To make one: "
                              f"`{shell_command('sloth', 'lane', 'set', lane, '--concurrency', 'N', '--create')}`.")


class ScheduleNotFound(SlothError):
    """A schedule name no `sloth schedule add` made (or one since removed)."""

    code = "schedule_not_found"
    exit_code = EXIT_NOT_FOUND
    hint = "List schedules with `sloth schedule ls`."

    def __init__(self, name: str) -> None:
        super().__init__(f"no schedule named {name!r}")
        self.name = name


class BatchNotFound(SlothError):
    """A `--batch` id or name no add made (or whose jobs were all pruned)."""

    code = "batch_not_found"
    exit_code = EXIT_NOT_FOUND
    hint = "`sloth status` lists the batches with unfinished jobs; `sloth ls --json` shows each job's batch."

    def __init__(self, ref: object) -> None:
        super().__init__(f"no batch {'with id' if str(ref).isascii() and str(ref).isdigit() else 'named'} {str(ref)!r}")


class LogUnreadable(SlothError):
    """A job's log file is there but cannot be read (a folder in its place,
    no permission). A missing file is no error: the attempt printed nothing."""

    code = "log_unreadable"
    hint = "Check that file's type and permissions."

    def __init__(self, path: object, e: OSError) -> None:
        super().__init__(f"cannot read the log {path}: {e.strerror or e}")


class LeaseLost(SlothError):
    """The caller's token is not the job's current token: someone else owns it now."""

    code = "lease_lost"
    exit_code = EXIT_CONFLICT
    hint = "The job was reclaimed after its lease expired; stop working on it."


class BadRequest(SlothError):
    code = "bad_request"
    exit_code = EXIT_USAGE
    hint = "Run `sloth --help` or see the README for the accepted values."


class FieldError(BadRequest):
    """One field of a job is invalid. ``field`` is its name in the job spec
    (``timeout_s``) so the CLI can name the option as typed (``--timeout``)."""

    def __init__(self, field: str, problem: str, hint: str | None = None) -> None:
        super().__init__(f"{field} {problem}", hint)
        self.field, self.problem = field, problem

    def to_dict(self) -> dict[str, str]:
        """On the wire with ``field`` and ``problem`` too (optional: from_dict
        makes a FieldError again), so a client names the option it took."""
        return {**super().to_dict(), "field": self.field, "problem": mask(storable(self.problem))}


class DaemonNotRunning(SlothError):
    """Nobody listens on the socket (no such file, or connection refused)."""

    code = "daemon_not_running"
    exit_code = EXIT_NOT_RUNNING
    hint = "Start it with `sloth daemon start` (or `sloth service install --now`)."


class ConnectionLost(SlothError):
    """The daemon closed the connection before it answered (it stopped or
    crashed mid-request). Not DaemonNotRunning: nothing should be started
    on the strength of it without looking again."""

    code = "connection_lost"
    exit_code = EXIT_NOT_RUNNING
    hint = "See `sloth daemon status`; the daemon log says why it stopped."


class DaemonBusy(SlothError):
    """A daemon is there but takes no more connections right now (its
    accept queue or its connection limit is full)."""

    code = "busy"
    exit_code = EXIT_UNAVAILABLE
    hint = "Try again in a moment; `sloth daemon status` shows its connection count."


class DaemonNotAnswering(SlothError):
    """A daemon holds the socket or the instance lock but did not answer in time."""

    code = "not_answering"
    exit_code = EXIT_UNAVAILABLE


class DaemonAlreadyRunning(SlothError):
    code = "already_running"
    exit_code = EXIT_CONFLICT
    hint = "Stop it with `sloth daemon stop`, or use another SLOTH_HOME."


class PermissionDenied(SlothError):
    """A peer of another uid asked the daemon for something."""

    code = "permission_denied"
    hint = "Only the user who runs the daemon may talk to it."


class StorageError(SlothError):
    """The data dir or database cannot be used (missing, read-only, corrupt)."""

    code = "storage"
    hint = "Check that the data dir exists and is writable (`sloth doctor`)."


class StorageBusy(StorageError):
    """Another process held the database's write lock past our patience.
    Passing: the caller may try again (the daemon does, on its own)."""

    code = "storage_busy"
    hint = ("Another program holds a long write transaction on the queue database; "
            "sloth tries again by itself. If it lasts, find it with `fuser` on queue.db.")


class QueueBroken(StorageError):
    """The database file was replaced, truncated or corrupted under an open
    queue. Sticky: that queue takes no more writes; reads may still work."""

    code = "queue_broken"
    hint = ("Stop the daemon (`sloth daemon stop`) and run `sloth doctor`: it says whether the file "
            "can be salvaged (`sqlite3 queue.db .recover`) or a backup must be put back.")


class ProtocolError(SlothError):
    code = "protocol"
    exit_code = EXIT_USAGE
    hint = "Send one JSON object per line with fields v, id, op (see protocol.py)."


class ConfigError(SlothError):
    code = "config"
    exit_code = EXIT_USAGE
    hint = "Fix the file named above; `sloth config` shows the effective settings."


class ServiceError(SlothError):
    """The login service (systemd --user unit, launchd agent) could not be handled."""

    code = "service"
    hint = "See `sloth service status` and `sloth doctor`."


class ServiceManagerMissing(ServiceError):
    """systemctl / launchctl is not on PATH."""


class ServiceCommandFailed(ServiceError):
    """systemctl / launchctl ran and said no."""


# A spawn failing with one of these is the daemon's (or the machine's) lack
# of descriptors, processes or memory: not the job's fault (see limits.py).
RESOURCE_ERRNOS = frozenset({_errno.EMFILE, _errno.ENFILE, _errno.EAGAIN, _errno.ENOMEM})


class SpawnError(SlothError):
    """A job's command could not be started. ``retry`` is False when trying
    again cannot help (no such program, not executable), True for passing
    trouble. ``resource`` (from ``errno``) is True when the trouble is the
    daemon's own lack of descriptors, processes or memory: then the attempt
    does not count against the job."""

    code = "spawn_failed"

    def __init__(self, message: str, *, retry: bool, errno: int | None = None) -> None:
        super().__init__(message)
        self.retry = retry
        self.resource = errno in RESOURCE_ERRNOS


def from_dict(d: dict[str, Any]) -> SlothError:
    """Rebuild a typed error from its wire form (used by the client). An
    unknown code stays a SlothError that keeps the code it was sent with."""
    code = str(d.get("code", "error"))
    message = str(d.get("message", "unknown error"))
    hint = str(d.get("hint", ""))
    cls = ERRORS_BY_CODE.get(code, SlothError)
    field, problem = d.get("field"), d.get("problem")
    named = cls is BadRequest and isinstance(field, str) and isinstance(problem, str)
    if named:
        cls = FieldError
    err = cls.__new__(cls)
    SlothError.__init__(err, message, hint)  # not cls.__init__: its arguments differ per class
    if named:
        err.field, err.problem = field, problem  # type: ignore[attr-defined]
    if cls is SlothError and code != SlothError.code:
        err.code = code  # type: ignore[misc]  # an instance attribute shadows the class's
    return err

"""Typed errors. Each carries a message (what went wrong) and a hint (the fix).

Every error has a stable ``code`` (sent over the socket) and an ``exit_code``
(used by the CLI). The CLI catches :class:`SlothError` once, at the edge.
"""

from __future__ import annotations

# Named exit codes of the CLI (documented in the README).
EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_NOT_RUNNING = 3
EXIT_NOT_FOUND = 4
EXIT_JOB_FAILED = 5
EXIT_CONFLICT = 6


class SlothError(Exception):
    """Base of every error a user may see."""

    code = "error"
    exit_code = EXIT_ERROR
    hint = ""

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        if hint is not None:
            self.hint = hint

    def to_dict(self) -> dict:
        return {"code": self.code, "message": self.message, "hint": self.hint}


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


class LogUnreadable(SlothError):
    """A job's log file is there but cannot be read (a folder in its place,
    no permission). A missing file is no error: the attempt printed nothing."""

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


class DaemonNotRunning(SlothError):
    code = "daemon_not_running"
    exit_code = EXIT_NOT_RUNNING
    hint = "Start it with `sloth daemon start` (or `sloth service install --now`)."


class DaemonAlreadyRunning(SlothError):
    code = "already_running"
    exit_code = EXIT_CONFLICT
    hint = "Stop it with `sloth daemon stop`, or use another SLOTH_HOME."


class StorageError(SlothError):
    """The data dir or database cannot be used (missing, read-only, corrupt)."""

    code = "storage"
    hint = "Check that the data dir exists and is writable (`sloth doctor`)."


class ProtocolError(SlothError):
    code = "protocol"
    exit_code = EXIT_USAGE
    hint = "Send one JSON object per line with fields v, id, op (see protocol.py)."


class ConfigError(SlothError):
    code = "config"
    exit_code = EXIT_USAGE
    hint = "Fix the file named above; `sloth config` shows the effective settings."


ERRORS_BY_CODE: dict[str, type[SlothError]] = {
    cls.code: cls
    for cls in (
        SlothError,
        IllegalTransition,
        LeaseLost,
        BadRequest,
        DaemonNotRunning,
        DaemonAlreadyRunning,
        StorageError,
        ProtocolError,
        ConfigError,
    )
}


def from_dict(d: dict) -> SlothError:
    """Rebuild a typed error from its wire form (used by the client)."""
    code = str(d.get("code", "error"))
    message = str(d.get("message", "unknown error"))
    hint = str(d.get("hint", ""))
    if code == "not_found":
        err: SlothError = JobNotFound.__new__(JobNotFound)
        SlothError.__init__(err, message, hint)
        return err
    cls = ERRORS_BY_CODE.get(code, SlothError)
    err = cls(message, hint)
    err.code = code
    return err

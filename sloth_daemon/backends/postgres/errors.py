"""How the PostgreSQL queue words what goes wrong: a psycopg error as the
StorageError a user sees (what happened, and the fix), and a URL without
its password for messages. Part of backends/postgres/db.py, split off to keep it small."""

from __future__ import annotations

import psycopg
from psycopg import errors as pgerr
from psycopg.conninfo import conninfo_to_dict

from sloth_daemon.errors import StorageBusy, StorageError

HINT_REACH = ("Check that the PostgreSQL server is running and reachable, and that queue_url"
              " (or SLOTH_QUEUE_URL) names the right host, port, database and user.")
HINT_UNKNOWN = "Check the job with `sloth show ID` once the server is reachable again."
HINT_BROKEN = ("Stop the daemon (`sloth daemon stop`) and check that queue_url reaches the database that"
               " holds this queue (`sloth db status`); restore it from a backup if it was lost.")


def describe(url: str) -> str:
    """user@host:port/dbname of a URL, without its password (for messages)."""
    try:
        d = conninfo_to_dict(url)
    except psycopg.Error:
        return "(an unparsable URL)"
    host = d.get("host") or "localhost"
    port = f":{d['port']}" if d.get("port") else ""
    user = f"{d['user']}@" if d.get("user") else ""
    return f"{user}{host}{port}/{d.get('dbname', '')}"


def first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


# The server answered and said no (unknown database or role, failed auth,
# pg_hba): waiting will not change that. Said while it starts or stops, or
# when it is full, it will.
PASSING = ("starting up", "shutting down", "in recovery", "too many", "remaining connection slots")


def refused(e: psycopg.OperationalError) -> bool:
    text = str(e)
    return "FATAL:" in text and not any(p in text for p in PASSING)


def reason(e: BaseException) -> str:
    """libpq's message without its 'connection to server at ... failed:' preamble."""
    text = " ".join(str(e).split())
    for marker in ("FATAL: ", "failed: "):
        if marker in text:
            text = text.rsplit(marker, 1)[1]
            break
    return text or type(e).__name__


def storage_error(e: psycopg.Error, doing: str) -> StorageError:
    """A psycopg error as the StorageError a user sees: what and how to fix it."""
    if isinstance(e, pgerr.LockNotAvailable):
        return StorageBusy(f"PostgreSQL: a row stayed locked by another session while {doing}",
                           hint="Another session holds a long transaction on the queue; try again.")
    if isinstance(e, pgerr.QueryCanceled):
        return StorageError(f"PostgreSQL cancelled {doing}: {first_line(e)}",
                            hint="A statement waited longer than statement_timeout: the server is"
                                 " overloaded or another session holds a lock for long.")
    if isinstance(e, pgerr.InsufficientPrivilege):
        return StorageError(f"PostgreSQL refused {doing}: {first_line(e)}",
                            hint="Grant the role in queue_url the rights on schema sloth"
                                 " (or run `sloth db migrate` as its owner).")
    if isinstance(e, pgerr.UndefinedTable) or isinstance(e, pgerr.UndefinedFunction):
        return StorageError(f"the sloth schema is missing or damaged ({doing}): {first_line(e)}",
                            hint="Run `sloth db status` and `sloth db migrate`.")
    return StorageError(f"queue database error while {doing}: {first_line(e)}",
                        hint="See `sloth db status` and the PostgreSQL server log.")

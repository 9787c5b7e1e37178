"""The latest job: what `sloth wait`, `logs` and `show` mean with no id (as
task-spooler's -w, -c and -i do). No Typer; light imports."""

from __future__ import annotations

from sloth_daemon import errors


class NoJobs(errors.SlothError):
    code = "no_jobs"
    exit_code = errors.EXIT_NOT_FOUND
    hint = "Queue one with `sloth add -- CMD`."


def latest_job_id() -> int:
    """The id of the newest job (the highest: the one added last), asked of
    the daemon, or read from the queue file when no daemon runs. Raises
    NoJobs when there is none (never queued, or all pruned)."""
    from sloth_daemon.cli.base import call_or_read

    try:
        jid = call_or_read("latest").get("id")
    except errors.ProtocolError:  # a daemon from before `latest` (not restarted since): the file says
        from sloth_daemon.cli.base import paths
        from sloth_daemon.cli.offline import answer

        jid = answer(paths(), "latest").get("id")
    if jid is None:
        raise NoJobs("there are no jobs yet")
    return int(jid)

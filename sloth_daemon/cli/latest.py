"""The latest job: what `sloth wait`, `logs` and `show` mean with no id (as
task-spooler's -w, -c and -i do): the latest job this user queued from this
machine (on a shared queue another machine's jobs are not ours), and for
`logs` the latest of those that has started a run (tsp's rule: a delayed or
held job has no output yet). No Typer; light imports."""

from __future__ import annotations

from sloth_daemon import errors


class NoJobs(errors.SlothError):
    code = "no_jobs"
    exit_code = errors.EXIT_NOT_FOUND
    hint = "Queue one with `sloth add -- CMD`."


def latest_job_id(*, ran: bool = False) -> int:
    """The id of the newest job queued from this machine (``ran``: the
    newest that has started), asked of the daemon, or read from the queue
    when no daemon runs. Raises NoJobs when there is none."""
    from sloth_daemon.cli.connection import call_or_read

    args = {"ran": True} if ran else {}
    try:
        jid = call_or_read("latest", **args).get("id")
    except errors.ProtocolError:  # a daemon from before `latest` (not restarted since): the file says
        from sloth_daemon.cli.connection import paths
        from sloth_daemon.cli.offline import answer

        jid = answer(paths(), "latest", **args).get("id")
    if jid is None:
        raise NoJobs("no job of yours has run yet" if ran else "there are no jobs yet")
    return int(jid)

"""What a command given no job id means: the latest job (the newest, the
highest id), as tsp's -c, -i and -w do. Said on stderr, so a script that
reads stdout sees only the answer."""

from __future__ import annotations

from sloth_daemon import errors
from sloth_daemon.cli.base import call_or_read
from sloth_daemon.cli.edge import echo


def latest_job_id(command: str) -> int:
    """The newest job's id, told on stderr ("sloth: logs of the latest
    job, 12"); SlothError when the queue has none."""
    jid = call_or_read("latest")["id"]
    if jid is None:
        raise errors.SlothError(f"no jobs yet: `sloth {command}` with no id means the latest job",
                                hint="Queue one with `sloth add -- CMD`.")
    echo(f"sloth: {command} of the latest job, {jid}", err=True)
    return int(jid)

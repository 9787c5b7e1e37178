"""`sloth show [ID]...`: each job with its history, a failed one's last
log lines. It asks the daemon, or reads the queue file when none answers
(connection.call_or_read). Both readers of the command line end here, with
the options commands.py declares: the Typer app (typer_app.py) and the
fast path (fast.py). No Typer.
"""

from __future__ import annotations

from sloth_daemon.cli.connection import call_or_read, log_paths
from sloth_daemon.cli.output import echo, emit_json
from sloth_daemon.cli.values import parse_id

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Optional, Sequence


def show(job_ids: Optional[Sequence[str]], as_json: bool, batch: Optional[str] = None) -> None:
    """`sloth show [ID]...`: each job with its history; a failed one's last
    log lines. No ID: the latest job (said on stderr). --batch: the batch,
    its jobs counted by state."""
    import time

    from sloth_daemon.cli import render

    if batch is not None:
        return _show_batch(batch, job_ids, as_json)

    if job_ids:
        ids = [parse_id(j) for j in job_ids]
    else:
        from sloth_daemon.cli.latest import latest_job_id

        ids = [latest_job_id()]
        echo(f"sloth: show of the latest job, {ids[0]}", err=True)
    res = call_or_read("show", ids=ids)
    if as_json:
        now = time.time()
        emit_json({**res, "jobs": [render.with_timing(j, now) for j in res["jobs"]]})
        return
    blocks = []
    for j in res["jobs"]:
        tail = render.tail_lines(str(log_paths().job_log(j["id"], j["attempts"]))) \
            if j["state"] == "failed" and j["attempts"] else []
        blocks.append(render.show_job(j, j["events"], prereqs=j["prereqs"], dependents=j["dependents"],
                                      log_tail=tail))
    echo("\n\n".join(blocks))


def _show_batch(ref: str, job_ids: Optional[Sequence[str]], as_json: bool) -> None:
    """`sloth show --batch REF`: its line (counts by state), when it was
    queued, and which batch a name meant when several have it."""
    import time

    from sloth_daemon import errors
    from sloth_daemon.cli.many_jobs import batch_line, find_batch

    if job_ids:
        raise errors.BadRequest("give job ids or --batch to show, not both")
    found = find_batch(ref, read=True)
    if as_json:
        emit_json(found)
        return
    b = found["batch"]
    from sloth_daemon.durations import format_duration

    lines = [batch_line(b), f"queued {format_duration(max(0.0, time.time() - b['at']))} ago"]
    if b.get("same_name"):
        lines.append(f"the newest of {b['same_name']} batches named {b['name']!r} (older ones: by id)")
    if found["ids"]:
        lines.append(f"jobs {found['ids'][0]}..{found['ids'][-1]}: `sloth ls --batch {b['id']}`")
    echo("\n".join(lines))

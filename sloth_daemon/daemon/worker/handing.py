"""What a run is handed besides its command (issue 33 item 3): the file it
may write its result to (``$SLOTH_RESULT``: the keeper reads it once the run
ends, keeper/results.py) and, for a job added ``--after``/``--after-any``,
what its predecessors handed on (``$SLOTH_AFTER_RESULTS``: a JSON file
written here as the run is claimed, one object per predecessor).

A predecessor's result is written in the transaction that records its end
(outcomes.record), and that end is what queues the dependent: so when the
dependent is claimed, every result it waits for is in the queue, however
often the daemon was restarted or killed in between.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sloth_daemon.errors import SlothError
from sloth_daemon.models import Job
from sloth_daemon.safefile import open_file

if TYPE_CHECKING:
    from sloth_daemon.queue import Queue

log = logging.getLogger("sloth.worker")


def result_path(log_path: Path) -> Path:
    """$SLOTH_RESULT of the attempt whose log is ``log_path`` (``5.2.log`` -> ``5.2.result.json``):
    beside its log, in the private log folder, removed once read."""
    return log_path.with_name(log_path.name.removesuffix(".log") + ".result.json")


def after_results(queue: "Queue", job: Job) -> list[dict[str, Any]]:
    """One object per predecessor of ``job``, in the order it was added after
    them: ``{"id", "need" ("done" | "end"), "state", "exit_code", "attempt",
    "label", "result"}``; ``result`` is what that job's last attempt handed
    on (null: nothing, or it was pruned: then ``state`` is null too)."""
    wanted = [(i, "done") for i in job.after] + [(i, "end") for i in job.after_any]
    ids = [i for i, _ in wanted]
    found = {j.id: j for j in queue.get_many(ids)}
    kept = queue.results(ids)
    out = []
    for i, need in wanted:
        j = found.get(i)
        last = kept.get(i, [])
        last_result = last[-1] if last and j is not None and last[-1]["attempt"] == j.attempts else None
        out.append({"id": i, "need": need, "state": j.state.value if j else None,
                    "exit_code": j.exit_code if j else None, "attempt": j.attempts if j else None,
                    "label": j.label if j else None,
                    "result": last_result["result"] if last_result else None})
    return out


def hand_on(queue: "Queue", job: Job, log_path: Path) -> dict[str, str]:
    """The run's variables of this module: SLOTH_RESULT always, and
    SLOTH_AFTER_RESULTS (the file written now) for a job that waited for
    others. A file that cannot be written is said in the daemon's log and
    the variable left out: the job runs all the same."""
    env = {"SLOTH_RESULT": str(result_path(log_path))}
    if not (job.after or job.after_any):
        return env
    path = log_path.with_name(log_path.name.removesuffix(".log") + ".after.json")
    try:
        data = json.dumps(after_results(queue, job), ensure_ascii=False).encode("utf-8", "surrogateescape")
        fd = open_file(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
    except (OSError, SlothError) as e:
        log.error("job %d: cannot write %s for $SLOTH_AFTER_RESULTS: %s", job.id, path, e)
        return env
    env["SLOTH_AFTER_RESULTS"] = str(path)
    return env

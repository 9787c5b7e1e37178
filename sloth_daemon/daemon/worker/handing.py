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

from sloth_daemon.errors import BadRequest, SlothError
from sloth_daemon.models import Job
from sloth_daemon.safefile import open_file

if TYPE_CHECKING:
    from sloth_daemon.backends.face import QueueReads
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
    room = HANDED_CAP
    for i, need in wanted:
        j = found.get(i)
        last = kept.get(i, [])
        last_result = last[-1] if last and j is not None and last[-1]["attempt"] == j.attempts else None
        one = {"id": i, "need": need, "state": j.state.value if j else None,
               "exit_code": j.exit_code if j else None, "attempt": j.attempts if j else None,
               "label": j.label if j else None, "result": None}
        if last_result is not None:
            size = len(json.dumps(last_result["result"], ensure_ascii=False))
            if size <= room:
                one["result"], room = last_result["result"], room - size
            else:  # past the cap: said, and `sloth result ID` has it
                one["left_out"] = True
        out.append(one)
    return out


HANDED_CAP = 4 << 20  # characters of results one $SLOTH_AFTER_RESULTS holds (2,000 predecessors x 64 KiB
# would be 128 MiB built and written as the run is claimed); past it a result is null with "left_out": true


RESULTS_SHOWN = 10  # `show` lists the results of a job's last this many attempts (`sloth result --attempt N`: any)


def shown_results(q: "QueueReads", job: dict[str, Any]) -> list[dict[str, Any]]:
    """What `show` lists of the job's results (``q``: a queue or its read-only view)."""
    n = job["attempts"]
    return q.results([job["id"]], attempts=(max(1, n - RESULTS_SHOWN + 1), n)).get(job["id"], []) if n else []


def one_result(q: "QueueReads", job_id: int, attempt: Any = None) -> dict[str, Any]:
    """The ``result`` op: what attempt ``attempt`` (default: the last) of the
    job handed on, ``result`` null and ``found`` false when nothing. Raises
    JobNotFound, BadRequest for an attempt it never had."""
    job = q.get(job_id)
    if attempt is not None and (isinstance(attempt, bool) or not isinstance(attempt, int)
                                or not 1 <= attempt <= job.attempts):
        raise BadRequest(f"job {job.id} has attempts 1..{job.attempts}, not {attempt!r}" if job.attempts
                         else f"job {job.id} has not run yet, so it has no attempt {attempt!r}")
    n = job.attempts if attempt is None else attempt
    kept = q.results([job.id], attempts=(n, n)).get(job.id, []) if n else []
    return {"id": job.id, "attempt": n, "attempts": job.attempts, "found": bool(kept),
            "result": kept[0]["result"] if kept else None}


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

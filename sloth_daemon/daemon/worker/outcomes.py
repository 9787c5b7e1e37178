"""What a run's end means for its job: one queue transition, chosen here.

The job's own doing (its exit code, its signal, its timeout) completes or
fails it. An end that was not the job's doing gives the attempt back: the
daemon interrupted it to stop, the keeper fenced it because no lease renewal
came in time, or the keeper itself was stopped. What decides is what the
keeper reports, not what the daemon asked: a run that ended by itself before
an interruption reached it is recorded as it ended (never given back to run
again). A run we ended because its lease was lost needs no write: our token
is void. Nor does one whose job was cancelled, but for how a run it had
started ended (event ``ended``). A run pending behind another that was dropped
before it started (pipeline.py) never ran: its claim is undone, no trace.
"""

from __future__ import annotations

from typing import Any, Collection

from sloth_daemon.backends.contract import Completion
from sloth_daemon.checks import DEFAULT_RETRY_ON
from sloth_daemon.errors import IllegalTransition
from sloth_daemon.models import NO_RETRY_EXIT, Job
from sloth_daemon.queue import Queue
from sloth_daemon.daemon.worker.lifecycle import BY_REQUEST, NOTHING_TO_WRITE, Attempt, Why
from sloth_daemon.daemon.worker.spawner import Outcome



def record(queue: Queue, run: Attempt, outcome: Outcome, *, runner: dict[str, Any] | None = None,
           durable: bool = True, retry_on: Collection[str] = DEFAULT_RETRY_ON) -> Job | None:
    """Write ``outcome`` under the run's lease (with the process identity
    ``runner`` if not yet written; without an fsync unless ``durable``); the
    job after, or None when there is nothing to write. ``retry_on``: the
    ends that are no exit code retried by default (config's retry_on).
    Raises LeaseLost or JobNotFound (it is not ours any more) and
    StorageError (try again later: the outcome is kept)."""
    jid, tok = run.job.id, run.token
    ok, message = outcome.describe()
    why = run.ending.why if run.ending is not None else None
    if outcome.result is not None:  # before its end: the end may queue a dependent, which must find it
        queue.keep_result(jid, run.attempt, outcome.result, durable=False)
    if why in NOTHING_TO_WRITE:
        if why in BY_REQUEST and outcome.started and outcome.returncode is not None:
            return queue.note_ended(jid, run.attempt, ended_note(outcome), ended_at=outcome.ended_at,
                                    durable=durable)
        return None
    # --overlap replace (Actions.replace): the run was ended first; its job is recorded cancelled, with why,
    # only now that its process has ended -- its lane slot and the occurrence after it waited for that
    if why is Why.REPLACED and not by_itself(outcome):
        return _replaced(queue, run, outcome, durable=durable)
    kw: dict[str, Any] = {"runner": runner, "durable": durable}
    if outcome.postpone_s is not None:  # never started, for want of resources: not counted
        note = (f"not started: {outcome.reason}; short of resources: not counted; "
                f"next try in {outcome.postpone_s:g}s")
        return queue.release(jid, tok, message=note, delay_s=outcome.postpone_s, kind="postponed", **kw)
    if outcome.spawn_retry is not None:
        return queue.fail(jid, tok, message=message, retry=outcome.spawn_retry, **kw)
    if not outcome.started:  # its claim undone: nothing ran, so its history shows nothing
        return queue.unclaim(jid, tok, durable=durable)
    if why is Why.INTERRUPTED and not by_itself(outcome):
        suffix = f"; {outcome.log_problem}" if outcome.log_problem else ""
        return queue.release(jid, tok, message="interrupted: daemon stopping" + suffix, **kw)
    if why is Why.CONDITION_LOST and run.ending is not None and not by_itself(outcome):
        return queue.release(jid, tok, message=f"{run.ending.text}: stopped (--on-lost stop); requeued, not counted",
                             kind="condition_lost", **kw)
    if outcome.killed_by == "fence":
        return queue.release(jid, tok, message=message, kind="fenced", **kw)
    if outcome.killed_by == "keeper":
        return queue.release(jid, tok, message=f"{message} (the keeper was stopped)", **kw)
    at = outcome.ended_at
    if ok:
        return queue.complete(jid, tok, message=message, exit_code=outcome.returncode, ended_at=at, **kw)
    retry, message, rule = retry_verdict(run.job, outcome, message, retry_on)
    return queue.fail(jid, tok, message=message, exit_code=outcome.returncode, ended_at=at, retry=retry, rule=rule,
                      **kw)


def plain_completion(run: Attempt, outcome: Outcome) -> Completion | None:
    """The outcome as a Completion where record() would write it with
    complete() and nothing more (a run that ended by itself, with exit code
    0, no result to keep, no end asked of it), so that a turn's several can
    go in one complete_many; else None (record() writes it)."""
    ok, message = outcome.describe()
    why = run.ending.why if run.ending is not None else None
    if (not ok or not outcome.started or outcome.result is not None or why in NOTHING_TO_WRITE
            or outcome.postpone_s is not None or outcome.spawn_retry is not None
            or outcome.killed_by in ("fence", "keeper")
            or (why in (Why.REPLACED, Why.INTERRUPTED, Why.CONDITION_LOST) and not by_itself(outcome))):
        return None
    return Completion(run.job.id, run.token, message, outcome.returncode, outcome.ended_at, run.identity)


def _replaced(queue: Queue, run: Attempt, outcome: Outcome, *, durable: bool) -> Job | None:
    try:
        job = queue.cancel(run.job.id, message=run.ending.text if run.ending else "")
    except IllegalTransition:  # finished meanwhile (a user's cancel): as it was
        return None
    if outcome.started and outcome.returncode is not None:
        return queue.note_ended(run.job.id, run.attempt, ended_note(outcome), ended_at=outcome.ended_at,
                                durable=durable)
    return job


def by_itself(outcome: Outcome) -> bool:
    """It started and ended with no end asked of it: before a kill reached
    it (the keeper's outcome names no reason and nobody who ended it)."""
    return outcome.started and outcome.reason is None and outcome.killed_by is None


def ended_note(outcome: Outcome) -> str:
    """How the run of a job cancelled while it ran ended (event ``ended``)."""
    how = Outcome(outcome.returncode, log_problem=outcome.log_problem).describe()[1]
    return f"{how}; it ended by itself" if by_itself(outcome) else f"{how}; its process tree was ended"


EXIT_MEANING = {126: "found but not executable", 127: "command not found"}


def end_cause(outcome: Outcome) -> str | None:
    """The retry rules' name of an end that is no exit code (checks.RETRY_CAUSES):
    the keeper's timeout, stall or --fail-on kill, its memory limit, a
    signal it did not send; None for an exit code (or an end asked for by
    no rule: retried, as before there were rules)."""
    if outcome.killed_by in ("timeout", "stall", "match"):
        return outcome.killed_by
    if outcome.over == "mem":
        return "mem"
    code = outcome.returncode
    if outcome.reason is None and code is not None and code < 0:
        return "signal"
    return None


def retry_verdict(job: Job, outcome: Outcome, message: str,
                  retry_on: Collection[str] = DEFAULT_RETRY_ON) -> tuple[bool, str, str]:
    """(retry?, message, the rule that decided, for the try's history;
    docs/watchdogs.md): an exit code by the job's --retry-exit /
    --no-retry-exit (a typo is not worth three tries with backoff); an end
    that is no exit code by its --retry-on / --no-retry-on, else config's
    ``retry_on``. An end no rule names (a kill nobody asked for by name) is
    retried, as before there were rules."""
    code, cause = outcome.returncode, end_cause(outcome)
    if cause is not None:
        retry, rule = _cause_rule(job, cause, retry_on)
        return retry, message, rule
    if outcome.reason or code is None or code <= 0:
        return True, message, ""
    meaning = EXIT_MEANING.get(code)
    if meaning:
        message = message.replace(f"exit {code}", f"exit {code} ({meaning})", 1)
    return job.retries_exit(code), message, _exit_rule(job, code)


def _cause_rule(job: Job, cause: str, defaults: Collection[str]) -> tuple[bool, str]:
    own = job.rules or {}
    if cause in own.get("retry_on", ()):
        return True, f"retry rule: {cause} retries (--retry-on {cause})"
    if cause in own.get("no_retry_on", ()):
        return False, f"not retried: {cause} is in --no-retry-on"
    shown = ",".join(sorted(defaults)) or "none"
    if cause in defaults:
        return True, f"retry rule: {cause} retries (retry_on: {shown})"
    return False, f"not retried: {cause} is not in retry_on ({shown}; --retry-on {cause} asks)"


def _exit_rule(job: Job, code: int) -> str:
    default = job.no_retry_exit == list(NO_RETRY_EXIT)
    if code in job.no_retry_exit:
        return f"not retried: exit {code} is in " + ("the default --no-retry-exit 126,127" if default
                                                      else "--no-retry-exit")
    if job.retry_exit is not None:
        if code in job.retry_exit:
            return f"retry rule: exit {code} is in --retry-exit"
        return f"not retried: exit {code} is not in --retry-exit {','.join(map(str, job.retry_exit))}"
    if default:
        return f"retry rule: exit {code} retries (default: every exit code but 126,127)"
    never = ",".join(map(str, job.no_retry_exit))
    return f"retry rule: exit {code} retries (--no-retry-exit {never or 'none'})"

"""`sloth pause` and `sloth resume` of running jobs: ``--job ID...`` stops
(SIGSTOP) or continues (SIGCONT) those jobs' whole process trees; ``LANE
--jobs`` also pauses (resumes) the lane's running jobs, beside the lane's
own pause (claim nothing new), which is what `sloth pause [LANE]` alone
does. Typer-free (the fast path may run it): prints with output.echo,
returns the exit code."""

from __future__ import annotations

from sloth_daemon import errors
from sloth_daemon.cli.connection import call
from sloth_daemon.cli.output import echo, emit_json
from sloth_daemon.cli.values import parse_id

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Optional, Sequence


def pause(*, lane: Optional[Sequence[str]] = None, job: bool = False, jobs: bool = False,
          as_json: bool = False) -> Optional[int]:
    """`sloth pause` (its help and options: commands.py)."""
    return _pause_or_resume("pause", lane, job, jobs, as_json)


def resume(*, lane: Optional[Sequence[str]] = None, job: bool = False, jobs: bool = False,
           as_json: bool = False) -> Optional[int]:
    """`sloth resume` (its help and options: commands.py)."""
    return _pause_or_resume("resume", lane, job, jobs, as_json)


def _pause_or_resume(verb: str, words: Optional[Sequence[str]], job: bool, jobs: bool,
                     as_json: bool) -> Optional[int]:
    if job:
        if jobs:
            raise errors.BadRequest(f"--job names the jobs to {verb}; --jobs is for a lane",
                                    hint=f"`sloth {verb} --job 12 13`, or `sloth {verb} LANE --jobs`.")
        if not words:
            raise errors.BadRequest(f"which jobs? Give their ids after --job, e.g. `sloth {verb} --job 12 13`")
        return _report(call(f"{verb}_jobs", ids=_ids(words)), verb, as_json)
    if words and len(words) > 1:
        raise errors.BadRequest(f"{verb} one lane at a time (got {len(words)} words)",
                                hint=f"For jobs: `sloth {verb} --job {' '.join(words)}`.")
    lane = words[0] if words else None
    if not jobs:  # the lane's own pause, as ever: claim nothing new
        res = call(verb, **({"lane": lane} if lane else {}))
        emit_json(res) if as_json else echo(f"{verb}d {lane or 'all lanes'}")
        return 0
    # LANE --jobs: the lane first (nothing new starts), then its running jobs
    # (resume: the jobs first, then the lane's new ones may start).
    what = {"lane": lane} if lane else {}
    if verb == "pause":
        call("pause", **what)
        res = call("pause_jobs", **what)
    else:
        res = call("resume_jobs", **what)
        call("resume", **what)
    if not as_json:
        echo(f"{verb}d {lane or 'all lanes'}")
    return _report(res, verb, as_json)


def _ids(values: Sequence[str]) -> list[int]:
    out = []
    for v in values:
        out += [parse_id(p) for p in v.replace(",", " ").split()]
    return out


def _report(res: dict[str, Any], verb: str, as_json: bool) -> Optional[int]:
    """As many_jobs.report's: each job changed on stdout, each left alone on stderr
    with why (exit 6); nothing changed at all and something was left: an error."""
    if as_json:
        emit_json(res)
    elif res["skipped"] and not res["jobs"]:
        raise errors.IllegalTransition("; ".join(s["why"] for s in res["skipped"][:5]),
                                       hint="See their states with `sloth show ID...`.")
    else:
        for j in res["jobs"]:
            echo(f"job {j['id']} {'paused' if verb == 'pause' else 'resumed'}")
    for s in [] if as_json else res["skipped"]:
        echo(f"sloth: job {s['id']} left alone: {s['why']}", err=True)
    return errors.EXIT_CONFLICT if res["skipped"] else None

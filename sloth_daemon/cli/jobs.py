"""Commands on jobs: add, ls, show, logs, wait, cancel, retry, pause, resume, prune."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, Callable, List, Optional

import typer

from .. import errors
from .app import app, call, connect, duration, emit_json, handles_errors, parse_id, paths


# --------------------------------------------------------------------- add
@app.command(context_settings={"allow_interspersed_args": False})
@handles_errors
def add(
    command: Optional[List[str]] = typer.Argument(None, help="The command and its arguments (after --)."),
    lane: str = typer.Option("default", "--lane", "-l", help="Lane (each has its own concurrency)."),
    priority: int = typer.Option(0, "--priority", "-p", help="Higher runs first within a lane."),
    max_attempts: Optional[int] = typer.Option(
        None, "--max-attempts", help="Tries before failed (default from config)."),
    lease: Optional[str] = typer.Option(None, "--lease", help="Lease length, e.g. 1m (default from config)."),
    timeout: Optional[str] = typer.Option(
        None, "--timeout", "-t", help="Kill the job's process tree after this, e.g. 2h."),
    delay: Optional[str] = typer.Option(None, "--delay", help="Do not start before this long from now, e.g. 10m."),
    at: Optional[str] = typer.Option(None, "--at", help="Do not start before this time (HH:MM or ISO)."),
    key: Optional[str] = typer.Option(
        None, "--key", "-k", help="Idempotency key: if an unfinished job has it, reuse that job."),
    label: Optional[str] = typer.Option(None, "--label", help="A short name shown in listings."),
    cwd: Optional[Path] = typer.Option(None, "--cwd", help="Working directory (default: the current one)."),
    shell: bool = typer.Option(False, "--shell", "-s", help="Run the command through /bin/sh -c."),
    stdin: bool = typer.Option(False, "--stdin", help="Read many commands, one shell line each, from stdin."),
    from_file: Optional[Path] = typer.Option(None, "--file", "-f", help="Like --stdin but from a file."),
    wait: bool = typer.Option(False, "--wait", "-w", help="Block until the job ends; exit with its outcome."),
    no_start: bool = typer.Option(False, "--no-start", help="Do not start the daemon if it is not running."),
    as_json: bool = typer.Option(False, "--json", help="Print the ids as JSON."),
) -> None:
    """Queue a command: `sloth add -- rsync -a ~/photos /backup`. Prints the job id."""
    many = stdin or from_file is not None
    _check_add_usage(command, many=many, delay=delay, at=at, key=key)
    common = _common_fields(
        lane=lane, priority=priority, cwd=cwd, max_attempts=max_attempts, lease_s=duration(lease, "--lease"),
        timeout_s=duration(timeout, "--timeout"), not_before=_not_before(delay, at), label=label)
    if many:
        jobs, where = _lines_as_jobs(sys.stdin.buffer.read() if stdin else _read_file(from_file),
                                     "--stdin" if stdin else f"--file {from_file}")
    else:
        argv = ["/bin/sh", "-c", " ".join(command or [])] if shell else list(command or [])
        jobs, where = [{"command": argv, "shell": shell, **({"key": key} if key is not None else {})}], _no_line
    ids = _submit(jobs, common, no_start=no_start, where=where)
    if as_json:
        emit_json({"ids": ids} if many else {"id": ids[0]})
    else:
        typer.echo("\n".join(map(str, ids)))
    if wait:
        raise typer.Exit(_wait(ids, quiet=True, as_json=False))


def _check_add_usage(command: Optional[List[str]], *, many: bool, delay: Optional[str], at: Optional[str],
                     key: Optional[str]) -> None:
    if delay is not None and at is not None:
        raise errors.BadRequest("--delay and --at cannot be used together")
    if many and command:
        raise errors.BadRequest("give either a command or --stdin/--file, not both")
    if not many and not command:
        raise errors.BadRequest("no command given",
                                hint="Put the command after --, e.g. `sloth add -- make test`.")
    if many and key is not None:
        raise errors.BadRequest("--key applies to one job; it cannot be used with --stdin/--file")


def _not_before(delay: Optional[str], at: Optional[str]) -> Optional[float]:
    if delay is not None:
        import time

        return time.time() + (duration(delay, "--delay") or 0)
    if at is not None:
        from ..durations import parse_at

        return parse_at(at)
    return None


def _common_fields(*, cwd: Optional[Path], **fields: Any) -> dict[str, Any]:
    """What every job of one `sloth add` shares: the caller's folder and
    environment, and the options given (those not given are left out, so
    the daemon's defaults apply)."""
    from ..paths import caller_cwd

    common = {"cwd": caller_cwd(cwd), "env": dict(os.environ), **fields}
    return {k: v for k, v in common.items() if v is not None}


def _lines_as_jobs(data: bytes, source: str) -> tuple[list[dict[str, Any]], Callable[[int], str]]:
    """One job per non-blank line, and where each came from ("line 7 of --stdin")."""
    from ..shellwords import line_job

    # Bytes that are not UTF-8 pass through as in argv (surrogateescape), not a traceback.
    text = data.decode("utf-8", "surrogateescape")
    numbered = [(n, ln) for n, ln in enumerate(text.splitlines(), 1) if ln.strip()]
    if not numbered:
        raise errors.BadRequest("no commands on input (one per line)")
    return [line_job(ln) for _, ln in numbered], lambda i: f"line {numbered[i][0]} of {source}"


def _no_line(i: int) -> str:
    return ""


def _read_file(p: Optional[Path]) -> bytes:
    try:
        return Path(p).read_bytes()  # type: ignore[arg-type]
    except OSError as e:
        raise errors.BadRequest(f"cannot read {p}: {e.strerror or e}") from None


def _submit(jobs: list[dict[str, Any]], common: dict[str, Any], *, no_start: bool,
            where: Callable[[int], str]) -> list[int]:
    """All or none (submit.py): checked before a daemon is started or a byte sent."""
    from .. import submit

    submit.check(jobs, common, where=where)
    parts = submit.frames(jobs, common, where=where)
    return submit.submit(jobs, common, parts, lambda: _connect_or_start(no_start))


def _connect_or_start(no_start: bool):  # noqa: ANN202 - a Client; lazy import keeps start-up lean
    try:
        return connect()
    except errors.DaemonNotRunning:
        if no_start:
            raise
    pid = _start_daemon()
    typer.echo(f"sloth: started the daemon (pid {pid})", err=True)
    return connect()


def _start_daemon(timeout_s: float = 10.0) -> int:
    from ..launcher import start_background

    return start_background(paths(), timeout_s=timeout_s)


# ---------------------------------------------------------------- listings
@app.command("ls")
@handles_errors
def ls(
    state: Optional[List[str]] = typer.Option(None, "--state", "-s", help="Only these states (repeatable)."),
    lane: Optional[str] = typer.Option(None, "--lane", "-l", help="Only this lane."),
    all_: bool = typer.Option(
        False, "--all", "-a", help="Include finished jobs (default: queued and running, plus the last 10 finished)."),
    limit: int = typer.Option(200, "--limit", "-n", help="At most this many (newest)."),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """List jobs: queued and running ones, and the most recently finished."""
    from .. import render
    from ..models import JobState

    for s in state or []:  # bad usage is exit 2 whether or not the daemon runs
        if s not in JobState._value2member_map_:
            raise errors.BadRequest(f"unknown state {s!r}", hint="States: queued, claimed, done, failed, cancelled.")
    if state:
        jobs = call("list", states=state, lane=lane, limit=limit)["jobs"]
    elif all_:
        jobs = call("list", lane=lane, limit=limit)["jobs"]
    else:
        active = call("list", states=["queued", "claimed"], lane=lane, limit=limit)["jobs"]
        recent = call("list", states=["done", "failed", "cancelled"], lane=lane, limit=10)["jobs"]
        jobs = sorted(recent + active, key=lambda j: j["id"])
    if as_json:
        emit_json(jobs)
        return
    if not jobs:
        typer.echo("no jobs")
        return
    rows, states = render.job_rows(jobs)
    typer.echo(render.table(render.JOB_HEADERS, rows, states))


@app.command()
@handles_errors
def show(
    job_id: str = typer.Argument(..., metavar="ID"),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """Show one job and its history (claimed, reclaimed, resumed, failed, ...)."""
    from .. import render

    res = call("show", id=parse_id(job_id))
    if as_json:
        emit_json(res)
    else:
        typer.echo(render.show_job(res["job"], res["events"]))


@app.command()
@handles_errors
def logs(
    job_id: str = typer.Argument(..., metavar="ID"),
    attempt: Optional[int] = typer.Option(None, "--attempt", "-a", help="Which attempt (default: the latest)."),
    follow: bool = typer.Option(False, "--follow", "-f", help="Keep printing output as the job writes it."),
    path_only: bool = typer.Option(False, "--path", help="Print the log file's path instead."),
) -> None:
    """Print a job's output (one log file per attempt, size-capped)."""
    jid = parse_id(job_id)
    args: dict[str, Any] = {"id": jid}
    if attempt is not None:
        args["attempt"] = attempt
    if follow and not path_only:
        out = sys.stdout.buffer
        with connect(timeout_s=None) as c:
            for ev in c.stream("follow", **args):
                if ev.get("kind") == "log":
                    out.write(ev["data"].encode("utf-8", "surrogateescape"))
                    out.flush()
        return
    res = call("logs", **args)
    if path_only:
        typer.echo(res["path"])
        return
    _print_log(jid, res)


def _print_log(jid: int, res: dict[str, Any]) -> None:
    from ..private import open_log

    try:
        with open_log(res["path"]) as f:  # never through a link, only a regular file
            while chunk := f.read(1 << 16):
                sys.stdout.buffer.write(chunk)
        sys.stdout.buffer.flush()
    except FileNotFoundError:  # the attempt has printed nothing (no output, no file)
        if sys.stderr.isatty():
            typer.echo(f"(job {jid} attempt {res['attempt']} has printed nothing)", err=True)
    except BrokenPipeError:
        raise
    except OSError as e:
        raise errors.LogUnreadable(res["path"], e) from None


@app.command("wait")
@handles_errors
def wait_cmd(
    job_ids: List[str] = typer.Argument(..., metavar="ID..."),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """Block until the jobs finish; exit 0 if all are done, 5 if any failed or was cancelled."""
    raise typer.Exit(_wait([parse_id(j) for j in job_ids], quiet=False, as_json=as_json))


def _wait(ids: list[int], *, quiet: bool, as_json: bool) -> int:
    with connect(timeout_s=None) as c:
        final = None
        for ev in c.stream("wait", ids=ids):
            if ev.get("kind") == "end":
                final = ev["result"]
    jobs = final["jobs"] if final else []
    if as_json:
        emit_json(jobs)
    elif not quiet:
        from ..text import showable

        for j in jobs:
            typer.echo(f"{j['id']}\t{j['state']}\t{showable(j.get('message', ''))}")
    bad = [j for j in jobs if j["state"] != "done"]
    return errors.EXIT_JOB_FAILED if bad else 0


# ------------------------------------------------------------ job actions
def _action(op: str, job_id: str, as_json: bool, verb: str) -> None:
    res = call(op, id=parse_id(job_id))
    if as_json:
        emit_json(res)
    else:
        typer.echo(f"job {res['job']['id']} {verb} ({res['job']['state']})")


@app.command()
@handles_errors
def cancel(job_id: str = typer.Argument(..., metavar="ID"), as_json: bool = typer.Option(False, "--json")) -> None:
    """Cancel a queued or running job (a running one has its process tree ended)."""
    _action("cancel", job_id, as_json, "cancelled")


@app.command()
@handles_errors
def retry(job_id: str = typer.Argument(..., metavar="ID"), as_json: bool = typer.Option(False, "--json")) -> None:
    """Put a failed or cancelled job back in the queue with a fresh attempt budget."""
    _action("retry", job_id, as_json, "queued again")


@app.command()
@handles_errors
def pause(
    lane: Optional[str] = typer.Argument(None, help="Lane to pause (default: everything)."),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Stop starting new jobs (in one lane, or all). Running jobs carry on."""
    res = call("pause", **({"lane": lane} if lane else {}))
    emit_json(res) if as_json else typer.echo(f"paused {lane or 'all lanes'}")


@app.command()
@handles_errors
def resume(
    lane: Optional[str] = typer.Argument(None, help="Lane to resume (default: everything)."),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Start jobs again after `sloth pause`."""
    res = call("resume", **({"lane": lane} if lane else {}))
    emit_json(res) if as_json else typer.echo(f"resumed {lane or 'all lanes'}")


@app.command()
@handles_errors
def prune(
    older_than: str = typer.Option("7d", "--older-than", help="Delete finished jobs that ended longer ago than this."),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Delete finished jobs (and their logs) older than a duration."""
    res = call("prune", older_than_s=duration(older_than, "--older-than"))
    emit_json(res) if as_json else typer.echo(f"pruned {res['pruned']} job(s)")



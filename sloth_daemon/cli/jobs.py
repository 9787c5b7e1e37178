"""`sloth add` and what it needs: reading commands, batching, starting the daemon.

The commands that read jobs are look.py's, the ones that act on them
act.py's, waiting and progress watch.py's.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, Callable, List, Optional

import typer

from .. import errors
from .app import app, connect, duration, emit_json, handles_errors, paths


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
    after: Optional[List[str]] = typer.Option(
        None, "--after", help="Run once these jobs are done (ids, e.g. 12,13); cancelled if one fails."),
    after_any: Optional[List[str]] = typer.Option(
        None, "--after-any", help="Run once these jobs have ended, whatever the result."),
    chain: bool = typer.Option(False, "--chain", help="--stdin/--file: each line after the one before succeeds."),
    chain_any: bool = typer.Option(False, "--chain-any", help="--stdin/--file: each line after the one before ends."),
    retry_exit: Optional[str] = typer.Option(
        None, "--retry-exit", help="Retry only these exit codes, e.g. 1,75."),
    no_retry_exit: Optional[str] = typer.Option(
        None, "--no-retry-exit", help="Never retry these exit codes (default 126,127; none to retry all)."),
    anywhere: bool = typer.Option(False, "--anywhere", help="A shared queue: run on any machine (default: this one)."),
    on: Optional[str] = typer.Option(None, "--on", help="A shared queue: run only on this host (or tag)."),
    wait: bool = typer.Option(False, "--wait", "-w", help="Block until the job ends; exit with its outcome."),
    no_start: bool = typer.Option(False, "--no-start", help="Do not start the daemon if it is not running."),
    as_json: bool = typer.Option(False, "--json", help="Print the ids as JSON: {\"ids\": [...]}."),
) -> None:
    """Queue a command: `sloth add -- rsync -a ~/photos /backup`. Prints the job id."""
    from . import add_opts as opts

    many = stdin or from_file is not None
    command, at = opts.stray_words(command, at)
    _check_add_usage(command, many=many, delay=delay, at=at, key=key)
    common = _common_fields(
        lane=lane, priority=priority, cwd=cwd, max_attempts=max_attempts, lease_s=duration(lease, "--lease"),
        timeout_s=duration(timeout, "--timeout"), not_before=opts.not_before(delay, at), label=label,
        **opts.dep_fields(after, after_any), **opts.retry_fields(retry_exit, no_retry_exit),
        **opts.place_fields(anywhere, on))
    if many:
        jobs, where = _lines_as_jobs(sys.stdin.buffer.read() if stdin else _read_file(from_file),
                                     "--stdin" if stdin else f"--file {from_file}")
        jobs = opts.chain(jobs, opts.chain_mode(chain, chain_any))
    elif chain or chain_any:
        raise errors.BadRequest("--chain links the lines of --stdin/--file", hint="For one job use --after ID.")
    else:
        argv = ["/bin/sh", "-c", " ".join(command or [])] if shell else list(command or [])
        jobs, where = [{"command": argv, "shell": shell, **({"key": key} if key is not None else {})}], _no_line
    ids = _submit(jobs, common, no_start=no_start, where=where)
    if wait:
        from .watch import wait_for

        raise typer.Exit(wait_for(ids, stream=sys.stderr, as_json=as_json, json_extra={"ids": ids},
                                  before=None if as_json else "\n".join(map(str, ids))))
    if as_json:
        emit_json({"ids": ids})
    else:
        typer.echo("\n".join(map(str, ids)))


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
    numbered = [(n, ln) for n, ln in enumerate(text.splitlines(), 1)
                if ln.strip() and not ln.lstrip().startswith("#")]
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
    from .add_opts import tell_new_lanes

    submit.check(jobs, common, where=where)
    parts = submit.frames(jobs, common, where=where)
    res = submit.submit(jobs, common, parts, lambda: _connect_or_start(no_start))
    tell_new_lanes(res)
    return list(res["ids"])


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

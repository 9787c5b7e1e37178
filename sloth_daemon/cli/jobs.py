"""`sloth add` as a Typer command: its options and help. What it does with
them is add_run.py's, shared with the fast path (fast.py).

The commands that read jobs are look.py's, the ones that act on them
act.py's, waiting and progress watch.py's.
"""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from sloth_daemon.cli.app import app, handles_errors
from sloth_daemon.cli.complete import job_ids, lanes


# --------------------------------------------------------------------- add
@app.command(context_settings={"allow_interspersed_args": False})
@handles_errors
def add(
    command: Optional[List[str]] = typer.Argument(None, help="The command and its arguments (after --)."),
    lane: str = typer.Option("default", "--lane", "-l", help="Lane (each has its own concurrency).",
                             autocompletion=lanes),
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
        None, "--after", help="Run once these jobs are done (ids, e.g. 12,13; at most 1000); cancelled if one fails.",
        autocompletion=job_ids),
    after_any: Optional[List[str]] = typer.Option(
        None, "--after-any", help="Run once these jobs have ended, whatever the result (at most 1000).",
        autocompletion=job_ids),
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
    from sloth_daemon.cli.add_run import add as run

    code = run(command, lane=lane, priority=priority, max_attempts=max_attempts, lease=lease, timeout=timeout,
               delay=delay, at=at, key=key, label=label, cwd=cwd, shell=shell, stdin=stdin, from_file=from_file,
               after=after, after_any=after_any, chain=chain, chain_any=chain_any, retry_exit=retry_exit,
               no_retry_exit=no_retry_exit, wait=wait, no_start=no_start, as_json=as_json,
               anywhere=anywhere, on=on)
    if code:
        raise typer.Exit(code)

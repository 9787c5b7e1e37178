"""The ``sloth`` command line: a Typer app that is a client of the daemon's socket.

Start-up cost matters (``sloth add`` is run from scripts in loops), so this
module imports only typer and the client at top level; everything else is
imported inside the command that needs it. The daemon is imported only by
``sloth daemon run``.
"""

from __future__ import annotations

import functools
import json
import os
import sys
from pathlib import Path
from typing import Any, Callable, List, Optional

import typer

from . import errors
from .errors import SlothError

app = typer.Typer(
    help="sloth: hand it shell commands and walk away. Jobs survive sleep, crashes and reboots.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
    rich_markup_mode=None,
)
daemon_app = typer.Typer(help="Run, start, stop or inspect the background daemon.", no_args_is_help=True)
app.add_typer(daemon_app, name="daemon")

_DEBUG = False


@app.callback()
def _root(
    debug: bool = typer.Option(False, "--debug", help="Show tracebacks on errors."),
) -> None:
    global _DEBUG
    _DEBUG = debug or bool(os.environ.get("SLOTH_DEBUG"))


def handles_errors(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Print a SlothError as one line plus a hint and exit with its named code."""

    @functools.wraps(fn)
    def wrapper(*a: Any, **kw: Any) -> Any:
        try:
            return fn(*a, **kw)
        except SlothError as e:
            if _DEBUG:
                import traceback

                traceback.print_exc()
            typer.echo(f"sloth: error: {e.message}", err=True)
            if e.hint:
                typer.echo(f"hint: {e.hint}", err=True)
            raise typer.Exit(e.exit_code) from None
        except KeyboardInterrupt:
            raise typer.Exit(130) from None

    return wrapper


def paths():  # noqa: ANN201 - lazy import keeps start-up lean
    from . import paths as p

    return p.resolve()


def connect(*, timeout_s: float | None = 30.0):  # noqa: ANN201
    from .client import Client

    return Client(paths().socket, timeout_s=timeout_s)


def call(op: str, **args: Any) -> Any:
    with connect() as c:
        return c.call(op, **args)


def emit_json(data: Any) -> None:
    typer.echo(json.dumps(data, indent=2, sort_keys=True))


def parse_id(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise errors.BadRequest(f"bad job id {text!r}: ids are whole numbers (see `sloth ls`)") from None
    if v < 1:
        raise errors.BadRequest(f"bad job id {text!r}: ids start at 1")
    return v


def duration(text: Optional[str], what: str) -> Optional[float]:
    if text is None:
        return None
    from .durations import parse_duration

    return parse_duration(text, what=what)


# --------------------------------------------------------------------- add
@app.command(context_settings={"allow_interspersed_args": False})
@handles_errors
def add(
    command: Optional[List[str]] = typer.Argument(None, help="The command and its arguments (after --)."),
    lane: str = typer.Option("default", "--lane", "-l", help="Lane (each has its own concurrency)."),
    priority: int = typer.Option(0, "--priority", "-p", help="Higher runs first within a lane."),
    max_attempts: Optional[int] = typer.Option(None, "--max-attempts", help="Tries before failed (default from config)."),
    lease: Optional[str] = typer.Option(None, "--lease", help="Lease length, e.g. 1m (default from config)."),
    timeout: Optional[str] = typer.Option(None, "--timeout", "-t", help="Kill the job's process tree after this, e.g. 2h."),
    delay: Optional[str] = typer.Option(None, "--delay", help="Do not start before this long from now, e.g. 10m."),
    at: Optional[str] = typer.Option(None, "--at", help="Do not start before this time (HH:MM or ISO)."),
    key: Optional[str] = typer.Option(None, "--key", "-k", help="Idempotency key: if an unfinished job has it, reuse that job."),
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
    from .errors import BadRequest

    if delay is not None and at is not None:
        raise BadRequest("--delay and --at cannot be used together")
    many = stdin or from_file is not None
    if many and command:
        raise BadRequest("give either a command or --stdin/--file, not both")
    if not many and not command:
        raise BadRequest("no command given", hint="Put the command after --, e.g. `sloth add -- make test`.")
    import time

    not_before = None
    if delay is not None:
        not_before = time.time() + (duration(delay, "--delay") or 0)
    elif at is not None:
        from .durations import parse_at

        not_before = parse_at(at)
    workdir = str((cwd or Path.cwd()).absolute())
    if cwd is not None and not Path(workdir).is_dir():
        raise BadRequest(f"--cwd {workdir} is not a folder")
    common: dict[str, Any] = {
        "lane": lane, "priority": priority, "cwd": workdir, "env": dict(os.environ),
        "max_attempts": max_attempts, "lease_s": duration(lease, "--lease"),
        "timeout_s": duration(timeout, "--timeout"), "not_before": not_before, "label": label,
    }
    common = {k: v for k, v in common.items() if v is not None}
    if many:
        if key is not None:
            raise BadRequest("--key applies to one job; it cannot be used with --stdin/--file")
        # Bytes that are not UTF-8 pass through as in argv (surrogateescape), not a traceback.
        text = sys.stdin.buffer.read().decode("utf-8", "surrogateescape") if stdin else _read_file(from_file)
        from .shellwords import line_job

        jobs = [line_job(ln) for ln in text.splitlines() if ln.strip()]
        if not jobs:
            raise BadRequest("no commands on input (one per line)")
    else:
        argv = list(command or [])
        if shell:
            argv = ["/bin/sh", "-c", " ".join(argv)]
        jobs = [{"command": argv, "shell": shell, **({"key": key} if key else {})}]
    ids = _submit(jobs, common, no_start=no_start)
    if as_json:
        emit_json({"ids": ids} if many else {"id": ids[0]})
    else:
        typer.echo("\n".join(map(str, ids)))
    if wait:
        raise typer.Exit(_wait(ids, quiet=True, as_json=False))


def _read_file(p: Optional[Path]) -> str:
    try:
        return Path(p).read_bytes().decode("utf-8", "surrogateescape")  # type: ignore[arg-type]
    except OSError as e:
        raise errors.BadRequest(f"cannot read {p}: {e.strerror or e}") from None


def _submit(jobs: list[dict[str, Any]], common: dict[str, Any], *, no_start: bool) -> list[int]:
    from .client import Client

    sock = paths().socket
    try:
        client = Client(sock)
    except errors.DaemonNotRunning:
        if no_start:
            raise
        pid = _start_daemon()
        typer.echo(f"sloth: started the daemon (pid {pid})", err=True)
        client = Client(sock)
    ids: list[int] = []
    with client:
        for batch in _batches(jobs, common):
            ids += client.call("add", jobs=batch, common=common)["ids"]
    return ids


def _batches(jobs: list[dict[str, Any]], common: dict[str, Any]):  # noqa: ANN202
    """Split into requests that stay well under the 1 MiB frame."""
    budget = (1 << 20) - len(json.dumps(common)) - 4096
    batch: list[dict[str, Any]] = []
    size = 0
    for j in jobs:
        n = _job_size(j)
        if batch and size + n > budget:
            yield batch
            batch, size = [], 0
        batch.append(j)
        size += n
    if batch:
        yield batch


def _job_size(job: dict[str, Any]) -> int:
    """An upper bound of a job's bytes in the frame, at a fifth of json.dumps's cost
    (it was 40% of the client's time for 50,000 --stdin lines). ASCII-escaped
    strings are never shorter than their UTF-8; 64 covers keys and punctuation."""
    from json.encoder import encode_basestring_ascii as q

    return sum(len(q(a)) + 1 for a in job["command"]) + len(q(job.get("key") or "")) + 64


def _start_daemon(timeout_s: float = 10.0) -> int:
    from .launcher import start_background

    return start_background(paths(), timeout_s=timeout_s)


# ---------------------------------------------------------------- listings
@app.command("ls")
@handles_errors
def ls(
    state: Optional[List[str]] = typer.Option(None, "--state", "-s", help="Only these states (repeatable)."),
    lane: Optional[str] = typer.Option(None, "--lane", "-l", help="Only this lane."),
    all_: bool = typer.Option(False, "--all", "-a", help="Include finished jobs (default: queued and running, plus the last 10 finished)."),
    limit: int = typer.Option(200, "--limit", "-n", help="At most this many (newest)."),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """List jobs: queued and running ones, and the most recently finished."""
    from . import render
    from .models import JobState

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
    from . import render

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
    try:
        with open(res["path"], "rb") as f:
            while chunk := f.read(1 << 16):
                sys.stdout.buffer.write(chunk)
        sys.stdout.buffer.flush()
    except FileNotFoundError:  # the attempt has printed nothing (no output, no file)
        if sys.stderr.isatty():
            typer.echo(f"(job {jid} attempt {res['attempt']} has printed nothing)", err=True)
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
        for j in jobs:
            typer.echo(f"{j['id']}\t{j['state']}\t{j.get('message', '')}")
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


@app.command()
@handles_errors
def config(as_json: bool = typer.Option(False, "--json"), example: bool = typer.Option(False, "--example", help="Print an example config file.")) -> None:
    """Show the effective settings and where each comes from."""
    from . import config as cfg

    if example:
        typer.echo(cfg.EXAMPLE, nl=False)
        return
    p = paths()
    s = cfg.load(p.config_file)
    d = s.as_dict()
    d["paths"] = p.as_dict()
    if as_json:
        emit_json(d)
        return
    typer.echo(f"config file: {p.config_file}{'' if p.config_file.exists() else ' (not present; defaults apply)'}")
    for k, v in d["settings"].items():
        typer.echo(f"  {k:<20} {v['value']!s:<12} ({v['source']})")
    typer.echo("lanes:")
    for k, v in d["lanes"].items():
        typer.echo(f"  {k:<20} {v['concurrency']!s:<12} ({v['source']})")
    typer.echo("paths:")
    for k, v in d["paths"].items():
        typer.echo(f"  {k:<20} {v}")


# ------------------------------------------------------------------ daemon
@daemon_app.command("run")
@handles_errors
def daemon_run() -> None:
    """Run the daemon in the foreground (what the login service runs)."""
    from .daemon import main as daemon_main

    raise typer.Exit(daemon_main())


@daemon_app.command("start")
@handles_errors
def daemon_start(as_json: bool = typer.Option(False, "--json")) -> None:
    """Start the daemon in the background if it is not running."""
    try:
        st = call("status")
        msg, pid = "already running", st["pid"]
    except errors.DaemonNotRunning:
        pid = _start_daemon()
        msg = "started"
    emit_json({"pid": pid, "state": msg}) if as_json else typer.echo(f"sloth daemon {msg} (pid {pid})")


@daemon_app.command("stop")
@handles_errors
def daemon_stop(
    timeout: str = typer.Option("60s", "--timeout", help="How long to wait for running jobs to be interrupted."),
) -> None:
    """Stop the daemon: running jobs are interrupted and requeued, not failed."""
    from .launcher import wait_gone

    st = call("status")
    call("shutdown")
    if not wait_gone(st["pid"], duration(timeout, "--timeout") or 60):
        raise errors.SlothError(f"daemon pid {st['pid']} did not exit in time", hint="Check `sloth daemon status`.")
    typer.echo(f"sloth daemon stopped (pid {st['pid']})")


@daemon_app.command("status")
@handles_errors
def daemon_status(as_json: bool = typer.Option(False, "--json")) -> None:
    """Show pid, uptime, version, paths, jobs by state and the last sleep/resume seen."""
    from .durations import format_duration, local_time

    st = call("status")
    if as_json:
        emit_json(st)
        return
    typer.echo(f"sloth daemon {st['version']} running, pid {st['pid']}, up {format_duration(st['uptime_s'])}")
    typer.echo("jobs:   " + "  ".join(f"{k} {v}" for k, v in st["counts"].items()))
    lanes = st.get("lanes", {})
    typer.echo("lanes:  " + "  ".join(
        f"{k} {v['running']}/{v['concurrency']}{' (paused)' if v['paused'] else ''}" for k, v in lanes.items()))
    if st.get("paused_all"):
        typer.echo("paused: all lanes")
    j = st.get("last_jump")
    typer.echo("resume: " + (f"{j['describe']} at {local_time(j['at'])}" if j else "none seen"))
    c = st.get("clock", {})
    typer.echo(f"clock:  checked every {format_duration(c.get('check_interval_s', 0))}"
               f"{', timerfd' if c.get('timerfd') else ''}")
    for k, v in st["paths"].items():
        typer.echo(f"{k + ':':<10}{v}")


def _register_extras() -> None:
    try:
        from .cli_service import register
    except ImportError:  # pragma: no cover - during development only
        return
    register(app, handles_errors)


_register_extras()


def main() -> None:
    _only_the_command_named(sys.argv[1:2])
    app(prog_name="sloth")


def _only_the_command_named(first: list[str]) -> None:
    """Typer turns every registered command into a click command on each run
    (~5 ms of signature inspection, 6% of a `sloth add`); a run needs one.
    Keep only the command named first on the line. Anything else (an option
    first, a typo, shell completion) keeps them all, for help and suggestions."""
    if not first or "_SLOTH_COMPLETE" in os.environ:
        return
    cmds = [c for c in app.registered_commands if (c.name or c.callback.__name__.replace("_", "-")) == first[0]]
    groups = [g for g in app.registered_groups if g.name == first[0]]
    if cmds or groups:
        app.registered_commands, app.registered_groups = cmds, groups

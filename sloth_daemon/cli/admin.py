"""Commands on the daemon and its settings: config, daemon run|start|stop|status."""

from __future__ import annotations

import typer

from .. import errors
from .app import app, call, daemon_app, duration, emit_json, handles_errors, paths
from .jobs import _start_daemon


@app.command()
@handles_errors
def config(
    as_json: bool = typer.Option(False, "--json"),
    example: bool = typer.Option(False, "--example", help="Print an example config file."),
) -> None:
    """Show the effective settings and where each comes from."""
    from .. import config as cfg

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
    from ..daemon import main as daemon_main

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
    from ..launcher import wait_gone

    grace = duration(timeout, "--timeout") or 60
    pid = call("shutdown")["pid"]  # asks nothing of the database: works whatever happened to it
    if not wait_gone(pid, grace):
        raise errors.SlothError(f"daemon pid {pid} did not exit in time", hint="Check `sloth daemon status`.")
    typer.echo(f"sloth daemon stopped (pid {pid})")


@daemon_app.command("status")
@handles_errors
def daemon_status(as_json: bool = typer.Option(False, "--json")) -> None:
    """Show pid, uptime, version, paths, jobs by state and the last sleep/resume seen."""
    from ..durations import format_duration, local_time

    st = call("status")
    if as_json:
        emit_json(st)
        return
    typer.echo(f"sloth daemon {st['version']} running, pid {st['pid']}, up {format_duration(st['uptime_s'])}")
    problem = (st.get("queue") or {}).get("problem")
    if problem:
        typer.echo(f"QUEUE:  {problem}; it takes no writes (see `sloth doctor`)")
    counts = st.get("counts") or {}
    typer.echo("jobs:   " + ("  ".join(f"{k} {v}" for k, v in counts.items()) or "unknown"))
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


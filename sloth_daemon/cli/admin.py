"""Commands on the daemon and its settings: config, daemon start|stop|restart|reload|status
(`daemon run` is launcher.run_foreground). Their options are declared in commands.py."""

from __future__ import annotations

from typing import Any

import typer

from sloth_daemon import errors
from sloth_daemon.cli.app import call, call_or_read, duration, emit_json, paths
from sloth_daemon.cli.add_run import start_daemon as _start_daemon


def config(*, as_json: bool, example: bool) -> None:
    """`sloth config` (its help and options: commands.py)."""
    from sloth_daemon import config as cfg

    if example:
        typer.echo(cfg.EXAMPLE, nl=False)
        return
    p = paths()
    import json

    # A broken file is an error even while the daemon runs; JSON-shaped, to compare with the daemon's answer.
    file = json.loads(json.dumps(cfg.load(p.config_file).as_dict()))
    d = call_or_read("config")
    d["paths"] = p.as_dict()
    d["file_differs"] = d["settings"] != file["settings"] or d["lanes"] != file["lanes"]
    emit_json(d) if as_json else _print_config(d, p.config_file)


def _print_config(d: dict[str, Any], file: Any) -> None:
    typer.echo(f"config file: {file}{'' if file.exists() else ' (not present; defaults apply)'}")
    if d["file_differs"]:
        typer.echo("  (the file has changed since the daemon read it: `sloth daemon reload` applies it)")
    queue = d.get("queue")
    if queue:  # read without a daemon, and the queue did not answer: say why, show the settings anyway
        err = queue["error"]
        typer.echo(f"queue: {queue['where']} cannot be read: {err['message']}")
        if err.get("hint"):
            typer.echo(f"  hint: {err['hint']}")
        typer.echo("  (lanes below as config.toml sets them; `sloth lane set` changes kept in the queue are not shown)")
    from sloth_daemon.config import DURATION_KEYS

    for k, v in d["settings"].items():
        shown = _duration(v["value"]) if k in DURATION_KEYS else _shown(v["value"])
        typer.echo(f"  {k:<20} {shown:<12} ({v['source']})")
    typer.echo("lanes:")
    for k, v in d.get("lanes_in_force", d["lanes"]).items():
        typer.echo(f"  {k:<20} {v['concurrency']!s:<12} ({v['source']})")
    typer.echo("paths:")
    for k, v in d["paths"].items():
        typer.echo(f"  {k:<20} {v}")


def _duration(v: object) -> str:
    """A duration as a config file writes it (``1m``, ``7d``, ``1m30s``),
    not as the seconds it is kept in (--json keeps those)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return _shown(v)
    if v != int(v):
        return f"{v:g}s"  # 0.2s, 1.5s: exact, as a file writes them
    parts, rest = [], int(v)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        n, rest = divmod(rest, size)
        if n:
            parts.append(f"{n}{unit}")
    return "".join(parts) or "0s"


def _shown(v: object) -> str:
    if isinstance(v, (list, tuple)):
        return ", ".join(map(str, v)) or "(none)"
    return repr(v) if v == "" else str(v)


# ------------------------------------------------------------------ daemon


def daemon_start(*, as_json: bool) -> None:
    """`sloth daemon start` (its help and options: commands.py)."""
    try:
        st = call("status")
        msg, pid = "already running", st["pid"]
    except errors.DaemonNotRunning:
        pid = _start_daemon()
        msg = "started"
    emit_json({"pid": pid, "state": msg}) if as_json else typer.echo(f"sloth daemon {msg} (pid {pid})")


def daemon_stop(*, keep_jobs: bool, timeout: str) -> None:
    """`sloth daemon stop` (its help and options: commands.py)."""
    pid, n = _stop(keep_jobs, duration(timeout, "--timeout") or 60)
    typer.echo(f"sloth daemon stopped (pid {pid}); " + (
        f"{n} running job(s) left running for the next daemon" if keep_jobs else
        f"{n} running job(s) stopped and queued again, not failed (`sloth daemon stop --keep-jobs` leaves "
        "them running)" if n else "no job was running"))


def daemon_restart(*, timeout: str) -> None:
    """`sloth daemon restart` (its help and options: commands.py)."""
    old, n = _stop(True, duration(timeout, "--timeout") or 60)
    new = _start_daemon()
    typer.echo(f"sloth daemon restarted (pid {old} -> {new}); {n} running job(s) handed over")


def _stop(keep_jobs: bool, timeout_s: float) -> tuple[int, int]:
    """Ask the daemon to exit and wait until it has: (its pid, running jobs)."""
    from sloth_daemon.cli.launcher import wait_gone

    res = call("shutdown", keep_jobs=keep_jobs)  # asks nothing of the database: works whatever happened to it
    pid = res["pid"]
    if not wait_gone(pid, timeout_s):
        raise errors.SlothError(f"daemon pid {pid} did not exit in time", hint="Check `sloth daemon status`.")
    return pid, int(res.get("running", 0))


def daemon_reload(*, as_json: bool) -> None:
    """`sloth daemon reload` (its help and options: commands.py)."""
    res = call("reload")
    if as_json:
        emit_json(res)
        return
    for line in res["changed"] + res["notes"]:
        typer.echo(line)
    typer.echo(f"reloaded {res['file']}" + ("" if res["changed"] or res["notes"] else ": nothing changed"))


def daemon_status(*, as_json: bool) -> None:
    """`sloth daemon status` (its help and options: commands.py)."""
    from sloth_daemon.durations import format_duration, local_time

    st = call("status")
    if as_json:
        emit_json(st)
        return
    typer.echo(f"sloth daemon {st['version']} running, pid {st['pid']}, up {format_duration(st['uptime_s'])}")
    pairs: list[tuple[str, str]] = []
    problem = (st.get("queue") or {}).get("problem")
    if problem:
        pairs.append(("QUEUE", f"{problem}; it takes no writes (see `sloth doctor`)"))
    counts = st.get("counts") or {}
    pairs.append(("jobs", "  ".join(f"{k} {v}" for k, v in counts.items()) or "unknown"))
    lanes = st.get("lanes", {})
    pairs.append(("lanes", "  ".join(
        f"{k} {v['running']}/{v['concurrency']}{' (paused)' if v['paused'] else ''}" for k, v in lanes.items())))
    if st.get("paused_all"):
        pairs.append(("paused", "all lanes"))
    j = st.get("last_jump")
    pairs.append(("resume", f"{j['describe']} at {local_time(j['at'])}" if j else "none seen"))
    c = st.get("clock", {})
    pairs.append(("clock", f"checked every {format_duration(c.get('check_interval_s', 0))}"
                           f"{', timerfd' if c.get('timerfd') else ''}"))
    pairs.append(("keeper", _keeper_line(st.get("keeper") or {})))
    pairs += [(k, str(v)) for k, v in st["paths"].items()]
    width = max(len(k) for k, _ in pairs) + 2  # "key: value", the values in one column
    for k, v in pairs:
        typer.echo(f"{k + ':':<{width}}{v}")


def _keeper_line(k: dict[str, Any]) -> str:
    """The keeper as `daemon status` shows it: who it is and what it holds, or why there is none."""
    if k.get("pid") is None:
        return f"NONE CONNECTED: {k.get('problem') or 'unknown (an older daemon does not say)'}"
    runs = k.get("runs")
    return (f"pid {k['pid']}, version {k.get('version') or '?'} (protocol v{k.get('protocol') or '?'}), "
            + (f"{runs} run(s) held" if runs is not None else "runs held unknown"))


"""Commands on the daemon: `sloth daemon run|start|stop|restart|reload|status`
(how a daemon is started in the background: launcher.py). Their options
are declared in commands.py. No Typer: `daemon run` is on the fast path
(it is what the login service runs)."""

from __future__ import annotations

from sloth_daemon import errors
from sloth_daemon.cli.connection import call, start_daemon
from sloth_daemon.cli.output import echo, emit_json
from sloth_daemon.cli.values import duration

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


def daemon_run() -> int:
    """`sloth daemon run` (what the login service runs): the daemon in this
    process, its exit code. Declared fast (commands.py): no Typer and its
    ~5 MiB resident for as long as the daemon runs."""
    from sloth_daemon.daemon.main import main

    return main()


def daemon_start(*, as_json: bool) -> None:
    """`sloth daemon start` (its help and options: commands.py)."""
    try:
        st = call("status")
        msg, pid = "already running", st["pid"]
    except errors.DaemonNotRunning:
        pid = start_daemon()
        msg = "started"
    emit_json({"pid": pid, "state": msg}) if as_json else echo(f"sloth daemon {msg} (pid {pid})")


def daemon_stop(*, keep_jobs: bool, timeout: str) -> None:
    """`sloth daemon stop` (its help and options: commands.py)."""
    pid, n = _stop(keep_jobs, duration(timeout, "--timeout") or 60)
    echo(f"sloth daemon stopped (pid {pid}); " + (
        f"{n} running job(s) left running for the next daemon" if keep_jobs else
        f"{n} running job(s) stopped and queued again, not failed (`sloth daemon stop --keep-jobs` leaves "
        "them running)" if n else "no job was running"))


def daemon_restart(*, timeout: str) -> None:
    """`sloth daemon restart` (its help and options: commands.py)."""
    old, n = _stop(True, duration(timeout, "--timeout") or 60)
    new = start_daemon()
    echo(f"sloth daemon restarted (pid {old} -> {new}); {n} running job(s) handed over")


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
        echo(line)
    echo(f"reloaded {res['file']}" + ("" if res["changed"] or res["notes"] else ": nothing changed"))


def daemon_status(*, as_json: bool) -> None:
    """`sloth daemon status` (its help and options: commands.py)."""
    from sloth_daemon.durations import format_duration, local_time

    st = call("status")
    if as_json:
        emit_json(st)
        return
    echo(f"sloth daemon {st['version']} running, pid {st['pid']}, up {format_duration(st['uptime_s'])}")
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
        echo(f"{k + ':':<{width}}{v}")


def _keeper_line(k: dict[str, Any]) -> str:
    """The keeper as `daemon status` shows it: who it is and what it holds, or why there is none."""
    if k.get("pid") is None and k.get("idle"):
        return "none (it exits once it holds no job; the next job starts one)"
    if k.get("pid") is None:
        return f"NONE CONNECTED: {k.get('problem') or 'unknown (an older daemon does not say)'}"
    runs = k.get("runs")
    return (f"pid {k['pid']}, version {k.get('version') or '?'} (protocol v{k.get('protocol') or '?'}), "
            + (f"{runs} run(s) held" if runs is not None else "runs held unknown"))


"""The systemd --user half of the login service (Linux)."""

from __future__ import annotations

import re
import shlex
import shutil
from pathlib import Path
from typing import Any

from sloth_daemon.errors import ServiceError
from sloth_daemon.paths import Paths
from sloth_daemon.text import shell_command
from sloth_daemon.service.common import (
    MANAGER, UNIT_NAME, Report, env_notes, fill, read_text, remove, run, template, user_name, write_if_changed,
)

_SYSTEMD_SAFE = re.compile(r"[A-Za-z0-9_@%+=:,./-]+")
SOCKET_NAME = "sloth.socket"  # beside the service: systemd pairs them by name


def _systemd_quote(arg: str, *, exec_line: bool = False) -> str:
    if "\n" in arg or "\0" in arg:
        raise ServiceError(f"cannot put {arg!r} in a unit file: it contains a newline")
    out = arg.replace("%", "%%")
    if exec_line:
        out = out.replace("$", "$$")
    if _SYSTEMD_SAFE.fullmatch(arg):
        return out
    return '"' + out.replace("\\", "\\\\").replace('"', '\\"') + '"'


def render_unit(program: list[str], env: dict[str, str], timeout_s: int) -> str:
    # $ is expanded in the arguments only, never in the command's own path.
    argv = [*program, "daemon", "run"]
    exec_start = " ".join(_systemd_quote(a, exec_line=i > 0) for i, a in enumerate(argv))
    env_lines = [f"Environment={_systemd_quote(f'{k}={v}')}" for k, v in env.items()]
    return fill(template(UNIT_NAME), EXEC_START=exec_start, ENVIRONMENT=env_lines,
                TIMEOUT_STOP_S=str(timeout_s))


def render_socket(p: Paths) -> str:
    """sloth.socket: ListenStream at the daemon's socket path (as the
    service's daemon resolves it: the same environment, SLOTH_HOME baked)."""
    path = str(p.socket)
    if "\n" in path or "\0" in path:
        raise ServiceError(f"cannot put {path!r} in a unit file: it contains a newline")
    return fill(template(SOCKET_NAME), SOCKET_PATH=path.replace("%", "%%"))


def socket_path(unit: Path) -> Path:
    return unit.with_name(SOCKET_NAME)


def unit_exec_binary(text: str) -> str | None:
    for line in text.splitlines():
        if line.startswith("ExecStart="):
            try:
                words = shlex.split(line.partition("=")[2])
            except ValueError:
                return None
            return words[0].lstrip("-@:+!").replace("%%", "%") if words else None
    return None


def manager_answers() -> bool | None:
    """Whether this session's systemd user manager answers (a user bus): None
    without systemctl. Without it no `systemctl --user` (so no `sloth
    service install`) can work here -- under su or sudo, in a container."""
    if shutil.which("systemctl") is None:
        return None
    try:
        return run(None, ["systemctl", "--user", "show-environment"], check=False, timeout_s=10).returncode == 0
    except ServiceError:
        return False


def linger() -> str | None:
    """'yes' / 'no' from logind, or None when it cannot be told."""
    if shutil.which("loginctl") is None:
        return None
    try:
        cp = run(None, ["loginctl", "show-user", user_name(), "--property=Linger"], check=False, timeout_s=10)
    except ServiceError:
        return None
    for line in cp.stdout.splitlines():
        if line.startswith("Linger="):
            return line.partition("=")[2].strip() or None
    return None


def linger_advice(report: Report) -> None:
    state, user = linger(), user_name()
    if state == "no":
        report.warnings.append(
            f"linger is off for {user}: the service (and your running jobs) stop when you log out "
            f"and start again only at your next login. Turn it on: {shell_command('loginctl', 'enable-linger', user)}")
    elif state is None:
        report.notes.append("could not tell whether linger is on "
                            f"(`{shell_command('loginctl', 'show-user', user, '--property=Linger')}`); "
                            "without it the service stops at logout")


def install(content: str, p: Paths, path: Path, *, now: bool, socket: str) -> Report:
    """Write the service and its socket (``socket``: render_socket's), reload
    if either changed, enable the socket, then the service."""
    r = Report("linux", str(path))
    r.state = write_if_changed(path, content, r)
    sock_state = write_if_changed(socket_path(path), socket, r)
    if r.state == "unchanged" and sock_state != "unchanged":
        r.state = "updated"
    if r.state != "unchanged":
        run(r, ["systemctl", "--user", "daemon-reload"])
    run(r, ["systemctl", "--user", "enable", *(["--now"] if now else []), SOCKET_NAME])
    run(r, ["systemctl", "--user", "enable", *(["--now"] if now else []), UNIT_NAME])
    if r.state == "updated":
        r.notes.append(f"a running daemon keeps the old unit until `systemctl --user restart {UNIT_NAME}` "
                       "(running jobs keep running: the new daemon takes them over)")
    if not now:
        r.notes.append(f"it starts at your next login; start it now with `systemctl --user start {UNIT_NAME}`")
    env_notes(r, p, "unit (Environment=)")
    linger_advice(r)
    return r


def uninstall(path: Path) -> Report:
    r = Report("linux", str(path), state="not installed")
    if not path.exists():
        return r
    sock = socket_path(path)
    if sock.exists():  # an install of before the socket unit has none
        run(r, ["systemctl", "--user", "disable", "--now", SOCKET_NAME])
    run(r, ["systemctl", "--user", "disable", "--now", UNIT_NAME])
    remove(path, r)
    if sock.exists():
        remove(sock, r)
    run(r, ["systemctl", "--user", "daemon-reload"])
    r.state = "removed"
    return r


def status(path: Path) -> dict[str, Any]:
    """installed?, enabled?, active?, the program it runs, linger."""
    text = read_text(path)
    d: dict[str, Any] = {"platform": "linux", "manager": MANAGER["linux"], "path": str(path),
                         "installed": text is not None, "enabled": None, "active": None}
    if text is not None and shutil.which("systemctl"):
        for key in ("enabled", "active"):
            cp = run(None, ["systemctl", "--user", f"is-{key}", UNIT_NAME], check=False, timeout_s=15)
            d[key] = cp.stdout.strip() or "unknown"
    d["text"], d["binary"] = text, unit_exec_binary(text) if text else None
    d["linger"] = linger()
    return d

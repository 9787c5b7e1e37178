"""The login service, rendered from the templates in the top-level ``service/``:
systemd --user here, launchd in service_launchd.py. Idempotent; every file
written and command run is reported. ``SLOTH_SERVICE_PLATFORM=linux|macos``
(or the hidden ``--platform``) lets tests drive both flavours on Linux."""

from __future__ import annotations

import math
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .errors import BadRequest, ServiceCommandFailed, ServiceError, ServiceManagerMissing, SlothError
from .paths import Paths, resolve

UNIT_NAME = "sloth.service"
LABEL = "io.slothqueue.sloth"
PLATFORM_ENV = "SLOTH_SERVICE_PLATFORM"
MANAGER = {"linux": "systemd --user", "macos": "launchd"}
_PLACEHOLDER = re.compile(r"@[A-Z_]+@")
_SYSTEMD_SAFE = re.compile(r"[A-Za-z0-9_@%+=:,./-]+")


@dataclass
class Report:
    """What install/uninstall did, for the human and the --json view."""

    platform: str
    path: str
    state: str = ""  # installed | updated | unchanged | removed | not installed
    written: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    commands: list[list[str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"manager": MANAGER[self.platform], **asdict(self)}


# ------------------------------------------------------------ shared parts
def platform(override: str | None = None) -> str:
    name = override or os.environ.get(PLATFORM_ENV) or ""
    if name:
        if name not in MANAGER:
            raise BadRequest(f"unknown service platform {name!r}", hint="Use linux or macos.")
        return name
    if sys.platform == "darwin":
        return "macos"
    if sys.platform.startswith("linux"):
        return "linux"
    raise ServiceError(f"no login service for {sys.platform}",
                       hint="Start the daemon with `sloth daemon start` (e.g. from your login script).")


def template(name: str) -> str:
    """A template from the wheel (sloth_daemon.service_templates), else the checkout."""
    try:
        from importlib.resources import files

        return files("sloth_daemon.service_templates").joinpath(name).read_text(encoding="utf-8")
    except Exception:  # noqa: BLE001 - editable install or checkout; older importlib.resources
        here = Path(__file__).resolve().parent
        for f in (here / "service_templates" / name, here.parent / "service" / name):
            if f.is_file():
                return f.read_text(encoding="utf-8")
    raise ServiceError(f"the service template {name} is missing from this install", hint="Reinstall slothqueue.")


def fill(text: str, **values: str | list[str]) -> str:
    """Replace ``@NAME@`` outside comments. A list value replaces the whole
    line (one line per item, same indent; none drops the line)."""
    out: list[str] = []
    in_xml_comment = False
    for line in text.splitlines(keepends=True):
        if "<!--" in line:
            in_xml_comment = True
        if in_xml_comment or line.lstrip().startswith("#"):
            in_xml_comment = in_xml_comment and "-->" not in line
            out.append(line)
            continue
        for key, value in values.items():
            token = f"@{key}@"
            if token not in line:
                continue
            if isinstance(value, list):
                indent = line[: len(line) - len(line.lstrip())]
                line = "".join(f"{indent}{v}\n" for v in value)
            else:
                line = line.replace(token, value)
        if _PLACEHOLDER.search(line):
            raise ServiceError(f"template line {line.strip()!r} has an unfilled placeholder (a bug)")
        out.append(line)
    return "".join(out)


def sloth_program() -> list[str]:
    """The absolute argv prefix that runs this sloth, whatever venv or pipx it lives in."""
    candidates = []
    if sys.argv and os.path.basename(sys.argv[0]) == "sloth":
        candidates.append(os.path.abspath(sys.argv[0]))
    candidates.append(os.path.join(os.path.dirname(os.path.abspath(sys.executable)), "sloth"))
    candidates.append(os.path.abspath(shutil.which("sloth") or "/nonexistent"))
    for c in candidates:
        if os.path.isfile(c) and os.access(c, os.X_OK):
            return [c]
    return [os.path.abspath(sys.executable), "-m", "sloth_daemon"]


def stop_timeout_s(p: Paths) -> int:
    """Seconds the service manager waits after SIGTERM: kill grace plus headroom."""
    from .config import load

    return max(30, math.ceil(float(load(p.config_file).kill_grace_s)) + 20)


def baked_env(p: Paths) -> dict[str, str]:
    return {"SLOTH_HOME": str(p.home)} if p.home else {}


def unit_path(plat: str) -> Path:
    if plat == "macos":
        return Path.home() / "Library" / "LaunchAgents" / f"{LABEL}.plist"
    base = os.environ.get("XDG_CONFIG_HOME", "")
    root = Path(base) if os.path.isabs(base) else Path.home() / ".config"
    return root / "systemd" / "user" / UNIT_NAME


def render(plat: str, *, program: list[str] | None = None, paths: Paths | None = None) -> str:
    p = paths or resolve()
    prog = program or sloth_program()
    if plat == "macos":
        from .service_launchd import render_plist

        return render_plist(prog, p, stop_timeout_s(p))
    return render_unit(prog, baked_env(p), stop_timeout_s(p))


def write_if_changed(path: Path, content: str, report: Report) -> str:
    try:
        old = path.read_text(encoding="utf-8") if path.exists() else None
        if old == content:
            return "unchanged"
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(content, encoding="utf-8")
        os.replace(tmp, path)
    except OSError as e:
        raise ServiceError(f"cannot write {path}: {e.strerror or e}",
                           hint=f"Check the permissions of {path.parent}.") from e
    report.written.append(str(path))
    return "installed" if old is None else "updated"


def remove(path: Path, report: Report) -> None:
    try:
        path.unlink()
    except OSError as e:
        raise ServiceError(f"cannot remove {path}: {e.strerror or e}", hint="Remove it by hand.") from e
    report.removed.append(str(path))


_MISSING_HINT = {
    "systemctl": "`sloth service` needs systemd's user manager. Without it, start the daemon with "
    "`sloth daemon start` (e.g. from your login script); `sloth add` starts it too.",
    "launchctl": "launchctl ships with macOS; on other systems use `sloth daemon start`.",
}


def require(tool: str) -> str:
    exe = shutil.which(tool)
    if exe is None:
        raise ServiceManagerMissing(f"{tool} not found on PATH", hint=_MISSING_HINT.get(tool))
    return exe


def run(report: Report | None, argv: list[str], *, check: bool = True,
        timeout_s: float = 120) -> subprocess.CompletedProcess[str]:
    """Run a service-manager command; record it in ``report`` if given."""
    exe, shown = require(argv[0]), shlex.join(argv)
    try:
        cp = subprocess.run([exe, *argv[1:]], capture_output=True, text=True, timeout=timeout_s,
                            stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise ServiceCommandFailed(f"`{shown}` could not run: {e}") from e
    if report is not None:
        report.commands.append(list(argv))
    if check and cp.returncode != 0:
        said = (cp.stderr.strip() or cp.stdout.strip() or "no output").splitlines()[-1]
        hint = (_BUS_HINT if "bus" in said.lower() else _FAILED_HINT[argv[0]]) if argv[0] in _FAILED_HINT else None
        raise ServiceCommandFailed(f"`{shown}` failed (exit {cp.returncode}): {said}", hint=hint)
    return cp


_BUS_HINT = ("No user session bus: log in directly (not via su/sudo), or export "
             "XDG_RUNTIME_DIR=/run/user/$(id -u) and try again.")
_FAILED_HINT = {
    "systemctl": "See `systemctl --user status sloth.service` and `journalctl --user -u sloth.service -e`.",
    "launchctl": f"See `launchctl print gui/<uid>/{LABEL}` and the daemon log (`sloth config` shows log_dir).",
}


def user_name() -> str:
    import pwd

    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        return os.environ.get("USER") or str(os.getuid())


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
            f"and start again only at your next login. Turn it on: loginctl enable-linger {user}")
    elif state is None:
        report.notes.append(f"could not tell whether linger is on (`loginctl show-user {user} --property=Linger`); "
                            "without it the service stops at logout")


def env_notes(report: Report, p: Paths, where: str) -> None:
    for k, v in baked_env(p).items():
        report.notes.append(f"{k}={v} is baked into the {where}: the service runs that queue")


# ------------------------------------------------------------------ systemd
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


def unit_exec_binary(text: str) -> str | None:
    for line in text.splitlines():
        if line.startswith("ExecStart="):
            try:
                words = shlex.split(line.partition("=")[2])
            except ValueError:
                return None
            return words[0].lstrip("-@:+!").replace("%%", "%") if words else None
    return None


def install(*, now: bool = False, plat: str | None = None) -> Report:
    plat = platform(plat)
    if plat == "macos":
        return _launchd().install(now=now)
    p, path = resolve(), unit_path(plat)
    content = render(plat, paths=p)
    require("systemctl")  # before writing anything
    r = Report(plat, str(path))
    r.state = write_if_changed(path, content, r)
    if r.state != "unchanged":
        run(r, ["systemctl", "--user", "daemon-reload"])
    run(r, ["systemctl", "--user", "enable", *(["--now"] if now else []), UNIT_NAME])
    if r.state == "updated":
        r.notes.append(f"a running daemon keeps the old unit until `systemctl --user restart {UNIT_NAME}` "
                       "(running jobs are interrupted and requeued)")
    if not now:
        r.notes.append(f"it starts at your next login; start it now with `systemctl --user start {UNIT_NAME}`")
    env_notes(r, p, "unit (Environment=)")
    linger_advice(r)
    return r


def uninstall(*, plat: str | None = None) -> Report:
    plat = platform(plat)
    if plat == "macos":
        return _launchd().uninstall()
    path = unit_path(plat)
    r = Report(plat, str(path), state="not installed")
    if not path.exists():
        return r
    run(r, ["systemctl", "--user", "disable", "--now", UNIT_NAME])
    remove(path, r)
    run(r, ["systemctl", "--user", "daemon-reload"])
    r.state = "removed"
    return r


def status(*, plat: str | None = None) -> dict[str, Any]:
    """installed?, path, enabled?, active?, binary still there?, linger."""
    plat = platform(plat)
    if plat == "macos":
        return _launchd().status()
    path = unit_path(plat)
    text = _read(path)
    d: dict[str, Any] = {"platform": plat, "manager": MANAGER[plat], "path": str(path),
                         "installed": text is not None, "enabled": None, "active": None}
    if text is not None and shutil.which("systemctl"):
        for key in ("enabled", "active"):
            cp = run(None, ["systemctl", "--user", f"is-{key}", UNIT_NAME], check=False, timeout_s=15)
            d[key] = cp.stdout.strip() or "unknown"
    d.update(_binary_and_current(plat, text, unit_exec_binary(text) if text else None))
    d["linger"] = linger()
    return d


def _launchd():  # noqa: ANN202 - the macOS half, imported only when used
    from . import service_launchd

    return service_launchd


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def _binary_and_current(plat: str, text: str | None, binary: str | None) -> dict[str, Any]:
    try:
        current = None if text is None else text == render(plat)
    except SlothError:
        current = None
    return {"binary": binary, "binary_exists": bool(binary) and os.path.isfile(binary or ""),
            "current": current}

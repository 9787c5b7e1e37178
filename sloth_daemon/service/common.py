"""Parts shared by the systemd and launchd halves of the login service:
where the file goes, the templates from the top-level ``service/`` folder,
filling them, running the manager's commands and reporting what was done."""

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

from sloth_daemon.errors import BadRequest, ServiceCommandFailed, ServiceError, ServiceManagerMissing
from sloth_daemon.paths import Paths

UNIT_NAME = "sloth.service"
LABEL = "io.slothqueue.sloth"
PLATFORM_ENV = "SLOTH_SERVICE_PLATFORM"
MANAGER = {"linux": "systemd --user", "macos": "launchd"}
UNIT_MAX_BYTES = 1 << 20  # a unit file or plist is a few KiB
_PLACEHOLDER = re.compile(r"@[A-Z_]+@")


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
        pkg = Path(__file__).resolve().parent.parent
        for f in (pkg / "service_templates" / name, pkg.parent / "service" / name):
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
    from sloth_daemon.config import load

    return max(30, math.ceil(float(load(p.config_file).kill_grace_s)) + 20)


def baked_env(p: Paths) -> dict[str, str]:
    return {"SLOTH_HOME": str(p.home)} if p.home else {}


def unit_path(plat: str) -> Path:
    if plat == "macos":
        return Path.home() / "Library" / "LaunchAgents" / f"{LABEL}.plist"
    base = os.environ.get("XDG_CONFIG_HOME", "")
    root = Path(base) if os.path.isabs(base) else Path.home() / ".config"
    return root / "systemd" / "user" / UNIT_NAME


def write_if_changed(path: Path, content: str, report: Report) -> str:
    try:
        old = read_text(path)
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


def env_notes(report: Report, p: Paths, where: str) -> None:
    for k, v in baked_env(p).items():
        report.notes.append(f"{k}={v} is baked into the {where}: the service runs that queue")


def read_text(path: Path) -> str | None:
    """An installed unit file or plist (a link to one is followed), or None:
    missing, unreadable, or not a regular file (a FIFO is refused, not waited on)."""
    from sloth_daemon.safefile import read_file

    try:
        return read_file(path, UNIT_MAX_BYTES, follow=True).decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return None

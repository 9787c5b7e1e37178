"""The launchd LaunchAgent half of the login service (macOS)."""

from __future__ import annotations

import os
import plistlib
import shutil
import time
from pathlib import Path
from typing import Any
from xml.sax.saxutils import escape

from sloth_daemon.errors import ServiceError
from sloth_daemon.paths import Paths, ensure_dir
from sloth_daemon.service.common import (
    LABEL, MANAGER, Report, baked_env, env_notes, fill, read_text, remove, run, template, write_if_changed,
)

PLIST_NAME = f"{LABEL}.plist"
# launchd's own default PATH is /usr/bin:/bin:/usr/sbin:/sbin. Jobs carry the
# environment captured by `sloth add`; this is only for the daemon itself.
STANDARD_PATH = ["/usr/local/bin", "/opt/homebrew/bin", "/usr/bin", "/bin", "/usr/sbin", "/sbin"]


def domain() -> str:
    return f"gui/{os.getuid()}"


def target() -> str:
    return f"{domain()}/{LABEL}"


def render_plist(program: list[str], p: Paths, timeout_s: int) -> str:
    path_dirs = list(dict.fromkeys([os.path.dirname(program[0]), *STANDARD_PATH]))
    env = {"PATH": ":".join(path_dirs), **baked_env(p)}
    env_lines = [x for k, v in env.items() for x in (f"<key>{escape(k)}</key>", f"<string>{escape(v)}</string>")]
    return fill(
        template(PLIST_NAME),
        SLOTH=[f"<string>{escape(a)}</string>" for a in program],
        LOG_FILE=escape(str(p.daemon_log)),
        EXIT_TIMEOUT_S=str(timeout_s),
        ENVIRONMENT=env_lines,
        SOCKET_PATH=escape(str(p.socket)),  # Sockets: launchd listens there, starts us on a connection
    )


def _print() -> tuple[bool, str]:
    cp = run(None, ["launchctl", "print", target()], check=False, timeout_s=15)
    return cp.returncode == 0, cp.stdout


def _bootout(r: Report, wait_s: float) -> None:
    """Unload and wait until launchd has really let go (else bootstrap says 'Input/output error')."""
    run(r, ["launchctl", "bootout", target()], check=False)
    deadline = time.monotonic() + wait_s
    while _print()[0]:
        if time.monotonic() > deadline:
            raise ServiceError(f"launchd still has {LABEL} loaded after bootout",
                               hint=f"Try again in a moment, or `launchctl bootout {target()}` by hand.")
        time.sleep(0.2)


def install(content: str, p: Paths, path: Path, *, now: bool) -> Report:
    ensure_dir(p.log_dir)  # launchd opens StandardOutPath but will not create its folder
    r = Report("macos", str(path))
    r.state = write_if_changed(path, content, r)
    loaded = _print()[0]
    if loaded and r.state != "unchanged":
        _bootout(r, wait_s=60)
        loaded = False
    run(r, ["launchctl", "enable", target()])
    if not loaded:
        run(r, ["launchctl", "bootstrap", domain(), str(path)])
        r.notes.append("launchd starts it as soon as it is loaded (RunAtLoad), and at every login")
    if now:
        run(r, ["launchctl", "kickstart", target()])
    r.notes.append(f"daemon output goes to {p.daemon_log}")
    env_notes(r, p, "plist (EnvironmentVariables)")
    return r


def uninstall(path: Path) -> Report:
    r = Report("macos", str(path), state="not installed")
    loaded = _print()[0]
    if not loaded and not path.exists():
        return r
    if loaded:
        _bootout(r, wait_s=60)
    if path.exists():
        remove(path, r)
    r.state = "removed"
    return r


def plist_binary(text: str) -> str | None:
    try:
        args = plistlib.loads(text.encode("utf-8")).get("ProgramArguments") or []
    except Exception:  # noqa: BLE001 - any unreadable plist means "unknown"
        return None
    return args[0] if args and isinstance(args[0], str) else None


def status(path: Path) -> dict[str, Any]:
    text = read_text(path)
    d: dict[str, Any] = {"platform": "macos", "manager": MANAGER["macos"], "path": str(path),
                         "installed": text is not None, "enabled": None, "active": None}
    if shutil.which("launchctl"):
        loaded, out = _print()
        d["enabled"] = "loaded" if loaded else "not loaded"
        state = _field(out, "state") if loaded else None
        d["active"] = "active" if state == "running" else (state or "inactive")
        d["pid"] = _field(out, "pid")
    d["text"], d["binary"] = text, plist_binary(text) if text else None
    d["linger"] = None
    return d


def _field(out: str, name: str) -> str | None:
    for line in out.splitlines():
        key, sep, value = line.strip().partition(" = ")
        if sep and key == name:
            return value.strip()
    return None

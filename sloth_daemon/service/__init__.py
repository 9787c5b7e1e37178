"""The login service: a systemd --user unit (Linux) or a launchd
LaunchAgent (macOS), rendered from the templates in the top-level
``service/`` folder. Idempotent; every file written and command run is
reported. ``SLOTH_SERVICE_PLATFORM=linux|macos`` (or the hidden
``--platform``) lets tests drive both flavours on Linux."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from sloth_daemon.errors import BadRequest, ServiceError, SlothError
from sloth_daemon.paths import Paths, resolve
from sloth_daemon.service import launchd, systemd
from sloth_daemon.service.common import (
    LABEL, MANAGER, PLATFORM_ENV, UNIT_NAME, Report, baked_env, fill, platform, read_text, require, sloth_program,
    stop_timeout_s, template, unit_path,
)
from sloth_daemon.service.launchd import plist_binary
from sloth_daemon.service.systemd import linger, render_unit, unit_exec_binary, user_name

__all__ = [
    "BadRequest", "LABEL", "MANAGER", "PLATFORM_ENV", "UNIT_NAME", "Report", "ServiceError", "fill",
    "install", "linger", "platform", "plist_binary", "render", "render_unit", "sloth_program", "status",
    "template", "uninstall", "unit_exec_binary", "unit_path", "user_name",
]
_TOOL = {"linux": "systemctl", "macos": "launchctl"}


def render(plat: str, *, program: list[str] | None = None, paths: Paths | None = None) -> str:
    p = paths or resolve()
    prog = program or sloth_program()
    if plat == "macos":
        return launchd.render_plist(prog, p, stop_timeout_s(p))
    return render_unit(prog, baked_env(p), stop_timeout_s(p))


def install(*, now: bool = False, plat: str | None = None) -> Report:
    plat = platform(plat)
    p, path = resolve(), unit_path(plat)
    content = render(plat, paths=p)
    require(_TOOL[plat])  # before writing anything
    files = [(path, content)]
    if plat == "linux":  # and its socket (activation: the daemon started on the first connection)
        files.append((systemd.socket_path(path), systemd.render_socket(p)))
    before = [(f, text, read_text(f)) for f, text in files]
    try:
        if plat == "macos":
            return launchd.install(content, p, path, now=now)
        return systemd.install(content, p, path, now=now, socket=files[1][1])
    except ServiceError as e:  # no user bus, say: leave nothing behind that says otherwise
        undone = "; ".join(u for f, text, was in before if (u := _undo(f, was, text)))
        if not undone:
            raise
        raise type(e)(f"{e.message}; {undone}", e.hint) from e


def _undo(path: Path, before: str | None, wrote: str) -> str:
    """Put ``path`` back as it was before a failed install (and the enable
    link systemd may have made to it): what was done, or "" if nothing."""
    if read_text(path) != wrote or before == wrote:
        return ""  # not ours to undo: the file was already this, or is not
    try:
        if before is None:
            path.unlink()
            link = path.parent / ("sockets.target.wants" if path.suffix == ".socket" else "default.target.wants") \
                / path.name
            if link.is_symlink() and os.path.realpath(link) == os.path.realpath(path.parent / path.name):
                link.unlink()
            return f"nothing was left behind (removed {path})"
        path.write_text(before, encoding="utf-8")
        return f"{path} was put back as it was"
    except OSError as e:
        return f"and {path} could not be put back ({e.strerror or e}): remove it by hand"


def uninstall(*, plat: str | None = None) -> Report:
    plat = platform(plat)
    if plat == "macos":
        require("launchctl")
        return launchd.uninstall(unit_path(plat))
    return systemd.uninstall(unit_path(plat))


def status(*, plat: str | None = None) -> dict[str, Any]:
    """installed?, path, enabled?, active?, binary still there?, current?, linger."""
    plat = platform(plat)
    half = launchd if plat == "macos" else systemd
    d = half.status(unit_path(plat))
    text, binary = d.pop("text"), d["binary"]
    try:
        current = None if text is None else text == render(plat)
    except SlothError:
        current = None
    d.update(binary_exists=bool(binary) and os.path.isfile(binary or ""), current=current)
    return d

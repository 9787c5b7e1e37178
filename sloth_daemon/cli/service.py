"""``sloth service install|uninstall|status``: the login service that
runs the daemon.

Imported only when one of these commands runs (their options are declared
in commands.py); the logic lives in the service package, imported inside
the commands.
"""

from __future__ import annotations

import json
from typing import Any, Optional


from sloth_daemon.cli.output import echo


def _emit_json(data: Any) -> None:
    echo(json.dumps(data, indent=2, sort_keys=True))


def _show_report(r: Any, summary: str) -> None:
    for path in r.written:
        echo(f"wrote {path}")
    for path in r.removed:
        echo(f"removed {path}")
    for argv in r.commands:
        echo("ran: " + " ".join(argv))
    echo(summary)
    for note in r.notes:
        echo(f"note: {note}")
    for warning in r.warnings:
        echo(f"warning: {warning}", err=True)




def install(*, now: bool, print_only: bool, as_json: bool, platform: Optional[str]) -> None:
    """`sloth service install` (its help and options: commands.py)."""
    from sloth_daemon import service

    plat = service.platform(platform)
    if print_only:
        _print_unit(plat, as_json)
        return
    r = service.install(now=now, plat=plat)
    if as_json:
        _emit_json(r.as_dict())
        return
    what = {"installed": "installed", "updated": "updated (file rewritten)",
            "unchanged": "already installed, unchanged"}[r.state]
    _show_report(r, f"sloth service {what}: {service.MANAGER[plat]}, {r.path}")


def uninstall(*, as_json: bool, platform: Optional[str]) -> None:
    """`sloth service uninstall` (its help and options: commands.py)."""
    from sloth_daemon import service

    r = service.uninstall(plat=platform)
    if as_json:
        _emit_json(r.as_dict())
    elif r.state == "not installed":
        echo(f"sloth service not installed ({r.path}): nothing to do")
    else:
        _show_report(r, f"sloth service removed: {service.MANAGER[r.platform]}")


def status(*, as_json: bool, platform: Optional[str]) -> None:
    """`sloth service status` (its help and options: commands.py)."""
    from sloth_daemon import service

    d = service.status(plat=platform)
    if as_json:
        _emit_json(d)
        return
    for key, value in _status_lines(d):
        echo(f"{key + ':':<11}{value}")


def _print_unit(plat: str, as_json: bool) -> None:
    from sloth_daemon import service

    content = service.render(plat)
    if as_json:
        _emit_json({"platform": plat, "path": str(service.unit_path(plat)), "content": content})
    else:
        echo(content, nl=False)


def _status_lines(d: dict[str, Any]) -> list[tuple[str, str]]:
    def yn(v: Any) -> str:
        return "unknown" if v is None else ("yes" if v else "no")

    installed = yn(d["installed"])
    if d["installed"] and d.get("current") is False:
        installed += " (differs from what `sloth service install` writes now; re-run it)"
    lines = [("manager", d["manager"]), ("file", d["path"]), ("installed", installed)]
    if d["installed"]:
        lines += [("enabled", d["enabled"] or "unknown"), ("active", d["active"] or "unknown")]
        if d.get("pid"):
            lines.append(("pid", str(d["pid"])))
        binary = d["binary"] or "unknown"
        lines.append(("binary", f"{binary} ({'exists' if d['binary_exists'] else 'MISSING'})"))
    if d["platform"] == "linux":
        lines.append(("linger", d["linger"] or "unknown"))
    return lines


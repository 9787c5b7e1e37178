"""`sloth config`: the settings in force and where each comes from. On the
fast path (no Typer): it reads config.toml and asks the daemon (or reads
the queue) as every daily command does. Its options: commands.py."""

from __future__ import annotations

from sloth_daemon.cli.connection import call_or_read, paths

from sloth_daemon.cli.output import echo, emit_json

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


def config(*, as_json: bool, example: bool) -> None:
    """`sloth config` (its help and options: commands.py)."""
    if example:
        from sloth_daemon.config import EXAMPLE

        echo(EXAMPLE.removesuffix("\n"))
        return
    # The daemon answers with its paths and whether the file now says other than what is in force (a
    # broken file is its error): this command then reads no TOML, and imports neither config nor paths.
    d = call_or_read("config")
    if d.get("file_error"):  # a broken file is an error even while the daemon runs
        from sloth_daemon.errors import from_dict

        raise from_dict(d["file_error"])
    if "file_differs" not in d:  # a daemon from before it said so
        from sloth_daemon import config as cfg

        p = paths()
        d["paths"], d["file_differs"] = p.as_dict(), cfg.file_differs(d, cfg.load(p.config_file))
    emit_json(d) if as_json else _print_config(d)


def _print_config(d: dict[str, Any]) -> None:
    import os

    file = d["paths"]["config"]
    echo(f"config file: {file}{'' if os.path.exists(file) else ' (not present; defaults apply)'}")
    if d["file_differs"]:
        echo("  (the file has changed since the daemon read it: `sloth daemon reload` applies it)")
    queue = d.get("queue")
    if queue:  # read without a daemon, and the queue did not answer: say why, show the settings anyway
        err = queue["error"]
        echo(f"queue: {queue['where']} cannot be read: {err['message']}")
        if err.get("hint"):
            echo(f"  hint: {err['hint']}")
        echo("  (lanes below as config.toml sets them; `sloth lane set` changes kept in the queue are not shown)")
    from sloth_daemon.checks import DURATION_KEYS

    for k, v in d["settings"].items():
        shown = _duration(v["value"]) if k in DURATION_KEYS else _shown(v["value"])
        echo(f"  {k:<20} {shown:<12} ({v['source']})")
    echo("lanes:")
    for k, v in d.get("lanes_in_force", d["lanes"]).items():
        echo(f"  {k:<20} {v['concurrency']!s:<12} ({v['source']})")
    resources = d.get("resources_in_force", d.get("resources")) or {}
    echo("resources:" + ("" if resources else " (none: [resources] in the file names them)"))
    for k, v in resources.items():
        echo(f"  {k:<20} {_shown(v['tokens']):<12} ({v['source']})")
    for k, v in (d.get("resource_opts") or {}).items():  # [resources.NAME] tables: shares, order, ...
        echo(f"  {k + ' (table)':<20} " + ", ".join(f"{o} = {_shown(x)}" for o, x in v.items()))
    echo("paths:")
    for k, v in d["paths"].items():
        echo(f"  {k:<20} {v}")


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

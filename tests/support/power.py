"""A fake /sys/class/power_supply: a tree of supply folders, and the
argv prefix that runs a process in a private mount namespace where the tree
is bind-mounted over the real one (its children, the keeper and the jobs,
inherit the namespace). Plugging the charger in is a write to ``online``."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

TARGET = "/sys/class/power_supply"


def can_unshare() -> str | None:
    """Why a private mount namespace cannot be had here (None: it can)."""
    if shutil.which("unshare") is None:
        return "unshare is not installed"
    p = subprocess.run(["unshare", "--mount", "--propagation", "private", "true"], capture_output=True, text=True)
    return None if p.returncode == 0 else f"unshare --mount is not permitted here: {p.stderr.strip()}"


def fake_power(root: Path, *, online: bool, percent: int = 55) -> Path:
    """A power-supply tree: one system battery, one mains adapter."""
    (root / "BAT0").mkdir(parents=True)
    (root / "BAT0" / "type").write_text("Battery\n")
    (root / "BAT0" / "capacity").write_text(f"{percent}\n")
    (root / "ACAD").mkdir()
    (root / "ACAD" / "type").write_text("Mains\n")
    plug(root, online)
    return root


def plug(root: Path, online: bool) -> None:
    """The charger in (``online``) or out."""
    (root / "BAT0" / "status").write_text("Charging\n" if online else "Discharging\n")
    (root / "ACAD" / "online").write_text("1\n" if online else "0\n")


def over_power(tree: Path) -> list[str]:
    """The argv prefix that runs a command where /sys/class/power_supply is ``tree``."""
    script = f"mkdir -p {TARGET} 2>/dev/null; mount --bind {tree} {TARGET} && exec \"$@\""
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh"]

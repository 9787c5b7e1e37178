"""``which``: a program on PATH, as ``shutil.which`` finds it, without
importing shutil (it imports bz2 and lzma: ~0.6 MB resident in a daemon
that never archives; docs/idle.md)."""

from __future__ import annotations

import os


def which(cmd: str, path: str | None = None) -> str | None:
    """The path of executable ``cmd`` (a name looked up on PATH, or a path
    with a slash checked as it is), or None."""
    def runnable(p: str) -> bool:
        return os.path.exists(p) and os.access(p, os.F_OK | os.X_OK) and not os.path.isdir(p)

    if os.path.dirname(cmd):
        return cmd if runnable(cmd) else None
    dirs = (os.environ.get("PATH", os.defpath) if path is None else path).split(os.pathsep)
    for d in dirs:
        full = os.path.join(d or os.curdir, cmd)
        if runnable(full):
            return full
    return None

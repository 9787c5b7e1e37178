"""A sloth of another user, for tests run as root: its folder, its daemon.

The other user is ``nobody`` (uid 65534: it has a name, which the messages
under test must show). Our interpreter may live where that user cannot go
(a venv's python linked into root's pyenv), so the daemon runs on an
interpreter of the same version that it may run, with this checkout and
our site-packages on PYTHONPATH. Every process whose environment carries
the folder is reaped at the end.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

from tests.support.harness import alive, processes_with_env

NOBODY = 65534
REPO = Path(__file__).resolve().parents[2]


def as_user(uid: int, *argv: str) -> list[str]:
    return ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", *argv]


def python_for(uid: int) -> str | None:
    """An interpreter of our version that ``uid`` may run, or None."""
    want = f"{sys.version_info.major}.{sys.version_info.minor}"
    for exe in (sys.executable, shutil.which(f"python{want}") or "", f"/usr/bin/python{want}"):
        if not exe:
            continue
        p = subprocess.run(as_user(uid, "env", "-i", "PATH=/usr/bin:/bin", exe, "-I", "-c", "import sys; print('%d.%d' % sys.version_info[:2])"),
                           capture_output=True, text=True, cwd="/", timeout=30)
        if p.returncode == 0 and p.stdout.strip() == want:
            return exe
    return None


class OtherUsersSloth:
    """``home``: a SLOTH_HOME of ``uid``'s (0700, theirs) in a folder all may enter."""

    def __init__(self, uid: int = NOBODY) -> None:
        self.uid = uid
        self.root = Path(tempfile.mkdtemp(prefix="slo-"))
        os.chmod(self.root, 0o755)
        self.home = self.root / "h"
        self.home.mkdir(mode=0o700)
        os.chown(self.home, uid, uid)
        python = python_for(uid)
        if python is None:
            raise RuntimeError(f"no Python {sys.version_info[:2]} that uid {uid} may run")
        self.python = python
        site = sysconfig.get_paths()["purelib"]
        self.env = {"PATH": "/usr/bin:/bin", "HOME": str(self.home), "SLOTH_HOME": str(self.home),
                    "PYTHONPATH": f"{REPO}:{site}", "LANG": "C.UTF-8", "NO_COLOR": "1"}

    def sloth(self, *args: str) -> subprocess.CompletedProcess[str]:
        """`sloth ARGS` as that user."""
        return subprocess.run(as_user(self.uid, "env", "-i", *(f"{k}={v}" for k, v in self.env.items()),
                                      self.python, "-m", "sloth_daemon", *args),
                              capture_output=True, text=True, cwd="/", timeout=60)

    def root_sloth(self, *args: str, input: str | None = None) -> subprocess.CompletedProcess[str]:
        """`sloth ARGS` as us (root), pointed at that user's folder."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("SLOTH_")}
        env.update(SLOTH_HOME=str(self.home), NO_COLOR="1")
        return subprocess.run([sys.executable, "-m", "sloth_daemon", *args], env=env, input=input,
                              capture_output=True, text=True, cwd="/", timeout=60)

    def owners(self) -> dict[str, int]:
        """Every path in the folder and its owner's uid (nothing followed)."""
        out = {}
        for d, dirs, files in os.walk(self.home):
            for n in dirs + files:
                out[os.path.join(d, n)] = os.lstat(os.path.join(d, n)).st_uid
        return out

    def reap(self) -> None:
        self.sloth("daemon", "stop")
        for p in processes_with_env("SLOTH_HOME", str(self.home)):
            try:
                p.send_signal(signal.SIGKILL)
            except Exception:  # noqa: BLE001 - gone already
                pass
        for p in processes_with_env("SLOTH_HOME", str(self.home)):
            if alive(p.pid):
                p.wait(10)
        shutil.rmtree(self.root, ignore_errors=True)

"""Where the floor of the daemon's memory at rest is (docs/idle.md).

    python tests/bench/bench_floor.py [--runs N]

Runs a real daemon (temporary SLOTH_HOME), lets it run jobs and renew
itself at rest, and reads the modules it then holds (its own sys.modules,
through tests/support/modules_probe/). Then, in fresh interpreters of the
same Python, at -O level 0 and at -OO, prints VmRSS of:
  bare      `python -c pass` (what `site` loads included)
  stdlib    + every standard-library module the daemon at rest holds,
            asyncio without ssl (daemon/lean.py) and one SQLite connection
  sloth     + sloth's own modules at rest
beside the renewed daemon's own VmRSS. What is left for sloth under a target
is the target less the stdlib row.
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tests.support.harness import temp_harness  # noqa: E402

PROBE = REPO / "tests" / "support" / "modules_probe"
IMPORTS = r"""
import sys
if sys.argv[1] != "bare":
    import importlib, sqlite3
    names = sys.argv[2].split(",")
    from sloth_daemon.daemon import lean  # noqa: F401  (asyncio without ssl, as the daemon)
    sqlite3.connect(":memory:").execute("select 1").fetchall()
    for n in names:
        if not n.startswith(("sloth_daemon", "__", "_distutils", "sitecustomize")):
            try:
                importlib.import_module(n)
            except ImportError:
                pass
if sys.argv[1] == "sloth":
    for n in names:
        if n.startswith("sloth_daemon"):
            importlib.import_module(n)
print(next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmRSS:")))
"""


def at_rest(jobs: int = 50) -> tuple[list[str], float]:
    """The modules a renewed daemon at rest holds, and its VmRSS (MB)."""
    with temp_harness('keeper_linger_s = "300ms"\n') as h:
        out = h.home / "modules.json"
        h.daemon_env.update({"PYTHONPATH": f"{REPO}:{PROBE}", "SLOTH_TEST_MODULES_OUT": str(out),
                             "SLOTH_RENEW_GROWTH_KB": "0"})
        d = h.start()
        ids = h.add_many([{"command": ["true"]} for _ in range(jobs)])
        h.call("wait", ids=[ids[-1]])
        h.wait_for(lambda: "renewed at rest" in h.daemon_log.read_text(errors="replace"), timeout_s=60,
                   what="a renewal")
        h.wait_ready(d)
        h.call("ping")
        os.kill(d.pid, signal.SIGUSR2)
        h.wait_for(out.exists, timeout_s=10, what="the module list")
        rss = next(int(line.split()[1]) for line in Path(f"/proc/{d.pid}/status").read_text().splitlines()
                   if line.startswith("VmRSS:"))
        return json.loads(out.read_text())["modules"], rss / 1024


def floor(names: list[str], what: str, optimize: bool) -> float:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    cmd = [sys.executable, *(["-OO"] if optimize else []), "-c", IMPORTS, what, ",".join(names)]
    return int(subprocess.run(cmd, env=env, cwd="/", capture_output=True, text=True, check=True).stdout) / 1024


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=2)
    a = ap.parse_args()
    compileall.compile_dir(REPO / "sloth_daemon", quiet=1, optimize=[0, 2])  # as installed, and renewed once
    names, daemon = at_rest()
    print(f"\n## the floor at rest ({a.runs} runs; {sum(n.startswith('sloth_daemon') for n in names)} of sloth's "
          f"modules, {len(names)} in all)\n")
    print("| process | VmRSS | at -OO |")
    print("|---|---|---|")
    for what in ("bare", "stdlib", "sloth"):
        rows = [[floor(names, what, opt) for _ in range(a.runs)] for opt in (False, True)]
        print(f"| {what} | " + " | ".join(f"{min(r):.1f}-{max(r):.1f} MB" for r in rows) + " |")
    print(f"| the renewed daemon at rest (this tree's flags) | {daemon:.1f} MB | |")


if __name__ == "__main__":
    main()

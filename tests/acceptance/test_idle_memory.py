"""What the daemon loads only when a path needs it (issue 34 item 2,
docs/idle.md): having run a job and come to rest, it has mapped no OpenSSL
(asyncio's ssl, hashlib's libcrypto: ~5 MB resident for nothing on a Unix
socket) and no psutil (needed only to look at or end a process that is not
a fresh run's), and its keeper is gone. The control shows that importing
asyncio, hashlib and psutil the ordinary way maps them, so the check can fail.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.harness import TEST_CONFIG, alive

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/PID/maps")

LAZY = ("_ssl.", "_hashlib.", "libssl", "libcrypto", "_psutil_linux")


def mapped_in(maps: str) -> set[str]:
    return {Path(line.split()[-1]).name for line in maps.splitlines() if len(line.split()) >= 6}


def mapped(pid: int) -> set[str]:
    return mapped_in(Path(f"/proc/{pid}/maps").read_text())


def test_a_daemon_that_ran_jobs_and_came_to_rest_has_mapped_no_openssl_and_no_psutil(make_harness):
    control = subprocess.run([sys.executable, "-c", "import asyncio, hashlib, psutil; hashlib.sha256(b'x');"
                              "print(open('/proc/self/maps').read())"], capture_output=True, text=True,
                             check=True).stdout
    assert all(any(n.startswith(name) for n in mapped_in(control)) for name in ("_ssl.", "libcrypto", "_psutil_linux")), \
        "this Python maps no OpenSSL or psutil library: nothing to check"
    h = make_harness(TEST_CONFIG + 'keeper_linger_s = "200ms"\n')
    daemon = h.start()
    keeper = h.keeper_pid()
    ids = h.add_many([{"command": ["sh", "-c", "echo $HOME"], "env": {"HOME": str(h.home), "A": "1"}},
                      {"command": ["true"], "env": {"HOME": str(h.home), "B": "2"}}])  # two environments stored
    for jid in ids:
        h.wait_state(jid, "done")
    h.cli("wait", *map(str, ids), check=True)
    h.wait_for(lambda: not alive(keeper) and h.call("status")["keeper"]["pid"] is None, timeout_s=10,
               what="the keeper let go")
    loaded = mapped(daemon.pid)
    assert not [n for n in loaded if n.startswith(LAZY)], sorted(loaded)

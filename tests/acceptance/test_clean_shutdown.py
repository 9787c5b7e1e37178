"""A daemon that stops or restarts with connections open (a follower, a
waiter, an idle client, the client that asked it to stop) ends them itself
and logs no traceback (issue 20, seen once: CancelledError and "Event loop
is closed" in daemon.log on every restart)."""

from __future__ import annotations

import socket
import subprocess
import sys

NOISE = ("Traceback", "Exception in callback", "Event loop is closed", "CancelledError")


def test_restarts_and_a_stop_with_open_connections_log_no_traceback(harness):
    harness.start()
    jid = harness.add("sh", "-c", "while :; do echo tick; sleep 0.1; done")
    harness.wait_state(jid, "running")
    follow = [subprocess.Popen([sys.executable, "-m", "sloth_daemon", *args], env=harness.env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
              for args in (("logs", "-f", str(jid)), ("wait", str(jid)))]
    idle = socket.socket(socket.AF_UNIX)
    idle.connect(str(harness.socket))
    try:
        harness.wait_for(lambda: harness.call("status")["server"]["open"] >= 4, timeout_s=10,
                         what="the follower, the waiter and the idle client connected")
        for _ in range(2):
            harness.cli("daemon", "restart", check=True)
        harness.cli("daemon", "stop", check=True)
    finally:
        idle.close()
        for p in follow:
            p.kill()
            p.wait(10)
    logs = harness.log_text() + (harness.home / "logs" / "daemon.log").read_text(errors="replace")
    assert logs.count(" stopped") >= 3, logs
    found = [w for w in NOISE if w in logs]
    assert not found, logs

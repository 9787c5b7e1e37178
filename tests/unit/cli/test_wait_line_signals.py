"""`sloth wait`'s live line is redrawn by a thread. A Ctrl-C the kernel
gave to that thread (it may give a process's signal to any thread that
does not block it) left the main thread in its recv, waiting for a frame
that never comes on held jobs: the wait went on after ^C (seen in CI). The
thread must start with SIGINT, SIGTERM and SIGHUP blocked, and the main
thread must not be left with them blocked."""

from __future__ import annotations

import io
import signal
import sys

import pytest

from sloth_daemon.cli.wait import _View

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/task")


def blocked(tid: int) -> int:
    with open(f"/proc/self/task/{tid}/status") as f:
        return int(next(line for line in f if line.startswith("SigBlk:")).split()[1], 16)


def test_the_live_lines_thread_never_takes_a_stop_signal():
    view = _View([1], io.StringIO(), live=True, quiet=True)
    view.update([{"id": 1, "state": "held", "lane": "default"}], initial=True)
    try:
        mask = blocked(view._ticker.native_id)
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            assert mask & (1 << (sig - 1)), f"{sig.name} not blocked in the ticker thread"
        assert not signal.pthread_sigmask(signal.SIG_BLOCK, []) & {signal.SIGINT, signal.SIGTERM}
    finally:
        view.stop()

"""Issue 14, item 2: one `sloth add` queues all its jobs or none, whatever
its size (also past the 1 MiB frame), and after any failure says which.
Through the real CLI and the real daemon."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from sloth_daemon.cli.client import Client
from sloth_daemon.errors import EXIT_NOT_RUNNING, EXIT_USAGE
from sloth_daemon.paths import resolve

pytestmark = pytest.mark.acceptance
NOTHING = "nothing was queued"


def total(h) -> int:
    return sum(h.call("status")["counts"].values())


def frames_taken(h, n: int) -> Any:
    """A wait_for predicate: the daemon has answered ``n`` requests besides
    the status polls themselves (each poll counts itself)."""
    before = h.call("status")["server"]["requests"]
    polls = [0]

    def seen() -> bool:
        polls[0] += 1
        return h.call("status")["server"]["requests"] - before - polls[0] >= n

    return seen


def write_lines(path: Path, n: int, *, bad_at: int | None = None) -> None:
    """n plain command lines of ~45 bytes (n=40,000: 1.8 MB, past one frame)."""
    with open(path, "wb") as f:
        for i in range(1, n + 1):
            line = f"echo line number {i} of a long batch file".encode()
            if i == bad_at:
                line = b"echo a NUL \x00 byte here"
            f.write(line + b"\n")


def test_a_bad_line_anywhere_queues_nothing_and_says_which(harness, home):
    harness.start()
    batch = home / "batch.txt"
    write_lines(batch, 40_000, bad_at=36_935)
    p = harness.cli("add", "--file", str(batch), timeout_s=120)
    assert total(harness) == 0, p.stderr
    assert p.returncode == EXIT_USAGE, p.stderr
    assert "line 36935 of --file" in p.stderr and "NUL" in p.stderr and NOTHING in p.stderr, p.stderr
    assert "Traceback" not in p.stderr and p.stdout == ""

    write_lines(batch, 40_000)  # fixed: the re-run queues each line once
    ids = harness.cli_json("add", "--file", str(batch), timeout_s=120)["ids"]
    assert len(ids) == len(set(ids)) == 40_000 and total(harness) == 40_000
    assert harness.job(ids[-1])["command"] == ["echo", "line", "number", "40000", "of", "a", "long", "batch", "file"]


def test_a_kill_9_of_the_daemon_mid_batch_queues_nothing_of_it(harness, home):
    harness.start()
    harness.call("pause")
    batch = home / "big.txt"
    write_lines(batch, 300_000)  # ~13 MB: a dozen frames
    seen = frames_taken(harness, 3)
    p = subprocess.Popen([sys.executable, "-m", "sloth_daemon", "add", "--no-start", "--file", str(batch)],
                         env=harness.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # Kill once a few frames have been taken, while the rest are still coming.
        harness.wait_for(seen, timeout_s=60, what="a few frames taken")
        harness.kill9()
        out, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    harness.start()
    assert total(harness) == 0, err
    assert p.returncode == EXIT_NOT_RUNNING, err
    assert NOTHING in err and "Traceback" not in err and out == "", err


def test_a_lost_commit_answer_is_asked_for_and_reported_exactly(harness):
    """The daemon commits, the answer never arrives (cut here on purpose):
    the client asks by its batch token and reports the ids it was told."""
    from sloth_daemon.errors import ConnectionLost
    from sloth_daemon.cli.submit import frames, submit

    harness.start()
    p = resolve({"SLOTH_HOME": str(harness.home)})
    jobs: list[dict[str, Any]] = [{"command": ["true", str(i)]} for i in range(5)]
    common = {"cwd": str(harness.home), "env": dict(harness.env)}

    class CutAfterCommit(Client):
        def call(self, op: str, **args: Any) -> Any:
            if op != "commit":
                return super().call(op, **args)
            next(self._exchange(op, args))  # the daemon got it and answered...
            raise ConnectionLost("the daemon closed the connection before answering")  # ...we never heard

    ids = submit(jobs, common, frames(jobs, common, where=str), lambda: CutAfterCommit(p.socket))["ids"]
    assert len(ids) == 5 and [harness.job(i)["command"][1] for i in ids] == ["0", "1", "2", "3", "4"]

    class NeverSent(Client):
        def call(self, op: str, **args: Any) -> Any:
            if op == "commit":
                raise ConnectionLost("the daemon closed the connection before answering")
            return super().call(op, **args)

    with pytest.raises(ConnectionLost, match=NOTHING):
        submit(jobs, common, frames(jobs, common, where=str), lambda: NeverSent(p.socket))
    assert total(harness) == 5


def test_staged_jobs_die_with_their_connection(harness):
    harness.start()
    with Client(harness.socket) as c:
        assert c.call("stage", jobs=[{"command": ["true"]}] * 3, common={"cwd": "/"})["staged"] == 3
    with Client(harness.socket) as c:  # a new connection has nothing staged
        with pytest.raises(Exception, match="nothing to commit"):
            c.call("commit", batch="t1")
        assert c.call("batch", batch="t1") == {"batch": "t1", "queued": False, "ids": []}
    assert total(harness) == 0


def test_no_daemon_and_no_start_says_nothing_was_queued(harness):
    p = harness.cli("add", "--no-start", "--", "true")
    assert p.returncode == EXIT_NOT_RUNNING and NOTHING in p.stderr and "Traceback" not in p.stderr


def test_the_daemon_stopping_mid_send_is_reported_not_hidden(harness, home):
    """SIGTERM while a batch is being sent: the daemon drains and exits; the
    client says nothing was queued (its staged frames went with it)."""
    harness.start()
    batch = home / "big.txt"
    write_lines(batch, 300_000)
    seen = frames_taken(harness, 2)
    p = subprocess.Popen([sys.executable, "-m", "sloth_daemon", "add", "--no-start", "--file", str(batch)],
                         env=harness.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        harness.wait_for(seen, timeout_s=60, what="a few frames taken")
        assert harness.daemon is not None
        os.kill(harness.daemon.pid, signal.SIGTERM)
        out, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    harness.daemon.wait(30)
    assert p.returncode != 0 and NOTHING in err and "Traceback" not in err, err
    harness.start()
    assert total(harness) == 0

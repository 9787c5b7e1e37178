"""The daemon's and the keeper's log (text.log_to_stderr) on a disk that
refuses a write: a real file, refused by the kernel (RLIMIT_FSIZE: EFBIG,
as a full disk's ENOSPC), in a process of its own."""

from __future__ import annotations

import subprocess
import sys

import pytest

CODE = """if 1:
    import logging, os, resource, signal, sys
    from sloth_daemon import text
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # refused with EFBIG, not killed
    text.log_to_stderr(logging.INFO, "%(levelname)s %(message)s")
    log = logging.getLogger("x")
    log.info("before the disk fills")
    room = os.fstat(2).st_size + int(sys.argv[1])
    resource.setrlimit(resource.RLIMIT_FSIZE, (room, resource.RLIM_INFINITY))
    log.warning("a line the disk has no room for")
    log.warning("another")
    resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    log.info("after, with room again")
"""


@pytest.mark.parametrize("room", [0, 10, 30])
def test_a_line_the_disk_refuses_is_dropped_and_the_next_starts_a_line_of_its_own(tmp_path, room):
    """The chaos soak's full disk left "--- Logging error ---" and its
    traceback in a daemon's log (logging's own report of the failed write,
    let out once there was room), and a refused line's start glued to the
    next ("WARNING a INFO after ..."): a reader of the log (doctor, a test,
    a person) takes lines for records."""
    log = tmp_path / "daemon.log"
    with open(log, "wb") as err:
        p = subprocess.run([sys.executable, "-c", CODE, str(room)], stderr=err, timeout=30)
    assert p.returncode == 0
    lines = log.read_text().splitlines()
    assert "Logging error" not in log.read_text() and "Traceback" not in log.read_text()
    assert lines[0] == "INFO before the disk fills" and lines[-1] == "INFO after, with room again", lines
    # what got in of the refused line stands alone (or nothing, room 0)
    assert lines[1:-1] == [("WARNING a line the disk has no room for\n"[:room])], lines

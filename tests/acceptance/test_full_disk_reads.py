"""With no daemon and the disk full, the read-only commands still read
(issue 20, seen once: `ls`/`show`/`status` said "disk I/O error"): a
read-only open must make no file (SQLite's mode=ro makes -wal and -shm)."""

from __future__ import annotations

import os

import pytest

from tests.support.faults import DiskFull
from tests.support.harness import TEST_CONFIG, Harness


@pytest.fixture
def full_home(home):
    disk = DiskFull.mount(home / "h", size_mb=16)
    if disk is None:
        pytest.skip("cannot mount a tmpfs here (needs root)")
    h = Harness(home / "h", config=TEST_CONFIG)
    try:
        yield h, disk
    finally:
        h.reap()
        disk.unmount()


def test_ls_show_and_status_read_a_full_disk_without_a_daemon(full_home):
    h, disk = full_home
    h.start()
    ids = [h.add("echo", f"job {i}") for i in range(3)]
    for i in ids:
        h.wait_state(i, "done")
    assert h.stop() == 0
    assert not os.path.exists(f"{h.home}/queue.db-wal")  # a clean close leaves the file alone
    disk.fill()
    for args in (("ls", "--all"), ("show", str(ids[0])), ("status",), ("logs", str(ids[1]))):
        p = h.cli(*args)
        assert p.returncode == 0, (args, p.stderr)
        assert "disk I/O error" not in p.stderr
    assert "job 1" in h.cli("logs", str(ids[1])).stdout
    assert [j["id"] for j in h.cli_json("ls", "--all")["jobs"]] == sorted(ids, reverse=True)
    assert not os.path.exists(f"{h.home}/queue.db-shm")  # nothing was made beside it

"""The per-attempt log: capped, head and tail kept, the cut said out loud;
only a file it created itself is ever written or streamed."""

import contextlib
import os
import stat
import subprocess
import tempfile

import pytest

from sloth_daemon.keeper.joblog import LogWriter
from sloth_daemon.keeper.jobenv import DAEMON_ONLY_ENV, job_env


def test_small_output_is_kept_whole(tmp_path):
    p = tmp_path / "1.1.log"
    w = LogWriter(p, cap=1000)
    w.write(b"hello\n")
    w.write(b"world\n")
    w.close()
    assert p.read_bytes() == b"hello\nworld\n"


def test_output_up_to_the_cap_is_not_cut(tmp_path):
    p = tmp_path / "x.log"
    w = LogWriter(p, cap=100)
    data = bytes(range(65, 65 + 26)) * 3 + b"0123456789" * 2  # 98 bytes
    for i in range(0, len(data), 7):
        w.write(data[i:i + 7])
    w.close()
    assert p.read_bytes() == data


def test_past_the_cap_head_and_tail_are_kept_and_the_cut_is_named(tmp_path):
    p = tmp_path / "x.log"
    w = LogWriter(p, cap=100)
    data = b"".join(b"%05d\n" % i for i in range(1000))  # 6000 bytes
    for i in range(0, len(data), 13):
        w.write(data[i:i + 13])
    w.close()
    out = p.read_bytes()
    head, _, rest = out.partition(b"\n[sloth] ... ")
    assert head == data[:50]
    note, _, tail = rest.partition(b" ...\n")
    assert b"5900 bytes cut here" in note and b"of 6000" in note
    assert tail == data[-50:]


def test_an_attempt_that_prints_nothing_leaves_no_file(tmp_path):
    p = tmp_path / "1.1.log"
    w = LogWriter(p, cap=100)
    w.write(b"")
    assert w.snapshot() == b""
    w.close()
    assert not p.exists() and w.problem is None


def test_the_file_appears_with_the_first_byte_mode_0600_and_a_snapshot_reads_it(tmp_path):
    p = tmp_path / "1.1.log"
    w = LogWriter(p, cap=100)
    w.write(b"a" * 60)  # 50 to the head on disk, 10 held as tail
    assert p.read_bytes() == b"a" * 50
    assert stat.S_IMODE(p.stat().st_mode) == 0o600
    assert w.snapshot() == b"a" * 60
    w.close()
    assert p.read_bytes() == b"a" * 60


def test_never_appends_to_a_file_that_exists(tmp_path):
    """Not ours: a stale or hostile file. Nothing is added to it, none of
    its bytes are streamed; ours count as lost and the problem says why."""
    p = tmp_path / "x.log"
    p.write_bytes(b"an earlier run of this attempt\n")
    w = LogWriter(p, cap=100)
    w.write(b"new\n")
    assert w.snapshot() == b""  # never the bytes of a file we did not write
    w.close()
    assert p.read_bytes() == b"an earlier run of this attempt\n"
    assert w.problem == f"4 bytes of output lost: {p} exists; not appending to a file sloth did not create"


def test_a_symlink_planted_at_the_path_is_not_followed(tmp_path):
    target = tmp_path / "precious"
    target.write_bytes(b"keep me\n")
    p = tmp_path / "x.log"
    p.symlink_to(target)
    w = LogWriter(p, cap=100)
    w.write(b"x" * 80)
    assert b"keep me" not in w.snapshot()
    w.close()
    assert target.read_bytes() == b"keep me\n"
    assert p.is_symlink()
    assert w.problem == f"80 bytes of output lost: {p} exists; not appending to a file sloth did not create"


def test_a_snapshot_reads_the_file_it_created_not_what_is_at_the_path_now(tmp_path):
    p = tmp_path / "x.log"
    secret = tmp_path / "secret"
    secret.write_bytes(b"S" * 100)
    w = LogWriter(p, cap=20)
    w.write(b"mine" * 5)  # 10 to the head, 10 held as tail
    p.unlink()
    p.symlink_to(secret)  # swapped in under the running writer
    assert w.snapshot() == b"mine" * 5
    w.finish()  # finished: the snapshot is the whole file we wrote, still by descriptor
    assert w.snapshot() == b"mine" * 5
    w.close()
    assert secret.read_bytes() == b"S" * 100


def test_no_folder_is_made_a_missing_one_is_a_problem(tmp_path):
    p = tmp_path / "jobs" / "1.1.log"
    w = LogWriter(p, cap=100)
    w.write(b"hello\n")
    w.close()
    assert not p.parent.exists()
    assert w.problem == f"6 bytes of output lost: cannot create {p}: No such file or directory"


def test_a_symlinked_folder_is_not_followed(tmp_path):
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "jobs").symlink_to(real)
    p = tmp_path / "jobs" / "1.1.log"
    w = LogWriter(p, cap=100)
    w.write(b"hello\n")
    w.close()
    assert list(real.iterdir()) == []
    assert w.problem is not None and w.problem.startswith(f"6 bytes of output lost: cannot create {p}")


def test_an_uncreatable_file_loses_output_without_raising_and_says_so(tmp_path):
    p = tmp_path / "x.log"
    p.mkdir()  # a folder in the way
    w = LogWriter(p, cap=100)
    w.write(b"hello\n")
    w.note("timed out")
    w.close()
    assert w.problem is not None
    assert w.problem.startswith(f"{6 + len(b'[sloth] timed out') + 2} bytes of output lost: cannot create {p}")
    assert "Is a directory" in w.problem


def test_nothing_is_written_nor_a_file_made_after_close(tmp_path):
    p = tmp_path / "x.log"
    w = LogWriter(p, cap=100)
    w.close()
    w.write(b"late\n")
    w.note("late")
    assert not p.exists()


@contextlib.contextmanager
def tiny_tmpfs(size: str):
    """A real, small file system (root only; skips where mounting is refused)."""
    d = tempfile.mkdtemp(prefix="sl-full-")
    try:
        if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", d],
                                               capture_output=True).returncode != 0:
            pytest.skip("needs root and tmpfs to fill a real file system")
        try:
            yield d
        finally:
            subprocess.run(["umount", "-l", d], capture_output=True)
    finally:
        os.rmdir(d)


def test_a_full_disk_counts_the_lost_bytes_and_the_head_is_kept(tmp_path):
    from pathlib import Path
    with tiny_tmpfs("8k") as d:
        p = Path(d) / "full.log"
        w = LogWriter(p, cap=64 * 1024)
        w.write(b"x" * 20000)  # the head (32 KiB) does not fit in 8 KiB
        w.close()
        written = p.stat().st_size
        assert 0 < written < 20000
        assert w.problem == f"{20000 - written} bytes of output lost: No space left on device"


def test_job_env_uses_the_captured_environment_and_drops_manager_variables():
    captured = {"PATH": "/bin", "NOTIFY_SOCKET": "/run/x", "HOME": "/h"}
    env = job_env(captured, {"SLOTH_JOB_ID": "7"})
    assert env == {"PATH": "/bin", "HOME": "/h", "SLOTH_JOB_ID": "7"}


def test_job_env_without_capture_strips_daemon_only_hooks():
    daemon_env = {"PATH": "/bin", "LD_PRELOAD": "/x.so", "SLOTH_FAKECLOCK_FILE": "/o", "LANG": "C"}
    env = job_env(None, {}, daemon_env)
    assert env == {"PATH": "/bin", "LANG": "C"}
    assert "LD_PRELOAD" in DAEMON_ONLY_ENV

"""The per-attempt log: capped, head and tail kept, the cut said out loud."""

import os

import pytest

from sloth_daemon.runner import DAEMON_ONLY_ENV, LogWriter, job_env


def test_small_output_is_kept_whole(tmp_path):
    p = tmp_path / "a" / "1.1.log"
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
    p = tmp_path / "jobs" / "1.1.log"
    w = LogWriter(p, cap=100)
    w.write(b"")
    assert w.snapshot() == b""
    w.close()
    assert not p.exists() and not p.parent.exists() and w.problem is None


def test_the_file_appears_with_the_first_byte_and_a_snapshot_reads_it(tmp_path):
    p = tmp_path / "jobs" / "1.1.log"
    w = LogWriter(p, cap=100)
    w.write(b"a" * 60)  # 50 to the head on disk, 10 held as tail
    assert p.read_bytes() == b"a" * 50
    assert w.snapshot() == b"a" * 60
    w.close()
    assert p.read_bytes() == b"a" * 60


def test_appends_after_what_the_file_already_holds(tmp_path):
    p = tmp_path / "x.log"
    p.write_bytes(b"old\n")
    w = LogWriter(p, cap=100)
    w.write(b"new\n")
    assert w.snapshot() == b"new\n"
    w.close()
    assert p.read_bytes() == b"old\nnew\n"


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


def test_a_snapshot_never_shows_another_runs_bytes_from_a_file_it_could_not_open(tmp_path, monkeypatch):
    p = tmp_path / "x.log"
    p.write_bytes(b"an earlier run of this attempt\n")
    w = LogWriter(p, cap=100)

    def refuse(*a, **k):
        raise PermissionError(13, "Permission denied")
    monkeypatch.setattr("builtins.open", refuse)  # as for a file we may not write
    w.write(b"this run\n")
    monkeypatch.undo()
    assert w.snapshot() == b""
    w.close()
    assert w.problem == f"9 bytes of output lost: cannot create {p}: Permission denied"


def test_nothing_is_written_nor_a_file_made_after_close(tmp_path):
    p = tmp_path / "x.log"
    w = LogWriter(p, cap=100)
    w.close()
    w.write(b"late\n")
    w.note("late")
    assert not p.exists()


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="/dev/full is Linux-only")
def test_a_full_disk_counts_the_lost_bytes(tmp_path):
    p = tmp_path / "full.log"
    p.symlink_to("/dev/full")  # every write: ENOSPC
    w = LogWriter(p, cap=100)
    w.write(b"x" * 30)
    w.close()
    assert w.problem == "30 bytes of output lost: No space left on device"


def test_job_env_uses_the_captured_environment_and_drops_manager_variables():
    captured = {"PATH": "/bin", "NOTIFY_SOCKET": "/run/x", "HOME": "/h"}
    env = job_env(captured, {"SLOTH_JOB_ID": "7"})
    assert env == {"PATH": "/bin", "HOME": "/h", "SLOTH_JOB_ID": "7"}


def test_job_env_without_capture_strips_daemon_only_hooks():
    daemon_env = {"PATH": "/bin", "LD_PRELOAD": "/x.so", "SLOTH_FAKECLOCK_FILE": "/o", "LANG": "C"}
    env = job_env(None, {}, daemon_env)
    assert env == {"PATH": "/bin", "LANG": "C"}
    assert "LD_PRELOAD" in DAEMON_ONLY_ENV

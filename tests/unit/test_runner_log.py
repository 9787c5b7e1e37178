"""The per-attempt log: capped, head and tail kept, the cut said out loud."""

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


def test_job_env_uses_the_captured_environment_and_drops_manager_variables():
    captured = {"PATH": "/bin", "NOTIFY_SOCKET": "/run/x", "HOME": "/h"}
    env = job_env(captured, {"SLOTH_JOB_ID": "7"})
    assert env == {"PATH": "/bin", "HOME": "/h", "SLOTH_JOB_ID": "7"}


def test_job_env_without_capture_strips_daemon_only_hooks():
    daemon_env = {"PATH": "/bin", "LD_PRELOAD": "/x.so", "SLOTH_FAKECLOCK_FILE": "/o", "LANG": "C"}
    env = job_env(None, {}, daemon_env)
    assert env == {"PATH": "/bin", "LANG": "C"}
    assert "LD_PRELOAD" in DAEMON_ONLY_ENV

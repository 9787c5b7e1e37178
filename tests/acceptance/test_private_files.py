"""Issue 14, item 5: sloth's folders and files are the user's own, private,
and links are not followed. The real daemon, run as root here (CI runs as
root), with folders another user owns or links in them; the real CLI."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from sloth_daemon.paths import resolve

pytestmark = pytest.mark.acceptance
NOBODY = 65534
needs_root = pytest.mark.skipif(os.getuid() != 0, reason="chown to another user needs root")


def mode(p: Path) -> int:
    return stat.S_IMODE(os.lstat(p).st_mode)


def start_fails(h, *words: str) -> str:
    """Start `sloth daemon run`; it must refuse (exit non-zero) and say ``words``."""
    p = subprocess.Popen([sys.executable, "-m", "sloth_daemon", "daemon", "run"], env=h.env, text=True,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd="/", start_new_session=True)
    h.spawned.append(p)
    try:
        _, err = p.communicate(timeout=15)
    except subprocess.TimeoutExpired:
        p.kill()
        _, err = p.communicate()
        raise AssertionError(f"the daemon started and served there:\n{err}") from None
    assert p.returncode != 0, err
    for w in words:
        assert w in err, err
    assert "Traceback" not in err
    return err


def test_started_like_the_unit_with_umask_022_everything_is_private(harness):
    """The unit used to leave the log folder 0755 and job logs 0644: another
    user read `secret token=hunter2` from a job's log. queue.db was 0644."""
    old = os.umask(0o022)
    try:
        harness.start()
    finally:
        os.umask(old)
    jid = harness.add("sh", "-c", "echo secret token=hunter2")
    harness.wait_state(jid, "done")
    h = harness.home
    p = resolve({"SLOTH_HOME": str(h)})
    log = Path(harness.call("logs", id=jid)["path"])
    assert log.read_bytes() == b"secret token=hunter2\n"
    for d in (h, h / "logs", h / "logs" / "jobs", log.parent, h / "run"):
        assert mode(d) == 0o700, (d, oct(mode(d)))
    for f in (log, p.db, Path(f"{p.db}-wal"), Path(f"{p.db}-shm"), p.lock, p.queue_id_file):
        assert mode(f) == 0o600, (f, oct(mode(f)))
    # What jobs make is as from a terminal (umask 022), not private.
    jid = harness.add("sh", "-c", f"touch {h}/made-by-a-job")
    harness.wait_state(jid, "done")
    assert mode(h / "made-by-a-job") == 0o644


@needs_root
def test_a_home_another_user_owns_is_refused_and_nothing_is_made_in_it(harness):
    h = harness.home
    os.chown(h, NOBODY, NOBODY)
    start_fails(harness, str(h), f"owned by user nobody (uid {NOBODY})", "SLOTH_HOME")
    assert sorted(os.listdir(h)) == ["config.toml"]  # no run/, no queue.db, no logs/
    assert os.lstat(h).st_uid == NOBODY and mode(h) == 0o755  # not chmod'ed either


@needs_root
def test_a_link_planted_for_run_is_refused_and_its_target_untouched(harness, home):
    target = home / "elsewhere"
    target.mkdir(mode=0o755)
    os.chown(target, NOBODY, NOBODY)
    (harness.home / "run").symlink_to(target)
    start_fails(harness, "run", "symbolic link", "rm ")
    assert mode(target) == 0o755 and os.listdir(target) == []  # no chmod, no socket put there


def test_a_log_folder_others_may_write_is_refused(harness):
    logs = harness.home / "logs"
    logs.mkdir(mode=0o777)
    os.chmod(logs, 0o777)
    start_fails(harness, str(logs), "writable by group and others", "chmod 700")


def test_logs_of_a_job_never_follow_a_link_swapped_in(harness, home):
    harness.start()
    jid = harness.add("sh", "-c", "echo harmless")
    harness.wait_state(jid, "done")
    log = Path(harness.call("logs", id=jid)["path"])
    secret = home / "secret"
    secret.write_text("root-only secret\n")
    os.chmod(secret, 0o600)
    log.unlink()
    log.symlink_to(secret)
    for argv in (["logs", str(jid)], ["logs", "-f", str(jid)]):
        p = harness.cli(*argv)
        assert "root-only secret" not in p.stdout, argv
        assert p.returncode == 1 and "symbolic link" in p.stderr and "Traceback" not in p.stderr, (argv, p.stderr)
    log.unlink()
    os.mkfifo(log)  # a FIFO in its place: refused, never read from (that would hang)
    p = harness.cli("logs", str(jid), timeout_s=20)
    assert p.returncode == 1 and "not a regular file" in p.stderr, p.stderr


def test_the_service_files_set_a_077_umask():
    from sloth_daemon.service import launchd, systemd

    unit = systemd.render_unit(["/usr/bin/sloth"], {}, 30)
    assert "\nUMask=0077\n" in unit
    p = resolve({"SLOTH_HOME": "/tmp/x"})
    plist = launchd.render_plist(["/usr/bin/sloth"], p, 30)
    import plistlib

    assert plistlib.loads(plist.encode())["Umask"] == 0o077


@needs_root
def test_doctor_checks_owner_mode_and_links(harness, home):
    harness.start()
    assert harness.cli("daemon", "stop").returncode == 0  # the keeper leaves too (not a hand-over)
    h = harness.home
    harness.wait_for(lambda: not any(p.name.startswith("keeper") for p in (h / "run").iterdir()),
                     what="the keeper gone and its socket removed")
    (h / "logs").mkdir(exist_ok=True)
    os.chmod(h / "logs", 0o755)  # only readable by others: the daemon tightens it, doctor warns
    target = home / "t"
    target.mkdir()
    (h / "run").rmdir()
    (h / "run").symlink_to(target)
    p = harness.cli("doctor", "--json")
    import json

    checks = {c["name"]: c for c in json.loads(p.stdout)["checks"]}
    files = checks["files"]
    assert files["status"] == "fail" and "symbolic link" in files["detail"] and "0755" in files["detail"], files
    (h / "run").unlink()
    os.chown(h / "queue.db", NOBODY, NOBODY)
    checks = {c["name"]: c for c in json.loads(harness.cli("doctor", "--json").stdout)["checks"]}
    assert checks["files"]["status"] == "fail" and f"owned by user nobody (uid {NOBODY})" in checks["files"]["detail"]

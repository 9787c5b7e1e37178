"""Issue 14, item 8: every input edge gets a clear error naming the option as
typed, never a traceback; paths round-trip as bytes; every duration and time
is bounded. The real CLI and daemon."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from sloth_daemon.errors import SlothError
from tests.support.harness import processes_with_env

pytestmark = pytest.mark.acceptance
EXIT_USAGE, EXIT_CONFLICT = 2, 6


def clean_error(p: subprocess.CompletedProcess[str], code: int, *words: str) -> None:
    assert p.returncode == code, (p.returncode, p.stderr)
    lines = p.stderr.strip().splitlines()
    assert lines and lines[0].startswith("sloth: error: "), p.stderr
    for w in words:
        assert w in p.stderr, p.stderr
    assert "Traceback" not in p.stderr and "internal error" not in p.stderr, p.stderr


def sloth_bytes(h, *args: bytes, cwd: bytes | None = None) -> subprocess.CompletedProcess[str]:
    """The CLI with arguments (and a folder) given as raw bytes."""
    return subprocess.run([os.fsencode(sys.executable), b"-m", b"sloth_daemon", *args], env=h.env, text=True,
                          capture_output=True, timeout=60, cwd=cwd or os.fsencode(str(h.home)))


def test_a_folder_named_in_latin_1_round_trips_as_bytes(harness, home):
    harness.start()
    folder = os.fsencode(str(home)) + b"/caf\xe9"  # "café" in Latin-1: not UTF-8
    os.mkdir(folder)
    p = sloth_bytes(harness, b"add", b"--json", b"--", b"sh", b"-c", b"pwd; printf 'caf\\351' > out", cwd=folder)
    assert p.returncode == 0, p.stderr
    (jid,) = json.loads(p.stdout)["ids"]
    job = harness.wait_state(jid, "done")
    assert os.fsencode(job["cwd"]) == folder  # the exact bytes, back from the queue
    assert open(folder + b"/out", "rb").read() == b"caf\xe9"  # it ran there
    shown = harness.cli("show", str(jid))
    assert shown.returncode == 0 and "caf\\xe9" in shown.stdout, shown.stderr
    assert harness.cli("ls").returncode == 0


@pytest.mark.parametrize("option", [b"--label", b"--lane", b"--key"])
def test_names_that_are_not_utf8_are_refused_by_name(harness, option):
    harness.start()
    p = sloth_bytes(harness, b"add", option, b"caf\xe9", b"--", b"true")
    clean_error(p, EXIT_USAGE, option.decode(), "UTF-8", "nothing was queued")
    assert sum(harness.call("status")["counts"].values()) == 0


def test_a_relative_sloth_home_is_refused_and_creates_nothing(harness, home):
    name = f"relhome-{uuid.uuid4().hex[:8]}"
    env = dict(harness.env, SLOTH_HOME=name)
    try:
        p = subprocess.run([sys.executable, "-m", "sloth_daemon", "add", "--", "true"], env=env, text=True,
                           capture_output=True, timeout=60, cwd=home)
        clean_error(p, EXIT_USAGE, "SLOTH_HOME must be an absolute path", name)
        assert not (home / name).exists() and not Path("/", name).exists()
    finally:  # without the fix a daemon runs there: end it (by its environment), remove what it made
        for proc in processes_with_env("SLOTH_HOME", name):
            proc.kill()
        for p_ in (home / name, Path("/", name)):
            shutil.rmtree(p_, ignore_errors=True)


def test_durations_and_times_are_bounded(harness):
    harness.start()
    clean_error(harness.cli("add", "--delay", "99999999999d", "--", "true"), EXIT_USAGE, "--delay", "100 years")
    clean_error(harness.cli("add", "--timeout", "0", "--", "true"), EXIT_USAGE, "--timeout must be at least 1ms")
    clean_error(harness.cli("add", "--at", "0001-01-01T00:00", "--", "true"), EXIT_USAGE, "--at")
    # Over the socket too: a time no calendar can show is refused, and show never breaks.
    with pytest.raises(Exception, match="not_before must be at most"):
        harness.add("true", not_before=1e300)
    far = harness.add("true", not_before=253402300799.0)
    assert harness.cli("show", str(far)).returncode == 0
    assert sum(harness.call("status")["counts"].values()) == 1


def test_add_from_a_deleted_folder_says_so(harness, home):
    harness.start()
    gone = home / "gone"
    gone.mkdir()
    p = subprocess.run(
        [sys.executable, "-c", "import os, sys, runpy; os.chdir(sys.argv[1]); os.rmdir(sys.argv[1]); "
         "sys.argv = ['sloth', 'add', '--', 'true']; runpy.run_module('sloth_daemon', run_name='__main__')",
         str(gone)], env=harness.env, text=True, capture_output=True, timeout=60)
    clean_error(p, EXIT_USAGE, "current folder no longer exists", "--cwd")


def test_one_job_over_the_frame_is_told_what_to_do_not_to_batch(harness):
    harness.start()
    p = harness.cli("add", "--", "echo", *["x" * 110_000] * 10)  # 1.1 MB (one argument may be 128 KiB)
    clean_error(p, EXIT_USAGE, "the command is", "over the", "nothing was queued", "file")
    assert "fewer jobs" not in p.stderr and "batches" not in p.stderr


def test_an_argument_longer_than_exec_takes_is_refused_before_it_is_queued(harness, home):
    """Linux's execve refuses a single argument of 128 KiB or more (E2BIG):
    such a job could only fail, try after try. A line of --file or --stdin
    that makes one (a plain word, or the shell line itself) is refused at
    add, and so is such a job on the socket; nothing is queued."""
    harness.start()
    big = "x" * (128 * 1024)
    (home / "big.txt").write_text(f"echo ok\necho {big}\n")
    clean_error(harness.cli("add", "--file", str(home / "big.txt")), EXIT_USAGE, "line 2", "128 KiB",
                "nothing was queued")
    clean_error(harness.cli("add", "--stdin", input=f"echo '{big}'\n"), EXIT_USAGE, "128 KiB", "nothing was queued")
    with pytest.raises(SlothError, match="128 KiB"):
        harness.call("add", jobs=[{"command": ["echo", big]}], common={"cwd": "/"})
    assert sum(harness.call("status")["counts"].values()) == 0
    (home / "edge.txt").write_text("echo " + "x" * (128 * 1024 - 1) + "\n")
    ok = harness.cli_json("add", "--file", str(home / "edge.txt"))["ids"][0]
    assert harness.wait_state(ok, "done", "failed")["state"] == "done"


def test_resume_of_one_lane_while_all_are_paused_is_refused(harness):
    harness.start()
    assert harness.cli("pause").returncode == 0
    p = harness.cli("resume", "default")
    clean_error(p, EXIT_CONFLICT, "all lanes are paused", "sloth resume")
    assert harness.call("status")["paused_all"] is True


def test_an_empty_key_is_an_error_not_no_key(harness):
    harness.start()
    clean_error(harness.cli("add", "--key", "", "--", "true"), EXIT_USAGE, "--key")
    assert sum(harness.call("status")["counts"].values()) == 0


def test_labels_and_commands_cannot_break_the_table(harness):
    harness.start()
    harness.call("pause")
    harness.cli("add", "--label", "two\nlines \x1b[31mred\x1b[0m", "--", "true", check=True)
    harness.cli("add", "--shell", "--", "echo a\necho b", check=True)
    out = harness.cli("ls").stdout
    # header, one line per job, counts, and that everything is paused
    assert "\x1b" not in out and len(out.strip().splitlines()) == 5, out
    assert "two\\nlines \\x1b[31mred" in out
    shown = harness.cli("show", "1").stdout
    assert "\x1b" not in shown


def test_a_queue_url_without_psycopg_installed_is_a_clear_error_everywhere(harness, home):
    """queue_url set, the postgres extra not installed (psycopg hidden here
    by a package on PYTHONPATH that refuses to import): every way to the
    queue says what to install, never "internal error"."""
    hide = home / "nopg" / "psycopg"
    hide.mkdir(parents=True)
    (hide / "__init__.py").write_text('raise ImportError("No module named psycopg (hidden by the test)")\n')
    env = dict(harness.env, SLOTH_QUEUE_URL="postgresql://nobody@127.0.0.1:1/x", PYTHONPATH=str(home / "nopg"))
    for args in (["ls"], ["status"], ["add", "--", "true"], ["db", "status"], ["daemon", "run"]):
        p = subprocess.run([sys.executable, "-m", "sloth_daemon", *args], env=env, text=True, capture_output=True,
                           timeout=60, cwd=home)
        clean_error(p, 1, "a PostgreSQL queue needs psycopg 3", "slothqueue[postgres]")
    assert not processes_with_env("SLOTH_HOME", str(harness.home))  # no daemon was left running

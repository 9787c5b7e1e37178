"""Issue 20, item 5: a file sloth reads that someone replaced -- with a FIFO,
a link to /dev/zero, something huge -- gets a clear error at once from every
command, and a running daemon keeps serving (and still answers SIGTERM).

The real CLI and the real daemon in a temporary SLOTH_HOME (config.toml
lives there too). A hang is caught by each command's subprocess timeout,
well before the test's own; a read without end by an address-space limit
on the command (1 GiB), so a regression fails fast instead of eating the
machine's memory.
"""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
import time

import pytest

pytestmark = pytest.mark.acceptance
PROMPT_S = 10  # each command must answer well within this; the old code hung until killed
FIFO_SAYS = "is a FIFO, not a regular file"


def run(h, *args: str, limit_memory: bool = False) -> tuple[subprocess.CompletedProcess[str], float]:
    """`sloth ARGS` and how long it took; a hang fails the test after PROMPT_S."""
    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))

    t0 = time.monotonic()
    try:
        p = subprocess.run([sys.executable, "-m", "sloth_daemon", *args], env=h.env, capture_output=True,
                           text=True, timeout=PROMPT_S, cwd=str(h.home), preexec_fn=cap if limit_memory else None)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"`sloth {' '.join(args)}` hung (no answer in {PROMPT_S}s)") from None
    return p, time.monotonic() - t0


def replace_with_fifo(path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)
    os.mkfifo(path)


@pytest.mark.parametrize("args", [("config",), ("doctor",), ("daemon", "start"), ("status",), ("ls",)])
def test_a_fifo_as_config_gets_a_clear_error_at_once(make_harness, args):
    h = make_harness("")
    replace_with_fifo(h.home / "config.toml")
    p, took = run(h, *args)
    out = p.stdout + p.stderr
    assert p.returncode != 0 and f"config {h.home / 'config.toml'} {FIFO_SAYS}" in out, out
    assert "Traceback" not in out and "internal error" not in out, out
    assert took < 5, took


def test_a_running_daemon_refuses_a_fifo_config_on_reload_and_keeps_serving(harness):
    harness.start()
    replace_with_fifo(harness.home / "config.toml")
    p, _ = run(harness, "daemon", "reload")
    assert p.returncode == 2 and FIFO_SAYS in p.stderr, p.stderr  # a config error exits 2
    p, _ = run(harness, "config")  # reads the file itself too: the same clear error, not a hang
    assert p.returncode == 2 and FIFO_SAYS in p.stderr, p.stderr  # a config error exits 2
    harness.daemon.send_signal(signal.SIGHUP)  # systemctl reload: the same refusal, in the log
    harness.wait_for(lambda: FIFO_SAYS in harness.log_text(), timeout_s=10, what="the refused SIGHUP reload logged")
    assert harness.call("config")["settings"]["lease_s"]["value"] == 3.0  # the old settings are kept
    jid = harness.add("true")
    harness.wait_state(jid, "done", timeout_s=20)  # still serving
    replace_with_fifo(harness.home / "daemon.lock")  # the CLI reads the daemon's pid and socket there
    for args in (("status",), ("ls",), ("show", str(jid))):
        p, _ = run(harness, *args)
        assert p.returncode == 0, (args, p.stderr)
    assert harness.stop(signal.SIGTERM, timeout_s=20) == 0  # and still answering SIGTERM


@pytest.mark.parametrize("name", ["daemon.lock", "queue.id", "keeper.journal", "keeper.lock",
                                  "logs/keeper.log", "logs/daemon.log", "queue.db"])
def test_a_fifo_in_place_of_one_of_sloths_files_is_named_by_start_doctor_and_status(make_harness, name):
    h = make_harness("")
    replace_with_fifo(h.home / name)
    said = f"{h.home / name} {FIFO_SAYS}"
    p, took = run(h, "daemon", "start")
    assert p.returncode != 0 and said in p.stderr, p.stderr
    assert took < 5, took
    p, _ = run(h, "doctor")
    assert p.returncode == 1 and said in p.stdout, p.stdout
    p, _ = run(h, "status")  # no daemon: read from the queue file, the FIFO never opened to read
    assert p.returncode == 0, p.stderr
    assert not h.our_processes(), "a daemon or keeper was left behind, stuck on the FIFO"


def test_a_config_linked_to_dev_zero_or_huge_is_refused_not_read(make_harness):
    h = make_harness("")
    cfg = h.home / "config.toml"
    cfg.unlink()
    cfg.symlink_to("/dev/zero")
    p, took = run(h, "config", limit_memory=True)  # the old code read it until memory ran out (1.3 GB)
    assert p.returncode == 2 and f"config {cfg} is a character device, not a regular file" in p.stderr, p.stderr
    cfg.unlink()
    with open(cfg, "wb") as f:
        f.truncate(2 << 30)  # a regular file of 2 GiB (sparse)
    p, took = run(h, "config", limit_memory=True)
    assert p.returncode == 2 and f"config {cfg} is larger than 1 MiB" in p.stderr, p.stderr
    assert took < 5, took


def test_a_config_linked_to_a_regular_file_elsewhere_is_followed(make_harness, home):
    h = make_harness("")
    real = home / "dotfiles" / "sloth.toml"
    real.parent.mkdir()
    real.write_text("max_attempts = 7\n")
    (h.home / "config.toml").unlink()
    (h.home / "config.toml").symlink_to(real)
    assert h.cli_json("config")["settings"]["max_attempts"]["value"] == 7
    h.start()
    assert h.call("config")["settings"]["max_attempts"]["value"] == 7

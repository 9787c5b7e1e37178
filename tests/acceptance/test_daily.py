"""Issue 9, "living with the queue all day", through the real CLI and a real
daemon: live lanes, dependencies, requests on many jobs, honest listings,
reading without the daemon, being told, progress, and what users type first."""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import uuid

import psutil
import pytest

from sloth_daemon.errors import EXIT_CONFLICT, EXIT_JOB_FAILED, EXIT_NOT_FOUND, EXIT_NOT_RUNNING, EXIT_USAGE
from tests.acceptance.test_cli import one_error, run_in_pty
from tests.support.harness import TEST_CONFIG, Harness, kill_and_wait, processes_with_env

pytestmark = pytest.mark.acceptance

def add(h: Harness, *args: str, **kw) -> int:
    return h.cli_json("add", *args, **kw)["ids"][0]


def state(h: Harness, jid: int) -> str:
    return h.job(jid)["state"]


def running_pid(h: Harness, jid: int) -> int:
    return h.wait_for(lambda: state(h, jid) == "running" and (h.job(jid).get("runner") or {}).get("pid"),
                      what=f"job {jid} running")


# --------------------------------------------------------- 1. live lanes
def test_lanes_are_live_survive_a_restart_and_must_exist(harness):
    harness.start()
    for args in (["pause", "downlods"], ["resume", "downlods"], ["lane", "set", "downlods", "-c", "2"],
                 ["ls", "--lane", "downlods"]):
        p = harness.cli(*args)
        assert p.returncode == EXIT_NOT_FOUND, args
        one_error(p, "no lane named 'downlods'")
        assert "Lanes: default" in p.stderr
    p = harness.cli("add", "-l", "downloads", "--", "sleep", "60")
    assert "new lane 'downloads'" in p.stderr
    first = int(p.stdout)
    p = harness.cli("add", "-l", "downloads", "--", "sleep", "60")
    second = int(p.stdout)
    assert p.stderr == ""  # said once
    third = add(harness, "-l", "downloads", "--", "true")
    pid = running_pid(harness, first)
    assert state(harness, second) == "queued"

    p = harness.cli("lane", "set", "downloads", "--concurrency", "3", check=True)
    assert p.stdout == "lane downloads: concurrency 3 (was 1)\n"
    running_pid(harness, second)  # at once, no restart ...
    harness.wait_state(third, "done")
    assert harness.job(first)["runner"]["pid"] == pid and psutil.pid_exists(pid)  # ... and the runner untouched
    harness.cli("lane", "set", "downloads", "-c", "1", check=True)  # lowering stops nothing that runs
    assert {state(harness, first), state(harness, second)} == {"running"}
    lanes = harness.cli_json("lane", "ls")["lanes"]
    assert lanes["downloads"] == {"concurrency": 1, "source": "sloth lane set", "running": 2, "queued": 0,
                                  "blocked": 0, "paused": False}
    p = harness.cli("lane", "set", "downloads", "-c", "0", check=True)
    assert p.stdout.startswith("lane downloads: concurrency 1, paused (-c 0 pauses a lane;")

    harness.cli("cancel", str(first), str(second), check=True)
    assert harness.stop() == 0
    harness.start()
    lanes = harness.cli_json("lane", "ls")["lanes"]
    assert (lanes["downloads"]["concurrency"], lanes["downloads"]["paused"]) == (1, True)  # both survive


def test_daemon_reload_and_sighup_say_what_changed_and_tell_systemd(harness):
    notify = harness.home / "notify.sock"
    sd = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sd.bind(str(notify))
    sd.settimeout(10)
    try:
        daemon = harness.start(env={"NOTIFY_SOCKET": str(notify)})
        assert sd.recv(4096).startswith(b"READY=1")
        cfg = harness.home / "config.toml"
        cfg.write_text(TEST_CONFIG + "max_attempts = 7\n[lanes]\nvideo = 2\n")
        p = harness.cli("daemon", "reload", check=True)
        assert p.stdout.splitlines() == ["max_attempts: 3 -> 7", "lanes.video: added (1 -> 2)",
                                         f"reloaded {cfg}"]
        reloading, ready = sd.recv(4096).decode(), sd.recv(4096).decode()
        assert re.fullmatch(r"RELOADING=1\nMONOTONIC_USEC=\d+", reloading) and ready.startswith("READY=1")
        assert harness.job(add(harness, "--", "true"))["max_attempts"] == 7
        assert harness.cli_json("lane", "ls")["lanes"]["video"]["concurrency"] == 2

        cfg.write_text(TEST_CONFIG + "max_atempts = 7\n")
        p = harness.cli("daemon", "reload")
        assert p.returncode == EXIT_USAGE
        one_error(p, "unknown setting 'max_atempts'")
        assert "max_attempts" in p.stderr  # the known ones are named
        assert harness.call("config")["settings"]["max_attempts"]["value"] == 7  # kept

        cfg.write_text(TEST_CONFIG + "max_attempts = 4\n")
        os.kill(daemon.pid, signal.SIGHUP)
        harness.wait_for(lambda: harness.cli_json("config")["settings"]["max_attempts"]["value"] == 4,
                         what="SIGHUP reload")
        assert "max_attempts: 7 -> 4" in harness.log_text()
        assert daemon.poll() is None
    finally:
        sd.close()


# --------------------------------------------------------- 2. dependencies
def test_after_after_any_and_chains(quick_retry, home):
    h = quick_retry
    h.start()
    gate = home / "go"
    a = add(h, "--max-attempts", "1", "--", "sh", "-c", f"while [ ! -e {gate} ]; do sleep 0.05; done; exit 1")
    b = add(h, "--after", str(a), "--", "echo", "b")
    c = add(h, "--after-any", str(a), "--", "echo", "c")
    d = add(h, "--after", str(b), "--", "echo", "d")
    ls = h.cli("ls", check=True).stdout
    assert re.search(rf"^{b}\s+blocked\s+default\s+0\s+0/3\s+after {a}\s", ls, re.M)
    gate.touch()
    assert h.cli("wait", str(a), str(b), str(c), str(d)).returncode == EXIT_JOB_FAILED
    assert [state(h, j) for j in (a, b, c, d)] == ["failed", "cancelled", "done", "cancelled"]
    assert h.events(b)[-1]["message"] == f"not run: job {a}, which it runs after, failed"
    assert h.events(d)[-1]["message"] == f"not run: job {b}, which it runs after, was cancelled"
    assert h.cli("logs", str(c), check=True).stdout == "c\n"

    chain = h.cli_json("add", "--stdin", "--chain", "--max-attempts", "1",
                       input="echo one\nsh -c 'sleep 0.2; exit 3'\necho three\n")["ids"]
    loose = h.cli_json("add", "--file", "/dev/stdin", "--chain-any", "--max-attempts", "1",
                       input="sh -c 'exit 3'\necho after\n")["ids"]
    assert h.cli("wait", *map(str, chain + loose)).returncode == EXIT_JOB_FAILED
    assert [state(h, j) for j in chain] == ["done", "failed", "cancelled"]
    assert [state(h, j) for j in loose] == ["failed", "done"]
    started = [next(e["at"] for e in h.events(j) if e["kind"] == "started") for j in chain[:2]]
    assert started[1] >= h.job(chain[0])["finished_at"]  # the second began after the first ended

    p = h.cli("add", "--after", "99999", "--", "true")
    assert p.returncode == EXIT_NOT_FOUND
    one_error(p, "no job with id 99999")


# ------------------------------------------------- 3. many jobs at once
def test_commands_take_many_jobs_in_one_request_each(harness):
    harness.start()
    harness.cli("pause", check=True)
    ids = harness.cli_json("add", "--stdin", "-l", "bulk", input="true\n" * 40)["ids"]
    before = harness.call("status")["server"]["requests"]
    p = harness.cli("cancel", *map(str, ids), check=True)
    assert harness.call("status")["server"]["requests"] - before == 2  # the cancel, and this status
    assert p.stdout.splitlines() == [f"job {i} cancelled" for i in ids]
    p = harness.cli("cancel", str(ids[0]))
    assert p.returncode == EXIT_CONFLICT
    one_error(p, f"job {ids[0]} is cancelled")
    assert len(harness.cli_json("retry", *map(str, ids[:3]))["jobs"]) == 3
    res = harness.cli_json("cancel", "--lane", "bulk", "--state", "queued")
    assert sorted(j["id"] for j in res["jobs"]) == ids[:3]

    x = [add(harness, "-l", "x", "--max-attempts", "1", "--", "false") for _ in range(2)]
    y = add(harness, "-l", "y", "--max-attempts", "1", "--", "false")
    harness.cli("resume", check=True)
    harness.cli("wait", *map(str, x + [y]))
    res = harness.cli_json("retry", "--failed", "--lane", "x")
    assert sorted(j["id"] for j in res["jobs"]) == x and state(harness, y) == "failed"
    harness.cli("pause", check=True)

    done = add(harness, "-l", "y", "--label", "again", "--", "sh", "-c", "echo $SLOTH_TEST_X")
    harness.cli("cancel", str(done), check=True)
    waiting = add(harness, "--", "true")
    p = harness.cli("restart", str(done), str(waiting))
    assert p.returncode == EXIT_CONFLICT  # a queued job is left alone, and said so
    new = int(re.fullmatch(rf"job {done} restarted as job (\d+)\n", p.stdout).group(1))
    assert f"job {waiting} left alone: job {waiting} is queued; only finished jobs can be restarted" in p.stderr
    assert {k: harness.job(new)[k] for k in ("command", "lane", "label", "cwd")} == {
        k: harness.job(done)[k] for k in ("command", "lane", "label", "cwd")}

    shown = harness.cli("show", str(done), str(new), check=True).stdout
    assert shown.startswith(f"job {done}  cancelled\n") and f"\n\njob {new}  queued\n" in shown
    p = harness.cli("prune", "--older-than", "0", "--state", "cancelled", "--lane", "bulk", "--dry-run", check=True)
    assert p.stdout.startswith("would prune 40 job(s)")
    assert harness.cli_json("prune", "--older-than", "0", "--state", "cancelled", "--lane", "bulk") == {"pruned": 40}
    assert harness.cli_json("ls", "--lane", "bulk")["total"] == 0


# --------------------------------------------------- 4. honest listings
def test_ls_puts_running_first_counts_everything_and_json_is_never_cut(harness):
    harness.start()
    harness.cli("lane", "set", "default", "-c", "2", check=True)
    done = add(harness, "--wait", "--", "true")
    sleepers = harness.cli_json("add", "--stdin", input="sleep 60\n" * 2)["ids"]
    for j in sleepers:
        running_pid(harness, j)
    queued = harness.cli_json("add", "--stdin", "--priority", "1", input="true\n" * 45)["ids"]
    lines = harness.cli("ls", check=True).stdout.splitlines()
    assert [int(ln.split()[0]) for ln in lines[1:4]] == [*sleepers, queued[0]]
    assert lines[1].split()[1] == "running"
    assert "2 running, 45 queued; finished: 1 done" in lines
    assert lines[-1] == "8 more not shown (rows 1-40 of 48): `sloth ls --all`, --state S, --lane L or --limit N"
    res = harness.cli_json("ls")
    assert len(res["jobs"]) == res["total"] == 48 and res["left_out"] == 0
    assert res["jobs"][-1]["id"] == done
    assert [j["id"] for j in harness.cli_json("ls", "--state", "running")["jobs"]] == sleepers


# ---------------------------------------- 5. reading without the daemon
def test_ls_show_logs_config_and_lanes_read_the_file_when_no_daemon_runs(harness):
    harness.start()
    jid = int(harness.cli("add", "--wait", "--max-attempts", "1", "--", "sh", "-c", "echo boom; exit 2").stdout)
    harness.stop()
    for args in (["ls"], ["show", str(jid)], ["logs", str(jid)], ["config"], ["lane", "ls"], ["status"]):
        p = harness.cli(*args)
        assert p.returncode == 0, (args, p.stderr)
        assert p.stderr == "sloth: no daemon is running; reading the queue file (read-only)\n", args
    assert harness.cli("logs", str(jid)).stdout == "boom\n"
    assert harness.cli("status").stdout.startswith("daemon   not running")
    assert harness.cli_json("show", str(jid))["jobs"][0]["state"] == "failed"
    harness.env["SLOTH_NO_START"] = "1"  # else a cancel starts the daemon (test_daily_commands.py)
    p = harness.cli("cancel", str(jid))
    del harness.env["SLOTH_NO_START"]
    assert p.returncode == EXIT_NOT_RUNNING


def test_the_cli_finds_a_daemon_started_with_another_runtime_dir(tmp_path):
    """cron, su, ssh: no (or another) XDG_RUNTIME_DIR than the daemon's. The
    CLI finds the daemon through its lock file instead of starting a second."""
    tag = uuid.uuid4().hex
    base = {k: v for k, v in os.environ.items() if not k.startswith(("SLOTH_", "XDG_"))}
    base.update(HOME=str(tmp_path / "home"), XDG_DATA_HOME=str(tmp_path / "d"), XDG_CONFIG_HOME=str(tmp_path / "c"),
                XDG_STATE_HOME=str(tmp_path / "s"), SLOTH_TEST_TAG=tag, NO_COLOR="1")
    (tmp_path / "rt1").mkdir(mode=0o700)
    (tmp_path / "rt2").mkdir(mode=0o700)
    desktop, cron = dict(base, XDG_RUNTIME_DIR=str(tmp_path / "rt1")), dict(base, XDG_RUNTIME_DIR=str(tmp_path / "rt2"))

    def sloth(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "sloth_daemon", *args], env=env, capture_output=True, text=True,
                              timeout=60, cwd=str(tmp_path))
    try:
        started = json.loads(sloth(desktop, "daemon", "start", "--json").stdout)
        p = sloth(cron, "add", "--wait", "--", "echo", "from cron")
        assert p.returncode == 0, p.stderr
        assert "started the daemon" not in p.stderr
        assert sloth(cron, "daemon", "status", "--json").stdout and \
            json.loads(sloth(cron, "daemon", "status", "--json").stdout)["pid"] == started["pid"]
    finally:
        kill_and_wait(processes_with_env("SLOTH_TEST_TAG", tag), [])


# ---------------------------------------------------------- 6. being told
def test_add_wait_wait_show_and_logs_tell_the_outcome_and_the_log_tail(quick_retry, home):
    h = quick_retry
    h.start()
    p = h.cli("add", "--wait", "--max-attempts", "1", "--", "sh", "-c", "echo one; echo boom; exit 3")
    jid = int(p.stdout)
    assert p.returncode == EXIT_JOB_FAILED
    assert p.stderr == f"job {jid} failed: exit 3\n  | one\n  | boom\n"
    p = h.cli("wait", str(jid))
    assert p.returncode == EXIT_JOB_FAILED and p.stdout.startswith(f"job {jid} failed: exit 3")
    text = h.cli("show", str(jid), check=True).stdout
    assert text.endswith("  last lines of its log (attempt 1)\n    | one\n    | boom\n")
    assert not re.search(r"\d{9,}", text)  # times are human, never epochs

    counter = home / "n"
    script = f'n=$(($(cat {counter} 2>/dev/null || echo 0) + 1)); echo $n > {counter}; echo "run $n"; [ $n -ge 3 ]'
    flaky = add(h, "--max-attempts", "3", "--", "sh", "-c", script)
    p = h.cli("logs", "-f", str(flaky))
    assert (p.returncode, p.stdout) == (0, "run 1\nrun 2\nrun 3\n"), p.stderr
    assert re.findall(r"--- attempt (\d)", p.stderr) == ["2", "3"] and "exit 1; retry rule: " in p.stderr and "; retry 2/3" in p.stderr
    bad = add(h, "--max-attempts", "2", "--", "sh", "-c", "echo no; exit 4")
    p = h.cli("logs", "-f", str(bad))
    assert (p.returncode, p.stdout) == (EXIT_JOB_FAILED, "no\nno\n")


def test_a_failure_is_notified_and_the_on_finish_hook_gets_the_job(home):
    bin_dir = home / "bin"
    bin_dir.mkdir()
    record = home / "notified"
    (bin_dir / "notify-send").write_text(f'#!/bin/sh\nprintf "%s|" "$@" >> {record}\necho >> {record}\n')
    (bin_dir / "notify-send").chmod(0o755)
    hook_out = home / "hook.jsonl"
    hook = home / "hook.sh"
    hook.write_text(f'#!/bin/sh\n{{ tr -d "\\n"; echo; }} >> {hook_out}\n[ "$SLOTH_JOB_ID" != "2" ] || exec sleep 300\n')
    hook.chmod(0o755)
    config = TEST_CONFIG + f'notify = ["failed"]\non_finish = "{hook}"\nhook_timeout_s = "1s"\n'
    h = Harness(home / "h", config=config, extra_env={"PATH": f"{bin_dir}:{os.environ['PATH']}"})
    try:
        h.start()
        bad = add(h, "--max-attempts", "1", "--", "sh", "-c", "exit 3")
        slow_hook = add(h, "--", "true")
        h.cli("wait", str(bad), str(slow_hook))
        h.wait_for(lambda: record.exists() and hook_out.exists() and len(hook_out.read_text().splitlines()) == 2,
                   what="notification and hooks")
        assert record.read_text() == f"-a|sloth|-u|critical|--|sloth: job {bad} failed|exit 3\nsh -c exit 3|\n"
        sent = [json.loads(ln) for ln in hook_out.read_text().splitlines()]
        assert [(j["id"], j["state"]) for j in sent] == [(bad, "failed"), (slow_hook, "done")]
        # the hook that hangs is killed after hook_timeout_s; the daemon served all along
        h.wait_for(lambda: not [p for p in h.our_processes() if p.name() == "sleep"], timeout_s=15,
                   what="the hung hook killed")
        assert "still running after 1s: killed" in h.log_text()
    finally:
        h.reap()


# ------------------------------------------------------------- 7. progress
def test_wait_shows_progress_on_a_terminal_and_lines_when_piped_and_ls_watch_redraws(harness):
    harness.start()
    harness.cli("lane", "set", "default", "-c", "2", check=True)
    ids = harness.cli_json("add", "--stdin", input="sleep 0.2\n" * 4 + "sh -c 'exit 5'\n")["ids"]
    cmd = [sys.executable, "-m", "sloth_daemon"]
    out = run_in_pty(cmd + ["wait", *map(str, ids)], harness.env, harness.home)
    assert "\r\x1b[K" in out and re.search(r"\d/5 ended · \d done", out)
    assert f"job {ids[-1]} failed" in out and f"job {ids[0]} done" in out  # each outcome as it happens (issue 22)
    p = harness.cli("wait", *map(str, ids))
    assert p.stdout.splitlines()[:4] == [f"job {i} done (exit 0)" for i in ids[:4]] and "\x1b" not in p.stdout

    proc = subprocess.Popen(cmd + ["ls", "--watch", "--interval", "0.2s"], env=harness.env, cwd=str(harness.home),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    harness.spawned.append(proc)
    time.sleep(1.5)
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=20)
    assert proc.returncode == 0 and out.count("sloth ls, every 0.2s") >= 2


# ------------------------------------------------ 8. what users type first
def test_what_users_type_first(harness, home):
    harness.start()
    assert re.fullmatch(r"sloth \d+\.\d+\.\d+\n", harness.cli("--version", check=True).stdout)
    sleeper = add(harness, "--", "sleep", "60")
    pid = running_pid(harness, sleeper)
    st = harness.cli("status", check=True).stdout
    assert st.startswith("daemon   running, pid") and f"running  {sleeper}" in st
    p = harness.cli("kill", str(sleeper), check=True)
    assert p.stdout == f"job {sleeper} killed\n"
    harness.wait_for(lambda: not psutil.pid_exists(pid) or psutil.Process(pid).status() == "zombie",
                     what="killed job gone")
    assert harness.job(sleeper)["attempts"] == 1 and state(harness, sleeper) == "cancelled"  # not retried

    harness.cli("pause", check=True)
    p = harness.cli("add", "--at", "tomorrow", "08:00", "--", "true", check=True)  # as typed, unquoted
    t = harness.job(int(p.stdout))["not_before"]
    tomorrow = dt.date.today() + dt.timedelta(days=1)
    assert dt.datetime.fromtimestamp(t) == dt.datetime.combine(tomorrow, dt.time(8, 0))
    p = harness.cli("add", "--at", "00:00", "--", "true")
    assert "00:00 has passed today: the job waits until" in p.stderr
    t = harness.job(add(harness, "--delay", "+10m", "--", "true"))["not_before"]
    assert 590 < t - time.time() <= 600
    p = harness.cli("add", "--timeout", "5", "mins", "--", "echo", "hi")
    assert p.returncode == EXIT_USAGE
    one_error(p, "--timeout 5 mins: a duration is one word")
    f = home / "jobs.txt"
    f.write_text("# nightly\n\necho a\n   # not this one\necho b  # but this one\n")
    assert len(harness.cli_json("add", "--file", str(f))["ids"]) == 2

    harness.cli("resume", check=True)
    typo = add(harness, "--", "sh", "-c", "nosuchcommand-xyz")
    listed = add(harness, "--retry-exit", "3", "--", "sh", "-c", "exit 4")
    opted = add(harness, "--max-attempts", "2", "--no-retry-exit", "none", "--", "sh", "-c", "exit 127")
    harness.cli("wait", str(typo), str(listed), str(opted))
    assert (harness.job(typo)["attempts"], harness.job(typo)["message"]) == (1, "exit 127 (command not found)")
    assert harness.job(listed)["attempts"] == 1 and harness.job(opted)["attempts"] == 2


def test_shell_completion_offers_job_ids_lanes_and_states(harness):
    harness.start()
    harness.cli("pause", check=True)
    jid = add(harness, "-l", "video", "--", "echo", "hello")

    def complete(words: str) -> list[str]:
        env = dict(harness.env, _SLOTH_COMPLETE="complete_bash", COMP_WORDS=words,
                   COMP_CWORD=str(len(words.split()) - (0 if words.endswith(" ") else 1)))
        p = subprocess.run([sys.executable, "-m", "sloth_daemon"], env=env, capture_output=True, text=True,
                           timeout=30)
        return p.stdout.split()

    assert str(jid) in complete("sloth show ")
    assert complete("sloth pause ") == ["default", "video"]
    assert complete("sloth ls --lane v") == ["video"]
    assert complete("sloth ls --state r") == ["running"]
    assert "blocked" in complete("sloth cancel --state ")

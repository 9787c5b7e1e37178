"""Every `sloth` command, run as a real CLI process against a real daemon in a temp SLOTH_HOME."""

from __future__ import annotations

import datetime as dt
import json
import os
import pty
import re
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from sloth_daemon import __version__, protocol
from sloth_daemon.errors import EXIT_CONFLICT, EXIT_JOB_FAILED, EXIT_NOT_FOUND, EXIT_NOT_RUNNING, EXIT_USAGE

pytestmark = pytest.mark.acceptance

ANSI = re.compile(r"\x1b\[")


def one_error(p: subprocess.CompletedProcess[str], *words: str) -> None:
    """Stderr is `sloth: error: ...` plus a `hint: ...` line; no traceback."""
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 2, p.stderr
    assert lines[0].startswith("sloth: error: ") and lines[1].startswith("hint: "), p.stderr
    assert len(lines[1]) > len("hint: ") + 5
    for w in words:
        assert w in lines[0], p.stderr
    assert "Traceback" not in p.stderr


def show(h, jid: int) -> dict:
    """`sloth show --json` of one job, as {job, events}."""
    (d,) = h.cli_json("show", str(jid))["jobs"]
    return {"job": {k: v for k, v in d.items() if k not in ("events", "prereqs", "dependents", "results", "waited_s", "ran_s")},
            "events": d["events"]}


# ------------------------------------------------------------------- add
def test_add_stores_every_option(harness, home):
    harness.start()
    harness.cli("pause", check=True)  # nothing runs: the jobs stay as added
    work = home / "work dir"
    work.mkdir()
    t0 = time.time()
    out = harness.cli_json(
        "add", "--lane", "video", "--priority", "5", "--max-attempts", "7", "--lease", "2m",
        "--timeout", "1h30m", "--delay", "10m", "--label", "nightly", "--cwd", str(work),
        "--", "ffmpeg", "-i", "a b.mov", "out.mp4")
    t1 = time.time()
    job = show(harness, out["ids"][0])["job"]
    assert job["command"] == ["ffmpeg", "-i", "a b.mov", "out.mp4"]
    assert (job["lane"], job["priority"], job["max_attempts"]) == ("video", 5, 7)
    assert (job["lease_s"], job["timeout_s"], job["label"]) == (120.0, 5400.0, "nightly")
    assert job["cwd"] == str(work) and job["state"] == "queued" and job["shell"] is False
    assert t0 + 600 <= job["not_before"] <= t1 + 600

    at = harness.cli_json("add", "--at", "2031-05-06T07:08", "--", "true")["ids"][0]
    assert show(harness, at)["job"]["not_before"] == dt.datetime(2031, 5, 6, 7, 8).timestamp()

    sh = harness.cli_json("add", "--shell", "--", "echo", "$HOME", "|", "wc", "-c")["ids"][0]
    job = show(harness, sh)["job"]
    assert job["command"] == ["/bin/sh", "-c", "echo $HOME | wc -c"] and job["shell"] is True

    k1 = harness.cli_json("add", "--key", "backup-photos", "--", "rsync", "a", "b")["ids"][0]
    k2 = harness.cli_json("add", "--key", "backup-photos", "--", "rsync", "a", "b")["ids"][0]
    k3 = harness.cli_json("add", "--key", "other", "--", "rsync", "a", "b")["ids"][0]
    assert k1 == k2 != k3
    assert show(harness, k1)["job"]["key"] == "backup-photos"

    # Human output is the bare id, for `id=$(sloth add ...)`.
    p = harness.cli("add", "--", "true", check=True)
    assert re.fullmatch(r"\d+\n", p.stdout)
    # A relative --cwd is made absolute against where sloth ran.
    rel = harness.cli_json("add", "--cwd", "work dir", "--", "true", cwd=home)["ids"][0]
    assert show(harness, rel)["job"]["cwd"] == str(work)


def test_add_rejects_bad_options_without_touching_the_queue(harness, home):
    harness.start()
    cases = [
        (["add", "--delay", "5x", "--", "true"], ["--delay", "5x"]),
        (["add", "--timeout", "soon", "--", "true"], ["--timeout"]),
        (["add", "--lease", "-1m", "--", "true"], ["--lease"]),
        (["add", "--at", "25:99", "--", "true"], ["25:99"]),
        (["add", "--delay", "1m", "--at", "10:00", "--", "true"], ["--delay and --at"]),
        (["add", "--cwd", str(home / "nope"), "--", "true"], ["nope", "not a folder"]),
        (["add"], ["no command given"]),
        (["add", "--stdin", "--", "true"], ["not both"]),
        (["add", "--stdin", "--key", "k"], ["--key"]),
        (["add", "--file", str(home / "missing.txt")], ["cannot read", "missing.txt"]),
        (["add", "--max-attempts", "0", "--", "true"], ["--max-attempts", "nothing was queued"]),
        (["add", "--lane", "", "--", "true"], ["--lane"]),
    ]
    for args, words in cases:
        p = harness.cli(*args, input="echo hi\n")
        assert p.returncode == EXIT_USAGE, (args, p.stderr)
        one_error(p, *words)
    p = harness.cli("add", "--priority", "x", "--", "true")  # caught by the argument parser
    assert p.returncode == EXIT_USAGE and "Traceback" not in p.stderr and "--priority" in p.stderr
    assert harness.call("status")["counts"] == {s: 0 for s in ("blocked", "queued", "held", "running", "done", "failed", "cancelled")}


def test_add_wait_exits_with_the_outcome_and_jobs_get_our_env_and_cwd(harness, home):
    harness.start()
    work = home / "w"
    work.mkdir()
    harness.env["SLOTH_TEST_VALUE"] = "from the caller"
    p = harness.cli("add", "--wait", "--cwd", str(work), "--", "sh", "-c", 'echo "$SLOTH_TEST_VALUE"; pwd')
    assert p.returncode == 0, p.stderr
    jid = int(p.stdout.strip())
    assert show(harness, jid)["job"]["state"] == "done"
    assert harness.cli("logs", str(jid), check=True).stdout == f"from the caller\n{work}\n"
    p = harness.cli("add", "--wait", "--max-attempts", "1", "--", "sh", "-c", "exit 3")
    assert p.returncode == EXIT_JOB_FAILED
    assert show(harness, int(p.stdout.strip()))["job"]["state"] == "failed"


def test_add_stdin_and_file_queue_one_job_per_line(harness, home):
    harness.start()
    harness.cli("pause", check=True)
    # 3,000 lines of ~450 bytes: more than one 1 MiB request, and a listing
    # of them is a response over 1 MiB too.
    n, pad = 3000, "." * 400
    lines = "".join(f"echo line {i} {pad} | tr a-z A-Z\n" + ("\n   \n" if i % 500 == 0 else "") for i in range(n))
    ids = harness.cli_json("add", "--stdin", "--lane", "bulk", "--priority", "2", input=lines)["ids"]
    assert len(ids) == len(set(ids)) == n and ids == sorted(ids)
    jobs = harness.cli_json("ls", "--lane", "bulk")["jobs"]  # JSON: every job, however many pages
    assert [j["id"] for j in jobs] == ids
    assert [j["command"] for j in jobs] == [
        ["/bin/sh", "-c", f"echo line {i} {pad} | tr a-z A-Z"] for i in range(n)]
    assert {(j["lane"], j["priority"], j["shell"]) for j in jobs} == {("bulk", 2, True)}

    f = home / "jobs.txt"
    f.write_text("echo one\necho two\n\necho three")
    p = harness.cli("add", "--file", str(f), check=True)
    assert len(p.stdout.split()) == 3
    p = harness.cli("add", "--stdin", input="\n  \n")
    assert p.returncode == EXIT_USAGE
    one_error(p, "no commands")


def test_bytes_that_are_not_utf8_reach_the_job_unchanged(harness, home):
    # Filenames and arguments are bytes on Unix; a Latin-1 name must not become
    # a traceback (stdin/--file) or a different name (argv).
    harness.start()
    harness.env["LC_ALL"] = "C.UTF-8"  # a UTF-8 locale: Python's stdin would be strict
    out = home / "out"
    f = home / "jobs.txt"
    f.write_bytes(b"printf '%s\\n' caf\xe9 >> " + bytes(out) + b"\n")
    cmds = [
        [sys.executable, "-m", "sloth_daemon", "add", "--wait", "--stdin"],
        [sys.executable, "-m", "sloth_daemon", "add", "--wait", "--file", str(f)],
        [os.fsencode(sys.executable), b"-m", b"sloth_daemon", b"add", b"--wait", b"--", b"sh", b"-c",
         b"printf '%s\\n' \"$0\" >> " + bytes(out), b"caf\xe9"],
    ]
    for argv in cmds:
        p = subprocess.run(argv, input=f.read_bytes(), env=harness.env, capture_output=True,
                           timeout=60, cwd=str(harness.home))
        assert p.returncode == 0, (argv, p.stderr.decode(errors="replace"))
    assert out.read_bytes() == b"caf\xe9\n" * 3


def test_no_start_without_a_daemon_exits_3_and_starts_nothing(harness):
    p = harness.cli("add", "--no-start", "--", "true")
    assert p.returncode == EXIT_NOT_RUNNING
    one_error(p, "no sloth daemon is listening", str(harness.socket))
    assert "sloth daemon start" in p.stderr
    for args in (["daemon", "status"], ["daemon", "reload"], ["daemon", "stop"]):  # never started for
        p = harness.cli(*args)
        assert p.returncode == EXIT_NOT_RUNNING, args
        one_error(p, "no sloth daemon")
    # The commands that need a daemon start one (test_daily_commands.py), unless SLOTH_NO_START says not to.
    harness.env["SLOTH_NO_START"] = "1"
    for args in (["wait", "1"], ["pause"], ["cancel", "1"], ["logs", "-f", "1"], ["lane", "set", "default", "-c", "2"],
                 ["add", "--", "true"]):
        p = harness.cli(*args)
        assert p.returncode == EXIT_NOT_RUNNING, args
        one_error(p, "no sloth daemon")
    del harness.env["SLOTH_NO_START"]
    # Reading needs none (item 5): and with no queue file yet, nothing is created.
    assert harness.cli("ls", check=True).stdout.startswith("no jobs")
    p = harness.cli("show", "1")
    assert p.returncode == EXIT_NOT_FOUND and "read-only" in p.stderr
    assert not (harness.home / "queue.db").exists()
    # Bad usage is bad usage whether or not a daemon runs.
    for args in (["ls", "--state", "bogus"], ["show", "abc"], ["add", "--no-start", "--delay", "5x", "--", "true"]):
        p = harness.cli(*args)
        assert p.returncode == EXIT_USAGE, args
        one_error(p)
    assert not harness.our_processes()


def test_add_starts_the_daemon_when_none_runs(harness):
    p = harness.cli("add", "--", "sh", "-c", "echo started by add")
    assert p.returncode == 0, p.stderr
    m = re.search(r"sloth: started the daemon \(pid (\d+)\)", p.stderr)
    assert m, p.stderr
    pid = int(m.group(1))
    assert p.stdout.strip().isdigit() and "started" not in p.stdout  # stdout is only the id
    jid = int(p.stdout)
    harness.wait_state(jid, "done")
    assert harness.cli("logs", str(jid), check=True).stdout == "started by add\n"
    daemon = psutil.Process(pid)
    assert daemon.environ().get("SLOTH_HOME") == str(harness.home)  # so reap() finds it
    assert harness.cli_json("daemon", "status")["pid"] == pid
    # a second add uses it and says nothing about starting
    p = harness.cli("add", "--", "true", check=True)
    assert p.stderr == ""


# ------------------------------------------------------------- listings
def ls_ids(h, *args: str) -> list[int]:
    return [j["id"] for j in h.cli_json("ls", *args)["jobs"]]


def test_ls_default_state_lane_all_and_json(harness):
    harness.start()
    ids = harness.cli_json("add", "--stdin", input="true\n" * 12)["ids"]
    failed = harness.cli_json("add", "--max-attempts", "1", "--", "false")["ids"][0]
    assert harness.cli("wait", *map(str, ids), str(failed)).returncode == EXIT_JOB_FAILED
    harness.cli("pause", check=True)
    queued = harness.cli_json("add", "--lane", "video", "--", "echo", "v")["ids"][0]
    other = harness.cli_json("add", "--", "echo", "d")["ids"][0]

    # --json is for scripts: every job (a script must not miss what nobody sees was left out)
    every = harness.cli_json("ls")
    assert [j["id"] for j in every["jobs"]] == [queued, other, failed] + ids[::-1]
    assert (every["total"], every["left_out"]) == (15, 0)
    # the table: queued in the order they will run, then the last 10 finished, the most recent first
    default = harness.cli_json("ls", "--limit", "40")
    default["jobs"] = default["jobs"][:12]
    assert [j["id"] for j in default["jobs"]] == [queued, other, failed] + ids[:2:-1]
    assert default["counts"] == {"blocked": 0, "queued": 2, "held": 0, "running": 0, "done": 12, "failed": 1, "cancelled": 0}
    assert ls_ids(harness, "--all") == [queued, other, failed] + ids[::-1]
    assert ls_ids(harness, "--state", "failed") == [failed]
    assert ls_ids(harness, "--state", "queued", "--state", "failed") == [queued, other, failed]
    assert ls_ids(harness, "--lane", "video") == [queued]
    page = harness.cli_json("ls", "--all", "--limit", "2", "--offset", "1")
    assert [j["id"] for j in page["jobs"]] == [other, failed] and page["left_out"] == 12
    job = harness.cli_json("ls", "--state", "failed")["jobs"][0]
    assert {"id", "state", "lane", "priority", "attempts", "max_attempts", "command", "message"} <= job.keys()
    assert "env" not in job  # the environment captured at add is not echoed back

    p = harness.cli("ls", check=True)
    lines = p.stdout.splitlines()
    assert lines[0].split() == ["ID", "STATE", "LANE", "PRI", "TRY", "WHEN", "WAITED", "RAN", "COMMAND"]
    rows = lines[1:1 + len(default["jobs"])]
    col = lines[0].index("COMMAND")
    assert rows[0][col:] == "echo v" and rows[1][col:] == "echo d"
    assert re.match(rf"{failed}\s+failed\s+default\s+0\s+1/1\s+", rows[2])
    assert re.search(r"\s\d+(\.\d)?m?s\s+\d+(\.\d)?m?s\s+false$", rows[2]), rows[2]  # WAITED, RAN
    assert lines[len(rows) + 1] == "2 queued; finished: 12 done, 1 failed"
    assert lines[len(rows) + 2] == "lanes: default 1 queued · video 1 queued"
    assert lines[-2].startswith("3 more not shown (rows 1-12 of 15): `sloth ls --all`")
    assert lines[-1] == "paused: everything; nothing new starts until `sloth resume`"
    assert not ANSI.search(p.stdout)

    for args, code, words in ((["--state", "bogus"], EXIT_USAGE, ["unknown state 'bogus'", "queued"]),
                              (["--lane", "nope"], EXIT_NOT_FOUND, ["no lane named 'nope'", "video"])):
        p = harness.cli("ls", *args)
        assert p.returncode == code
        one_error(p, words[0])
        assert words[1] in p.stderr


def test_ls_with_nothing_says_so(harness):
    harness.start()
    assert harness.cli("ls", check=True).stdout == "no jobs\nnothing running or queued\n"
    assert harness.cli_json("ls")["jobs"] == []


def test_show_human_and_json_with_retry_history(quick_retry):
    harness = quick_retry
    harness.start()
    jid = harness.cli_json("add", "--max-attempts", "2", "--label", "flaky", "--", "sh", "-c", "exit 3")["ids"][0]
    final = harness.wait_state(jid, "failed")
    res = show(harness, jid)
    assert res["job"] == {**final, "updated_at": res["job"]["updated_at"]} and final["attempts"] == 2
    ev = [(e["kind"], e["attempt"]) for e in res["events"]]
    assert ev == [("claimed", 1), ("started", 1), ("failed", 1), ("claimed", 2), ("started", 2), ("failed", 2)]
    first, last = res["events"][2], res["events"][5]
    rule = "retry rule: exit 3 retries (default: every exit code but 126,127)"  # why (docs/watchdogs.md)
    assert first["message"] == f"exit 3; {rule}; retry 2/2 in 0.2s"  # when the next try comes
    assert last["message"] == f"exit 3; {rule}; no attempts left"
    assert res["events"][3]["at"] - first["at"] >= 0.2  # not retried before its time

    text = harness.cli("show", str(jid), check=True).stdout
    assert text.startswith(f"job {jid}  failed\n")
    assert "[flaky] sh -c 'exit 3'" in text and "attempts  2/2" in text
    lines = text.split("  history\n", 1)[1].splitlines()
    assert [re.sub(r"^\s*[\d:-]+( [\d:]+)?\s+", "", ln) for ln in lines] == [
        "enqueued",
        f"claimed (attempt 1)  {res['events'][0]['message']}",
        f"started (attempt 1)  {res['events'][1]['message']}",
        f"failed (attempt 1)  exit 3; {rule}; retry 2/2 in 0.2s",
        f"claimed (attempt 2)  {res['events'][3]['message']}",
        f"started (attempt 2)  {res['events'][4]['message']}",
        f"failed (attempt 2)  exit 3; {rule}; no attempts left",
    ]
    assert not ANSI.search(text)


def test_bad_job_ids(harness):
    harness.start()
    for args, code, words in [
        (["show", "abc"], EXIT_USAGE, ["bad job id 'abc'"]),
        (["show", "0"], EXIT_USAGE, ["ids start at 1"]),
        (["show", "-5"], EXIT_USAGE, []),
        (["show", "1.5"], EXIT_USAGE, ["bad job id"]),
        (["show", "999999"], EXIT_NOT_FOUND, ["no job with id 999999"]),
        (["show", str(2**70)], EXIT_NOT_FOUND, ["no job with id"]),
        (["logs", "999999"], EXIT_NOT_FOUND, ["no job with id 999999"]),
        (["cancel", "999999"], EXIT_NOT_FOUND, []),
        (["retry", "999999"], EXIT_NOT_FOUND, []),
        (["wait", "999999"], EXIT_NOT_FOUND, []),
        (["wait", "1", "x"], EXIT_USAGE, ["bad job id 'x'"]),
    ]:
        p = harness.cli(*args)
        assert p.returncode == code, (args, p.returncode, p.stderr)
        if p.stderr.startswith("sloth: error"):
            one_error(p, *words)
        else:  # "-5" looks like an option to the argument parser
            assert "Traceback" not in p.stderr and "Usage" in p.stderr


# ------------------------------------------------------------------- logs
def test_logs_attempts_and_path(quick_retry, home):
    harness = quick_retry
    harness.start()
    counter = home / "n"
    script = f'n=$(($(cat {counter} 2>/dev/null || echo 0) + 1)); echo $n > {counter}; echo "run $n"; [ $n -ge 2 ]'
    jid = harness.cli_json("add", "--max-attempts", "2", "--", "sh", "-c", script)["ids"][0]
    harness.wait_state(jid, "done", timeout_s=30)
    assert harness.cli("logs", str(jid), check=True).stdout == "run 2\n"
    assert harness.cli("logs", "--attempt", "1", str(jid), check=True).stdout == "run 1\n"
    assert harness.cli("logs", "-a", "2", str(jid), check=True).stdout == "run 2\n"
    path = Path(harness.cli("logs", "--path", str(jid), check=True).stdout.strip())
    assert path.is_absolute() and path.read_text() == "run 2\n"
    p1 = Path(harness.cli("logs", "--path", "--attempt", "1", str(jid), check=True).stdout.strip())
    assert p1 != path and p1.read_text() == "run 1\n"
    p = harness.cli("logs", "--attempt", "3", str(jid))
    assert p.returncode == EXIT_USAGE
    one_error(p, "attempts 1..2")

    silent = harness.cli_json("add", "--wait", "--", "true")["ids"][0]  # printed nothing: no file, no error
    p = harness.cli("logs", str(silent), check=True)  # stdout is the job's output only; the note on stderr
    assert p.stdout == "" and p.stderr == f"sloth: job {silent} attempt 1 has printed nothing\n"
    p = harness.cli("logs", "--path", str(silent), check=True)
    assert not Path(p.stdout.strip()).exists() and "does not exist" in p.stderr

    harness.cli("pause", check=True)
    q = harness.cli_json("add", "--", "true")["ids"][0]
    p = harness.cli("logs", str(q))
    assert p.returncode != 0
    one_error(p, "has not started")


def test_logs_follow_waits_for_the_start_and_streams_until_the_end(harness, home):
    harness.start()
    harness.cli("pause", check=True)
    go = home / "go"
    script = f"echo tick 1; while [ ! -e {go} ]; do sleep 0.05; done; echo tick 2; echo tick 3"
    jid = harness.cli_json("add", "--", "sh", "-c", script)["ids"][0]
    follower = subprocess.Popen([sys.executable, "-m", "sloth_daemon", "logs", "-f", str(jid)],
                                env=harness.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                cwd=str(harness.home))
    harness.spawned.append(follower)
    try:
        # Queued: the follower waits for the job to start instead of ending empty.
        harness.wait_for(lambda: harness.call("status")["server"]["connections"] >= 1 and
                         follower.poll() is None, what="follower connected")
        harness.cli("resume", check=True)
        assert follower.stdout.readline() == b"tick 1\n"
        assert show(harness, jid)["job"]["state"] == "running"  # read while the job runs
        go.touch()
        rest, err = follower.communicate(timeout=30)
    finally:
        if follower.poll() is None:
            follower.kill()
    assert rest == b"tick 2\ntick 3\n", err
    assert follower.returncode == 0
    assert show(harness, jid)["job"]["state"] == "done"
    # Following a finished job prints its log and returns.
    assert harness.cli("logs", "-f", str(jid), check=True).stdout == "tick 1\ntick 2\ntick 3\n"


def test_logs_of_binary_output_come_back_byte_for_byte(harness, home):
    # Every byte value, 300 kB: more than one 256 KiB follow chunk, and bytes
    # that JSON escapes to six characters (the daemon's frames must hold them).
    data = bytes(range(256)) * 1200
    src = home / "blob"
    src.write_bytes(data)
    harness.start()
    jid = harness.cli_json("add", "--wait", "--", "cat", str(src))["ids"][0]
    path = Path(harness.cli("logs", "--path", str(jid), check=True).stdout.strip())
    assert path.read_bytes() == data
    for args in (["logs", str(jid)], ["logs", "-f", str(jid)]):
        p = subprocess.run([sys.executable, "-m", "sloth_daemon", *args], env=harness.env,
                           capture_output=True, timeout=60, cwd=str(harness.home))
        assert p.returncode == 0, p.stderr
        assert p.stdout == data, args


# ------------------------------------------------------------------- wait
def test_wait_for_several_ids(harness):
    harness.start()
    a = harness.cli_json("add", "--", "true")["ids"][0]
    b = harness.cli_json("add", "--", "sh", "-c", "sleep 0.3")["ids"][0]
    c = harness.cli_json("add", "--max-attempts", "1", "--", "false")["ids"][0]
    p = harness.cli("wait", str(a), str(b))
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines() == [f"job {a} done (exit 0)", f"job {b} done (exit 0)"]
    p = harness.cli("wait", str(a), str(b), str(c), "--json")
    assert p.returncode == EXIT_JOB_FAILED
    assert [(j["id"], j["state"]) for j in json.loads(p.stdout)["jobs"]] == [(a, "done"), (b, "done"), (c, "failed")]
    harness.cli("pause", check=True)
    d = harness.cli_json("add", "--", "true")["ids"][0]
    harness.cli("cancel", str(d), check=True)
    assert harness.cli("wait", str(d)).returncode == EXIT_JOB_FAILED  # cancelled is not done


# ------------------------------------------------------------ job actions
def test_cancel_and_retry(harness):
    harness.start()
    harness.cli("pause", check=True)
    jid = harness.cli_json("add", "--", "true")["ids"][0]
    res = harness.cli_json("cancel", str(jid))
    assert [(j["id"], j["state"]) for j in res["jobs"]] == [(jid, "cancelled")] and res["skipped"] == []
    p = harness.cli("cancel", str(jid))
    assert p.returncode == EXIT_CONFLICT
    one_error(p)
    p = harness.cli("retry", str(jid), check=True)
    assert p.stdout == f"job {jid} queued again\n"
    p = harness.cli("retry", str(jid))
    assert p.returncode == EXIT_CONFLICT  # a queued job cannot be retried
    one_error(p)
    assert harness.cli("cancel", str(jid), check=True).stdout == f"job {jid} cancelled\n"
    # a running job: its process is ended
    harness.cli("resume", check=True)
    run = harness.cli_json("add", "--", "sleep", "300")["ids"][0]
    job = harness.wait_state(run, "running")
    harness.wait_for(lambda: (harness.job(run).get("runner") or {}).get("pid"), what="job started")
    pid = harness.job(run)["runner"]["pid"]
    assert harness.cli_json("cancel", str(run))["jobs"][0]["state"] == "cancelled"
    harness.wait_for(lambda: not psutil.pid_exists(pid) or psutil.Process(pid).status() == "zombie",
                     what="cancelled job's process gone")
    assert job["id"] == run


def test_pause_and_resume_all_and_one_lane(harness):
    harness.start()
    p = harness.cli("pause", "video")  # no such lane yet: an error, not "paused video"
    assert p.returncode == EXIT_NOT_FOUND
    one_error(p, "no lane named 'video'")
    harness.cli("lane", "set", "video", "-c", "1", "--create", check=True)
    res = harness.cli_json("pause", "video")
    assert res["paused_lanes"] == ["video"] and res["paused_all"] is False
    v = harness.cli_json("add", "--lane", "video", "--", "true")["ids"][0]
    d = harness.cli_json("add", "--", "true")["ids"][0]
    harness.wait_state(d, "done")  # the worker ran a later job of another lane ...
    assert harness.job(v)["state"] == "queued"  # ... and left the paused lane alone
    st = harness.cli_json("daemon", "status")
    assert st["lanes"]["video"]["paused"] is True and st["lanes"]["default"]["paused"] is False
    assert harness.cli("resume", "video", check=True).stdout == "resumed video\n"
    harness.wait_state(v, "done")

    assert harness.cli("pause", check=True).stdout == "paused all lanes\n"
    st = harness.cli_json("daemon", "status")
    assert st["paused_all"] is True and all(ln["paused"] for ln in st["lanes"].values())
    x = harness.cli_json("add", "--", "true")["ids"][0]
    assert harness.job(x)["state"] == "queued"
    res = harness.cli_json("resume")
    assert res["paused_all"] is False and res["paused_lanes"] == []
    harness.wait_state(x, "done")


def test_prune_older_than(harness):
    harness.start()
    ids = harness.cli_json("add", "--stdin", input="echo a\necho b\n")["ids"]
    harness.cli("wait", *map(str, ids), check=True)
    logs = [Path(harness.cli("logs", "--path", str(i), check=True).stdout.strip()) for i in ids]
    assert all(p.exists() for p in logs)
    harness.cli("pause", check=True)
    keep = harness.cli_json("add", "--", "true")["ids"][0]
    assert harness.cli_json("prune", "--older-than", "1h") == {"pruned": 0}
    p = harness.cli("prune", "--older-than", "0s", check=True)
    assert p.stdout == "pruned 2 job(s): every finished job\n"  # not "finished more than 0s ago"
    assert ls_ids(harness, "--all") == [keep]
    assert not any(p.exists() for p in logs)
    p = harness.cli("prune", "--older-than", "soon")
    assert p.returncode == EXIT_USAGE
    one_error(p, "--older-than")


# ----------------------------------------------------------------- config
def test_config_shows_sources(harness):
    d = harness.cli_json("config")  # no daemon needed
    s = d["settings"]
    assert s["max_attempts"] == {"value": 3, "source": "default"}
    assert s["lease_s"]["value"] == 3.0 and s["lease_s"]["source"].startswith("file ")
    assert str(harness.home / "config.toml") in s["lease_s"]["source"]
    assert d["paths"]["socket"] == str(harness.socket)
    assert d["lanes"]["default"] == {"concurrency": 1, "source": "default_concurrency (default)"}
    assert d["file_differs"] is False  # read from the file with no daemon: the same as the file
    assert "has changed since the daemon read it" not in harness.cli("config", check=True).stdout

    cfg = harness.home / "config.toml"
    cfg.write_text(cfg.read_text() + 'max_attempts = 9\n[lanes]\nvideo = 2\n')
    d = harness.cli_json("config")
    assert d["settings"]["max_attempts"]["value"] == 9
    assert d["settings"]["max_attempts"]["source"].startswith("file ")
    assert d["lanes"]["video"]["concurrency"] == 2 and d["lanes"]["video"]["source"].startswith("file ")
    text = harness.cli("config", check=True).stdout
    assert re.search(r"max_attempts\s+9\s+\(file ", text)
    assert re.search(r"backoff_cap_s\s+1m\s+\(file ", text)  # as the file wrote it ("60s"), not 60.0
    assert re.search(r"default_concurrency\s+1\s+\(default\)", text)
    assert "video" in text

    cfg.write_text("max_attempts = 'many'\n")
    p = harness.cli("config")
    assert p.returncode == EXIT_USAGE
    one_error(p, str(cfg))
    example = harness.cli("config", "--example", check=True).stdout
    assert "lease_s" in example


# ----------------------------------------------------------------- daemon
def test_daemon_start_status_stop(harness):
    p = harness.cli("daemon", "status")
    assert p.returncode == EXIT_NOT_RUNNING
    started = harness.cli_json("daemon", "start")
    assert started["state"] == "started"
    pid = started["pid"]
    assert psutil.Process(pid).environ().get("SLOTH_HOME") == str(harness.home)
    again = harness.cli_json("daemon", "start")
    assert again == {"pid": pid, "state": "already running"}

    jid = harness.cli_json("add", "--", "true")["ids"][0]
    harness.wait_state(jid, "done")
    st = harness.cli_json("daemon", "status")
    assert st["pid"] == pid and st["version"] == __version__ and st["protocol"] == protocol.VERSION
    assert st["uptime_s"] >= 0
    assert st["paths"]["socket"] == str(harness.socket)
    assert st["paths"]["db"] == str(harness.home / "queue.db")
    assert st["counts"] == {"blocked": 0, "queued": 0, "held": 0, "running": 0, "done": 1, "failed": 0, "cancelled": 0}
    assert "last_jump" in st and st["last_jump"] is None
    text = harness.cli("daemon", "status", check=True).stdout
    assert text.startswith(f"sloth daemon {__version__} running, pid {pid}, up ")
    assert "done 1" in text and re.search(r"^resume: +none seen$", text, re.M) and str(harness.socket) in text
    assert re.search(r"^keeper: +pid \d+, version ", text, re.M)  # the keeper line the README promises
    pairs = [ln for ln in text.splitlines()[1:]]
    assert all(re.match(r"[A-Za-z_]+: +\S", ln) for ln in pairs), pairs  # "key: value", never "key:/path"
    assert len({ln.index(ln.split(":", 1)[1].strip()) for ln in pairs}) == 1  # the values in one column

    p = harness.cli("daemon", "stop", check=True)
    assert p.stdout == f"sloth daemon stopped (pid {pid}); no job was running\n"
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    assert harness.cli("daemon", "status").returncode == EXIT_NOT_RUNNING
    assert not harness.socket.exists()
    p = harness.cli("daemon", "stop")
    assert p.returncode == EXIT_NOT_RUNNING


def test_daemon_stop_when_the_daemons_parent_has_not_reaped_it(harness):
    # The harness's daemon is our child: after it exits it stays a zombie until
    # we wait() for it. `sloth daemon stop` must count that as stopped, not
    # wait out its timeout (a supervisor or shell that reaps late does the same).
    harness.start()
    pid = harness.daemon.pid
    p = harness.cli("daemon", "stop", "--timeout", "20s")
    assert p.returncode == 0, p.stderr
    assert p.stdout == f"sloth daemon stopped (pid {pid}); no job was running\n"
    assert harness.daemon.wait(10) == 0


# ------------------------------------------------------- help, completion
def commands_of(text: str) -> list[str]:
    section = text.split("Commands:", 1)[1]
    return [ln.split()[0] for ln in section.splitlines() if ln.startswith("  ") and not ln.startswith("   ")]


def listing_of(text: str) -> dict[str, str]:
    """A group's help, `Commands:` section: each command's whole line (wrapped lines joined)."""
    out: dict[str, str] = {}
    name = ""
    for ln in text.split("Commands:", 1)[1].splitlines():
        if ln.startswith("  ") and not ln.startswith("   "):
            name, _, rest = ln.strip().partition(" ")
            out[name] = rest.strip()
        elif ln.strip() and name:
            out[name] += " " + ln.strip()
    return out


def test_help_reads_well_everywhere(harness):
    top = harness.cli("--help", check=True).stdout
    assert top.startswith("Usage: sloth [OPTIONS] COMMAND [ARGS]...")
    cmds = commands_of(top)
    for c in ("add", "ls", "show", "logs", "wait", "cancel", "retry", "pause", "resume", "prune",
              "config", "daemon"):
        assert c in cmds
    assert harness.cli("-h", check=True).stdout == top
    daemon_cmds = commands_of(harness.cli("daemon", "--help", check=True).stdout)
    assert {"run", "start", "stop", "status"} <= set(daemon_cmds)
    pages = [[c] for c in cmds] + [["daemon", c] for c in daemon_cmds]
    for argv in pages:
        p = harness.cli(*argv, "--help")
        assert p.returncode == 0, (argv, p.stderr)
        text = p.stdout
        assert text.startswith(f"Usage: sloth {' '.join(argv)} "), text
        body = text.split("\n\n")
        assert len(body) >= 2 and body[1].strip(), f"{argv}: no description"
        assert all(len(ln) <= 80 for ln in text.splitlines()), f"{argv}: lines over 80 columns"
        assert "Traceback" not in p.stderr and not ANSI.search(text)
    add = harness.cli("add", "--help", check=True).stdout
    for opt in ("--lane", "--priority", "--max-attempts", "--lease", "--timeout", "--delay", "--at",
                "--key", "--label", "--cwd", "--shell", "--stdin", "--file", "--wait", "--no-start", "--json"):
        assert opt in add


def test_help_lines_whole_json_described_examples_and_short_names(harness):
    """Issue 22, item 7: no line of a group's listing cut mid-sentence, every
    --json described, the --at forms that work, examples where people look,
    and a short name that means one thing."""
    for group in ([], ["daemon"], ["lane"], ["service"], ["db"]):
        listing = listing_of(harness.cli(*group, "--help", check=True).stdout)
        for name, line in listing.items():
            assert not line.endswith(("...", "(e.g.", "e.g.")) and line[-1] in ".)", (group, name, line)
    assert "Restart the daemon without touching running jobs (after an upgrade, say): they keep running, and the " \
        "new daemon takes them over." == listing_of(harness.cli("daemon", "--help", check=True).stdout)["restart"]
    from sloth_daemon.cli.commands import COMMANDS

    for cmd in COMMANDS:
        text = harness.cli(*cmd.path, "--help", check=True).stdout
        if any(o.dest == "as_json" for o in cmd.options):
            line = " ".join(text.split("--json", 1)[1].split("\n", 1)[0].split())
            assert len(line) > 10, (cmd.path, "--json has no description")
        if cmd.path[0] in ("add", "ls", "show", "logs", "status", "prune", "config"):
            assert re.search(rf"Examples:\n +sloth {cmd.path[0]}\b", text), cmd.path
    add = " ".join(harness.cli("add", "--help", check=True).stdout.split())
    assert "9pm, tomorrow 08:00, mon 9:00" in add and "ISO" in add
    # -s and -w mean one thing each: add's --shell and --wait; ls --state and --watch have only long names
    ls_help = harness.cli("ls", "--help", check=True).stdout
    assert "-s," not in ls_help and "-w," not in ls_help and "--state" in ls_help and "--watch" in ls_help
    assert "-s, --shell" in harness.cli("add", "--help", check=True).stdout
    assert "-w, --wait" in harness.cli("add", "--help", check=True).stdout
    # each verb's --job says what it sends: pause SIGSTOP, resume SIGCONT (not pause's words)
    for verb, sig, other in (("pause", "SIGSTOP", "SIGCONT"), ("resume", "SIGCONT", "SIGSTOP")):
        job = " ".join(harness.cli(verb, "--help", check=True).stdout.split("\n  --job ", 1)[1].split("--jobs")[0].split())
        assert sig in job and other not in job, (verb, job)


def test_no_command_and_unknown_command(harness):
    p = harness.cli()  # the day at a glance (test_said_plainly.py), not the help
    assert p.returncode == 0 and "`sloth --help`" in p.stdout and "Traceback" not in p.stderr
    p = harness.cli("frobnicate")
    assert p.returncode == EXIT_USAGE
    assert "No such command 'frobnicate'" in p.stderr and "Traceback" not in p.stderr


def test_debug_shows_a_traceback(harness):
    harness.start()
    p = harness.cli("--debug", "show", "999999")
    assert p.returncode == EXIT_NOT_FOUND
    assert "Traceback (most recent call last)" in p.stderr
    assert "sloth: error: no job with id 999999" in p.stderr
    p = harness.cli("--debug", "add", "--delay", "5x", "--", "true")
    assert p.returncode == EXIT_USAGE and "Traceback" in p.stderr


def complete(harness, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "sloth_daemon"], env=dict(harness.env, **env),
                          capture_output=True, text=True, timeout=30)


def test_shell_completion(harness):
    # The script a shell sources, as `eval "$(_SLOTH_COMPLETE=source_bash sloth)"` does ...
    bash = complete(harness, _SLOTH_COMPLETE="source_bash").stdout
    assert "_sloth_completion" in bash and "complete -o default -F _sloth_completion sloth" in bash
    assert "#compdef sloth" in complete(harness, _SLOTH_COMPLETE="source_zsh").stdout
    # ... and `sloth --show-completion SHELL` (Typer takes the shell as a value when
    # not detecting it from the parent process, which a test cannot rely on).
    p = harness.cli("--show-completion", "bash")
    if p.returncode == 0:
        assert "_SLOTH_COMPLETE" in p.stdout
    env = dict(harness.env, _TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION="1")
    for shell, marker in (("bash", "_sloth_completion"), ("zsh", "#compdef sloth"), ("fish", "complete")):
        p = subprocess.run([sys.executable, "-m", "sloth_daemon", "--show-completion", shell], env=env,
                           capture_output=True, text=True, timeout=30)
        assert p.returncode == 0 and marker in p.stdout, (shell, p.stderr)
    # Completing words: commands, subcommands, options.
    for words, cword, want in (("sloth ad", "1", ["add"]),
                               ("sloth daemon st", "2", ["start", "status", "stop"]),
                               ("sloth add --max", "2", ["--max-attempts"])):
        p = complete(harness, _SLOTH_COMPLETE="complete_bash", COMP_WORDS=words, COMP_CWORD=cword)
        assert sorted(p.stdout.split()) == want, (words, p.stdout, p.stderr)


# --------------------------------------------------------------- colour
def run_in_pty(argv: list[str], env: dict[str, str], cwd: Path) -> str:
    """Run with stdout and stderr on a pseudo-terminal; return what it printed."""
    master, slave = pty.openpty()
    try:
        p = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=slave, stderr=slave,
                             cwd=str(cwd))
    finally:
        os.close(slave)
    out = b""
    try:
        while True:
            r, _, _ = select.select([master], [], [], 30)
            if not r:
                p.send_signal(signal.SIGKILL)
                raise AssertionError(f"no output from {argv}: {out!r}")
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: the other side closed
                break
            if not chunk:
                break
            out += chunk
    finally:
        os.close(master)
        p.wait(30)
    return out.decode("utf-8", "replace")


def test_no_color_and_no_tty_mean_no_escapes(harness):
    harness.start()
    ok = harness.cli_json("add", "--", "true")["ids"][0]
    bad = harness.cli_json("add", "--max-attempts", "1", "--", "false")["ids"][0]
    harness.cli("wait", str(ok), str(bad))
    cmd = [sys.executable, "-m", "sloth_daemon"]
    colour_env = {k: v for k, v in harness.env.items() if k != "NO_COLOR"}
    colour_env["TERM"] = "xterm-256color"

    # On a terminal without NO_COLOR the states are coloured (so the checks below mean something) ...
    assert ANSI.search(run_in_pty(cmd + ["ls"], colour_env, harness.home))
    # ... with NO_COLOR (any value) on the same terminal, nothing is.
    for args in (["ls"], ["show", str(bad)], ["daemon", "status"], ["ls", "--json"], ["show", "x"],
                 ["add", "--delay", "5x", "--", "true"], ["add", "--priority", "x", "--", "true"]):
        out = run_in_pty(cmd + args, dict(colour_env, NO_COLOR="1"), harness.home)
        assert out and not ANSI.search(out), (args, out)
    # Without a terminal (pipes), and without NO_COLOR: no escapes either.
    for args in (["ls"], ["show", str(bad)], ["daemon", "status"], ["config"], ["show", "x"]):
        p = subprocess.run(cmd + args, env=colour_env, capture_output=True, text=True, timeout=30,
                           cwd=str(harness.home))
        assert p.stdout + p.stderr and not ANSI.search(p.stdout + p.stderr), args

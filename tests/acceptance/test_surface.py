"""Issue 22, items 3, 5, 6 and 7 (the parts of "the surface a person meets"
that are listings, logs, add's checks, help and settings), through the real
CLI and a real daemon; a pseudo-terminal where it is about a terminal."""

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

import pytest

from sloth_daemon.errors import EXIT_CONFLICT, EXIT_USAGE
from tests.support.harness import Harness

pytestmark = pytest.mark.acceptance

TIME = re.compile(r"^    +(\d\d:\d\d:\d\d|\d{4}-\d\d-\d\d \d\d:\d\d)  ")


def ids_of(h: Harness, *args: str) -> list[int]:
    return [j["id"] for j in h.cli_json("ls", *args)["jobs"]]


# ------------------------------------------------------------- 5. add --file
def test_a_line_sh_cannot_read_is_named_and_nothing_is_queued(harness, home):
    harness.start()
    jobs = home / "jobs.txt"
    jobs.write_text('gzip -k a.log\necho "two\nif true; then echo three; fi\n')
    p = harness.cli("add", "--file", str(jobs))
    assert p.returncode == EXIT_USAGE
    assert f'line 2 of --file {jobs}: \'echo "two\'' in p.stderr and "Unterminated quoted string" in p.stderr
    assert "nothing was queued" in p.stderr and "Traceback" not in p.stderr
    assert harness.cli_json("ls")["total"] == 0
    # two broken lines do not pass as one (a quote opened on one, closed on the next) ...
    p = harness.cli("add", "--stdin", input='echo "a\nb"\n')
    assert p.returncode == EXIT_USAGE and "line 1 of --stdin" in p.stderr
    # ... nor a brace, a subshell or a loop left open
    for text, bad in (("{ echo a\necho b; }\n", 1), ("true\n(echo a\necho b)\n", 2),
                      ("for f in 1; do echo $f\ndone\n", 1), ("echo ok\ncase x in\nx) echo;; esac\n", 2)):
        p = harness.cli("add", "--stdin", input=text)
        assert p.returncode == EXIT_USAGE and f"line {bad} of --stdin" in p.stderr, (text, p.stderr)
    p = harness.cli("add", "-s", "--", 'echo "x')
    assert p.returncode == EXIT_USAGE and "Unterminated quoted string" in p.stderr
    assert harness.cli_json("ls")["total"] == 0
    # a here-document reads the lines after it, but each line is a job of its own: its body and end
    # would be queued as jobs ("hello", "EOF") and the here-document itself would read nothing
    p = harness.cli("add", "--stdin", input="echo ok\ncat <<EOF\nhello\nEOF\n")
    assert p.returncode == EXIT_USAGE and "line 2 of --stdin" in p.stderr and "here-document" in p.stderr, p.stderr
    assert harness.cli_json("ls")["total"] == 0
    # lines that parse are queued, all of them, and run
    good = ("echo $((1+2)) | tr 3 x\nif true; then echo y; fi\nf() { echo z; }; f\ncase a in a) echo w;; esac\n"
            "echo '<<' \"<<EOF\" # <<EOF\n")
    ids = harness.cli_json("add", "--stdin", input=good)["ids"]
    assert len(ids) == 5
    harness.cli("wait", *map(str, ids), check=True)
    assert [harness.cli("logs", str(i), check=True).stdout for i in ids] == ["x\n", "y\n", "z\n", "w\n", "<< <<EOF\n"]


# ------------------------------------------------------------ 3. --key echo
def test_add_key_a_second_time_says_which_job_has_it(harness):
    harness.start()
    harness.cli("pause", check=True)
    paused = "sloth: the queue is paused: nothing starts until `sloth resume`\n"  # issue 30: said at add
    first = harness.cli("add", "--key", "nightly", "--", "true", check=True)
    assert first.stderr == paused
    jid = int(first.stdout)
    again = harness.cli("add", "--key", "nightly", "--", "true", check=True)
    assert int(again.stdout) == jid
    assert again.stderr == paused + f"sloth: --key 'nightly': already queued as job {jid} (queued); nothing new was queued\n"
    assert harness.cli_json("ls")["total"] == 1


# ------------------------------------------------------ 6. listings and logs
def test_ls_says_what_is_paused(harness):
    harness.start()
    harness.cli("add", "-l", "video", "--", "true", check=True)
    assert "paused" not in harness.cli("ls", check=True).stdout
    harness.cli("pause", "video", check=True)
    out = harness.cli("ls", check=True).stdout.splitlines()
    assert out[-1] == "paused lane: video; `sloth resume LANE` starts its jobs again"
    harness.cli("pause", check=True)
    assert harness.cli("ls", check=True).stdout.splitlines()[-1] == \
        "paused: everything; nothing new starts until `sloth resume`"
    assert harness.cli("ls", "--all", check=True).stdout.splitlines()[-1].startswith("paused: everything")
    harness.cli("resume", check=True)
    harness.cli("resume", "video", check=True)
    assert "paused" not in harness.cli("ls", check=True).stdout


def test_ls_json_lists_every_job_as_its_help_says(harness):
    harness.start()
    ids = harness.cli_json("add", "--stdin", input="true\n" * 14)["ids"]
    harness.cli("wait", *map(str, ids), check=True)
    help_text = " ".join(harness.cli("ls", "--help", check=True).stdout.split())
    assert "with --json, every job" in help_text
    listing = harness.cli_json("ls")
    assert sorted(j["id"] for j in listing["jobs"]) == ids and listing["left_out"] == 0
    table = harness.cli("ls", check=True).stdout
    assert "4 more not shown" in table  # the table keeps its 10 latest finished, and says so
    assert len(harness.cli_json("ls", "--limit", "3")["jobs"]) == 3


def test_durations_in_ls_show_and_json(harness):
    harness.start()
    harness.cli("pause", check=True)
    slow = harness.cli_json("add", "--", "sleep", "1.2")["ids"][0]
    time.sleep(1.0)
    queued = harness.cli_json("ls")["jobs"][0]
    assert queued["id"] == slow and queued["ran_s"] is None and queued["waited_s"] >= 0.9
    harness.cli("resume", check=True)
    harness.wait_state(slow, "done")
    (job,) = harness.cli_json("show", str(slow))["jobs"]
    assert 1.1 <= job["ran_s"] < 5 and 0.9 <= job["waited_s"] < 5
    row = next(ln for ln in harness.cli("ls", check=True).stdout.splitlines() if ln.startswith(f"{slow} "))
    header = harness.cli("ls", check=True).stdout.splitlines()[0]
    assert header.split() == ["ID", "STATE", "LANE", "PRI", "TRY", "WHEN", "WAITED", "RAN", "COMMAND"]
    waited, ran = row[header.index("WAITED"):header.index("COMMAND")].split()
    assert re.fullmatch(r"1(\.\d)?s", ran) and re.fullmatch(r"[1-4](\.\d)?s", waited), row
    text = harness.cli("show", str(slow), check=True).stdout
    assert re.search(r"^  waited    [1-4](\.\d)?s  ran 1(\.\d)?s$", text, re.M), text
    harness.cli("pause", check=True)
    never = harness.cli_json("add", "--", "true")["ids"][0]
    harness.cli("cancel", str(never), check=True)
    (c,) = harness.cli_json("show", str(never))["jobs"]
    assert c["ran_s"] is None and c["waited_s"] is not None  # waited until it was cancelled; never ran


def test_ls_since_a_duration_a_day_and_time_or_iso(harness):
    harness.start()
    old = harness.cli_json("add", "--", "true")["ids"][0]
    harness.wait_state(old, "done")
    time.sleep(1.1)
    mark = dt.datetime.now().isoformat(timespec="seconds")
    time.sleep(1.1)
    new = harness.cli_json("add", "--", "true")["ids"][0]
    harness.wait_state(new, "done")
    assert ids_of(harness, "--since", mark) == [new]
    assert sorted(ids_of(harness, "--since", "12h")) == [old, new]
    assert sorted(ids_of(harness, "--since", "yesterday 00:00")) == [old, new]
    time.sleep(1.2)
    assert ids_of(harness, "--since", "1s") == []
    text = harness.cli("ls", "--since", mark, check=True).stdout
    assert text.splitlines()[1].startswith(f"{new} ") and "since " in text
    for bad in ("tomorrow 9:00", "soonish"):
        p = harness.cli("ls", "--since", bad)
        assert p.returncode == EXIT_USAGE and "--since" in p.stderr and "hint:" in p.stderr


def test_logs_and_show_say_what_they_mean(harness):
    harness.start()
    p = harness.cli("show")
    assert p.returncode != 0 and "no jobs yet" in p.stderr
    silent = harness.cli_json("add", "--", "true")["ids"][0]
    harness.wait_state(silent, "done")
    p = harness.cli("logs", check=True)  # no id: the latest job that ran, said on stderr
    assert p.stdout == "" and p.stderr == (f"sloth: logs of the latest job that ran, {silent}\n"
                                           f"sloth: job {silent} attempt 1 has printed nothing\n")
    p = harness.cli("logs", "--path", str(silent), check=True)
    assert p.stdout.strip().endswith(f"{silent}.1.log") and "does not exist" in p.stderr
    p = harness.cli("logs", "-n", "5", str(silent), check=True)
    assert p.stdout == "" and "does not exist" in p.stderr
    p = harness.cli("logs", "-f", str(silent), check=True)
    assert p.stdout == "" and p.stderr == f"sloth: job {silent} has printed nothing\n"
    loud = harness.cli_json("add", "--", "echo", "hello")["ids"][0]
    harness.wait_state(loud, "done")
    later = harness.cli_json("add", "--delay", "1h", "--", "true")["ids"][0]  # the latest added, not started
    p = harness.cli("logs", check=True)  # tsp's rule: the latest job that ran, not one still waiting
    assert p.stdout == "hello\n" and p.stderr == f"sloth: logs of the latest job that ran, {loud}\n"
    p = harness.cli("show", check=True)
    assert p.stdout.startswith(f"job {later}  queued") and p.stderr == f"sloth: show of the latest job, {later}\n"
    p = harness.cli("logs", str(later))  # a wrong state: 6, as the reference says
    assert p.returncode == EXIT_CONFLICT and f"job {later} has not started yet" in p.stderr
    harness.cli("pause", check=True)
    gone = harness.cli_json("add", "--", "true")["ids"][0]
    harness.cli("cancel", str(gone), check=True)
    p = harness.cli("logs", str(gone))
    assert p.returncode == EXIT_CONFLICT
    assert f"job {gone} was cancelled before it started, so it has no log" in p.stderr
    assert "logs -f" not in p.stderr and f"sloth show {gone}" in p.stderr
    held = harness.cli_json("add", "--hold", "--", "true")["ids"][0]
    p = harness.cli("logs", str(held))  # -f would block until someone releases it: say that instead
    assert p.returncode == EXIT_CONFLICT and f"job {held} is held" in p.stderr
    assert "logs -f" not in p.stderr and f"sloth release {held}" in p.stderr


def run_watch(argv: list[str], env: dict[str, str], cwd, seconds: float) -> str:
    """Run `sloth ls --watch` on a pseudo-terminal for ``seconds``, then Ctrl-C."""
    master, slave = pty.openpty()
    os.set_blocking(master, False)
    import fcntl
    import struct
    import termios

    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    p = subprocess.Popen(argv, env=env, stdin=slave, stdout=slave, stderr=slave, cwd=str(cwd),
                         start_new_session=True)
    os.close(slave)
    out, deadline = b"", time.monotonic() + seconds
    try:
        while time.monotonic() < deadline:
            r, _, _ = select.select([master], [], [], 0.1)
            if r:
                try:
                    out += os.read(master, 65536)
                except OSError:
                    break
        p.send_signal(signal.SIGINT)
        p.wait(10)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait(10)
        os.close(master)
    return out.decode("utf-8", "replace")


def test_ls_watch_honours_n(harness):
    harness.start()
    harness.cli("pause", check=True)
    harness.cli("add", "--stdin", input="true\n" * 8, check=True)
    env = dict(harness.env, COLUMNS="120", LINES="40")
    out = run_watch([sys.executable, "-m", "sloth_daemon", "ls", "--watch", "-n", "3", "--interval", "0.3s"],
                    env, harness.home, 3.0)
    frames = [f for f in out.split("\x1b[H\x1b[2J") if "sloth ls, every" in f]
    assert frames, out
    rows = [ln for ln in frames[-1].splitlines() if re.match(r"\d+ +queued ", ln)]
    assert len(rows) == 3, frames[-1]
    assert "5 more not shown" in frames[-1]


# ------------------------------------------------------------- 3. echoes
def test_show_history_is_in_time_order_after_a_handover(harness):
    """A job that ends while no daemon runs: the keeper keeps its end time; the
    next daemon adopts it, then records the end (at the time it happened)."""
    harness.start()
    jid = harness.cli_json("add", "--", "sleep", "2.5")["ids"][0]
    harness.wait_for(lambda: harness.job(jid)["state"] == "running" and harness.job(jid).get("runner"))
    harness.cli("daemon", "stop", "--keep-jobs", check=True)
    harness.daemon.wait(30)
    time.sleep(3.5)  # it ends, with no daemon to see it
    harness.start()
    harness.wait_state(jid, "done")
    text = harness.cli("show", str(jid), check=True).stdout
    hist = text.split("  history\n", 1)[1].splitlines()
    stamps = [m.group(1) for ln in hist if (m := TIME.match(ln))]
    assert len(stamps) >= 4 and stamps == sorted(stamps), text
    assert any("adopted" in ln for ln in hist) and any(" done " in ln for ln in hist)


def test_show_says_what_the_runs_were(quick_retry):
    h = quick_retry
    h.start()
    jid = h.cli_json("add", "--max-attempts", "2", "--", "sh", "-c", "exit 3")["ids"][0]
    h.wait_state(jid, "failed")
    for _ in range(2):
        h.cli("retry", str(jid), check=True)
        h.wait_for(lambda: h.job(jid)["state"] == "failed" and h.job(jid)["tries"] == 2, what="failed again")
    text = h.cli("show", str(jid), check=True).stdout
    line = next(ln for ln in text.splitlines() if ln.startswith("  attempts"))
    assert line == "  attempts  2/2 (6 runs; 4 before `sloth retry` started the count again)"
    assert "interruption" not in text.split("  history", 1)[0]


def test_config_shows_durations_as_written_and_suggests_a_key(make_harness):
    h = make_harness('lease_s = "1m"\nbackoff_cap_s = "5m"\nkill_grace_s = "90s"\n')
    text = h.cli("config", check=True).stdout
    assert re.search(r"^  lease_s +1m +\(file ", text, re.M) and re.search(r"^  backoff_cap_s +5m ", text, re.M)
    assert re.search(r"^  kill_grace_s +1m30s ", text, re.M) and "60.0" not in text
    assert h.cli_json("config")["settings"]["lease_s"]["value"] == 60.0  # --json keeps seconds
    (h.home / "config.toml").write_text("max_atempts = 5\n")
    p = h.cli("config")
    assert p.returncode != 0 and "unknown setting 'max_atempts'; did you mean max_attempts?" in p.stderr


# ---------------------------------------------------------------- 7. lanes
def test_lane_set_zero_pauses_a_new_lane_as_it_does_an_old_one(harness):
    harness.start()
    p = harness.cli("lane", "set", "nightly", "-c", "0", "--create", check=True)
    assert p.stdout == ("lane nightly: created; concurrency 1, paused (-c 0 pauses a lane; "
                        "`sloth resume nightly` runs its jobs again)\n")
    p = harness.cli("lane", "set", "default", "-c", "0", check=True)
    assert p.stdout.startswith("lane default: concurrency 1, paused (-c 0 pauses a lane;")
    lanes = harness.cli_json("lane", "ls")["lanes"]
    assert {k: (lanes[k]["concurrency"], lanes[k]["paused"]) for k in ("nightly", "default")} == \
        {"nightly": (1, True), "default": (1, True)}
    jid = harness.cli_json("add", "-l", "nightly", "--", "true")["ids"][0]
    harness.cli("resume", "nightly", check=True)
    harness.wait_state(jid, "done")


# ------------------------------------------------------------ 3. notify
def test_the_daemon_log_says_once_that_notifications_cannot_show(make_harness, home):
    h = make_harness('notify = ["failed", "done"]\n')
    empty = home / "nobin"
    empty.mkdir()
    h.daemon_env["PATH"] = str(empty)  # no notify-send, no osascript
    h.start()
    ids = h.cli_json("add", "--max-attempts", "1", "--stdin", input="true\nfalse\n")["ids"]
    h.cli("wait", *map(str, ids))
    h.cli("daemon", "reload", check=True)
    said = [ln for ln in h.log_text().splitlines() if "neither notify-send nor osascript" in ln]
    assert len(said) == 1, h.log_text()
    assert "sloth doctor" in said[0]
    assert json.loads(h.cli("doctor", "--json").stdout)  # doctor runs (its own check: tests/integration)


def test_logs_tail_prints_the_last_lines_as_the_job_wrote_them(harness):
    """`logs -n N` is the end of what `logs` prints, byte for byte (long
    lines whole, escapes as written), as tail -n: -n 0 prints nothing, a
    negative N is refused."""
    harness.start()
    script = 'for i in 1 2 3; do printf "%0900d\\n" $i; done; printf "\\033[31mred\\033[0m\\n"'
    jid = harness.cli_json("add", "--shell", "--", script)["ids"][0]
    harness.wait_state(jid, "done")
    whole = harness.cli("logs", str(jid), check=True).stdout
    assert len(whole.splitlines()) == 4
    for n in (1, 2, 4, 10):
        p = harness.cli("logs", "-n", str(n), str(jid), check=True)
        assert p.stdout == "".join(whole.splitlines(keepends=True)[-n:]), n
    assert harness.cli("logs", "-n", "0", str(jid), check=True).stdout == ""
    p = harness.cli("logs", "--tail=-1", str(jid))
    assert p.returncode == EXIT_USAGE and "--tail" in p.stderr and p.stdout == ""

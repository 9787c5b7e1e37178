"""The fast path (cli/fast.py) and the Typer app, run as the real CLI
against real daemons: the same jobs queued, the same output, the same exit
codes; and what the fast path imports.

Two daemons, A and B, in two SLOTH_HOMEs, get the same command lines in
the same order: A through ``sloth_daemon.cli.main`` (the fast path, which
hands what it does not know to Typer), B through the Typer app alone.
Their answers must be the same but for the home folder and the clock.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Iterator

import pytest

from tests.support.harness import TEST_CONFIG, Harness

pytestmark = pytest.mark.acceptance

REPO = Path(__file__).resolve().parents[2]
FAST = """
import atexit, os, sys
atexit.register(lambda: open(os.environ["FAST_CLI_REPORT"], "w").write(
    "typer" if "sloth_daemon.cli.typer_app" in sys.modules else "fast"))
from sloth_daemon.cli import main
main()
"""
TYPER = "from sloth_daemon.cli.typer_app import main; main()"

F, T = "fast", "typer"  # which path is to run a line in A
# (argv, stdin, the path A takes). Lines run in order; the queue they build is compared as it grows.
ADDS: list[tuple[list[str], str | None, str]] = [
    (["add", "--", "true"], None, F),
    (["add", "echo", "hi there"], None, F),
    (["add", "-l", "video", "-p", "5", "--max-attempts", "2", "--lease", "90s", "--timeout", "1h", "--",
      "sh", "-c", "exit 0"], None, F),
    (["add", "--lane=video", "--key", "k1", "--label", "nightly", "--", "true"], None, F),
    (["add", "--key", "k1", "--", "true"], None, F),
    (["add", "--after", "1,2", "--after-any", "3", "--json", "--", "true"], None, F),
    (["add", "--after", "1", "--after-any", "1", "--", "true"], None, F),
    (["add", "--after", "x", "--", "true"], None, F),
    (["add", "--stdin", "--chain"], "echo a\n# a comment\n\necho 'b c'\n", F),
    (["add", "-f", "jobs.txt", "--chain-any", "--json"], None, F),
    (["add", "--file", "missing.txt"], None, F),
    (["add", "--file=./bad.txt"], None, F),  # named as Typer names it: a Path ("bad.txt")
    (["add", "--stdin", "--key", "k"], "echo a\n", F),
    (["add", "--stdin"], "echo 'unterminated\n", F),
    (["add", "--stdin", "--", "true"], "echo a\n", F),
    (["add", "--chain", "--", "true"], None, F),
    (["add", "--delay", "5x", "--", "true"], None, F),
    (["add", "--delay", "10m", "--at", "09:00", "--", "true"], None, F),
    (["add", "--timeout", "5", "mins", "--", "echo"], None, F),
    (["add", "--at", "tomorrow", "08:00", "--", "true"], None, F),
    (["add", "--delay", "10m", "--", "true"], None, F),
    (["add", "--retry-exit", "1,75", "--", "false"], None, F),
    (["add", "--retry-exit", "1", "--no-retry-exit", "2", "--", "x"], None, F),
    (["add", "--no-retry-exit", "none", "-s", "--", "echo $HOME | wc -c"], None, F),
    (["add", "--cwd", "./sub/", "--", "pwd"], None, F),
    (["add", "--cwd", "/nonexistent", "--", "pwd"], None, F),
    (["add", "--lane", "", "--", "true"], None, F),
    (["add", "--max-attempts", "0", "--", "true"], None, F),
    (["add", "--", "true", "--lane", "x"], None, F),
    (["add", "-l", "newlane", "--no-start", "--", "true"], None, F),
    (["add"], None, F),
    (["add", "--"], None, F),
    (["add", "--priority", "x", "--", "true"], None, T),
    (["add", "--bogus", "--", "true"], None, T),
    (["add", "-sk", "kk", "--", "true"], None, T),
    (["add", "--help"], None, F),  # its page rendered from the declaration (fast_help.py), as Typer lays it out
    (["add", "--lane"], None, T),
    # The plainest lines (cli/fast_add.py), and those it leaves to the full add: a shell line as one
    # word, an assignment, a shell's script, a word that is not UTF-8, an option after the command.
    (["add", "--", "ls | wc -l"], None, F), (["add", "FOO=1", "env"], None, F),
    (["add", "--", "sh", "-c", "echo 'x"], None, F), (["add", "--", "printf", "%s", "caf\u00e9"], None, F),
    (["add", "echo", "--wait", "-l", "x"], None, F),
    # Words after -- are the command's, even those that look like a split option (a program named m).
    (["add", "--", "m", "--timeout", "5", "m"], None, F), (["add", "--at", "23:00", "--", "git", "log", "--", "x"], None, F),
]
READS: list[tuple[list[str], str | None, str]] = [
    (["ls"], None, F), (["ls", "--json"], None, F), (["ls", "-a"], None, F),
    (["ls", "--state", "queued", "--state", "blocked"], None, F), (["ls", "-l", "video"], None, F),
    (["ls", "--lane", "nolane"], None, F), (["ls", "-n", "2", "--offset", "1"], None, F),
    (["ls", "--limit", "0"], None, F), (["ls", "--state", "bogus"], None, F), (["ls", "--limit", "x"], None, T),
    (["ls", "--watch", "--json"], None, T), (["ls", "extra"], None, T), (["ls", "--since", "12h"], None, F),
    (["show", "1"], None, F), (["show", "1", "6", "--json"], None, F), (["show", "999"], None, F),
    (["show", "x"], None, F), (["show", "0"], None, F), (["show", "--json", "--", "3"], None, F),
    (["show"], None, F), ([], None, F),
    (["status"], None, F), (["status", "--json"], None, F), (["status", "extra"], None, T), (["status", "-h"], None, F),
    (["lane", "ls"], None, F), (["lane", "ls", "--json"], None, F), (["lane", "ls", "x"], None, T),
    (["logs", "1"], None, F), (["logs", "--path", "1"], None, F), (["logs", "-n", "3", "--attempt", "1", "1"], None, F),
    (["logs", "999"], None, F), (["logs", "x"], None, F), (["logs", "1", "2"], None, T), (["logs"], None, F),
    (["config"], None, F), (["config", "--json"], None, F), (["config", "--example"], None, F),
    (["config", "extra"], None, T), (["ls", "--state", "done", "--since", "1h"], None, F),
    (["logs", "-n", "x", "1"], None, T),
]
# The commands that change jobs (the daemons stay paused: nothing runs).
ACTS: list[tuple[list[str], str | None, str]] = [
    (["cancel", "3"], None, F), (["cancel", "3"], None, F), (["cancel", "--json", "4"], None, F),
    (["cancel"], None, F), (["cancel", "1", "--lane", "video"], None, F), (["cancel", "--lane", "nolane"], None, F),
    (["cancel", "--state", "done"], None, F), (["cancel", "-s", "done"], None, T), (["cancel", "x"], None, F), (["cancel", "999"], None, F),
    (["cancel", "--bogus"], None, T),
    (["retry", "3"], None, F), (["retry", "3", "4", "1"], None, F), (["retry", "--failed"], None, F),
    (["retry", "--lane", "video"], None, F), (["retry", "1", "--failed"], None, F), (["retry", "-l"], None, T),
    (["kill", "2"], None, F), (["kill", "--now", "999"], None, F), (["kill", "--json", "2"], None, F),
    (["kill"], None, T),
    (["pause", "video"], None, F), (["pause", "--json", "video"], None, F), (["resume", "video"], None, F),
    (["pause", "nolane"], None, F), (["pause"], None, F), (["pause", "a", "b"], None, F), (["pause", "--job", "999"], None, F), (["resume", "-h"], None, F),
    (["cancel", "--lane", "video"], None, F), (["cancel", "--state", "queued", "--state", "blocked", "--lane", "default"],
                                                None, F),
    (["restart", "3"], None, F), (["restart", "2", "3"], None, F), (["restart", "--json", "4"], None, F),
    (["restart"], None, T),
    (["edit", "7", "2", "--priority", "5"], None, F),
    (["edit", "7", "--timeout", "1h", "--when", "disk>=1K", "--keep-awake", "-s", "--", "echo a | wc"], None, F),
    (["cancel", "--state", "blocked,held", "--lane", "video"], None, F),
    (["prune", "--dry-run"], None, F), (["prune", "--older-than", "0", "--dry-run", "--state", "cancelled"], None, F),
    (["prune", "--older-than", "x"], None, F), (["prune", "--state", "running", "--dry-run"], None, F),
    (["prune", "--older-than", "0", "--state", "cancelled", "--lane", "video", "--json"], None, F),
    (["lane", "set", "video", "-c", "3"], None, F), (["lane", "set", "--json", "new", "-c", "0", "--create"], None, F),
    (["lane", "set", "nolane", "--concurrency", "2"], None, F), (["lane", "set", "video"], None, T),
    (["lane", "set", "video", "-c", "x"], None, T), (["lane", "rm", "new"], None, F), (["lane", "rm", "video"], None, F),
    (["lane", "rm", "nolane"], None, F),
    (["status"], None, F), (["lane", "ls"], None, F),
]
WAITS: list[tuple[list[str], str | None, str]] = [  # after `resume`: these jobs run
    (["add", "-w", "--", "true"], None, F),
    (["add", "--wait", "--max-attempts", "1", "--json", "--", "sh", "-c", "echo boom; exit 3"], None, F),
]
OFFLINE: list[tuple[list[str], str | None, str]] = [  # after both daemons stop
    (["ls"], None, F), (["show", "2"], None, F), (["status"], None, F), (["lane", "ls"], None, F),
    (["logs", "2"], None, F), (["add", "--no-start", "--", "true"], None, F),
    (["add", "--", "true"], None, F),  # starts the daemon
    (["daemon", "stop"], None, T),
    (["pause", "video"], None, F),  # starts it again
]


class Pair:
    """Daemons A and B, their shared work folder, and whether a phase failed."""

    def __init__(self, hs: list[Harness], work: Path) -> None:
        self.hs, self.work, self.broken = hs, work, False


@pytest.fixture(scope="module")
def pair() -> Iterator[Pair]:
    """One pair for the module: the phases below build on one another, in
    order (tests/support/workers.py keeps them on one worker, in order)."""
    root = Path(tempfile.mkdtemp(prefix="sl-"))  # short: the socket's path is limited
    work = root / "work"
    (work / "sub").mkdir(parents=True)
    (work / "jobs.txt").write_text("echo one\necho two\n")
    (work / "bad.txt").write_text("echo fine\necho 'unterminated\n")
    p = Pair([Harness(root / n, config=TEST_CONFIG) for n in ("a", "b")], work)
    try:
        for h in p.hs:
            h.start()
            h.call("pause")
        yield p
    finally:
        for h in p.hs:
            h.reap()
        shutil.rmtree(root, ignore_errors=True)


def run(h: Harness, code: str, argv: list[str], stdin: str | None, work: Path) -> tuple[int, str, str]:
    env = dict(h.env, FAST_CLI_REPORT=str(work / "report"))
    p = subprocess.run([sys.executable, "-c", code, *argv], env=env, input=stdin or "", capture_output=True,
                       text=True, timeout=60, cwd=str(work))
    return p.returncode, p.stdout, p.stderr


def same_text(h: Harness, text: str) -> str:
    """``text`` without what may differ between A and B: the home folder,
    its queue's id, pids, times of day and how long ago or ahead things are, and a job's
    process in --json."""
    if text.startswith("{"):  # --json: what a run of a process has of its own goes
        text = json.dumps(scrub(json.loads(text)), indent=2, sort_keys=True) + "\n"
    text = text.replace(str(h.home), "<HOME>")
    text = re.sub(r"/logs/jobs/[0-9a-f]{16}\b", "/logs/jobs/<queue>", text)  # each home's queue has its own id
    text = re.sub(r"\b1\d{9}(\.\d+)?\b", "<ts>", text)
    text = re.sub(r"\bpid +\d+", "pid <n>", text)
    text = re.sub(r"\bsloth-daemon:\S+", "<worker>", text)
    text = re.sub(r"\b\d{4}-\d\d-\d\d\b", "<date>", text)
    text = re.sub(r"\b\d{1,2}:\d\d(:\d\d)?\b", "<time>", text)
    text = re.sub(r"\b(in )?(\d+(\.\d+)?(ms|s|m|h|d|w))+( ago)?\b|\bnow\b", "<dur>", text)
    return re.sub(r"  +", "  ", text)  # a table's columns are as wide as those times were


def scrub(v: Any) -> Any:
    """JSON without a job's process (runner, worker: pids, clock ticks), how
    long it waited and ran (times), and what its runs cost (measured)."""
    if isinstance(v, dict):
        return {k: scrub(x) for k, x in v.items()
                if k not in ("runner", "worker", "pid", "uptime_s", "waited_s", "ran_s", "cost", "runs", "progress")}
    return [scrub(x) for x in v] if isinstance(v, list) else v


def queue(h: Harness) -> list[dict[str, Any]]:
    """Every job as the daemon holds it, without its times."""
    ids = [j["id"] for j in h.call("list", limit=10_000, finished_limit=10_000)["jobs"]]
    jobs = h.call("show", ids=sorted(ids))["jobs"] if ids else []
    out = []
    for j in jobs:
        j = json.loads(json.dumps(j).replace(str(h.home), "<HOME>"))
        j["events"] = [e.get("kind") for e in j["events"]]
        if j.get("not_before"):  # how far ahead of its adding, to the minute (the two were added apart)
            j["not_before"] = round((j["not_before"] - j["created_at"]) / 60)
        out.append({k: v for k, v in scrub(j).items() if not k.endswith("_at") and k != "lease_until"})
    return out


def compare(pair_: Pair, lines: list[tuple[list[str], str | None, str]]) -> None:
    """Each line in A and B, then the two queues; a phase after a failed one is skipped."""
    if pair_.broken:
        pytest.skip("an earlier phase failed: A and B no longer start from the same queue")
    (a, b), work = pair_.hs, pair_.work
    pair_.broken = True  # until this phase passes
    for argv, stdin, path in lines:
        got, want = run(a, FAST, argv, stdin, work), run(b, TYPER, argv, stdin, work)
        assert (work / "report").read_text() == path, argv
        assert got[0] == want[0], (argv, got, want)
        assert same_text(a, got[1]) == same_text(b, want[1]), (argv, got, want)
        assert same_text(a, got[2]) == same_text(b, want[2]), (argv, got, want)
    assert queue(a) == queue(b)
    pair_.broken = False


# The fast path and Typer queue, print and exit the same: one scenario in
# phases (one test each, so each has pytest's whole timeout), in this order.
def test_the_fast_path_and_typer_add_the_same(pair):
    compare(pair, ADDS)


def test_the_fast_path_and_typer_read_the_same(pair):
    compare(pair, READS)


def test_the_fast_path_and_typer_act_the_same(pair):
    compare(pair, ACTS)


def test_the_fast_path_and_typer_wait_and_log_the_same(pair):
    for h in pair.hs:
        # Only the waited-for jobs run: jobs left queued would run, fail and
        # retry on each daemon's own timing, and the queues could differ.
        h.call("cancel", states=["queued", "blocked"])
        h.call("resume")
    compare(pair, WAITS)
    ran = [j["id"] for j in pair.hs[0].call("list", states=["done", "failed"])["jobs"]]
    compare(pair, [(["logs", str(i)], None, F) for i in ran] + [(["logs", "-n", "1", str(ran[0])], None, F),
                                                                 (["status"], None, F)])


def test_the_fast_path_and_typer_work_the_same_without_a_daemon(pair):
    for h in pair.hs:
        h.stop()
    compare(pair, OFFLINE)


# ---------------------------------------------------------------- imports
# What a command that only asks the daemon need not import: the framework
# and the daemon's own modules (~70-100 ms), and the stdlib modules that
# cost more than the interpreter's start (typing, re and json ~2/3 of it).
HEAVY = {
    "typer", "click", "rich", "psutil", "sqlite3", "asyncio", "subprocess", "platformdirs", "sloth_daemon.cli.typer_app",
    "sloth_daemon.paths", "sloth_daemon.spec", "sloth_daemon.models", "sloth_daemon.config",
    "sloth_daemon.queue", "psycopg", "textual", "sloth_daemon.cli.top",
    # issue 32: the metrics are `sloth metrics`'s and the daemon's, never a daily command's
    "sloth_daemon.cli.metrics", "sloth_daemon.backends.metrics", "sloth_daemon.backends.run_tally",
}
LIGHT_TOO = {"typing", "dataclasses", "inspect", "re", "json", "pathlib", "socket", "selectors", "shlex", "secrets"}
IMPORTS = """
import sys
before = set(sys.modules)
out, sys.argv = sys.argv[1], ["sloth", *sys.argv[2:]]
from sloth_daemon.cli import main
code = 0
try:
    main()
except SystemExit as e:
    code = e.code
with open(out, "w") as f:
    f.write(repr((code, sorted(set(sys.modules) - before))))
"""


def imported(h: Harness, argv: list[str], out: Path, **env: str) -> tuple[object, set[str]]:
    """What ``sloth ARGV`` imports, run without site (its .pth files: an
    editable install's finder imports pathlib and more before sloth starts)."""
    import ast

    site = [p for p in sys.path if p.endswith("site-packages")]
    e = dict(h.env, PYTHONPATH=os.pathsep.join([str(REPO), *site]), **env)
    p = subprocess.run([sys.executable, "-S", "-c", IMPORTS, str(out), *argv], env=e, capture_output=True, text=True,
                       timeout=60, cwd=str(h.home))
    assert p.returncode == 0, p.stderr
    code, new = ast.literal_eval(out.read_text())
    return code, {m if m.startswith("sloth_daemon") else m.split(".")[0] for m in new}


LINES = [  # (argv, environment, light: none of LIGHT_TOO either)
    (["add", "--", "true"], {}, True),
    (["add", "--lane", "video", "-p", "3", "--after", "1", "--key", "k", "--json", "--", "true"], {}, True),
    (["ls"], {}, True), (["ls", "--json"], {}, True), (["show", "1"], {}, True), (["show", "1", "--json"], {}, True),
    (["status"], {}, True), (["status", "--json"], {}, True), (["lane", "ls"], {}, True), (["logs", "1"], {}, True),
    (["logs", "-n", "1", "1"], {}, True), (["cancel", "2"], {}, True), (["retry", "2"], {}, True),
    (["cancel", "--lane", "video"], {}, True), (["kill", "--json", "1"], {}, True), (["pause", "video"], {}, True),
    (["resume", "video"], {}, True), (["restart", "1"], {}, True), (["prune", "--dry-run"], {}, False),  # durations.parse_duration: re
    (["lane", "set", "video", "-c", "0"], {}, True), ([], {}, True),
    # issue 30: config, ls with any of its filters, on the fast path too (the daemon reads config.toml)
    (["config"], {}, True), (["config", "--json"], {}, True), (["ls", "--since", "12h"], {}, True),
    (["ls", "--all"], {}, True), (["ls", "--state", "done", "--lane", "video", "-n", "5"], {}, True),
    # issue 30: a command's --help page, from its declaration (textwrap wraps it as click does: re)
    (["add", "--help"], {}, False), (["ls", "-h"], {}, False), (["schedule", "show", "--help"], {}, False),
    # A TAB splits the line as the shell does, with shlex (and so re): still no Typer.
    ([], {"_SLOTH_COMPLETE": "complete_bash", "COMP_WORDS": "sloth ls --lane ", "COMP_CWORD": "3"}, False),
    ([], {"_SLOTH_COMPLETE": "complete_bash", "COMP_WORDS": "sloth show ", "COMP_CWORD": "2"}, False),
]


def test_the_daily_commands_and_a_tab_import_only_what_they_need(harness, home):
    harness.start()
    harness.wait_state(harness.add("echo", "done"), "done")
    harness.call("lane_set", lane="video", concurrency=0, create=True)  # its jobs stay queued
    harness.cli("add", "-l", "video", "--", "echo", "hi", check=True)
    for argv, env, light in LINES:
        code, new = imported(harness, argv, home / "imports.txt", **env)
        assert code in (0, None) or (argv[:1] == ["kill"] and code == 6), (argv, code)  # job 1 is done
        assert not new & HEAVY, (argv, sorted(new & HEAVY))
        if light:
            assert not new & LIGHT_TOO, (argv, sorted(new & LIGHT_TOO))


# issue 31: `sloth top`'s library (textual, ~150 ms and more) is imported by
# `top` alone, inside its function: not by the Typer app that every
# command outside the fast path goes through, nor by any help page.
TUI = {"textual", "sloth_daemon.cli.top", "sloth_daemon.cli.top.app", "sloth_daemon.cli.top.feed"}
TYPER_LINES = [["--help"], ["top", "--help"], ["ls", "--bogus"], ["schedule", "ls"], ["daemon", "status"]]


# The plainest add (cli/fast_add.py) reads no declaration: not the commands' table, nor its
# parser, nor the checks and durations the full add's options need.
PLAIN_NEVER = {"sloth_daemon.cli.commands", "sloth_daemon.cli.fast_args", "sloth_daemon.cli.add",
               "sloth_daemon.cli.add_options", "sloth_daemon.checks", "sloth_daemon.durations", "importlib"}


def test_the_plainest_add_imports_no_declaration(harness, home):
    harness.start()
    for argv in (["add", "--", "true"], ["add", "echo", "hi"], ["add", "--wait", "--", "true"]):
        code, new = imported(harness, argv, home / "imports.txt")
        assert code in (0, None), (argv, code)
        never = PLAIN_NEVER - {"sloth_daemon.durations"} if "--wait" in argv else PLAIN_NEVER  # "in 3ms"
        assert not new & never, (argv, sorted(new & never))


def test_a_listing_without_progress_imports_no_progress_view(harness, home):
    """`ls` reads progress_view (its PROGRESS and --columns cells) only when a job shows progress or a
    column is picked; and reading a duration (--since 12h) needs no math."""
    harness.start()
    harness.wait_state(harness.add("echo", "done"), "done")
    for argv in (["ls"], ["ls", "--since", "12h"], ["ls", "--all"]):
        code, new = imported(harness, argv, home / "imports.txt")
        assert code in (0, None), (argv, code)
        assert not new & {"sloth_daemon.cli.progress_view", "math"}, (argv, sorted(new))


def test_no_command_but_top_imports_its_terminal_library(harness, home):
    harness.start()
    for argv in TYPER_LINES:
        code, new = imported(harness, argv, home / "imports.txt")
        assert not new & TUI, (argv, sorted(new & TUI))
    code, new = imported(harness, ["top"], home / "imports.txt")  # not a terminal: refused before the import
    assert code == 2 and "sloth_daemon.cli.top" in new and not new & {"textual", "sloth_daemon.cli.top.app"}


def _maps_name(pid: int | str, name: str) -> bool:
    with open(f"/proc/{pid}/maps") as f:
        return name in f.read()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/PID/maps")
def test_a_daemon_on_the_sqlite_queue_never_loads_psycopg(harness):
    """psycopg is for a queue URL only: the default daemon and its keeper,
    having run a job, have no psycopg library mapped (psycopg[binary]'s C
    library is mapped from the moment `import psycopg` runs, as the control
    below shows)."""
    pytest.importorskip("psycopg")
    control = subprocess.run([sys.executable, "-c", "import psycopg, os; print(open('/proc/self/maps').read())"],
                             capture_output=True, text=True, check=True).stdout
    if "psycopg" not in control:
        pytest.skip("this psycopg maps no library of its own (not the binary build)")
    daemon = harness.start()
    jid = harness.add("true")
    harness.wait_state(jid, "done")
    assert not _maps_name(daemon.pid, "psycopg")
    assert not _maps_name(harness.keeper_pid(), "psycopg")


# ------------------------------------------------------------ completion
B, Z, FI, PS = "bash", "zsh", "fish", "powershell"
# (shell, the line as typed up to the cursor, answered by the fast path?)
TABS = [
    (B, "sloth show ", True), (B, "sloth show 1", True), (B, "sloth show 1 ", True), (B, "sloth show --json ", True),
    (B, "sloth logs ", True), (B, "sloth logs -f ", True), (B, "sloth logs 1 ", False), (B, "sloth logs --attempt ", False),
    (B, "sloth wait ", True), (B, "sloth restart ", True), (B, "sloth kill --now ", True), (B, "sloth cancel ", True),
    (B, "sloth retry --failed ", True), (B, "sloth cancel --lane ", True), (B, "sloth cancel --state q", True),
    (B, "sloth retry -l ", True), (B, "sloth pause ", True), (B, "sloth pause v", True), (B, "sloth pause video ", True),
    (B, "sloth resume ", True), (B, "sloth lane set ", True), (B, "sloth lane rm v", True),
    (B, "sloth lane set video ", False), (B, "sloth lane set -c ", False), (B, "sloth lane ", False),
    (B, "sloth ls --lane ", True), (B, "sloth ls -l v", True), (B, "sloth ls --state ", True), (B, "sloth ls --state f", True),
    (B, "sloth ls ", False), (B, "sloth ls --limit ", False), (B, "sloth ls --lane = ", False),
    (B, "sloth prune --state ", True), (B, "sloth prune -l ", True), (B, "sloth add --lane ", True),
    (B, "sloth add --after ", True), (B, "sloth add echo --lane ", True), (B, "sloth add ", False),
    (B, "sloth add -- ", False), (B, "sloth ad", False), (B, "sloth add --ma", False), (B, "sloth --debug show ", False),
    (B, "sloth show 'un", True), (B, "sloth show --bogus ", False), (B, "sloth show -h ", False),
    (Z, "sloth pause ", True), (Z, "sloth ls --state f", True), (Z, "sloth ls --lane zzz", True), (Z, "sloth show ", False),
    (Z, "sloth ad", False), (FI, "sloth pause ", True), (FI, "sloth ls --state ", True), (FI, "sloth show ", False),
    (PS, "sloth pause ", True), (PS, "sloth ls --lane v", True), (PS, "sloth show ", False),
]


def tab_env(shell: str, line: str, action: str = "get-args") -> dict[str, str | None]:
    """The environment a shell's completion script gives `sloth` for a TAB at the end of ``line``."""
    words = line.split()
    env: dict[str, str | None] = {k: None for k in ("COMP_WORDS", "COMP_CWORD", "_TYPER_COMPLETE_ARGS",
                                                     "_TYPER_COMPLETE_WORD_TO_COMPLETE", "_TYPER_COMPLETE_FISH_ACTION")}
    env["_SLOTH_COMPLETE"] = f"complete_{shell}"
    if shell == B:
        env.update(COMP_WORDS=line, COMP_CWORD=str(len(words) - (0 if line.endswith(" ") else 1)))
    else:
        env["_TYPER_COMPLETE_ARGS"] = line
    if shell == PS:
        env["_TYPER_COMPLETE_WORD_TO_COMPLETE"] = "" if line.endswith(" ") else words[-1]
    if shell == FI:
        env["_TYPER_COMPLETE_FISH_ACTION"] = action
    return env


def test_a_tab_completes_as_typer_completes(harness, monkeypatch, capsys):
    """Each line completed by the fast path and by the Typer app, in this
    process, against a real daemon: the same words, the same exit code."""
    from sloth_daemon.cli import fast_complete, typer_app

    harness.start()
    harness.call("pause")
    for args in (["--", "true"], ["-l", "video", "--label", "[x] y: z", "--", "echo", "a:b"], ["--", "false"]):
        harness.cli("add", *args, check=True)
    monkeypatch.setenv("SLOTH_HOME", str(harness.home))
    monkeypatch.setattr(sys, "argv", ["sloth"])
    cases = [(s, line, fast, "get-args") for s, line, fast in TABS]
    cases += [(FI, "sloth pause ", True, "is-args"), (FI, "sloth pause zzz", True, "is-args")]
    for shell, line, fast, action in cases:
        for k, v in tab_env(shell, line, action).items():
            monkeypatch.setenv(k, v) if v is not None else monkeypatch.delenv(k, raising=False)
        ours = fast_complete.complete()
        out = capsys.readouterr().out
        assert (ours is not None) == fast, (shell, line)
        with pytest.raises(SystemExit) as e:
            typer_app.main()
        want = capsys.readouterr().out
        if fast:
            assert (ours, out) == (e.value.code or 0, want), (shell, line)
        assert want.strip() or action == "is-args" or line.endswith(("'un", "zzz")) or not fast, (shell, line)

"""Issue 28, item 13: the CLI's words reach a terminal one way, output.echo,
which escapes whatever drives a terminal (text.for_terminal), so a new
command gets the rule for free. This test keeps it the one way: a printer
that writes around it must be listed here with why it may."""

from __future__ import annotations

import re
from pathlib import Path

from sloth_daemon.text import for_terminal

CLI = Path(__file__).resolve().parents[3] / "sloth_daemon" / "cli"
PRINTS = re.compile(r"\b(?:print|typer\.echo|click\.echo|secho)\(|\.write\b")

# file: (writes around output.echo, why)
AROUND = {
    "output.py": (2, "the writer itself, and a --debug traceback (masked)"),
    "logs.py": (4, "a job's own output, as bytes, as `cat` would: `sloth logs` is the job's, shown as it wrote it"),
    "wait.py": (5, "the live line and its erasing: each text through for_terminal (_shown), or sloth's counts"),
    "ls.py": (1, "ls --watch's screen: its text through for_terminal"),
    "ls_stream.py": (1, "ls --json streamed: JSON escapes every control character (ASCII only)"),
    "fast_complete.py": (1, "shell completion's answer to the shell, not to a terminal"),
    "edit.py": (1, "the file the editor opens"),
    "shell_check.py": (1, "the script sh -n reads, on a pipe"),
}


def test_every_printer_of_the_cli_goes_through_output_echo():
    found = {}
    for f in sorted(CLI.glob("*.py")):
        n = sum(1 for line in f.read_text().splitlines()
                if PRINTS.search(line) and not line.lstrip().startswith(("#", "def ")))
        if n:
            found[f.name] = n
    assert found == {name: n for name, (n, _why) in AROUND.items()}


def test_for_terminal_keeps_lines_and_own_colours_and_escapes_the_rest():
    evil = "a\x1b]0;T\x07\x1b[2J\r\t\x9b\u202e\udce9b"
    assert for_terminal(evil) == "a\\x1b]0;T\\x07\\x1b[2J\\r\\t\\x9b\\u202e\\xe9b"
    assert for_terminal("one\ntwo") == "one\ntwo"
    painted = "\x1b[36mrunning\x1b[0m  x\x1b[8my\x1b[2Jz"
    assert for_terminal(painted, colours=True) == "\x1b[36mrunning\x1b[0m  x\\x1b[8my\\x1b[2Jz"
    assert for_terminal(painted) == "\\x1b[36mrunning\\x1b[0m  x\\x1b[8my\\x1b[2Jz"


def test_near_offers_only_a_slip_of_the_word():
    from sloth_daemon.text import near

    assert near("--shell", ["--help", "--lane"]) == []          # click offered --help
    assert near("--at", ["--lane", "--tz", "--every"]) == []    # click offered --lane, --tz
    assert near("--prority", ["--priority", "--lane"]) == ["--priority"]
    assert near("--lable", ["--label", "--lane"]) == ["--label"]  # two letters swapped
    assert near("stauts", ["status", "restart", "start"]) == ["status"]  # the closest only
    assert near("--stat", ["--state", "--host", "--watch"]) == ["--state"]  # its start
    assert near("max_atempts", ["max_attempts", "lease_s"]) == ["max_attempts"]

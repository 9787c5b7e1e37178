"""What `sloth add` makes of the text it is given (issue 28 item 11, issue
30 "shell text without --shell"): a line that a backslash continues is one
job, as sh would read the file; a single argument written as a shell line
is refused with the fix; the script of `sh -c`/`bash -c` is checked as a
--shell line is. The real CLI, both of its readers, and a real daemon."""

from __future__ import annotations

import subprocess
import sys

import pytest

from sloth_daemon.errors import EXIT_USAGE

pytestmark = pytest.mark.acceptance


@pytest.mark.parametrize("via", ["--file", "--stdin"])
def test_a_backslash_continues_a_line_into_one_job(harness, home, via):
    harness.start()
    text = ("echo first \\\n  second third\n"
            "printf '%s\\n' 'a\\' b\n"          # a backslash in single quotes ends nothing
            "echo x \\\\\n"                     # an escaped backslash: the line ends here
            "echo y \\\n \\\n z\n"              # two continuations
            "echo end # a comment \\\n")        # a backslash in a comment continues nothing
    (home / "jobs.txt").write_text(text)
    args = ("add", "--file", str(home / "jobs.txt")) if via == "--file" else ("add", "--stdin")
    ids = harness.cli_json(*args, input=text if via == "--stdin" else None)["ids"]
    assert len(ids) == 5, ids
    harness.cli("wait", *map(str, ids), check=True)
    out = [harness.cli("logs", str(i), check=True).stdout for i in ids]
    assert out == ["first second third\n", "a\\\nb\n", "x \\\n", "y z\n", "end\n"], out


def test_a_continuation_that_opens_a_quote_is_named_by_its_first_line(harness, home):
    harness.start()
    p = harness.cli("add", "--stdin", input='true\necho "a \\\nb\n')
    assert p.returncode == EXIT_USAGE and "line 2 of --stdin" in p.stderr, p.stderr
    assert harness.cli_json("ls")["total"] == 0


REPORT = """
import atexit, os, sys
atexit.register(lambda: open(os.environ["REPORT"], "w").write(
    "typer" if "sloth_daemon.cli.typer_app" in sys.modules else "fast"))
"""
FAST = REPORT + "from sloth_daemon.cli import main; main()"  # the fast path takes `add -- CMD`
TYPER = REPORT + "from sloth_daemon.cli.typer_app import main; main()"


def both_readers(h, home, *args: str) -> tuple[int, str]:
    """``sloth ARGS`` through the fast path and through Typer: the same exit code and words, or the test fails."""
    said = []
    for code, path in ((FAST, "fast"), (TYPER, "typer")):
        env = dict(h.env, REPORT=str(home / "report"))
        p = subprocess.run([sys.executable, "-c", code, *args], env=env, capture_output=True, text=True,
                           timeout=60, cwd=str(home))
        assert (home / "report").read_text() == path
        said.append((p.returncode, p.stdout, p.stderr))
    assert said[0] == said[1], said
    return said[0][0], said[0][2]


@pytest.mark.parametrize("cmd, words", [
    (["ls | wc -l"], ["shell line given as one word", "sloth add --shell -- 'ls | wc -l'"]),
    (["make && make install"], ["shell line", "--shell"]),
    (["echo $HOME > out.txt"], ["shell line", "--shell"]),
    (["python3 train.py", "--epochs", "3"], ["shell line", "sloth add -- python3 train.py --epochs 3"]),
    (["sh", "-c", "for f in *; do echo"], ["sh can read", "expecting \"done\""]),
    (["bash", "-e", "-o", "pipefail", "-c", "a=(1 2; echo"], ["bash can read", "unexpected token"]),
    (["/bin/sh", "-ec", "echo 'open"], ["sh can read", "Unterminated quoted string"]),
])
def test_shell_text_without_shell_is_refused_with_the_fix(harness, home, cmd, words):
    harness.start()
    code, err = both_readers(harness, home, "add", "--", *cmd)
    assert code == EXIT_USAGE and "nothing was queued" in err, err
    for w in words:
        assert w in err, err
    assert harness.cli_json("ls")["total"] == 0


def test_what_is_a_program_or_a_good_script_is_queued_and_runs(harness, home):
    harness.start()
    odd = home / "my tool"  # a program whose name has a blank: it exists, so it is one
    odd.write_text("#!/bin/sh\necho odd\n")
    odd.chmod(0o755)
    ids = [harness.cli_json("add", "--", *cmd)["ids"][0] for cmd in (
        [str(odd)], ["sh", "-c", "for f in a b; do echo $f; done"], ["bash", "-lc", "a=(1 2); echo ${a[1]}"],
        ["echo", "a | b"])]
    elsewhere = home / "elsewhere"
    elsewhere.mkdir()  # run from another folder, the job's own folder given: its program is looked for there
    ids += harness.cli_json("add", "--cwd", str(home), "--", "./my tool", cwd=elsewhere)["ids"]
    harness.cli("wait", *map(str, ids), check=True)
    out = [harness.cli("logs", str(i), check=True).stdout for i in ids]
    assert out == ["odd\n", "a\nb\n", "2\n", "a | b\n", "odd\n"], out

"""What `sloth add` makes of the text it is given (issue 28 item 11, issue
30 "shell text without --shell"): a line that a backslash continues is one
job, as sh would read the file; a single argument written as a shell line
is refused with the fix; the script of `sh -c`/`bash -c` is checked as a
--shell line is. The real CLI, both of its readers, and a real daemon."""

from __future__ import annotations

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

"""shcheck: every line read by the real /bin/sh -n, alone or in the shared
script, and no line able to close or swallow another."""

from __future__ import annotations

import pytest

from sloth_daemon.cli.shell_check import closed, first_error, message, parse_error

GOOD = [
    "echo one", "gzip -k 'a b.log'", 'echo "$HOME" `date` $(id -u) ${USER:-x}', "echo $((1 + 2))",
    "if true; then echo y; fi", "f() { echo z; }; f", "case a in a) echo w;; esac", "( cd /tmp && ls )",
    "for f in *.log; do gzip \"$f\"; done", "echo '#' \"(\" ')' # a comment with a \" in it",
    "echo '<<' \"<<EOF\" # <<EOF", "cat <<EOF\nhi\nEOF", "echo a \\", "exit 3", "return 2", "echo }", "echo {",
]
# (lines, index of the first line that does not parse alone)
BAD = [
    (["echo one", 'echo "two', "echo three"], 1),
    (['echo "a', 'b"'], 0), (["echo 'a", "b'"], 0), (["echo `a", "b`"], 0), (["echo $(a", "b)"], 0),
    (["{ echo a", "echo b; }"], 0), (["(echo a", "echo b)"], 0), (["if true; then echo", "fi"], 0),
    (["for i in 1; do echo $i", "done"], 0), (["while true", "do echo; done"], 0),
    (["echo ok", "case x in", "x) echo;; esac"], 1), (["echo a &&", "echo b"], 0), (["}"], 0),
    (["true"] * 50 + ['echo "x'] + ["true"] * 50, 50),
    (["echo ok", "cat <<EOF", "hi", "EOF"], 1), (["cat <<-'END' | sh"], 0),  # a here-document left open
]


@pytest.mark.parametrize("line", GOOD)
def test_a_line_that_parses_alone_passes(line):
    assert parse_error(line) is None
    assert first_error([line]) is None


def test_good_lines_pass_together():
    assert first_error(GOOD) is None
    assert first_error(GOOD * 200) is None  # one sh for the closed ones, a few alone


@pytest.mark.parametrize("lines, bad", BAD)
def test_the_first_line_that_does_not_parse_alone_is_named(lines, bad):
    got = first_error(lines)
    assert got is not None and got[0] == bad, got
    assert message(got[1]).startswith("Syntax error"), got


def test_the_scan_says_closed_only_when_sure():
    assert closed('echo "a" \'b\' `c` $(d) ${e} $((1+2)) (f)')
    for line in ('echo "a', "echo 'a", "echo `a", "echo $(a", "echo ${a", "cat <<EOF", "echo a \\",
                 "case x in a) ;; esac", "echo $(a # c)", "echo a)"):
        assert not closed(line), line

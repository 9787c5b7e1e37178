"""A hostile reviewer's attacks on what `sloth add` and `sloth edit` make
of shell text (issue 28 item 11, issue 30; round 4, X1): a script -n
cannot read as it runs, a hint that would queue a job that fails, the same
rule on every way a command comes in. The real CLI and a real daemon."""

from __future__ import annotations

import pytest

from sloth_daemon.errors import EXIT_USAGE

pytestmark = pytest.mark.acceptance


def test_a_bash_script_that_turns_on_extglob_is_queued_and_runs(harness, home):
    """`shopt -s extglob` on one line, `!(pattern)` on the next: bash runs
    it; its -n, reading without running, called it a syntax error."""
    harness.start()
    files = home / "files"
    files.mkdir()
    (files / "keep").write_text("")
    (files / "drop").write_text("")
    jid = harness.cli_json("add", "--cwd", str(files), "--", "bash", "-c", "shopt -s extglob\nls !(drop)")["ids"][0]
    harness.cli("wait", str(jid), check=True)
    assert harness.cli("logs", str(jid), check=True).stdout == "keep\n"
    p = harness.cli("add", "--", "bash", "-c", "shopt -s extglob\nls !(")  # still read: a broken one is refused
    assert p.returncode == EXIT_USAGE and "bash can read" in p.stderr, p.stderr


def test_the_script_after_dash_dash_is_the_one_checked(harness):
    harness.start()
    p = harness.cli("add", "--", "bash", "-c", "--", "echo 'open")
    assert p.returncode == EXIT_USAGE and "bash can read" in p.stderr and "'open" in p.stderr, p.stderr
    jid = harness.cli_json("add", "--", "sh", "-c", "--", "echo fine")["ids"][0]
    harness.cli("wait", str(jid), check=True)
    assert harness.cli("logs", str(jid), check=True).stdout == "fine\n"


@pytest.mark.parametrize("cmd", [["FOO=1 printenv", "FOO"], ["FOO=1", "printenv", "FOO"]])
def test_an_assignment_for_a_program_is_refused_and_the_hint_given_runs(harness, cmd):
    """`FOO=1 printenv FOO`, one word or two: no program is named FOO=1, so
    the job could only fail; the hint's command (env sets it) runs."""
    harness.start()
    p = harness.cli("add", "--", *cmd)
    assert p.returncode == EXIT_USAGE and "nothing was queued" in p.stderr, p.stderr
    assert "sloth add -- env FOO=1 printenv FOO" in p.stderr, p.stderr
    assert harness.cli_json("ls")["total"] == 0
    jid = harness.cli_json("add", "--", "env", "FOO=1", "printenv", "FOO")["ids"][0]
    harness.cli("wait", str(jid), check=True)
    assert harness.cli("logs", str(jid), check=True).stdout == "1\n"


def test_edit_refuses_the_shell_text_add_refuses(harness, home):
    """`sloth edit ID -- 'ls | wc -l'` (a shell line as one word) and
    `-- sh -c 'if'` (a script sh cannot read) were stored, to fail when
    run; refused as `sloth add` refuses them, the job left as it was. A
    program of the job's own folder (--cwd) is a program."""
    harness.start()
    harness.cli("pause", check=True)
    jid = harness.cli_json("add", "--cwd", str(home), "--", "true")["ids"][0]
    for cmd, words in ((["ls | wc -l"], "shell line"), (["sh", "-c", "if"], "sh can read")):
        p = harness.cli("edit", str(jid), "--", *cmd)
        assert p.returncode == EXIT_USAGE and words in p.stderr and "nothing was edited" in p.stderr, p.stderr
        assert harness.job(jid)["command"] == ["true"]
    tool = home / "my tool"
    tool.write_text("#!/bin/sh\necho mine\n")
    tool.chmod(0o755)
    elsewhere = home / "elsewhere"
    elsewhere.mkdir()
    harness.cli("edit", str(jid), "--", "./my tool", check=True, cwd=elsewhere)
    harness.cli("resume", check=True)
    harness.cli("wait", str(jid), check=True)
    assert harness.cli("logs", str(jid), check=True).stdout == "mine\n"


def test_a_tilde_path_given_quoted_is_refused_and_the_hint_given_runs(harness, home):
    """`sloth add -- '~/bin/tool'`: only a shell turns ~ into $HOME, so as a
    program it is not found when run; the hint's --shell line runs it."""
    harness.start()
    (home / "bin").mkdir()
    tool = home / "bin" / "tool"
    tool.write_text("#!/bin/sh\necho tool\n")
    tool.chmod(0o755)
    harness.env["HOME"] = str(home)
    p = harness.cli("add", "--", "~/bin/tool")
    assert p.returncode == EXIT_USAGE and "sloth add --shell -- '~/bin/tool'" in p.stderr, p.stderr
    jid = harness.cli_json("add", "--shell", "--", "~/bin/tool")["ids"][0]
    harness.cli("wait", str(jid), check=True)
    assert harness.cli("logs", str(jid), check=True).stdout == "tool\n"

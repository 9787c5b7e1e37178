"""--stdin lines: plain ones run directly, anything the shell would interpret runs in sh."""

import subprocess

import pytest

from sloth_daemon.cli.shell_lines import is_plain, line_job


@pytest.mark.parametrize("line", [
    "true", "echo a b", "  make -C build all  ", "rsync -a /src/ host:/dst/", "dd if=/dev/zero of=x",
    "python3 train.py --lr 0.1 --tag run@2", "printf %s x",
])
def test_plain_lines_run_directly_with_the_words_sh_would_see(line):
    assert is_plain(line)
    job = line_job(line)
    assert job["command"] == line.split() and "shell" not in job
    # the claim: sh would have run exactly this argv
    out = subprocess.run(["/bin/sh", "-c", 'for a in "$@"; do printf "%s\\n" "$a"; done', "sh",
                          *line.split()], capture_output=True, text=True).stdout
    via_sh = subprocess.run(["/bin/sh", "-c", "set -- " + line + '; for a in "$@"; do printf "%s\\n" "$a"; done'],
                            capture_output=True, text=True).stdout
    assert out == via_sh


@pytest.mark.parametrize("line", [
    "echo $HOME", "echo ~", "ls *.txt", "echo 'a b'", 'echo "a"', "a | b", "a > f", "a && b", "a; b",
    "FOO=1 make", "cd /tmp", "exit 3", "echo a # c", "echo `date`", "echo a\\ b", "(echo a)",
    "if true", "export X=1", "echo {a,b}", "echo a[1]", "wait", "time sleep 1",
])
def test_anything_the_shell_interprets_runs_in_sh(line):
    assert not is_plain(line)
    assert line_job(line) == {"command": ["/bin/sh", "-c", line], "shell": True}

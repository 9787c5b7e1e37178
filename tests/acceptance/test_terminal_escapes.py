"""Issue 28, item 13: text that came from a user or another machine (lane
names, labels, commands, schedule names and commands, messages) never
reaches a terminal raw. Every command's human output, on a real
pseudo-terminal, colours on, with hostile names everywhere: the only escape
sequences that reach the terminal are sloth's own colours, and no other
C0 or C1 control byte does. The real CLI (both of its readers) and daemon."""

from __future__ import annotations

import re
import sys

import pytest

from tests.support.terminal import Terminal

pytestmark = pytest.mark.acceptance

# An OSC that titles the window, a screen clear, a BEL, a C1 CSI (U+009B), a bidi override.
EVIL = "x\x1b]0;PWNED\x07\x1b[2J\x9b31m\u202ey"
SHOWN = "x\\x1b]0;PWNED\\x07\\x1b[2J\\x9b31m\\u202ey"  # how every line shows it
# sloth's own: its colours, the live line of `wait` erased, the pty's line ends
OWN = re.compile(r"\x1b\[(?:0|3[0-7]|9[0-7])m|\r\x1b\[K|\r\n")
RAW = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def on_terminal(h, *args: str) -> tuple[int, str]:
    env = {k: v for k, v in h.env.items() if k != "NO_COLOR"}  # colours on: sloth's own must still pass
    env["TERM"] = "xterm"
    with Terminal([sys.executable, "-m", "sloth_daemon", *args], env, h.home) as t:
        code = t.wait(60)
        return code, t.raw.decode("utf-8", "surrogateescape")


def test_no_command_writes_a_hostile_name_raw_to_the_terminal(harness, home):
    harness.start()
    h = harness
    runs: list[tuple[tuple[str, ...], int, str]] = []

    def run(*args: str) -> str:
        code, out = on_terminal(h, *args)
        runs.append((args, code, out))
        return out

    made = run("add", "--lane", EVIL, "--label", EVIL, "--hold", "--", "printf", EVIL)
    jid = int(re.search(r"^(\d+)\s*$", made, re.M).group(1))
    run("add", "--lane", EVIL, "--shell", "--", f"echo '{EVIL}'")
    run("schedule", "add", "nightly", "--every", "1h", "--lane", EVIL, "--", "printf", EVIL)
    run("schedule", "add", EVIL, "--every", "1h", "--", "true")
    for args in (("status",), ("lane", "ls"), ("ls",), ("ls", "--all"), ("show", str(jid)), ("show",),
                 ("edit", str(jid), "--label", EVIL + "2"),
                 ("pause", EVIL), ("resume", EVIL), ("hold", "--lane", EVIL), ("release", "--lane", EVIL),
                 ("hold", "--lane", EVIL), ("lane", "set", EVIL, "-c", "2"), ("config",), ("daemon", "status"),
                 ("schedule", "ls"), ("schedule", "show", "nightly"), ("schedule", "show", EVIL),
                 ("schedule", "pause", EVIL), ("schedule", "resume", EVIL), ("schedule", "rm", EVIL),
                 ("pause", "no" + EVIL), ("lane", "rm", EVIL),
                 ("cancel", str(jid)), ("lane", "rm", "gone" + EVIL), ("wait", str(jid)), ("ls", "--lane", EVIL),
                 ("ls", "--st" + EVIL), (EVIL,), ("lane", "set", "x", "-c", EVIL), ("show", EVIL)):
        run(*args)
    for args, code, out in runs:
        assert code != 1 or "internal error" not in out, (args, out)
        left = RAW.search(OWN.sub("", out))
        assert left is None, (args, out)
    said = "".join(out for _, _, out in runs)
    # every place that names the lane, names it: escaped, not dropped
    for args in (("status",), ("lane", "ls"), ("pause", EVIL), ("schedule", "show", "nightly"), ("config",)):
        out = next(o for a, _, o in runs if a == args)
        assert SHOWN in out, (args, out)
    assert "PWNED" in said

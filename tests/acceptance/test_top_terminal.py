"""`sloth top` as a person runs it: the real command on a real
pseudo-terminal (tests/support/terminal.py) at 80x24, with NO_COLOR:
it draws, redraws on a resize (SIGWINCH from the terminal), lists its
keys on `?`, and `q` leaves the terminal as it found it. Piped, it says it
needs a terminal. The pilot tests (test_top.py) drive the rest."""

from __future__ import annotations

import fcntl
import re
import struct
import subprocess
import sys
import termios
import time

import pytest

pytest.importorskip("textual")

from tests.support.terminal import Terminal  # noqa: E402

pytestmark = pytest.mark.acceptance

_COLOUR = re.compile(r"\x1b\[[0-9;]*?(?:38|48);(?:5;(\d+)|2;(\d+);(\d+);(\d+))")
GREYS = set(range(232, 256)) | {0, 7, 15, 16, 231}  # what a monochrome (NO_COLOR) palette may use


def colours(text: str) -> set[str]:
    """The colours the output sets: 256-palette indexes, or r,g,b."""
    return {m.group(1) or ",".join(m.group(2, 3, 4)) for m in _COLOUR.finditer(text)}


_ESCAPE = re.compile(r"\x1b\[[0-9;?<>$]*[A-Za-z]")


def shown(t: Terminal, pattern: str, timeout_s: float = 30, *, since: int = 0) -> None:
    """Read until ``pattern`` is in what was written (from byte ``since`` on)
    with its escapes taken out (a table's cells are written one by one, each
    in its colours)."""
    deadline = time.monotonic() + timeout_s
    while not re.search(pattern, plain := _ESCAPE.sub("", t.raw[since:].decode("utf-8", "replace"))):
        assert time.monotonic() < deadline, f"no {pattern!r} in {plain[-3000:]!r}"
        t._read(0.2)


def top(harness, cols: int, rows: int, **env: str) -> Terminal:
    e = dict(harness.env, TERM="xterm-256color", **env)
    return Terminal([sys.executable, "-m", "sloth_daemon", "top"], e, harness.home, cols=cols, rows=rows)


def resize(t: Terminal, cols: int, rows: int) -> None:
    assert t.master is not None
    fcntl.ioctl(t.master, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))  # the kernel sends SIGWINCH


def test_top_on_a_real_terminal_at_80x24_without_colour_redraws_and_quits_clean(harness):
    harness.start()
    jid = harness.add("sleep", "60")
    harness.wait_state(jid, "running")
    # a job's text is shown, never obeyed: a terminal title escape, and what Textual would read as markup
    harness.add("echo", "\x1b]0;pwned\x07[b]bold?[/b]", not_before=time.time() + 3600)
    assert harness.env["NO_COLOR"] == "1"
    # COLUMNS and LINES exported (some shells and tools do): the resize below is still seen
    with top(harness, 80, 24, COLUMNS="80", LINES="24") as t:
        t.read_until(r"daemon up", 30)
        t.read_until(r"running \(1\)", 30)
        t.read_until(re.escape("[b]bold?[/b]"), 10)
        assert "\x1b]0;pwned" not in t.text
        drawn = len(t.raw)
        resize(t, 100, 30)
        t.read_until(r"(?s).{%d}.*daemon up" % drawn, 10)  # drawn again after the resize ...
        t.read_until(r"(?s).{%d}.*\x1b\[(?:29|30);\d+H" % drawn, 10)  # ... on rows it did not have before
        t.type(b"?")
        t.read_until(r"sloth top: keys", 10)
        t.read_until(r"asks first", 10)
        closing = len(t.raw)
        t.type(b"x")  # any key closes the help
        # the view drawn again once the help is gone (a key typed while it is open goes to the help)
        shown(t, r"log \(attempt 1\)", since=closing)  # the running job chosen, its detail read
        asked = len(t.raw)
        t.type(b"c")
        shown(t, rf"Cancel job {jid} \(sleep 60\)\?", since=asked)
        t.type(b"\r")  # Enter: the default, no
        shown(t, rf"cancel job {jid}: not done \(you said no\)", since=asked)
        time.sleep(0.5)
        assert harness.job(jid)["state"] == "running"
        t.type(b"c")
        time.sleep(0.5)
        t.type(b"y")
        harness.wait_state(jid, "cancelled", timeout_s=15)
        quitting = len(t.raw)
        t.type(b"q")
        assert t.wait(20) == 0
        tail = t.raw[quitting:].decode("utf-8", "replace")  # all it wrote on its way out
        for mode in ("\x1b[?1049l", "\x1b[?25h", "\x1b[?1000l"):  # the main screen back, the cursor shown, no mouse
            assert mode in tail, (mode, tail[-600:])
        assert t.master is not None
        lflag = termios.tcgetattr(t.master)[3]
        assert lflag & termios.ICANON and lflag & termios.ECHO  # the line discipline back in cooked mode
        assert not colours(t.text) - {str(g) for g in GREYS}, sorted(colours(t.text))  # NO_COLOR: greys only


def test_with_colour_the_same_view_uses_colours(harness):
    """The control for NO_COLOR above: without it, colours other than greys are drawn."""
    harness.start()
    env = {k: v for k, v in harness.env.items() if k != "NO_COLOR"}
    with Terminal([sys.executable, "-m", "sloth_daemon", "top"], dict(env, TERM="xterm-256color"), harness.home,
                  cols=80, rows=24) as t:
        t.read_until(r"daemon up", 30)
        time.sleep(0.5)
        t.type(b"q")
        assert t.wait(20) == 0
        assert colours(t.text) - {str(g) for g in GREYS}


def test_piped_it_says_it_needs_a_terminal(harness):
    p = subprocess.run([sys.executable, "-m", "sloth_daemon", "top"], env=harness.env, capture_output=True,
                       text=True, timeout=60, stdin=subprocess.DEVNULL, cwd=str(harness.home))
    assert p.returncode == 2, p
    assert "draws on a terminal" in p.stderr and "sloth status --json" in p.stderr
    assert not harness.socket.exists()  # nothing was started for it


def test_on_battery_the_header_says_so_and_a_schedule_waiting_for_mains_is_blocked(make_harness, home):
    """Top and the daemon in a namespace whose /sys/class/power_supply is a
    fake on battery (tests/support/power.py): the header reads the machine's
    power, and a schedule whose job waits for mains power says since when."""
    from tests.acceptance.test_conditions import FAST_LOOK, start_over_power
    from tests.support.power import fake_power, over_power

    h = make_harness(FAST_LOOK)
    tree = fake_power(home / "power", online=False, percent=41)
    start_over_power(h, tree)
    h.cli("schedule", "add", "backup", "--every", "1h", "--when", "ac", "--", "true", check=True)
    h.cli("schedule", "run", "backup", check=True)  # one occurrence now: it waits for the charger
    jid = h.wait_for(lambda: h.call("schedule_ls")["schedules"][0]["last_job"], 15, "the occurrence queued")
    h.wait_for(lambda: h.job(jid)["wait_reason"] == "waiting for mains power", 15, "the daemon to say why")
    argv = [*over_power(tree), sys.executable, "-m", "sloth_daemon", "top"]
    with Terminal(argv, dict(h.env, TERM="xterm-256color"), h.home, cols=130, rows=36) as t:
        t.read_until(r"on battery 41%", 30)
        shown(t, r"backup +blocked +every 1h +no run since \d\d:\d\d(:\d\d)?: waiting for mains power")
        t.type(b"q")
        assert t.wait(20) == 0

"""A command on a pseudo-terminal of its own, for tests about what a terminal
shows: the pty is its controlling terminal, so a Ctrl-C typed into it
reaches it as the terminal's SIGINT (and the terminal echoes ``^C``), and
``screen`` renders what was written the way a terminal would show it
(carriage returns, erased lines, colours dropped)."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import signal
import struct
import subprocess
import termios
import time
from pathlib import Path

_CSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def _take_terminal() -> None:
    """In the child, after setsid: stdin's terminal becomes the controlling one."""
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


class Terminal:
    def __init__(self, argv: list[str], env: dict[str, str], cwd: Path, *, cols: int = 120, rows: int = 30) -> None:
        master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
        try:
            self.proc = subprocess.Popen(argv, env=env, cwd=str(cwd), stdin=slave, stdout=slave, stderr=slave,
                                         start_new_session=True, preexec_fn=_take_terminal)
        finally:
            os.close(slave)
        self.master: int | None = master
        self.raw = b""

    @property
    def text(self) -> str:
        return self.raw.decode("utf-8", "replace")

    def _read(self, timeout_s: float) -> bool:
        """Read what is there within ``timeout_s``; False at the end (the other side closed)."""
        assert self.master is not None
        r, _, _ = select.select([self.master], [], [], timeout_s)
        if not r:
            return True
        try:
            chunk = os.read(self.master, 65536)
        except OSError:  # EIO: every writer closed its side
            return False
        self.raw += chunk
        return bool(chunk)

    def read_until(self, pattern: str, timeout_s: float = 30) -> re.Match[str]:
        """Read until ``pattern`` (a regular expression) is in the output."""
        deadline = time.monotonic() + timeout_s
        while (m := re.search(pattern, self.text)) is None:
            if time.monotonic() > deadline or not self._read(min(0.2, max(0.0, deadline - time.monotonic()))):
                if (m := re.search(pattern, self.text)) is not None:
                    return m
                raise AssertionError(f"no {pattern!r} in the output: {self.text!r}")
        return m

    def type(self, data: bytes) -> None:
        assert self.master is not None
        os.write(self.master, data)

    def wait(self, timeout_s: float = 30) -> int:
        """Read to the end; the exit code."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and self._read(0.2):
            if self.proc.poll() is not None:
                # What it wrote last, to the end (EIO once every writer has closed
                # its side) or until nothing more comes for 1 s (a grandchild
                # may keep the terminal open): a loaded machine hands the last
                # bytes over late, and one empty look is no end.
                quiet_until = time.monotonic() + 1.0
                while time.monotonic() < min(deadline, quiet_until):
                    before = len(self.raw)
                    if not self._read(0.1):
                        break
                    if len(self.raw) > before:
                        quiet_until = time.monotonic() + 1.0
                break
        try:
            return self.proc.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)
            raise AssertionError(f"still running after {timeout_s}s: {self.text!r}") from None

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        if self.master is not None:
            os.close(self.master)
            self.master = None

    def __enter__(self) -> Terminal:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def screen(self) -> list[str]:
        return screen(self.text)


def screen(text: str) -> list[str]:
    """The lines a terminal shows for ``text``: ``\\r`` goes back to the
    line's start, ``ESC[K`` erases to its end, other escapes show nothing."""
    lines: list[list[str]] = [[]]
    col, i = 0, 0
    while i < len(text):
        if text.startswith("\x1b[K", i):
            del lines[-1][col:]
            i += 3
            continue
        if (m := _CSI.match(text, i)) is not None:
            i = m.end()
            continue
        ch, i = text[i], i + 1
        if ch == "\r":
            col = 0
        elif ch == "\n":
            lines.append([])
            col = 0
        else:
            line = lines[-1]
            line.extend(" " * (col - len(line)))
            if col < len(line):
                line[col] = ch
            else:
                line.append(ch)
            col += 1
    return ["".join(ln) for ln in lines]

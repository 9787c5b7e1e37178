"""Text that came from outside, made safe to store and to show.

Paths, arguments and environment values are bytes on Unix; Python carries
the bytes that are not UTF-8 as lone surrogates (``surrogateescape``). Such
a string cannot be written as UTF-8 (to SQLite, to a terminal, to a log
line) and one with control characters can break a table or drive the
terminal. Every string that crosses into storage or onto a screen goes
through one of these, so no path, label or message can do either.
"""

from __future__ import annotations

# C0 and C1 controls, DEL, line/paragraph separators, bidi overrides and
# isolates (they reorder what follows on the line), lone surrogates.
# Compiled (and cached by re) on first use: every `sloth add` imports this module.
_UNSHOWABLE = "[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]"
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def as_bytes(s: str) -> bytes:
    """The bytes a path or argument stands for (what os.fsencode makes on a
    UTF-8 system). Raises UnicodeEncodeError for a surrogate that no byte
    stands for (only hand-made JSON has those)."""
    return s.encode("utf-8", "surrogateescape")


def is_bytes_text(s: str) -> bool:
    """True if ``s`` stands for some bytes (see :func:`as_bytes`)."""
    if s.isascii():
        return True
    try:
        as_bytes(s)
    except UnicodeEncodeError:
        return False
    return True


def is_utf8(s: str) -> bool:
    """True if ``s`` is plain text: no byte that was not UTF-8."""
    if s.isascii():
        return True
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def storable(s: str) -> str:
    """``s`` as valid UTF-8 text, for messages: a byte that was not UTF-8
    becomes ``\\xNN`` (lossy, and meant for people, not for reuse)."""
    if is_utf8(s):
        return s
    try:
        raw = as_bytes(s)
    except UnicodeEncodeError:
        raw = s.encode("utf-8", "surrogatepass")
    return raw.decode("utf-8", "backslashreplace")


TYPE_CHECKING = False
if TYPE_CHECKING:
    import re


def _escape(m: re.Match[str]) -> str:
    ch = m.group()
    if ch in _NAMED:
        return _NAMED[ch]
    n = ord(ch)
    if 0xDC80 <= n <= 0xDCFF:  # a byte that was not UTF-8
        return f"\\x{n - 0xDC00:02x}"
    return f"\\x{n:02x}" if n < 0x100 else f"\\u{n:04x}"


def showable(s: str) -> str:
    """``s`` for one line of a terminal: controls, separators, bidi marks
    and bytes that were not UTF-8 shown as escapes (``\\n``, ``\\x1b``,
    ``\\xe9``), so a label cannot break a table or move the cursor."""
    if s.isascii() and s.isprintable():  # nothing to escape: most text, and no re to import
        return s
    import re  # here, not at the top: every `sloth add` imports this module

    return re.sub(_UNSHOWABLE, _escape, s)


def shell_command(*words: object) -> str:
    """``words`` as one command to paste into a shell, each quoted as sh
    needs (a lane or a path a user chose stays one word and runs nothing).
    Every hint that puts outside text into a command makes it here."""
    import shlex

    return " ".join(shlex.quote(str(w)) for w in words)

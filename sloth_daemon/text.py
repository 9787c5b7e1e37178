"""Text that came from outside, made safe to store and to show.

Paths, arguments and environment values are bytes on Unix; Python carries
the bytes that are not UTF-8 as lone surrogates (``surrogateescape``). Such
a string cannot be written as UTF-8 (to SQLite, to a terminal, to a log
line) and one with control characters can break a table or drive the
terminal. Every string that crosses into storage or onto a screen goes
through one of these, so no path, label or message can do either; every
line the CLI writes, through ``for_terminal``.

A word typed wrong (an option, a command, a setting) is offered the known
words it is a slip of, and no others: ``near``.

Secrets: secrets kept out of what sloth says: one function, ``mask``, applied
where text is made for people to read, so that no path around it exists:

- every SlothError's message and hint, when it is made (errors.py): what
  the CLI prints, the socket carries and a status field quotes;
- every log line of the daemon and the keeper, traceback included
  (``log_to_stderr``: their logs are their stderr);
- every line the CLI writes to stderr, a --debug traceback too (cli/output.py).

It masks a password three ways, because a URL a driver cannot parse may
be quoted whole, in part, or not at all:

- the password of any ``scheme://user:password@`` (up to the last ``@``
  of the word: an unescaped ``@`` in a password must not leave its tail);
- ``password=...`` (libpq keyword strings, URL query parameters);
- the text of every password this process was configured with
  (``remember``: config.py calls it for queue_url and SLOTH_QUEUE_URL),
  raw, decoded and escaped, wherever it appears (psycopg's ``invalid
  percent-encoded token: "Secret%zz"`` names no URL).

Standard library only, and imported by every `sloth add` (through
errors.py): its imports wait until a text needs them.
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
    from typing import Iterable


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


# The only escape sequences a line may keep on its way out, and only where
# sloth colours (render.paint): a foreground colour or its reset. They can
# change a colour, never move the cursor, title a window or query the terminal.
_OWN_COLOURS = frozenset({"0", *(f"3{i}" for i in range(8)), *(f"9{i}" for i in range(8))})


MAX_WHOLE_DIGITS = 18  # a whole number a user writes (an id, a count): it fits a 64-bit integer column


def whole_number(s: str) -> int | None:
    """``s`` read as a whole number if it is 1 to 18 ASCII digits, else None.
    ``str.isdigit`` also takes '²' (which int() refuses) and '٣' (another
    script's 3), and int() refuses more than 4,300 digits: each was an
    internal error where a user's word was read with isdigit then int."""
    return int(s) if 0 < len(s) <= MAX_WHOLE_DIGITS and s.isascii() and s.isdigit() else None


def for_terminal(s: str, *, colours: bool = False) -> str:
    """``s`` as it may reach a terminal: the one rule every line the CLI
    writes goes through (cli/output.py's echo, the live lines of `wait` and
    `ls --watch`, click's usage errors), whoever wrote the text in it -- a
    user, another machine, a driver. Line breaks stay; every other control,
    separator, bidi mark and byte that was not UTF-8 is escaped as
    :func:`showable` escapes it, escape sequences too, except, with
    ``colours``, sloth's own colours (``ESC [ 36 m``). Without re, as
    every `sloth ls` prints through it."""
    if s.replace("\n", "").isprintable():  # nearly every text (str.isprintable is False for all we escape)
        return s
    if colours and "\x1b[" in s:
        first, *rest = s.split("\x1b[")
        out = [for_terminal(first)]
        for part in rest:
            code, m, after = part.partition("m")
            own = m and code in _OWN_COLOURS
            out.append("\x1b[" + code + "m" + for_terminal(after) if own else for_terminal("\x1b[" + part))
        return "".join(out)
    return "\n".join(ln if ln.isprintable() else showable(ln) for ln in s.split("\n"))


def shell_command(*words: object) -> str:
    """``words`` as one command to paste into a shell, each quoted as sh
    needs (a lane or a path a user chose stays one word and runs nothing).
    Every hint that puts outside text into a command makes it here."""
    return " ".join(shell_word(str(w)) for w in words)


_SHELL_SAFE = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_@%+=:,./-")


def shell_word(s: str) -> str:
    """``s`` as one sh word: shlex.quote's rule, without importing shlex
    (and re) on the fast path."""
    if s and all(c in _SHELL_SAFE for c in s):
        return s
    return "'" + s.replace("'", "'\"'\"'") + "'"


# ------------------------------------------------------------ suggestions
def near(word: str, choices: Iterable[str]) -> list[str]:
    """The ``choices`` ``word`` is a slip of, the closest only: at most one
    edit (two past 5 letters, three past 10) of the name without its
    dashes, or its start (3 letters at least)."""
    typed = word.lstrip("-").lower()
    allowed = 1 if len(typed) <= 5 else 2 if len(typed) <= 10 else 3
    scored = []
    for c in set(choices):
        name = c.lstrip("-").lower()
        d = 0 if len(typed) >= 3 and name.startswith(typed) else _distance(typed, name)
        if d <= allowed:
            scored.append((d, c))
    best = min((d for d, _ in scored), default=0)
    return [c for d, c in sorted(scored) if d == best][:3]


def _distance(a: str, b: str) -> int:
    """Edits (insert, delete, replace, swap two neighbours) from ``a`` to ``b``."""
    if abs(len(a) - len(b)) > 3:
        return 4
    prev2: list[int] = []
    prev = list(range(len(b) + 1))
    for i in range(1, len(a) + 1):
        cur = [i] + [0] * len(b)
        for j in range(1, len(b) + 1):
            cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] != b[j - 1]))
            if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                cur[j] = min(cur[j], prev2[j - 2] + 1)
        prev2, prev = prev, cur
    return prev[-1]


SHOWN = "***"
MIN_REMEMBERED = 3  # a shorter one would mask every "db" in every message: the patterns still cover it
URL_PASSWORD = r"(?i)\b([a-z][a-z0-9+.-]*://[^\s:/@'\"]*:)([^\s'\"]*)@"
KEYWORD = r"(?i)\b((?:pg)?password\s*=\s*)('(?:[^'\\]|\\.)*'?|[^\s&'\"]+)"
_known: tuple[str, ...] = ()  # longest first: a password that holds another is masked whole


def remember(conninfo: str) -> None:
    """Mask from now on, in this process, the password(s) that ``conninfo``
    (a URL or a libpq keyword string, well-formed or not) holds."""
    import re

    global _known
    found = {m.group(2) for m in re.finditer(URL_PASSWORD, conninfo)}
    found |= {m.group(2).strip("'") for m in re.finditer(KEYWORD, conninfo)}
    forms = {f for raw in found for f in _forms(raw) if len(f) >= MIN_REMEMBERED}
    # A new tuple bound at once: mask() in another thread reads the old or the new one.
    _known = tuple(sorted(set(_known) | forms, key=len, reverse=True))


def _forms(raw: str) -> set[str]:
    """A password as a message may quote it: as written, percent-decoded,
    and escaped the ways repr() and JSON escape it."""
    import json
    from urllib.parse import unquote

    out = set()
    for v in (raw, unquote(raw)):  # an invalid escape (%zz) is kept as written
        out |= {v, repr(v)[1:-1], json.dumps(v)[1:-1]}
    return out


def mask(text: str) -> str:
    """``text`` with every password in it shown as ``***``."""
    if not isinstance(text, str) or not text:
        return text
    for secret in _known:
        if secret in text:
            text = text.replace(secret, SHOWN)
    if "://" in text:
        import re

        text = re.sub(URL_PASSWORD, lambda m: m.group(1) + SHOWN + "@", text)
    if "assword" in text.lower():
        import re

        text = re.sub(KEYWORD, lambda m: m.group(1) + SHOWN, text)
    return text


def mask_url(url: str) -> str:
    """A URL to tell (a ping, a webhook) as it may be shown: its scheme and
    host, never its path, query or user (a healthchecks UUID, a Slack
    hook's path, a ``?token=`` are the secret): ``https://hc-ping.com/***``."""
    from urllib.parse import urlsplit

    try:
        u = urlsplit(url)
        host = u.hostname or ""
        port = f":{u.port}" if u.port else ""
    except ValueError:
        return SHOWN
    if ":" in host:
        host = f"[{host}]"
    rest = (u.path not in ("", "/")) or u.query or u.fragment or u.username
    return f"{u.scheme}://{host}{port}/{SHOWN if rest else ''}"


def log_to_stderr(level: int, fmt: str) -> None:
    """The process's logging: one handler, on stderr, whose every line
    (message, arguments, traceback) is masked whole. A line the log's disk
    refuses (full) is dropped, not replaced by logging's own traceback
    ("--- Logging error ---", written once there was room again: the chaos
    soak found one in a daemon's log), and the next line starts on a line
    of its own, not glued to what of the refused one got in."""
    import logging
    import sys

    class Masked(logging.Formatter):
        def format(self, record: logging.LogRecord) -> str:
            return mask(super().format(record))

    class Lines(logging.StreamHandler):
        torn = False  # a write failed: what got in of that line has no end

        def emit(self, record: logging.LogRecord) -> None:
            try:
                line = self.format(record) + self.terminator
            except Exception:
                self.handleError(record)  # a bug in a message: its traceback says where
                return
            try:
                self.stream.write("\n" + line if self.torn else line)
                self.flush()
                self.torn = False
            except OSError:
                self.torn = True
            except Exception:  # as StreamHandler: never raised into the code that logged
                self.handleError(record)

    handler = Lines(sys.stderr)
    handler.setFormatter(Masked(fmt))
    logging.basicConfig(level=level, handlers=[handler])

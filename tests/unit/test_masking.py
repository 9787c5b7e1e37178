"""text.mask: a password in any shape a message may quote it (issue 20 item 7)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from sloth_daemon import text
from sloth_daemon.errors import SlothError


@pytest.mark.parametrize("said, shown", [
    ("at postgresql://me:pw@host/db", "at postgresql://me:***@host/db"),
    ("postgres://me:pa@ss@host:5432/db", "postgres://me:***@host:5432/db"),  # an unescaped @: the tail too
    ("'postgresql://me:p w@h/db'", "'postgresql://me:p w@h/db'"),  # no password word to mask...
    ("https://u:tok/en@example.org/x", "https://u:***@example.org/x"),  # any scheme
    ("host=h password=abc port=5", "host=h password=*** port=5"),
    ("host=h password='a b\\' c' port=5", "host=h password=*** port=5"),
    ("postgresql://me@h/db?password=x&sslmode=off", "postgresql://me@h/db?password=***&sslmode=off"),
    ("PGPASSWORD=zz psql", "PGPASSWORD=*** psql"),
    ("postgresql://me@h:5432/db", "postgresql://me@h:5432/db"),  # nothing secret: unchanged
])
def test_patterns(said, shown):
    assert text.mask(said) == shown


@pytest.fixture(autouse=True)
def forget(monkeypatch):
    monkeypatch.setattr(text, "_known", ())  # what a test remembers, this process forgets after it


def test_a_remembered_password_is_masked_bare_decoded_and_escaped():
    text.remember("postgresql://me:Wh%40t\\ever%zz@h/db")  # @ escaped, a backslash, a bad escape
    raw = "Wh%40t\\ever%zz"
    for shown in (f'token: "{raw}"', f"decoded: {'Wh@t' + chr(92) + 'ever%zz'}", f"repr: {raw!r}"):
        assert "Wh" not in text.mask(shown), shown
    e = SlothError(f"cannot connect: invalid percent-encoded token: \"{raw}\"", hint=f"check {raw}")
    assert "Wh" not in e.message + e.hint and "***" in e.message  # every SlothError, where it is made


def test_a_short_password_is_masked_by_the_patterns_only():
    text.remember("postgresql://me:db@h/db")
    assert text.mask("the db is down; postgresql://me:db@h/db") == "the db is down; postgresql://me:***@h/db"


def test_the_log_handler_masks_message_arguments_and_traceback():
    code = """if 1:
        import logging
        from sloth_daemon import text
        text.remember("postgresql://me:Tr4ceback-pw@h/db")
        text.log_to_stderr(logging.INFO, "%(levelname)s %(message)s")
        try:
            raise ValueError("bad token Tr4ceback-pw")
        except ValueError:
            logging.getLogger("x").exception("failed at %s", "postgresql://u:Arg-pw@h/db")
    """
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    assert p.returncode == 0, p.stderr
    assert "ERROR failed at postgresql://u:***@h/db" in p.stderr and "bad token ***" in p.stderr
    assert "Tr4ceback-pw" not in p.stderr and "Arg-pw" not in p.stderr

"""Root pointed at another user's sloth (issue 20 items 13 and 14): a
refused peer is told nothing was queued and whose the daemon is; no hint
ever advises taking over, loosening or removing another user's files, and
nothing is made in their folder."""

from __future__ import annotations

import json
import os
import re
import shutil

import pytest

from tests.support.other_user import NOBODY, OtherUsersSloth

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act on another user's folder"),
    pytest.mark.skipif(shutil.which("setpriv") is None, reason="needs setpriv (util-linux)"),
]
TAKE_OVER = re.compile(r"\bchown\b|\bchmod\b|\brm\b|remove them|make (it|them) yours", re.I)


@pytest.fixture
def theirs():
    o = OtherUsersSloth(NOBODY)
    try:
        yield o
    finally:
        o.reap()


def test_root_adding_to_another_users_daemon_is_told_nothing_was_queued_and_whose_it_is(theirs):
    assert theirs.sloth("daemon", "start").returncode == 0
    for args, text in ((("add", "--", "true"), None), (("add", "--stdin"), "true\ntrue\n")):
        p = theirs.root_sloth(*args, input=text)
        assert p.returncode != 0
        assert "nothing was queued" in p.stderr, p.stderr
        assert "all or none" not in p.stderr and "no daemon could be asked" not in p.stderr, p.stderr
        assert "belongs to user nobody (uid 65534)" in p.stderr, p.stderr
        assert "sudo -u nobody sloth" in p.stderr, p.stderr
    ls = theirs.sloth("ls", "--all", "--json")
    assert ls.returncode == 0, ls.stderr
    assert json.loads(ls.stdout)["jobs"] == []  # and truly nothing was


def test_root_never_is_told_to_take_over_another_users_folder_and_changes_nothing_in_it(theirs):
    assert theirs.sloth("daemon", "start").returncode == 0
    assert theirs.sloth("daemon", "stop").returncode == 0  # their folder, socket left or not: all theirs
    before = theirs.owners()
    assert before and set(before.values()) == {NOBODY}
    for args in (("daemon", "start"), ("add", "--", "true")):
        p = theirs.root_sloth(*args)
        assert p.returncode != 0
        assert "user nobody (uid 65534)" in p.stderr, p.stderr
        assert not TAKE_OVER.search(p.stderr), p.stderr
    doc = theirs.root_sloth("doctor", "--json")
    checks = {c["name"]: c for c in json.loads(doc.stdout)["checks"]}
    for name in ("files", "runtime dir"):
        assert checks[name]["status"] == "fail" and "user nobody (uid 65534)" in checks[name]["detail"]
        assert "nobody" in checks[name]["hint"] and not TAKE_OVER.search(checks[name]["hint"]), checks[name]
    assert theirs.owners() == before  # nothing made, nothing taken: the daemon log untouched too


def test_root_makes_nothing_in_a_fresh_folder_of_another_user(theirs):
    p = theirs.root_sloth("add", "--", "true")
    assert p.returncode != 0
    assert "user nobody (uid 65534)" in p.stderr and not TAKE_OVER.search(p.stderr), p.stderr
    assert theirs.owners() == {}  # before: a `logs` folder of root's, made in their folder
    assert theirs.sloth("daemon", "start").returncode == 0  # ... which then kept them out of their own


def test_a_folder_root_left_in_a_users_home_is_to_be_given_back_not_used(theirs):
    """The one ownership sloth suggests changing: what `sudo sloth` made in
    the user's own home goes back to that user (sudo chown to them)."""
    left = theirs.home / "sl"
    left.mkdir(mode=0o700)  # ours (root's), in their home
    theirs.env["SLOTH_HOME"] = str(left)
    p = theirs.sloth("daemon", "start")
    assert p.returncode != 0
    assert f"{left} is owned by user root (uid 0), not by user nobody (uid 65534)" in p.stderr, p.stderr
    assert f"sudo chown -R {NOBODY} {left}" in p.stderr, p.stderr
    assert os.listdir(left) == []

"""What `sloth top` says of its connection (cli/top/feed.py: Feed._story):
once each, in the order it happens."""

from __future__ import annotations

from sloth_daemon.cli.top.feed import Feed


def test_the_connections_news_is_said_once_each(tmp_path, monkeypatch):
    monkeypatch.setenv("SLOTH_HOME", str(tmp_path))
    feed = Feed(lambda snap: None)  # not started: no thread, no connection
    said = [feed._story(pid, 1_800_000_000.0) for pid in (10, 10, None, None, 11, 11, None, 11, 12)]
    assert said[0] is None and said[1] is None  # first contact, then nothing new
    assert said[2].startswith("the daemon (pid 10) went away at ") and "read-only" in said[2]
    assert said[3] is None
    assert said[4] == "the daemon restarted (pid 10 -> 11); reconnected"
    assert said[5] is None
    assert said[6].startswith("the daemon (pid 11) went away")
    assert said[7] == "reconnected (pid 11)"  # the same daemon back (it was busy, or stopped and continued)
    assert said[8] == "the daemon restarted (pid 11 -> 12); reconnected"  # replaced between two reads


def test_no_daemon_from_the_start_says_nothing_but_the_source(tmp_path, monkeypatch):
    monkeypatch.setenv("SLOTH_HOME", str(tmp_path))
    feed = Feed(lambda snap: None)
    assert [feed._story(None, 0.0) for _ in range(3)] == [None, None, None]
    assert feed._story(5, 0.0) is None  # a first daemon: the header says it is up

"""The keeper's pure rules: when a lapsed trust deadline fences a run and
when it freezes it (suspend vs stall), the journal's format, the bounded
tap feed, request validation. Fed readings and files; no processes."""

from __future__ import annotations

import asyncio
import json
import socket

import pytest

from sloth_daemon.clock import ClockReadings
from sloth_daemon.keeper.tap import TapFeed
from sloth_daemon.keeper.wire import (
    ENV_REFS_KEPT, Cork, EnvCache, Journal, Refused, Trust, encode, parse, read_journal, secs, spawn_command,
    trust_verdict,
)

LEAD = 1.0


def at(boot: float, awake: float) -> ClockReadings:
    return ClockReadings(wall=1e9 + boot, awake=awake, total=boot)


# Trust set at boot 100 / awake 50, until boot 130: SIGTERM due at 129.
T = Trust(until=130.0, boot_at=100.0, awake_at=50.0)


def test_before_the_term_point_all_is_well():
    assert trust_verdict(T, LEAD, at(128.9, 78.9)) == "ok"
    assert trust_verdict(T, LEAD, at(110, 50.5)) == "ok"  # even after a sleep, if not lapsed


def test_without_a_sleep_a_lapse_fences_sigterm_first_then_sigkill():
    assert trust_verdict(T, LEAD, at(129.0, 79.0)) == "term"
    assert trust_verdict(T, LEAD, at(129.5, 79.5)) == "term"
    assert trust_verdict(T, LEAD, at(130.0, 80.0)) == "kill"
    assert trust_verdict(T, LEAD, at(500.0, 450.0)) == "kill"  # we were stalled (SIGSTOP, swap): both clocks ran


def test_a_lapse_caused_by_a_suspend_freezes():
    # slept an hour two seconds after the renewal: the daemon never had its window
    assert trust_verdict(T, LEAD, at(3702.0, 52.0)) == "freeze"
    # just past the term point, by a 2 s sleep
    assert trust_verdict(T, LEAD, at(129.5, 77.5)) == "freeze"


def test_a_sleep_does_not_excuse_a_daemon_that_had_its_whole_window():
    # slept 10 s early on, then 29+ s awake with no renewal: the daemon had time
    assert trust_verdict(T, LEAD, at(139.5, 79.5)) == "kill"
    assert trust_verdict(T, LEAD, at(129.5, 79.0)) == "term"  # slept 0.5 s: clock noise, not a suspend


def test_secs_reads_like_the_cli():
    assert [secs(x) for x in (3, 0.5, 1.25, 30.4, 3600)] == ["3s", "0.5s", "1.2s", "30s", "3600s"]


# ------------------------------------------------------------------- journal
def test_the_journal_keeps_unacked_outcomes_and_is_truncated_when_all_are_acked(tmp_path):
    path = tmp_path / "keeper.journal"
    j = Journal(path)
    a = {"key": "a", "job_id": 1, "outcome": {"returncode": 0}}
    b = {"key": "b", "job_id": 2, "outcome": {"returncode": 3}}
    assert j.append({"run": a}) and j.append({"run": b})
    assert read_journal(path) == [a, b]
    assert j.append({"ack": ["a"]})
    assert read_journal(path) == [b]
    j.reset([b])  # small: kept as it is
    assert read_journal(path) == [b]
    j.append({"ack": ["b"]})
    j.reset([])
    assert path.stat().st_size == 0 and read_journal(path) == []
    assert (path.stat().st_mode & 0o777) == 0o600


def test_a_large_journal_is_rewritten_with_the_unacked_outcomes_only(tmp_path, monkeypatch):
    monkeypatch.setattr("sloth_daemon.keeper.wire.JOURNAL_COMPACT_BYTES", 1000)
    path = tmp_path / "keeper.journal"
    j = Journal(path)
    for i in range(50):
        j.append({"run": {"key": f"k{i}", "outcome": {"returncode": i}}})
    j.append({"ack": [f"k{i}" for i in range(49)]})
    keep = [{"key": "k49", "outcome": {"returncode": 49}}]
    j.reset(keep)
    assert path.stat().st_size < 200 and read_journal(path) == keep
    j.append({"run": {"key": "new", "outcome": {}}})  # still appending, to the new file
    assert [r["key"] for r in read_journal(path)] == ["k49", "new"]


def test_torn_and_foreign_lines_are_skipped_and_a_torn_write_does_not_spoil_the_next(tmp_path):
    path = tmp_path / "keeper.journal"
    lines = [
        json.dumps({"v": 1, "run": {"key": "a", "outcome": {"returncode": 1}}}),
        "not json", json.dumps([1, 2]), json.dumps({"v": 2, "run": {"key": "z", "outcome": {}}}),
        json.dumps({"v": 1, "run": {"key": "no-outcome"}}), json.dumps({"v": 1, "ack": [3, None]}),
        '{"v": 1, "run": {"key": "torn", "outc',  # the writer died mid-line
    ]
    path.write_text("\n".join(lines))
    j = Journal(path)
    j.torn = True  # as after a write that failed half-way
    assert j.append({"run": {"key": "b", "outcome": {"returncode": 2}}})
    assert [r["key"] for r in read_journal(path)] == ["a", "b"]


def test_a_missing_journal_holds_nothing_and_a_symlinked_one_is_refused(tmp_path):
    assert read_journal(tmp_path / "none") == []
    (tmp_path / "elsewhere").write_text("")
    (tmp_path / "link").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(OSError):
        read_journal(tmp_path / "link")
    j = Journal(tmp_path / "link")  # never raises: outcomes stay in memory, the keeper says so
    assert j.fd is None and j.append({"run": {"key": "a", "outcome": {}}}) is False


# ------------------------------------------------------------------ tap feed
def test_a_tap_feed_skips_past_its_cap_says_how_much_and_always_takes_the_end():
    async def main() -> list[bytes | None]:
        feed = TapFeed(cap=10, job_id=3)
        feed.put(b"12345")
        feed.put(b"67890")
        feed.put(b"abc")  # no room: skipped, counted
        feed.put(b"def")
        got = [await feed.get(), await feed.get()]  # the follower catches up
        feed.put(b"xyz")
        feed.put(None)
        while got[-1] is not None:
            got.append(await feed.get())
        return got
    got = asyncio.run(main())
    assert got[:2] == [b"12345", b"67890"]
    assert got[2] == (b"\n[sloth] ... 6 bytes of live output skipped here: this follower fell behind "
                      b"(`sloth logs 3` has them once the job ends) ...\n")
    assert got[3:] == [b"xyz", None]


def test_the_end_gets_in_even_when_the_feed_is_full():
    async def main() -> list[bytes | None]:
        feed = TapFeed(cap=4, job_id=3)
        feed.put(b"1234")
        feed.put(b"5")
        feed.put(None)
        return [await feed.get() for _ in range(3)]
    first, note, end = asyncio.run(main())
    assert first == b"1234" and b"1 bytes of live output skipped" in note and end is None


# ---------------------------------------------------------------- validation
@pytest.mark.parametrize("msg, code, text", [
    ([], "protocol", "JSON object"),
    ({"v": 1.0, "op": "bye"}, "protocol", "version 1.0"),
    ({"v": True, "op": "bye"}, "protocol", "version True"),
    ({"v": 1, "op": "ping"}, "protocol", "unknown op 'ping'"),
    ({"v": 1, "op": "kill", "args": {}}, "bad_request", "needs argument(s): key"),
    ({"v": 1, "op": "bye", "args": {"now": 1}}, "bad_request", "does not take argument(s): now"),
])
def test_bad_requests_are_refused_with_a_clear_code(msg, code, text):
    with pytest.raises(Refused) as e:
        parse(msg)
    assert e.value.wire["code"] == code and text in e.value.wire["message"]


def test_a_spawn_command_is_checked_whole():
    ok = {"argv": ["ls", "-l"], "env": {"A": "b"}, "cwd": "/tmp", "log_path": "/x/1.log"}
    argv, env, cwd, log_path = spawn_command(ok, EnvCache())
    assert (argv, env, cwd, str(log_path)) == (["ls", "-l"], {"A": "b"}, "/tmp", "/x/1.log")
    for bad in ({"env": {"": "x"}}, {"env": {"A": "b\0c"}}, {"argv": []}, {"cwd": ""},
                {"log_path": "x.log"}, {"argv": ["ls", None]}, {"env_extra": {"B": 1}}, {"env_ref": 7},
                {"env": None}):
        with pytest.raises(Refused):
            spawn_command({**ok, **bad}, EnvCache())


def test_an_environment_sent_once_is_named_by_its_ref_after():
    envs = EnvCache()
    base = {"argv": ["true"], "cwd": "/", "log_path": "/x/1.log"}
    first = spawn_command({**base, "env": {"A": "1", "B": "2"}, "env_ref": "e1", "env_extra": {"B": "3"}}, envs)[1]
    again = spawn_command({**base, "env_ref": "e1", "env_extra": {"C": "4"}}, envs)[1]
    assert first == {"A": "1", "B": "3"} and again == {"A": "1", "B": "2", "C": "4"}
    with pytest.raises(Refused) as e:
        spawn_command({**base, "env_ref": "e2"}, envs)
    assert e.value.wire["code"] == "unknown_env" and e.value.wire["retry"] is True
    for i in range(ENV_REFS_KEPT):  # first in, first out: e1 is forgotten
        spawn_command({**base, "env": {}, "env_ref": f"n{i}"}, envs)
    with pytest.raises(Refused):
        spawn_command({**base, "env_ref": "e1"}, envs)


def test_a_keeper_from_before_env_refs_gets_the_whole_environment():
    """A keeper outlives daemon upgrades: one that does not list env_ref in
    its hello is sent the merged environment, never a ref it cannot read."""
    from types import SimpleNamespace

    from sloth_daemon.daemon.keeper_client import KeeperClient

    req = {"key": "k", "env": {"A": "1"}, "env_extra": {"B": "2"}}
    old = KeeperClient._whole(SimpleNamespace(info={"protocol": 1}), req)  # type: ignore[arg-type]
    assert old == {"key": "k", "env": {"A": "1", "B": "2"}}


def test_frames_queued_in_one_pass_of_the_loop_leave_in_one_write_in_order():
    async def main():
        a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        b.setblocking(False)
        _, writer = await asyncio.open_unix_connection(sock=a)
        writes = []
        real_write = writer.write
        writer.write = lambda data: (writes.append(data), real_write(data))[1]  # count: the real write still goes
        cork = Cork(writer)
        for i in range(3):
            cork.put(encode({"n": i}))
        assert cork.backlog() == sum(len(encode({"n": i})) for i in range(3))  # counted though not sent
        with pytest.raises(BlockingIOError):
            b.recv(4096)  # nothing left yet: corked until the loop's next pass
        await asyncio.sleep(0)
        assert len(writes) == 1
        got = b.recv(4096)
        assert [json.loads(line)["n"] for line in got.splitlines()] == [0, 1, 2]
        cork.put(encode({"n": 3}))
        cork.close()  # what was queued goes first
        await writer.wait_closed()
        b.setblocking(True)
        assert json.loads(b.recv(4096))["n"] == 3
        assert b.recv(4096) == b""
        await asyncio.sleep(0)
        assert len(writes) == 2  # the flush scheduled with the frame found nothing left to send
        b.close()
    asyncio.run(main())


def test_a_daemon_connection_that_stops_reading_is_cut_off_counting_what_is_corked(monkeypatch):
    from sloth_daemon.keeper import server as keeper_server
    monkeypatch.setattr(keeper_server, "DAEMON_BACKLOG_BYTES", 4096)

    async def main():
        a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)  # b never reads
        _, writer = await asyncio.open_unix_connection(sock=a)
        conn = keeper_server.Conn(writer)
        frame = {"v": 1, "event": {"kind": "exited", "key": "k" * 100}}
        sent = 0
        while conn.send(frame):  # within one pass: nothing has reached the transport yet
            sent += 1
            assert sent < 100, "never cut off"
        assert sent * len(encode(frame)) <= 4096 < (sent + 1) * len(encode(frame))
        assert writer.is_closing()
        assert not conn.send(frame)
        b.close()
    asyncio.run(main())

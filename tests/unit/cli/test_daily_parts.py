"""The small parts of issue 9, each on its own: `add`'s option helpers, the
lanes' latest-intent rule, config reload diffs, finding a daemon's socket
from the lock file, and the read-only answers the CLI gives without one."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from sloth_daemon import config
from sloth_daemon.cli import add_options
from sloth_daemon.cli.offline import answer
from sloth_daemon.clock import ManualClock
from sloth_daemon.errors import BadRequest, ConfigError, JobNotFound, LaneNotFound
from sloth_daemon.daemon.worker.lanes import Lanes, overrides_in_force
from sloth_daemon.cli.locate import daemon_socket, recorded_socket
from sloth_daemon.paths import resolve
from sloth_daemon.queue import Queue


# ------------------------------------------------------------------ add
@pytest.mark.parametrize("argv, command, at, want", [
    (["add", "--at", "tomorrow", "08:00", "--", "make"], ["08:00", "--", "make"], "tomorrow",
     (["make"], "tomorrow 08:00")),
    (["add", "--at", "mon", "9:00", "make"], ["9:00", "make"], "mon", (["make"], "mon 9:00")),
    (["add", "--at", "09:00", "--", "make"], ["make"], "09:00", (["make"], "09:00")),
    (["add", "--timeout", "5", "--", "mins"], ["mins"], None, (["mins"], None)),  # after --: a command
    (["add", "--", "w"], ["w"], None, (["w"], None)),
    # After --, or after the command's first word (add takes no option there), every word is the command's:
    # `git log -- README` at 23:00, a `--timeout 5 m` that a program named m is given.
    (["add", "--at", "23:00", "--", "git", "log", "--", "README"], ["git", "log", "--", "README"], "23:00",
     (["git", "log", "--", "README"], "23:00")),
    (["add", "--at", "tomorrow", "--", "9:00", "x"], ["9:00", "x"], "tomorrow", (["9:00", "x"], "tomorrow")),
    (["add", "--", "m", "--timeout", "5", "m"], ["m", "--timeout", "5", "m"], None, (["m", "--timeout", "5", "m"], None)),
    (["add", "-l", "x", "h", "--lease", "1", "h"], ["h", "--lease", "1", "h"], None, (["h", "--lease", "1", "h"], None)),
])
def test_stray_words_are_put_back_where_they_belong(argv, command, at, want):
    assert add_options.stray_words(command, at, argv) == want


@pytest.mark.parametrize("argv, command", [
    (["add", "--timeout", "5", "mins", "--", "echo"], ["mins", "--", "echo"]),
    (["add", "--delay=10", "minutes", "echo"], ["minutes", "echo"]),
    (["add", "--lease", "1.5", "h", "x"], ["h", "x"]),
])
def test_a_duration_split_in_two_is_an_error_not_a_job(argv, command):
    with pytest.raises(BadRequest, match="a duration is one word") as e:
        add_options.stray_words(command, None, argv)
    assert "put it after --" in e.value.hint


def test_ids_exit_codes_and_chains():
    assert add_options.id_list(["3,4", "7"], "--after") == [3, 4, 7]
    for bad in (["x"], ["0"], ["-1"]):
        with pytest.raises(BadRequest):
            add_options.id_list(bad, "--after")
    assert add_options.exit_codes("1, 75", "--retry-exit") == [1, 75] and add_options.exit_codes("none", "x") == []
    for bad in ("0", "256", "a"):
        with pytest.raises(BadRequest):
            add_options.exit_codes(bad, "--retry-exit")
    with pytest.raises(BadRequest):
        add_options.retry_fields("1", "2")
    jobs = add_options.chain([{"command": ["a"]}, {"command": ["b"]}], "after")
    assert "after_previous" not in jobs[0] and jobs[1]["after_previous"] == "after"
    linked = add_options.link_batch([{"command": ["c"], "after_previous": "after_any"}], [5, 9])
    assert linked == [{"command": ["c"], "after_any": [9]}]
    with pytest.raises(BadRequest):
        add_options.chain_mode(True, True)


# ---------------------------------------------------------------- lanes
def test_the_latest_intent_wins_between_lane_set_and_config(tmp_path):
    q = Queue(tmp_path / "q.db", ManualClock(0))
    try:
        q.enqueue(["x"], lane="video")
        cfg = config.Settings(lanes={"default": 1, "video": 2})
        lanes = Lanes(q, cfg)
        lanes.set("video", 5)
        assert Lanes(q, cfg).concurrency("video") == 5  # a restart keeps it
        same = config.Settings(lanes={"default": 1, "video": 2}, max_attempts=9)
        assert lanes.reload(same) == [] and lanes.concurrency("video") == 5  # an unrelated edit keeps it
        edited = config.Settings(lanes={"default": 1, "video": 3})
        notes = lanes.reload(edited)  # the file changed for that lane since: the file wins
        assert lanes.concurrency("video") == 3 and "replaces 5" in notes[0]
        assert overrides_in_force(q.lane_rows(), edited) == ({}, [])
        with pytest.raises(LaneNotFound):
            lanes.set("nope", 1)
        with pytest.raises(BadRequest):
            lanes.remove("video", 0)  # it is in config.toml
    finally:
        q.close()


# --------------------------------------------------------------- config
def test_config_knows_the_new_settings_and_says_what_a_reload_changes(tmp_path):
    s = config.from_mapping({"notify": ["failed", "drained"], "on_finish": "~/bin/done", "hook_timeout_s": "5s",
                             "lanes": {"gpu": 2}}, tmp_path / "c.toml")
    assert (s.notify, s.on_finish, s.hook_timeout_s) == (("failed", "drained"), "~/bin/done", 5.0)
    assert config.changes(config.Settings(), s) == [
        "notify: failed -> failed, drained", "on_finish: '' -> '~/bin/done'", "hook_timeout_s: 30.0 -> 5.0",
        "lanes.gpu: added (1 -> 2)"]
    for bad in ({"notify": ["loudly"]}, {"notify": "failed"}, {"on_finish": 5}, {"hook_timeout_s": "0s"}):
        with pytest.raises(ConfigError):
            config.from_mapping(bad, tmp_path / "c.toml")


# --------------------------------------------------------------- locate
def test_a_client_finds_the_socket_the_lock_file_names(tmp_path):
    ours = resolve({"SLOTH_HOME": str(tmp_path / "h")})
    ours.data_dir.mkdir(parents=True)
    elsewhere = tmp_path / "run" / "sloth.sock"
    elsewhere.parent.mkdir()
    assert daemon_socket(ours) == ours.socket and recorded_socket(ours) is None
    ours.lock.write_text(f"123\n{elsewhere}\n")
    assert daemon_socket(ours) == ours.socket  # recorded, but no socket there
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(elsewhere))
    mine = socket.socket(socket.AF_UNIX)
    ours.socket.parent.mkdir(parents=True)
    mine.bind(str(ours.socket))
    try:
        assert daemon_socket(ours) == elsewhere  # the queue's own daemon, even if a socket sits where we look
    finally:
        s.close()
        mine.close()
    ours.lock.write_text("123\nnot/absolute\n")
    assert recorded_socket(ours) is None


# -------------------------------------------------------------- offline
def test_reading_answers_come_from_the_file_without_a_daemon(tmp_path):
    paths = resolve({"SLOTH_HOME": str(tmp_path)})
    assert answer(paths, "list", limit=10)["jobs"] == []  # no queue file: empty, and none made
    assert not paths.db.exists()
    with pytest.raises(JobNotFound):
        answer(paths, "show", ids=[1])
    with Queue(paths.db) as q:
        a = q.enqueue(["echo", "hi"], lane="video")
        (b,) = q.enqueue_many([{"command": ["b"], "after": [a]}])
        q.set_meta("paused_lanes", ["video"])
    res = answer(paths, "list", limit=10, finished_limit=10)
    assert [j["id"] for j in res["jobs"]] == [a, b] and res["total"] == 2
    (shown,) = answer(paths, "show", ids=[b])["jobs"]
    assert shown["prereqs"][0]["id"] == a and shown["state"] == "blocked"
    lanes = answer(paths, "lanes")["lanes"]
    assert lanes["video"]["paused"] is True and lanes["video"]["queued"] == 1
    assert answer(paths, "status")["counts"]["blocked"] == 1
    with pytest.raises(Exception, match="has not started"):
        answer(paths, "logs", id=a)
    assert Path(paths.db).stat().st_size > 0

"""The wire contract: framing, the size cap, and parse errors fit to send back."""

from __future__ import annotations

import json

import pytest

from sloth_daemon import protocol
from sloth_daemon.errors import (
    EXIT_NOT_FOUND, BadRequest, DaemonNotRunning, JobNotFound, ProtocolError, SlothError, from_dict,
)


def frame(**msg) -> bytes:
    return json.dumps(msg).encode()


def test_encode_is_one_compact_line_with_version():
    data = protocol.encode(protocol.request(7, "add", jobs=[{"command": ["echo", "é\n"]}]))
    assert data.endswith(b"\n") and data.count(b"\n") == 1  # the newline in the arg is escaped
    msg = json.loads(data)
    # in the oldest version that has the op, so an older daemon understands it
    assert msg == {"v": 1, "id": 7, "op": "add", "args": {"jobs": [{"command": ["echo", "é\n"]}]}}
    assert "é".encode() in data  # not \u-escaped: cheaper for non-ASCII paths


def test_encode_size_cap_is_inclusive_of_the_newline():
    overhead = len(protocol.encode({"x": ""}))
    fits = protocol.encode({"x": "a" * (protocol.MAX_FRAME - overhead)})
    assert len(fits) == protocol.MAX_FRAME
    with pytest.raises(ProtocolError) as ei:
        protocol.encode({"x": "a" * (protocol.MAX_FRAME - overhead + 1)})
    assert "frame limit" in ei.value.message and ei.value.hint


def test_round_trip_request():
    req = protocol.parse_request(protocol.encode(protocol.request("abc", "show", id=3))[:-1])
    assert (req.id, req.op, req.args) == ("abc", "show", {"id": 3})


def test_args_may_be_omitted():
    assert protocol.parse_request(frame(v=1, id=1, op="ping")).args == {}


def test_every_op_in_the_table_parses_with_its_required_args():
    for op, (required, _optional) in protocol.OPS.items():
        v = protocol.OP_SINCE.get(op, 1)
        req = protocol.parse_request(frame(v=v, id=1, op=op, args={k: 1 for k in required}))
        assert (req.op, req.v) == (op, v)


def test_a_newer_op_in_an_older_version_is_unknown_and_a_newer_version_is_refused():
    with pytest.raises(ProtocolError, match="unknown op 'commit'"):
        protocol.parse_request(frame(v=1, id=1, op="commit", args={"batch": "t"}))
    with pytest.raises(ProtocolError, match="unknown op 'scan'"):
        protocol.parse_request(frame(v=2, id=1, op="scan", args={}))
    assert protocol.request(1, "scan")["v"] == 3  # so a daemon of v2 refuses it, and the client pages
    with pytest.raises(ProtocolError, match="unknown op 'edit'"):
        protocol.parse_request(frame(v=3, id=1, op="edit", args={"id": 1, "changes": {}}))
    assert protocol.request(1, "schedule_add")["v"] == 4  # a daemon of v3 says so, not "unknown op"
    # v5: "latest" means this machine's and takes "ran": a daemon of v4 says it lacks v5 (restart it)
    assert protocol.request(1, "latest", ran=True)["v"] == 5
    with pytest.raises(ProtocolError, match="unknown op 'latest'"):
        protocol.parse_request(frame(v=4, id=1, op="latest", args={}))
    # v6: round 4's ops (the timeline, the outbox, metrics, batches, results): a daemon of v5 refuses the version
    assert protocol.request(1, "timeline")["v"] == protocol.request(1, "result", id=1)["v"] == 6
    with pytest.raises(ProtocolError, match="unknown op 'outbox'"):
        protocol.parse_request(frame(v=5, id=1, op="outbox", args={}))
    with pytest.raises(ProtocolError, match="version 7 is not supported"):
        protocol.parse_request(frame(v=7, id=1, op="ping"))


@pytest.mark.parametrize(
    "line, words",
    [
        (b"\xff\xfe", "UTF-8"),
        (b"{not json", "not valid JSON"),
        (b"", "not valid JSON"),
        (b"[1,2]", "JSON object"),
        (b"42", "JSON object"),
        (b'"str"', "JSON object"),
        (b"null", "JSON object"),
        (b"[" * 100_000 + b"]" * 100_000, "JSON"),  # deep nesting: RecursionError, not a crash
        (frame(v=7, id=1, op="ping"), "version 7"),
        (frame(id=1, op="ping"), "version None"),
        (frame(v="1", id=1, op="ping"), "version '1'"),
        (frame(v=True, id=1, op="ping"), "version True"),  # True == 1 in Python, not on the wire
        (frame(v=1.0, id=1, op="ping"), "version 1.0"),
        (frame(v=1, id=1, op="explode"), "unknown op 'explode'"),
        (frame(v=1, id=1, op=5), "unknown op 5"),
        (frame(v=1, id=1), "unknown op None"),
        (frame(v=1, id=[1], op="ping"), "id must be"),
        (frame(v=1, id=True, op="ping"), "id must be"),
        (frame(v=1, id=1.5, op="ping"), "id must be"),
        (frame(v=1, id=1, op="ping", args=[]), "args must be"),
        (frame(v=1, id=1, op="ping", args="x"), "args must be"),
        (frame(v=1, id=1, op="logs", args={}), "needs argument(s): id"),
        (frame(v=1, id=1, op="ping", args={"x": 1}), "does not take argument(s): x"),
        (frame(v=1, id=1, op="shutdown", args={"now": True}), "does not take"),
    ],
)
def test_parse_errors(line, words):
    with pytest.raises(ProtocolError) as ei:
        protocol.parse_request(line)
    assert words in ei.value.message
    assert "\n" not in ei.value.message and len(ei.value.message) < 300
    assert ei.value.hint


def test_unknown_op_hint_lists_the_known_ones():
    with pytest.raises(ProtocolError) as ei:
        protocol.parse_request(frame(v=1, id=1, op="nope"))
    assert "add" in ei.value.hint and "ping" in ei.value.hint


def test_error_response_round_trips_to_a_typed_error():
    for err in (JobNotFound(5), BadRequest("bad"), DaemonNotRunning("gone"), ProtocolError("p")):
        wire = protocol.decode_response(protocol.encode(protocol.error(1, err))[:-1])
        assert wire["ok"] is False
        back = from_dict(wire["error"])
        assert type(back) is type(err)
        assert (back.code, back.message, back.hint, back.exit_code) == (
            err.code, err.message, err.hint, err.exit_code)
    assert from_dict({"code": "not_found", "message": "m"}).exit_code == EXIT_NOT_FOUND


def test_unknown_error_code_stays_a_sloth_error_with_its_code():
    e = from_dict({"code": "permission_denied", "message": "no", "hint": "h"})
    assert isinstance(e, SlothError) and e.code == "permission_denied" and e.hint == "h"


def test_decode_response_rejects_garbage_and_other_versions():
    with pytest.raises(ProtocolError):
        protocol.decode_response(b"\xff")
    with pytest.raises(ProtocolError):
        protocol.decode_response(b"{")
    with pytest.raises(ProtocolError) as ei:
        protocol.decode_response(b'{"v": 99, "id": 1, "ok": true}')
    assert "sloth daemon stop" in ei.value.hint
    with pytest.raises(ProtocolError):
        protocol.decode_response(b"[]")


def test_events_and_ok_carry_the_version_and_id():
    assert protocol.event(3, {"kind": "log"}, 1) == {"v": 1, "id": 3, "event": {"kind": "log"}}
    assert protocol.ok(3, {"a": 1}, 2) == {"v": 2, "id": 3, "ok": True, "result": {"a": 1}}


def test_undecodable_bytes_survive_a_round_trip():
    # Log output is bytes; the daemon sends it as str decoded with surrogateescape.
    raw = bytes(range(256))
    msg = protocol.event(1, {"kind": "log", "data": raw.decode("utf-8", "surrogateescape")})
    line = protocol.encode(msg, protocol.MAX_RESPONSE)
    back = protocol.decode_response(line[:-1])["event"]["data"]
    assert back.encode("utf-8", "surrogateescape") == raw


def test_responses_may_be_larger_than_requests():
    big = {"x": "a" * (protocol.MAX_FRAME + 10)}
    with pytest.raises(ProtocolError):
        protocol.encode(big)
    assert len(protocol.encode(big, protocol.MAX_RESPONSE)) > protocol.MAX_FRAME


def test_cli_batches_of_many_jobs_each_fit_in_a_frame():
    import random

    from sloth_daemon.cli.submit import _job_size, frames

    rng = random.Random(7)
    alphabet = ["a", "é", "\n", '"', "\\", "😀", "\x01", "\udcff", " "]
    jobs = []
    for i in range(3000):
        line = "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 800)))
        jobs.append({"command": ["/bin/sh", "-c", line], "shell": True, **({"key": f"k{i}é"} if i % 7 == 0 else {})})
    for j in jobs[:500]:  # the estimate never undercounts
        real = protocol.encode({"j": j}, protocol.MAX_RESPONSE)
        assert _job_size(j) >= len(real) - len(b'{"j":}\n')
    common = {"env": {"HOME": "/home/é" * 100}, "cwd": "/tmp"}
    batches = frames(jobs, common, where=str)
    assert len(batches) > 1 and [j for b in batches for j in b] == jobs
    for b in batches:
        req = protocol.request(1, "commit", jobs=b, common=common, batch="f" * 64)
        assert len(protocol.encode(req)) <= protocol.MAX_FRAME


def test_every_error_code_names_one_error_type():
    """A code two types share would turn one into the other on the client
    (a busy daemon was once reported as a busy database, exit 1 not 7)."""
    from sloth_daemon import errors

    seen: dict[str, str] = {}
    for cls in _all_subclasses(errors.SlothError):
        code = cls.__dict__.get("code")
        if code is not None:
            assert code not in seen, f"{cls.__name__} and {seen[code]} share the code {code!r}"
            seen[code] = cls.__name__


def _all_subclasses(cls):
    out = []
    for sub in cls.__subclasses__():
        out += [sub, *_all_subclasses(sub)]
    return out


@pytest.mark.parametrize(("op", "args"), [
    ("add", {"jobs": [{"command": ["x"], "ping": "https://example.com/p"}]}),
    ("add", {"jobs": [{"command": ["x"]}], "common": {"mail_to": ["me@example.com"]}}),
    ("add", {"jobs": [{"command": ["x"], "key": "k", "on_dup": "append"}]}),
    ("add", {"jobs": [{"command": ["x"], "rules": {"stall_s": 60.0}}]}),
    ("add", {"jobs": [{"command": ["x"], "needs": {"gpu": 0.5}}]}),
    ("add", {"jobs": [{"command": ["x"], "needs": {"gpu-mem": "20G"}}]}),
    ("commit", {"batch": "t", "jobs": [{"command": ["x"], "member": {"index": 1, "value": "a", "args": {}}}],
                "handle": {"name": None}}),
    ("edit", {"id": 1, "changes": {"needs": {"gpu": 0.25}}}),
    ("list", {"batch": 3}),
    ("scan", {"batch": 3}),
    ("schedule_add", {"name": "n", "recipe": {"every_s": 60, "job": {"command": ["x"]}, "expect_within_s": 120}}),
    ("schedule_edit", {"name": "n", "recipe": {"job": {"command": ["x"], "webhook": "https://example.com/h"}}}),
])
def test_round_4s_fields_in_older_ops_make_a_v5_daemon_say_to_restart_it_not_unknown_field(monkeypatch, op, args):
    """A daemon of v5 still running after an upgrade, asked with one of
    round 4's fields, refuses the version (restart it), not the field in
    its own words ("unknown job field(s): ping")."""
    req = protocol.request(1, op, **args)
    assert req["v"] == 6
    monkeypatch.setattr(protocol, "SUPPORTED_VERSIONS", (1, 2, 3, 4, 5))
    monkeypatch.setattr(protocol, "VERSION", 5)
    with pytest.raises(ProtocolError, match="version 6 is not supported") as refused:
        protocol.parse_request(protocol.encode(req)[:-1])
    assert "restart the daemon" in (refused.value.hint or "")


def test_a_request_without_round_4s_fields_keeps_its_op_s_version_so_older_daemons_take_it():
    assert protocol.request(1, "add", jobs=[{"command": ["x"], "needs": {"gpu": 1}, "key": "k"}],
                            common={"lane": "a"})["v"] == 1
    assert protocol.request(1, "commit", batch="t", jobs=[{"command": ["x"]}])["v"] == 2
    assert protocol.request(1, "list", states=["queued"])["v"] == 1
    assert protocol.request(1, "edit", id=1, changes={"needs": {"gpu": 2}})["v"] == 4
    assert protocol.request(1, "schedule_add", name="n", recipe={"every_s": 60, "job": {"command": ["x"]}})["v"] == 4
    assert protocol.request(1, "add", jobs="not a list")["v"] == 1  # a bad request is the daemon's to refuse

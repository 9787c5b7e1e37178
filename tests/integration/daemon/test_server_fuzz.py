"""Throw thousands of malformed frames at a real daemon over its real socket.

Each bad frame must get a typed error response (never "internal error", never
silence), the over-size frame gets one and its connection is closed, silent
and half-sending clients do not stall anyone, and afterwards the daemon still
answers and the queue is exactly as it was. Random with a fixed seed: the
same frames every run, a few thousand in all.
"""

from __future__ import annotations

import json
import random
import socket
from pathlib import Path
from typing import Any, Iterator


from sloth_daemon import protocol
from tests.support.harness import Harness

SEED = 20240611
# Every typed error a bad request may get, and the plain "error" code (e.g. "job
# 3 has not started yet") unless it is what a handler bug becomes: "internal error in ...".
TYPED = {"bad_request", "protocol", "not_found", "illegal_transition", "error"}
NOT_IDS = ["1", 1.5, True, False, [1], {"id": 1}, None, 2**64, 10**30, -(2**70), "", 1e300]
BAD_NUMBERS = ["1", True, [], {}, -1, float("nan"), float("inf"), 10**400, -(10**400), "NaN"]
BAD_STRINGS = [5, 1.5, True, [], {}, "", "a\x00b"]


class Conn:
    """A raw connection: bytes in, parsed response lines out."""

    def __init__(self, path: Path, timeout_s: float = 10) -> None:
        self.s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.s.settimeout(timeout_s)
        self.s.connect(str(path))
        self.buf = b""

    def send(self, data: bytes) -> None:
        self.s.sendall(data)

    def line(self) -> bytes | None:
        while b"\n" not in self.buf:
            chunk = self.s.recv(65536)
            if not chunk:
                return None
            self.buf += chunk
        line, _, self.buf = self.buf.partition(b"\n")
        return line

    def ask(self, frame: bytes) -> dict[str, Any]:
        self.send(frame + b"\n")
        try:
            line = self.line()
        except socket.timeout:
            raise AssertionError(f"no answer to {frame[:200]!r}") from None
        assert line is not None, f"connection closed after {frame[:200]!r}"
        return json.loads(line)

    def close(self) -> None:
        self.s.close()


def dumps(msg: Any) -> bytes:
    return json.dumps(msg, allow_nan=True).encode()


def req(op: Any, args: Any = None, *, v: Any = 1, rid: Any = 1, with_args: bool = True) -> bytes:
    msg: dict[str, Any] = {"v": v, "id": rid, "op": op}
    if with_args:
        msg["args"] = {} if args is None else args
    return dumps(msg)


# ------------------------------------------------------------------ frames
def random_bytes(rng: random.Random) -> Iterator[bytes]:
    for _ in range(1200):
        n = rng.choice([0, 1, 2, 5, 17, 100, 1000])
        yield bytes(rng.randrange(256) for _ in range(n)).replace(b"\n", b" ")


def invalid_utf8(rng: random.Random) -> Iterator[bytes]:
    bad = [b"\xff", b"\xfe", b"\xc3\x28", b"\xe2\x82", b"\xed\xa0\x80", b"\xc0\xaf", b"\xf8\x88\x80\x80\x80"]
    base = req("ping")
    for _ in range(400):
        at = rng.randrange(len(base) + 1)
        yield base[:at] + rng.choice(bad) + base[at:]


def invalid_json(rng: random.Random) -> Iterator[bytes]:
    base = req("add", {"jobs": [{"command": ["echo", "hi"]}]})
    for _ in range(300):
        cut = rng.randrange(1, len(base))  # every strict prefix of an object is invalid
        yield base[:cut]
    for extra in (b"x", b"}", b",", b" {}", b"{}"):
        yield base + extra
    yield b"{'v': 1}"
    yield b'{"v": 1, "op": "ping",}'
    yield b"[" * 50_000 + b"]" * 50_000  # deep nesting
    yield b'{"a":' * 50_000 + b"1" + b"}" * 50_000


def non_objects(rng: random.Random) -> Iterator[bytes]:
    for v in (1, -1, 1.5, "ping", None, True, False, [], [1, 2], [{"v": 1, "op": "ping"}], [[[]]]):
        yield dumps(v)


def wrong_versions(rng: random.Random) -> Iterator[bytes]:
    for v in (0, 7, -1, 99, 2**70, "1", 1.5, None, True, [1], {"v": 1}):  # v1 to v6 are spoken
        yield req("ping", v=v)
        yield req("status", v=v)
    yield dumps({"id": 1, "op": "ping"})  # no version at all


def unknown_ops(rng: random.Random) -> Iterator[bytes]:
    words = ["", "PING", "Ping", "ping ", "add2", "exec", "rm", "__init__", "handlers", "op_add", "drop"]
    for w in words:
        yield req(w)
    for op in (None, 1, 1.5, True, [], {}, ["ping"]):
        yield req(op)
    for _ in range(50):
        yield req("".join(rng.choice("abcdefghijklmnopqrstuvwxyz_") for _ in range(rng.randrange(1, 12))) + "!")
    yield dumps({"v": 1, "id": 1})  # no op
    for rid in ([1], {}, True, 1.5):
        yield req("ping", rid=rid)
    for args in ([], "x", 1, True, [["id", 1]]):
        yield dumps({"v": 1, "id": 1, "op": "show", "args": args})


def wrong_types(existing: list[int]) -> Iterator[bytes]:
    """For every op, every argument with wrong types. Each frame is invalid in some field."""
    some, done = existing[0], existing[-2]  # a queued job, a done one (see seed_queue)
    for op, (required, optional) in protocol.OPS.items():
        yield req(op, {"bogus": 1})  # unknown argument
        if required:
            yield req(op, {})  # missing a required argument
    for op in ("show", "cancel", "retry", "logs", "follow"):
        for bad in NOT_IDS + [0, -1, 99_999_999]:
            yield req(op, {"id": bad})
    for bad in ("1", 0, 99, True, 1.5, [], {}, -1, 2**64):
        for jid in (some, done):
            yield req("logs", {"id": jid, "attempt": bad})
            yield req("follow", {"id": jid, "attempt": bad})
    for bad in ("1", True, 1.5, [], {}, -1, 0):
        yield req("logs", {"id": done, "max_bytes": bad})
    for op in ("wait", "subscribe"):
        for bad in ("1", "12", 5, 1.5, True, {}, {"1": 1}, [], ["1"], [True], [1.5], [None], [[1]],
                    [0], [2**70], [99_999_999], [some, "x"]):
            yield req(op, {"ids": bad})
    # list
    for bad in ("queued", 5, {}, True, [1], [None], ["bogus"], ["QUEUED"], ["queued", 7]):
        yield req("list", {"states": bad})
    for bad in BAD_STRINGS:
        if bad not in ("", "a\x00b"):  # a lane that has no jobs is a fine filter
            yield req("list", {"lane": bad})
    for bad in (0, -1, 100_001, 10**30, "5", 1.5, True, None, [], float("nan")):
        if bad is not None:
            yield req("list", {"limit": bad})
    # pause / resume
    for op in ("pause", "resume"):
        for bad in BAD_STRINGS:
            if bad != "a\x00b":
                yield req(op, {"lane": bad})
    # prune
    for bad in BAD_NUMBERS:
        yield req("prune", {"older_than_s": bad})
    # add: the container
    for bad in ("x", 5, {}, None, True, [], "[]", {"command": ["true"]}):
        yield req("add", {"jobs": bad})
    for bad in (5, "x", True, [1], ["a"]):
        yield req("add", {"jobs": [{"command": ["true"]}], "common": bad})
    for bad in (5, "x", None, [], [1], True):
        yield req("add", {"jobs": [bad]})
    yield req("add", {"jobs": [{"command": ["true"]}, 5]})  # one bad job spoils the batch
    # add: every field of a job
    job_bad: dict[str, list[Any]] = {
        "command": ["echo hi", [], [1], [None], [["a"]], [True], ["a", 2], {}, 5, None, ["a\x00b"]],
        "env": [[], "A=1", 5, {"A": 1}, {"A": None}, {"A": ["x"]}, {"A": True}, {"": "x"},
                {"A=B": "x"}, {"A": "a\x00"}],
        "max_attempts": [0, -1, "3", 1.5, True, [], 2**64],
        "lease_s": [0, -1, "1m", True, [], float("nan"), float("inf"), 10**400],
        "timeout_s": [0, -1, "1h", True, [], float("nan"), 10**400],
        "not_before": ["now", True, [], float("nan"), float("inf"), 10**400],
        "priority": ["1", 1.5, True, [], 2**64, -(2**64)],
        "lane": BAD_STRINGS,
        "key": BAD_STRINGS,
        "cwd": [5, 1.5, True, [], {}, "a\x00b"],
        "label": [5, 1.5, True, [], {}, "a\x00b"],
        "shell": ["yes", "no", 1, 0, [], {}, ""],
        "unknown_field": [1],
    }
    for field, bads in job_bad.items():
        for bad in bads:
            job = {"command": ["true"], field: bad}
            if field == "command" and bad is None:
                del job["command"]
            yield req("add", {"jobs": [job]})
            if field != "command":
                yield req("add", {"jobs": [{"command": ["true"]}], "common": {field: bad}})


def all_frames(existing: list[int]) -> list[bytes]:
    rng = random.Random(SEED)
    frames: list[bytes] = []
    for gen in (random_bytes, invalid_utf8, invalid_json, non_objects, wrong_versions, unknown_ops):
        frames += list(gen(rng))
    typed = list(wrong_types(existing))
    frames += typed * 3  # the typed ones are few; send them on several connections
    rng.shuffle(frames)
    return frames


# ------------------------------------------------------------------ checks
def snapshot(h: Harness) -> dict[str, Any]:
    st = h.call("status")
    return {
        "jobs": h.call("list", limit=100_000)["jobs"],
        "counts": st["counts"],
        "paused": (st["paused_all"], st["paused_lanes"]),
    }


def seed_queue(h: Harness) -> list[int]:
    """Some finished jobs and some queued ones, so cancel/retry/etc. have targets."""
    done = [h.add("true") for _ in range(2)]
    failed = h.add("false", max_attempts=1)
    for j in done:
        h.wait_state(j, "done")
    h.wait_state(failed, "failed")
    h.call("pause")
    queued = [h.add("echo", str(i), lane=("video" if i % 2 else "default")) for i in range(4)]
    return queued + done + [failed]


def test_thousands_of_malformed_frames_change_nothing(harness):
    h = harness
    h.start()
    existing = seed_queue(h)
    before = snapshot(h)
    frames = all_frames(existing)
    assert len(frames) >= 3000
    silent = Conn(h.socket)  # connects and says nothing for the whole test
    half = Conn(h.socket)
    half.send(b'{"v": 1, "id": 1, "op": "add", "args": {"jobs": [{"command": ["tr')  # and stalls

    bad: list[tuple[bytes, Any]] = []
    conn = Conn(h.socket)
    for i, frame in enumerate(frames):
        if i % 250 == 0:  # spread over several connections
            conn.close()
            conn = Conn(h.socket)
        assert b"\n" not in frame
        resp = conn.ask(frame)
        err = resp.get("error") or {}
        if (resp.get("ok") is not False or resp.get("v") != 1 or err.get("code") not in TYPED
                or str(err.get("message")).startswith("internal error")):
            bad.append((frame[:300], resp))
    conn.close()
    assert not bad, f"{len(bad)} frame(s) without a typed error, e.g.:\n" + "\n".join(
        f"{f!r}\n  -> {r}" for f, r in bad[:15])

    # The silent and the half-sending clients are still connected and did not
    # stop anyone; the half-frame never turned into a job.
    assert h.call("ping")["pong"] is True
    half.close()
    silent.close()
    assert snapshot(h) == before


def test_over_size_frame_gets_an_error_and_the_connection_closes(harness):
    h = harness
    h.start()
    existing = seed_queue(h)
    before = snapshot(h)
    c = Conn(h.socket, timeout_s=30)
    # A valid-looking add whose frame never ends: > 1 MiB without a newline.
    head = b'{"v": 1, "id": 1, "op": "add", "args": {"jobs": [{"command": ["echo", "'
    try:
        c.send(head + b"a" * (protocol.MAX_FRAME + 4096))
    except (BrokenPipeError, ConnectionResetError):
        pass  # the daemon may close before we finish writing; what it said is still readable
    line = c.line()
    assert line is not None
    resp = json.loads(line)
    assert resp["ok"] is False and resp["error"]["code"] == "protocol"
    assert "over" in resp["error"]["message"]
    try:
        rest = c.line()
    except ConnectionResetError:
        rest = None
    assert rest is None  # closed: we cannot know where the next frame would start
    c.close()
    assert h.call("ping")["pong"] is True
    assert snapshot(h) == before
    assert existing


def test_clients_that_disconnect_mid_request_or_say_nothing(harness):
    h = harness
    h.start()
    seed_queue(h)
    before = snapshot(h)
    silent = [Conn(h.socket) for _ in range(5)]
    frame = req("add", {"jobs": [{"command": ["echo", "never"]}]})
    for cut in (1, len(frame) // 2, len(frame) - 1, len(frame)):  # the last one: no newline
        c = Conn(h.socket)
        c.send(frame[:cut])
        c.close()
        assert h.call("ping")["pong"] is True  # served while the others hang on
    # A client that sends a full request and leaves before reading the answer:
    # the request is done (it was complete), the daemon survives the broken pipe.
    c = Conn(h.socket)
    c.send(req("status") + b"\n")
    c.close()
    for s in silent:
        s.close()
    assert h.call("ping")["pong"] is True
    assert snapshot(h) == before


def test_a_good_request_after_bad_ones_on_the_same_connection_works(harness):
    h = harness
    h.start()
    c = Conn(h.socket)
    for frame in (b"\xff", b"[]", req("nope"), req("show", {"id": "1"})):
        assert c.ask(frame)["ok"] is False
    resp = c.ask(req("ping", rid="after"))
    assert resp == {"v": 1, "id": "after", "ok": True, "result": resp["result"]} and resp["result"]["pong"]
    c.close()

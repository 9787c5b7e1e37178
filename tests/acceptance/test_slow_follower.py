"""Issue 14, item 9: a slow reader of `logs -f` is not cut off, and the
daemon keeps serving meanwhile. The real daemon and keeper in a temporary
home run a real chatty job; the follower is a socket that stops reading for
a while (a paused pager), with a small receive buffer so it fills at once.
Live output it could not keep up with is skipped (the keeper's bounded
feed), and the follower is told how many bytes and where."""

from __future__ import annotations

import json
import socket
import sys
import threading
from pathlib import Path

from tests.support.harness import TEST_CONFIG, Harness

CHATTY = ("import sys, time\n"
          "for i in range(400):\n"
          "    sys.stdout.buffer.write(b'x' * 65535 + b'\\n'); sys.stdout.flush()\n"
          "    time.sleep(0.005)\n"
          "print('THE END')\n")  # ~26 MB over ~2-3 s


def follow_slowly(sock_path: Path, jid: int, paused: threading.Event) -> tuple[list[dict], int]:
    """Send `follow`, read nothing until ``paused`` is set, then read to the
    end. Returns (messages, bytes of log received)."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # fill up fast, like a stopped pager
    s.connect(str(sock_path))
    s.sendall(json.dumps({"v": 1, "id": 1, "op": "follow", "args": {"id": jid}}).encode() + b"\n")
    paused.wait(60)
    s.settimeout(60)
    msgs, got, buf = [], 0, b""
    with s:
        while True:
            chunk = s.recv(1 << 20)
            if not chunk:
                return msgs, got
            buf += chunk
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                msg = json.loads(line)
                msgs.append(msg)
                if "event" not in msg:
                    return msgs, got
                got += len(msg["event"].get("data", ""))


def test_a_follower_that_stops_reading_is_told_what_was_skipped_and_not_cut_off(home):
    h = Harness(home / "h", config=TEST_CONFIG + "log_cap_bytes = 67108864\n")
    try:
        h.start()
        jid = h.add(sys.executable, "-c", CHATTY)
        h.wait_state(jid, "running")
        resume = threading.Event()
        out: dict[str, tuple[list[dict], int]] = {}
        t = threading.Thread(target=lambda: out.setdefault("r", follow_slowly(h.socket, jid, resume)))
        t.start()
        try:
            h.wait_state(jid, "done", timeout_s=60)  # the daemon served others while the follower sat
            assert h.call("status")["pid"]
        finally:
            resume.set()
            t.join(90)
        msgs, got = out["r"]
    finally:
        h.reap()
    assert msgs, "nothing at all came"
    last = msgs[-1]
    assert "event" not in last and last.get("ok") is True, f"cut off: the stream ended with {str(last)[:300]}"
    text = "".join(m["event"].get("data", "") for m in msgs if "event" in m)
    assert "bytes of live output skipped here" in text  # told what was skipped, where
    assert got < 400 * 65536  # it was skipped, not buffered without bound

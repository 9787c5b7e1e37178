"""Issue 14, item 9: a slow reader of `logs -f` is not cut off. The real
server on a real socket, the real worker and spawner running a real chatty
job, in-process; the follower is a socket that stops reading for a while
(a paused pager). WRITE_TIMEOUT_S is shortened so the cut-off it used to
cause shows in seconds, not in half a minute."""

from __future__ import annotations

import asyncio
import json
import socket
import sys
import time
from pathlib import Path

from sloth_daemon import server as server_mod
from sloth_daemon.clock import SystemClocks
from sloth_daemon.config import Settings
from sloth_daemon.control import Control
from sloth_daemon.paths import resolve
from sloth_daemon.queue import Queue
from sloth_daemon.server import Server
from sloth_daemon.spawner import LocalSpawner
from sloth_daemon.worker import Worker

CHATTY = ("import sys, time\n"
          "for i in range(400):\n"
          "    sys.stdout.buffer.write(b'x' * 65535 + b'\\n'); sys.stdout.flush()\n"
          "    time.sleep(0.005)\n"
          "print('THE END')\n")  # ~26 MB over ~2-3 s


def follow_slowly(sock_path: Path, jid: int, pause_s: float) -> tuple[list[dict], int]:
    """Send `follow`, read nothing for ``pause_s``, then read to the end (a
    blocking socket in a thread: nothing reads for it meanwhile). Returns
    (messages, bytes of log received)."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # fill up fast, like a stopped pager
    s.connect(str(sock_path))
    s.sendall(json.dumps({"v": 1, "id": 1, "op": "follow", "args": {"id": jid}}).encode() + b"\n")
    time.sleep(pause_s)
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


def test_a_follower_that_stops_reading_is_told_what_was_skipped_and_not_cut_off(tmp_path, monkeypatch):
    monkeypatch.setattr(server_mod, "WRITE_TIMEOUT_S", 0.5)
    paths = resolve({"SLOTH_HOME": str(tmp_path)})
    settings = Settings(log_cap_bytes=64 << 20)
    clocks = SystemClocks()

    async def scenario() -> tuple[list[dict], int, dict]:
        q = Queue(paths.db, clocks)
        sp = LocalSpawner()
        w = Worker(q, settings, sp, clocks=clocks, log_path=paths.job_log, instance="t")
        c = Control(q, w, sp, paths, settings, request_stop=lambda why: None, instance="t")
        w.on_change = c.job_changed
        srv = Server(c)
        paths.runtime_dir.mkdir(parents=True, exist_ok=True)
        await srv.start(paths.socket)
        loop_task = asyncio.ensure_future(w.run())
        try:
            jid = q.enqueue([sys.executable, "-c", CHATTY])
            w.wake()
            loop = asyncio.get_running_loop()
            msgs, got = await loop.run_in_executor(None, follow_slowly, paths.socket, jid, 3.0)
            for _ in range(200):  # the daemon kept serving all along
                if q.get(jid).state == "done":
                    break
                await asyncio.sleep(0.05)
            return msgs, got, q.get(jid).to_dict()
        finally:
            await w.shutdown()
            loop_task.cancel()
            await srv.close()
            q.close()

    msgs, got, job = asyncio.run(scenario())
    assert msgs, "nothing at all came"
    last = msgs[-1]
    assert "event" not in last and last.get("ok") is True, f"cut off: the stream ended with {str(last)[:300]}"
    assert job["state"] == "done"
    text = "".join(m["event"].get("data", "") for m in msgs if "event" in m)
    assert "bytes of live output skipped here" in text  # told what was skipped, where
    assert got < 400 * 65536  # it was skipped, not buffered without bound

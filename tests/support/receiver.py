"""A real HTTP receiver on loopback for the telling tests (stdlib
http.server in a thread): records every request, drops a repeat by its
Idempotency-Key (as a receiver that wants exactly-once effects does), and
can be told to answer 500, 404 or 301, to hang, or to drop the connection."""

from __future__ import annotations

import http.server
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    at: float = field(default_factory=time.monotonic)


class Receiver:
    """``mode``: ok, 500, 404, hang (no answer, nothing done), apply-then-hang
    (done, then no answer: the sender cannot know), drop; ``redirect``: answer 301 (or the status
it holds) to /moved first; a GET (after a 303) is answered 200 and kept in ``requests``.
    ``requests``: every request; ``effects``: those whose key was new (in order)."""

    def __init__(self) -> None:
        self.mode = "ok"
        self.redirect: bool | int = False
        self.requests: list[Seen] = []
        self.effects: list[Seen] = []
        self.keys: set[str] = set()  # (path, Idempotency-Key) seen
        self.lock = threading.Lock()
        self.release = threading.Event()  # ends every hang
        self.each: Any = None  # called at each POST before it is answered (a test's clock advanced)
        me = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a: Any) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                seen = Seen("POST", self.path, {k.lower(): v for k, v in self.headers.items()}, body)
                with me.lock:
                    me.requests.append(seen)
                    mode = me.mode
                if me.each is not None:
                    me.each()
                if mode == "hang":
                    me.release.wait(600)
                    return
                if mode == "drop":  # the connection cut without an answer
                    self.connection.shutdown(socket.SHUT_RDWR)
                    self.close_connection = True
                    return
                if me.redirect and not self.path.startswith("/moved"):
                    self._answer(301 if me.redirect is True else int(me.redirect), {"Location": "/moved" + self.path})
                    return
                if mode in ("500", "404"):
                    self._answer(int(mode))
                    return
                with me.lock:
                    # one endpoint per channel: a ping and a webhook of one event share its key
                    key = self.path.split("?")[0] + " " + seen.headers.get("idempotency-key", "")
                    if key not in me.keys:
                        me.keys.add(key)
                        me.effects.append(seen)
                if mode == "apply-then-hang":  # done on our side; the sender never hears so
                    me.release.wait(600)
                    return
                self._answer(200)

            def do_GET(self) -> None:  # noqa: N802
                with me.lock:
                    me.requests.append(Seen("GET", self.path, {k.lower(): v for k, v in self.headers.items()},
                                            b""))
                self._answer(200)

            def _answer(self, code: int, headers: dict[str, str] | None = None) -> None:
                self.send_response(code)
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"OK")

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()

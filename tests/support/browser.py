"""A real headless Chromium driven over the DevTools protocol with the
standard library alone (a WebSocket client of ~50 lines: no new test
dependency for one test), for tests about what a page does: evaluate
script in it, hear its console errors and exceptions as the browser
reports them.

    with Browser(tmp_path) as b:
        b.open(page.as_uri())
        b.eval("document.title")
        b.errors   # console.error calls, uncaught exceptions, failed loads
"""

from __future__ import annotations

import base64
import http.client
import json
import os
import shutil
import socket
import struct
import subprocess
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--hide-scrollbars"]


class WebSocket:
    """A client WebSocket (RFC 6455): text frames out, masked; frames in, reassembled."""

    def __init__(self, url: str, timeout_s: float = 30) -> None:
        u = urlparse(url)
        self.sock = socket.create_connection((u.hostname or "127.0.0.1", u.port or 80), timeout=timeout_s)
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall((f"GET {u.path} HTTP/1.1\r\nHost: {u.netloc}\r\nUpgrade: websocket\r\n"
                           f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n")
                          .encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = self.sock.recv(1)
            if not chunk:
                raise ConnectionError("the browser closed the WebSocket during its handshake")
            head += chunk
        if b" 101 " not in head.split(b"\r\n", 1)[0]:
            raise ConnectionError(f"no WebSocket: {head[:200]!r}")

    def send(self, text: str) -> None:
        data, mask = text.encode(), os.urandom(4)
        n = len(data)
        head = bytes([0x81]) + (bytes([0x80 | n]) if n < 126 else
                                bytes([0x80 | 126]) + struct.pack(">H", n) if n < 65536 else
                                bytes([0x80 | 127]) + struct.pack(">Q", n))
        self.sock.sendall(head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(data)))

    def _exactly(self, n: int) -> bytes:
        out = b""
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            if not chunk:
                raise ConnectionError("the browser closed the WebSocket")
            out += chunk
        return out

    def recv(self) -> str:
        message = b""
        while True:
            b0, b1 = self._exactly(2)
            n = b1 & 0x7F
            if n == 126:
                n = struct.unpack(">H", self._exactly(2))[0]
            elif n == 127:
                n = struct.unpack(">Q", self._exactly(8))[0]
            payload = self._exactly(n)
            opcode = b0 & 0x0F
            if opcode == 0x8:
                raise ConnectionError("the browser closed the WebSocket")
            if opcode in (0x9, 0xA):  # ping, pong: nothing to say
                continue
            message += payload
            if b0 & 0x80:
                return message.decode()

    def close(self) -> None:
        self.sock.close()


class Browser:
    """Chromium with a fresh profile under ``tmp_path``, one page, its DevTools socket."""

    def __init__(self, tmp_path: Path, *, size: str = "1280,720") -> None:
        exe = shutil.which("chromium") or shutil.which("chromium-browser")
        if exe is None:
            raise FileNotFoundError("chromium")
        self.profile = tmp_path / f"cdp-profile-{os.getpid()}-{time.monotonic_ns()}"
        self.proc = subprocess.Popen([exe, *FLAGS, f"--user-data-dir={self.profile}", f"--window-size={size}",
                                      "--remote-debugging-port=0", "about:blank"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        self.errors: list[str] = []
        self._id = 0
        try:
            port = self._port()
            self.ws = WebSocket(self._page_socket(port))
            for method in ("Runtime.enable", "Log.enable", "Page.enable"):
                self.call(method)
        except BaseException:
            self.close()
            raise

    def _port(self) -> int:
        active = self.profile / "DevToolsActivePort"
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if active.exists() and active.read_text().strip():
                return int(active.read_text().split()[0])
            if self.proc.poll() is not None:
                raise RuntimeError(f"chromium exited with {self.proc.returncode}")
            time.sleep(0.05)
        raise TimeoutError("chromium opened no DevTools port in 30 s")

    def _page_socket(self, port: int) -> str:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            conn.request("GET", "/json/list")
            pages = [t for t in json.loads(conn.getresponse().read()) if t.get("type") == "page"]
            conn.close()
            if pages:
                return str(pages[0]["webSocketDebuggerUrl"])
            time.sleep(0.05)
        raise TimeoutError("chromium has no page")

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        """One DevTools command and its result; the events meanwhile are heard (errors kept)."""
        self._id += 1
        me = self._id
        self.ws.send(json.dumps({"id": me, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == me:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return dict(msg.get("result") or {})
            self._hear(msg)

    def _hear(self, msg: dict[str, Any]) -> None:
        method, p = msg.get("method"), msg.get("params") or {}
        if method == "Runtime.exceptionThrown":
            d = p.get("exceptionDetails") or {}
            self.errors.append("exception: " + str((d.get("exception") or {}).get("description") or d.get("text")))
        elif method == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
            self.errors.append("console: " + " ".join(str(a.get("value", a.get("description"))) for a in p["args"]))
        elif method == "Log.entryAdded" and (p.get("entry") or {}).get("level") == "error":
            self.errors.append("log: " + str(p["entry"].get("text")))

    def open(self, url: str) -> None:
        """Load ``url`` and wait until its document is complete."""
        self.call("Page.navigate", url=url)
        deadline = time.monotonic() + 30
        while self.eval("document.readyState") != "complete":
            if time.monotonic() > deadline:
                raise TimeoutError(f"{url} did not load in 30 s")
            time.sleep(0.05)

    def eval(self, expression: str) -> Any:
        """The value of ``expression`` in the page (a JSON value); an exception in it raises."""
        r = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in r:
            raise RuntimeError(f"{expression}: {r['exceptionDetails']}")
        return (r.get("result") or {}).get("value")

    def screenshot(self, path: Path) -> None:
        path.write_bytes(base64.b64decode(self.call("Page.captureScreenshot", format="png")["data"]))

    def close(self) -> None:
        ws = getattr(self, "ws", None)
        if ws is not None:
            ws.close()
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, 15)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, 9)
                self.proc.wait(10)

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

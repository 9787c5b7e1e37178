"""The socket client. Turns connection failures into DaemonNotRunning.

Kept import-light: ``sloth add`` pays for every module imported here.
"""

from __future__ import annotations

import itertools
import socket
from pathlib import Path
from typing import Any, Iterator

from . import protocol
from .errors import DaemonNotRunning, ProtocolError, from_dict

_ids = itertools.count(1)


class Client:
    """One connection to the daemon. Use as a context manager."""

    def __init__(self, socket_path: Path, *, timeout_s: float | None = 30.0) -> None:
        self.socket_path = Path(socket_path)
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout_s)
        try:
            self.sock.connect(str(self.socket_path))
        except (FileNotFoundError, ConnectionRefusedError) as e:
            self.sock.close()
            raise DaemonNotRunning(f"no sloth daemon is listening on {self.socket_path}") from e
        except OSError as e:
            self.sock.close()
            raise DaemonNotRunning(f"cannot connect to {self.socket_path}: {e.strerror or e}") from e
        self._buf = b""

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def call(self, op: str, **args: Any) -> Any:
        """Send one request, return its result; raise its typed error."""
        for msg in self._exchange(op, args):
            if "event" not in msg:
                return self._result(msg)
        raise DaemonNotRunning("the daemon closed the connection before answering")

    def stream(self, op: str, **args: Any) -> Iterator[dict[str, Any]]:
        """Yield the events of a streaming request; the final response's
        result is returned as a last event ``{"kind": "end", "result": ...}``."""
        for msg in self._exchange(op, args):
            if "event" in msg:
                yield msg["event"]
            else:
                yield {"kind": "end", "result": self._result(msg)}
                return
        raise DaemonNotRunning("the daemon closed the connection before answering")

    def _exchange(self, op: str, args: dict[str, Any]) -> Iterator[dict[str, Any]]:
        req_id = next(_ids)
        try:
            self.sock.sendall(protocol.encode(protocol.request(req_id, op, **args)))
        except (BrokenPipeError, ConnectionResetError) as e:
            raise DaemonNotRunning("the daemon closed the connection") from e
        while True:
            line = self._readline()
            if line is None:
                return
            yield protocol.decode_response(line)

    def _readline(self) -> bytes | None:
        while b"\n" not in self._buf:
            try:
                chunk = self.sock.recv(65536)
            except ConnectionResetError:
                return None
            if not chunk:
                return None
            self._buf += chunk
            if len(self._buf) > protocol.MAX_RESPONSE and b"\n" not in self._buf:
                raise ProtocolError("daemon sent an over-size frame")
        line, _, self._buf = self._buf.partition(b"\n")
        return line

    @staticmethod
    def _result(msg: dict[str, Any]) -> Any:
        if msg.get("ok"):
            return msg.get("result")
        raise from_dict(msg.get("error") or {})

"""The socket client. Turns every connection failure into a typed error
that says which it was, so nobody is told to start a daemon that is there:

- DaemonNotRunning: nobody listens (no socket file, or connection refused);
- DaemonBusy: a daemon is there but its accept queue or connection limit is
  full (EAGAIN, or its "busy" answer);
- DaemonNotAnswering: a daemon took the connection but did not answer in
  time (SIGSTOPped, or stalled);
- ConnectionLost: it closed the connection before answering.

Kept import-light: ``sloth add`` pays for every module imported here.
"""

from __future__ import annotations

# The C socket type itself: socket.py wraps it with file objects and enum
# names a client does not use, and importing it (selectors, array, enum)
# was a tenth of a `sloth add`.
import _socket
import errno
import os
import time

from sloth_daemon import protocol
from sloth_daemon.errors import (
    ConnectionLost, DaemonBusy, DaemonNotAnswering, DaemonNotRunning, ProtocolError, SlothError, from_dict,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Iterator

    StrPath = str | os.PathLike[str]

_ids = iter(range(1, 1 << 62))  # request ids (itertools.count, without importing itertools: ~0.15 ms)
CONNECT_TIMEOUT_S = 30.0
BUSY_PATIENCE_S = 1.0  # a full accept queue is often a burst: try again this long before saying busy
_NOBODY = {errno.ENOENT, errno.ECONNREFUSED, errno.ENOTDIR}


class Client:
    """One connection to the daemon. Use as a context manager.

    ``timeout_s`` bounds each wait for the daemon; None waits as long as a
    stream takes (``wait``, ``follow``), after a ping has shown the daemon
    answers. ``lock_path`` (the instance lock, which holds the daemon's pid)
    lets errors name the daemon's pid."""

    def __init__(self, socket_path: StrPath, *, timeout_s: float | None = 30.0,
                 lock_path: StrPath | None = None) -> None:
        self.socket_path = os.fspath(socket_path)
        self.timeout_s, self.lock_path = timeout_s, lock_path
        self.sock = self._connect()
        self._buf = b""
        if timeout_s is None:
            try:
                self.call("ping")  # proves it answers before we wait without a bound
            except BaseException:
                self.sock.close()
                raise
            self.sock.settimeout(None)

    def _connect(self) -> _socket.socket:
        deadline = time.monotonic() + BUSY_PATIENCE_S
        while True:
            sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
            # Always bounded: a blocking connect to a full accept queue would wait forever.
            sock.settimeout(self.timeout_s or CONNECT_TIMEOUT_S)
            try:
                sock.connect(self.socket_path)
                return sock
            except OSError as e:
                sock.close()
                if e.errno not in (errno.EAGAIN, errno.EWOULDBLOCK) or time.monotonic() > deadline:
                    raise self._connect_error(e) from e
            time.sleep(0.02)

    def _connect_error(self, e: OSError) -> SlothError:
        path = self.socket_path
        if e.errno in _NOBODY:
            return DaemonNotRunning(f"no sloth daemon is listening on {path}")
        if e.errno in (errno.EAGAIN, errno.EWOULDBLOCK):
            return DaemonBusy(f"the daemon on {path} has a full queue of connections waiting to be taken",
                              hint=f"It is overloaded, or stopped and not taking any. {self._check_hint()}")
        if isinstance(e, TimeoutError):
            return self._not_answering("did not take the connection")
        return DaemonNotRunning(f"cannot connect to {path}: {e.strerror or e}")

    def _pid(self) -> str | None:
        try:
            text = _read(self.lock_path) if self.lock_path else ""
        except OSError:
            return None
        first = (text.split() or [""])[0]  # the pid, then the socket's path (daemon.InstanceLock)
        return first if first.isdigit() else None

    def _check_hint(self) -> str:
        pid = self._pid()
        if pid is None:
            return "See `sloth doctor`."
        return (f"Check it with `ps -o pid,stat,etime,cmd -p {pid}` (STAT T: stopped, resume it with "
                f"`kill -CONT {pid}`); if it stays stuck, `kill {pid}` and `sloth daemon start`.")

    def _not_answering(self, what: str) -> DaemonNotAnswering:
        pid = self._pid()
        who = f"the daemon (pid {pid})" if pid else f"the daemon on {self.socket_path}"
        return DaemonNotAnswering(f"{who} {what} within {self.timeout_s or CONNECT_TIMEOUT_S:g}s; "
                                  "it may be stopped (SIGSTOP) or stalled", hint=self._check_hint())

    def set_timeout(self, timeout_s: float | None) -> None:
        """Bound the waits from now on (None: as long as it takes)."""
        self.timeout_s = timeout_s
        self.sock.settimeout(timeout_s)

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
        raise ConnectionLost("the daemon closed the connection before answering")

    def stream(self, op: str, **args: Any) -> Iterator[dict[str, Any]]:
        """Yield the events of a streaming request; the final response's
        result is returned as a last event ``{"kind": "end", "result": ...}``."""
        for msg in self._exchange(op, args):
            if "event" in msg:
                yield msg["event"]
            else:
                yield {"kind": "end", "result": self._result(msg)}
                return
        raise ConnectionLost("the daemon closed the connection before answering")

    def _exchange(self, op: str, args: dict[str, Any]) -> Iterator[dict[str, Any]]:
        req_id = next(_ids)
        try:
            self.sock.sendall(protocol.encode(protocol.request(req_id, op, **args)))
        except TimeoutError:
            raise self._not_answering("did not read the request") from None
        except OSError as e:  # closed on us: it may have said why first (e.g. busy)
            line = self._readline(quiet=True)
            if line is None:
                raise ConnectionLost(f"the daemon closed the connection ({e.strerror or e})") from e
            yield protocol.decode_response(line)
            return
        while True:
            line = self._readline()
            if line is None:
                return
            yield protocol.decode_response(line)

    def _readline(self, *, quiet: bool = False) -> bytes | None:
        while b"\n" not in self._buf:
            try:
                chunk = self.sock.recv(65536)
            except TimeoutError:
                if quiet:
                    return None
                raise self._not_answering("did not answer") from None
            except OSError:  # reset, or closed under us
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


def _read(path: StrPath) -> str:
    from sloth_daemon.safefile import read_file

    return read_file(path, 4096, head=True).decode("utf-8", "replace")  # never blocks on a FIFO there

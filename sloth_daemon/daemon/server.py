"""The Unix-socket control server: connections, framing and peer checks.

The per-op handlers are handlers.py's. Every connection: the peer's uid is
checked first (another user, root included, is refused). Then frames are read one line at a time with a hard
size cap; each request gets exactly one response. Bad input never changes
anything and never ends the daemon: only the offending connection suffers.

Connections are capped (``max_connections``, from the descriptor limit, see
limits.py): past the cap a client is told the daemon is busy and the
connection is closed at once, so idle or half-sent connections can never use
up the descriptors that job processes need.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import os
import socket
import sys
from pathlib import Path
from typing import Any

from sloth_daemon import protocol

from sloth_daemon.paths import peer_refused
from sloth_daemon.keeper import peercred
from sloth_daemon.daemon.control import Control
from sloth_daemon.errors import DaemonBusy, PermissionDenied, ProtocolError, SlothError
from sloth_daemon.daemon.handlers import Handlers, Session

log = logging.getLogger("sloth.server")
IDLE_TIMEOUT_S = 300.0  # a client that connects and says nothing is dropped
WRITE_TIMEOUT_S = 30.0  # a client that does not read a plain answer is dropped (not a stream's reader)
DEFAULT_MAX_CONNECTIONS = 256
BACKLOG = 128  # connections the kernel queues before we accept; past it connect() says EAGAIN


# Python 3.13's asyncio unlinks a Unix server's socket path when the server
# closes, even a socket it was given: the service manager's must stay where
# it is (its next connection starts us again), so that cleanup is turned off.
KEEP_PATH: dict[str, Any] = {"cleanup_socket": False} if sys.version_info >= (3, 13) else {}


class Server:
    def __init__(self, control: Control, *, max_connections: int = DEFAULT_MAX_CONNECTIONS,
                 given: socket.socket | None = None, adopted: socket.socket | None = None) -> None:
        self.server: asyncio.base_events.Server | None = None
        self.max_connections = max_connections
        self.active = 0
        self.stats = {"connections": 0, "requests": 0, "bad_frames": 0, "refused_peers": 0,
                      "refused_busy": 0, "open": 0, "max_connections": max_connections}
        self.handlers = Handlers(control, self.stats)
        self._conns: set[asyncio.Task[None]] = set()  # one task per open connection, ended by close()
        self.path: Path | None = None  # where it listens (start)
        self.given = given  # the listener our service manager passed, if it did (activation.inherited)
        self.own = adopted  # the listener bound here, or by this daemon before it renewed itself (renewal.py)
        self.closed = False  # close() began: a connection accepted before it, served after, is refused

    async def start(self, path: Path) -> None:
        """Listen on ``path``: on the socket our service manager made for it,
        if it passed one (``given``: taken by main() before the daemon opened
        anything), else on one bound here, replacing a stale file (the
        instance lock proves nobody serves it). Called again after
        ``stop_listening`` (an idle exit called off), it listens again."""
        self.path = path
        listener = self.listener
        if listener is None:
            listener = self.own = self._bind(path)
        # asyncio closes what it is given: the listener stays ours, for a listen again (or the next process)
        self.server = await asyncio.start_unix_server(
            self.handle, sock=listener.dup(), limit=protocol.MAX_FRAME + 2, backlog=BACKLOG, **KEEP_PATH)

    @staticmethod
    def _bind(path: Path) -> socket.socket:
        """A listener of our own at ``path``, replacing a stale file (the instance lock proves nobody serves it)."""
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old_umask = os.umask(0o177)  # the socket is born 0600, no window
        try:
            sock.bind(str(path))
            sock.listen(BACKLOG)
        except BaseException:
            sock.close()
            raise
        finally:
            os.umask(old_umask)
        os.chmod(path, 0o600)
        return sock

    @property
    def listener(self) -> socket.socket | None:
        """The listening socket (the service manager's or ours), kept while the daemon lives."""
        return self.given if self.given is not None else self.own

    def pause(self) -> None:
        """Accept no more for now; the listener stays and queues connections (a renewal, renewal.py)."""
        if self.server is not None:
            self.server.close()
            self.server = None

    def stop_listening(self) -> None:
        """Take no more connections (those open are served on). A socket bound
        here is removed, so a client starts the next daemon; a socket the
        service manager made stays its: it starts us again on the next connection."""
        self.pause()
        if self.given is None and self.path is not None:
            self.path.unlink(missing_ok=True)
        if self.own is not None:
            self.own.close()
            self.own = None

    async def close(self, *, keep_listener: bool = False) -> None:
        """Stop listening and end every open connection (a follower, a
        waiter, the client that asked us to stop) before the loop does:
        asyncio.run() would cancel them at its end, and a cancelled
        connection task is logged as a traceback. A connection accepted just
        before (its task not yet run, so not among those ended here) is refused
        when it runs: the queue it would use is about to close.
        ``keep_listener``: the next process takes the socket over (renewal.py)."""
        self.closed = True
        self.handlers.close()
        self.pause() if keep_listener else self.stop_listening()
        conns = [t for t in self._conns if t is not asyncio.current_task()]
        for t in conns:
            t.cancel()
        if conns:
            await asyncio.wait(conns, timeout=5.0)

    # ---------------------------------------------------------- connection
    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.stats["connections"] += 1
        if self.closed:
            self._refuse(writer, DaemonBusy("the daemon is stopping; it takes no more requests",
                                            hint="Try again: the next command starts it again."))
            return
        if self.active >= self.max_connections:
            self.stats["refused_busy"] += 1
            self._refuse(writer, DaemonBusy(f"the daemon has {self.active} connections open, its limit;"
                                            " it takes no more now"))
            return
        self.active += 1
        self.stats["open"] = self.active
        session = Session()
        task = asyncio.current_task()
        if task is not None:
            self._conns.add(task)
        try:
            uid = peercred.peer_uid(writer.get_extra_info("socket"))
            if uid != os.getuid():
                self.stats["refused_peers"] += 1
                err = PermissionDenied(*peer_refused(uid, os.getuid()))
                await self._send(writer, protocol.error(None, err))
                return
            await self._serve(reader, writer, session)
        except (ConnectionError, OSError):
            pass
        except asyncio.CancelledError:
            pass  # close(): the daemon is stopping; end as any closed connection does
        except Exception:  # never let one connection take the daemon down
            log.exception("connection handler failed")
        finally:
            self._conns.discard(task)
            session.close()  # a batch staged but not committed is dropped: nothing was queued
            self.active -= 1
            self.stats["open"] = self.active
            try:
                writer.close()
            except Exception:
                pass

    def _refuse(self, writer: asyncio.StreamWriter, err: DaemonBusy) -> None:
        """Past the cap, or stopping: say so and close, without waiting on the client."""
        try:
            writer.write(protocol.encode(protocol.error(None, err)))
            writer.close()
        except Exception:  # noqa: BLE001 - the client may be gone already
            pass

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, session: Session) -> None:
        while not reader.at_eof():
            try:
                line = await asyncio.wait_for(reader.readuntil(b"\n"), IDLE_TIMEOUT_S)
            except asyncio.IncompleteReadError:
                return  # disconnected mid-request: nothing was done
            except asyncio.LimitOverrunError:
                self.stats["bad_frames"] += 1
                await self._send(writer, protocol.error(None, ProtocolError(
                    f"frame over {protocol.MAX_FRAME} bytes; closing this connection")))
                return
            except (asyncio.TimeoutError, ConnectionError):
                return
            if not await self.dispatch(line[:-1], writer, session):
                return

    async def dispatch(self, line: bytes, writer: asyncio.StreamWriter, session: Session | None = None) -> bool:
        """Answer one frame. Returns False to close the connection."""
        self.stats["requests"] += 1
        try:
            req = protocol.parse_request(line)
        except ProtocolError as e:
            self.stats["bad_frames"] += 1
            return await self._send(writer, protocol.error(None, e))
        stream = req.op in self.handlers.stream_ops
        try:
            result = await self._run(req, writer, session or Session())
            msg = protocol.ok(req.id, result, req.v)
        except SlothError as e:
            msg = protocol.error(req.id, e, req.v)
        except ConnectionError:
            return False
        except Exception as e:  # a bug in a handler: answer, log, keep serving
            log.exception("handler %s failed", req.op)
            msg = protocol.error(req.id, SlothError(f"internal error in {req.op}: {e}",
                                                    hint="This is a bug; see the daemon log."), req.v)
        return await self._send(writer, msg, patient=stream)

    async def _run(self, req: protocol.Request, writer: asyncio.StreamWriter, session: Session) -> Any:
        if req.op in self.handlers.stream_ops:
            async def emit(ev: dict[str, Any]) -> None:
                # A stream's reader may be slow (a paused pager): wait for it,
                # never drop it; a live log skips what it cannot keep (handlers.py).
                if not await self._send(writer, protocol.event(req.id, ev, req.v), patient=True):
                    raise ConnectionError("client went away")
            return await self.handlers.stream_ops[req.op](req.args, emit)
        if req.op in self.handlers.session_ops:
            result = self.handlers.session_ops[req.op](req.args, session)
        else:
            result = self.handlers.ops[req.op](req.args)
        if inspect.isawaitable(result):  # a write that may wait for a lock, without blocking
            result = await result
        return result

    async def _send(self, writer: asyncio.StreamWriter, msg: dict[str, Any], *, patient: bool = False) -> bool:
        """Write one message. ``patient``: wait as long as the reader takes
        (the reader of a stream); else give up after WRITE_TIMEOUT_S."""
        try:
            data = protocol.encode(msg, protocol.MAX_RESPONSE)
        except ProtocolError as e:
            data = protocol.encode(protocol.error(msg.get("id"), ProtocolError(
                f"the answer is too large to send ({e.message})",
                hint="Ask for less, e.g. `sloth ls --limit 1000` or a --state/--lane filter."), msg.get("v", 1)))
        try:
            writer.write(data)
            await asyncio.wait_for(writer.drain(), None if patient else WRITE_TIMEOUT_S)
            return True
        except (ConnectionError, asyncio.TimeoutError, OSError):
            return False

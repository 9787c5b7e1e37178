"""The Unix-socket control server: connections, framing and peer checks.

The per-op handlers are handlers.py's. Every connection: the peer's uid is
checked first (another user, root included, is refused). Then frames are read one line at a time with a hard
size cap; each request gets exactly one response. Bad input never changes
anything and never ends the daemon: only the offending connection suffers.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import os
from pathlib import Path
from typing import Any

from . import peercred, protocol
from .control import Control
from .errors import PermissionDenied, ProtocolError, SlothError
from .handlers import Handlers

log = logging.getLogger("sloth.server")
IDLE_TIMEOUT_S = 300.0  # a client that connects and says nothing is dropped
WRITE_TIMEOUT_S = 30.0  # a client that does not read is dropped


class Server:
    def __init__(self, control: Control) -> None:
        self.server: asyncio.base_events.Server | None = None
        self.stats = {"connections": 0, "requests": 0, "bad_frames": 0, "refused_peers": 0}
        self.handlers = Handlers(control, self.stats)

    async def start(self, path: Path) -> None:
        old_umask = os.umask(0o177)  # the socket is born 0600, no window
        try:
            self.server = await asyncio.start_unix_server(
                self.handle, path=str(path), limit=protocol.MAX_FRAME + 2
            )
        finally:
            os.umask(old_umask)
        os.chmod(path, 0o600)

    async def close(self) -> None:
        self.handlers.close()
        if self.server is not None:
            self.server.close()

    # ---------------------------------------------------------- connection
    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.stats["connections"] += 1
        try:
            sock = writer.get_extra_info("socket")
            uid = peercred.peer_uid(sock)
            if uid != os.getuid():
                self.stats["refused_peers"] += 1
                err = PermissionDenied(f"uid {uid} may not use the sloth daemon of uid {os.getuid()}")
                await self._send(writer, protocol.error(None, err))
                return
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
                if not await self.dispatch(line[:-1], writer):
                    return
        except (ConnectionError, OSError):
            pass
        except Exception:  # never let one connection take the daemon down
            log.exception("connection handler failed")
        finally:
            try:
                writer.close()
            except Exception:
                pass

    async def dispatch(self, line: bytes, writer: asyncio.StreamWriter) -> bool:
        """Answer one frame. Returns False to close the connection."""
        self.stats["requests"] += 1
        try:
            req = protocol.parse_request(line)
        except ProtocolError as e:
            self.stats["bad_frames"] += 1
            return await self._send(writer, protocol.error(None, e))
        try:
            if req.op in self.handlers.streams:
                async def emit(ev: dict[str, Any]) -> None:
                    if not await self._send(writer, protocol.event(req.id, ev)):
                        raise ConnectionError("client went away")
                result = await self.handlers.streams[req.op](req.args, emit)
            else:
                result = self.handlers.ops[req.op](req.args)
                if inspect.isawaitable(result):  # a write that may wait for a lock, without blocking
                    result = await result
            msg = protocol.ok(req.id, result)
        except SlothError as e:
            msg = protocol.error(req.id, e)
        except ConnectionError:
            return False
        except Exception as e:  # a bug in a handler: answer, log, keep serving
            log.exception("handler %s failed", req.op)
            msg = protocol.error(req.id, SlothError(f"internal error in {req.op}: {e}",
                                                    hint="This is a bug; see the daemon log."))
        return await self._send(writer, msg)

    async def _send(self, writer: asyncio.StreamWriter, msg: dict[str, Any]) -> bool:
        try:
            data = protocol.encode(msg, protocol.MAX_RESPONSE)
        except ProtocolError as e:
            data = protocol.encode(protocol.error(msg.get("id"), ProtocolError(
                f"the answer is too large to send ({e.message})",
                hint="Ask for less, e.g. `sloth ls --limit 1000` or a --state/--lane filter.")))
        try:
            writer.write(data)
            await asyncio.wait_for(writer.drain(), WRITE_TIMEOUT_S)
            return True
        except (ConnectionError, asyncio.TimeoutError, OSError):
            return False

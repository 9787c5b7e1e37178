"""The keeper's server: its connections (peer uid checked, frames capped,
the daemon's never waited on), the ops of its wire protocol (keeper/wire.py),
and when it exits: idle, told bye, or SIGTERM.

What happens to the runs themselves is the run table's (keeper/kept_runs.py);
following a run's output is keeper/tap.py's.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import socket
import time
from pathlib import Path
from typing import Any

from sloth_daemon import __version__
from sloth_daemon.keeper import lockholder, peercred, timerfd
from sloth_daemon.keeper.stamps import start_stamp
from sloth_daemon.keeper.childwatch import become_subreaper, on_sigchld, reap_orphans
from sloth_daemon.keeper.kept_runs import KeptRuns
from sloth_daemon.keeper.tap import follow
from sloth_daemon.keeper.wire import (
    DAEMON_OPS, FEATURES, MAX_FRAME, VERSION, Cork, Refused, encode, error, number, ok, parse, text,
)

log = logging.getLogger("sloth.keeper")

DAEMON_BACKLOG_BYTES = 16 << 20  # unsent to the daemon: past it, cut it off (it resyncs by hello)
IDLE_CONN_S = 60.0  # a connection that is not the daemon's and says nothing is dropped


# --------------------------------------------------------------- connection
class Conn:
    """One client connection. Sending never waits: the daemon's connection
    is cut off when it falls ``DAEMON_BACKLOG_BYTES`` behind. Sends are
    corked (wire.Cork): ``close()``, not the writer's, flushes them."""

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self.writer = writer
        self.pid: Any = None
        self.who: tuple[int, float | None] | None = None  # the daemon's: (pid, start stamp), the kernel's word
        self.cork = Cork(writer)  # what one pass of the loop sends leaves in one write

    def send(self, msg: dict[str, Any]) -> bool:
        if self.writer.is_closing():
            return False
        self.cork.put(encode(msg))
        backlog = self.cork.backlog()
        if backlog > DAEMON_BACKLOG_BYTES:
            log.warning("connection (pid %s) fell %d bytes behind; cutting it off", self.pid, backlog)
            self.writer.transport.abort()
            return False
        return True

    def close(self) -> None:
        self.cork.close()


# ------------------------------------------------------------------- keeper
class Keeper:
    """Serves one keeper socket: at most one daemon attached, any number
    of followers; the runs are in ``table``."""

    def __init__(self, journal: Path, *, check_s: float, idle_exit_s: float, daemon_lock: Path | None = None) -> None:
        self.table = KeptRuns(journal, check_s=check_s, event=self.event, changed=self.idle_check)
        self.idle_exit_s = idle_exit_s
        self.daemon_lock = daemon_lock  # only the process holding it is the daemon (lockholder.py)
        self.daemon: Conn | None = None
        self.started_at = time.time()
        self.stopping = False  # SIGTERM: ending every run, then exit
        self.leaving = False  # told bye: exit once nothing is held
        self.finished = asyncio.Event()
        self._idle: asyncio.TimerHandle | None = None

    # -------------------------------------------------------------- serving
    def _reap_orphans(self) -> None:
        reap_orphans(self.table.roots)

    def _on_clock_set(self, watch: timerfd.ClockSetWatch) -> None:
        if watch.consume():
            self.table.check_trust()

    async def serve(self, sock: socket.socket) -> int:
        loop = asyncio.get_running_loop()
        if become_subreaper():
            on_sigchld(loop, self._reap_orphans)
            self.table.roots_reaped = True  # registered before the loop runs a SIGCHLD's hook (kept_runs._launch)
        loop.add_signal_handler(signal.SIGTERM, self.stop)
        for sig in (signal.SIGINT, signal.SIGHUP):  # detached: a terminal's signals are not for us
            loop.add_signal_handler(sig, lambda: None)  # a handler, not SIG_IGN: jobs must not inherit it
        watch = timerfd.create()  # readable when the clock is set or we resume: check trust at once
        if watch is not None:
            loop.add_reader(watch.fd, self._on_clock_set, watch)
        self.table.adopt_journal()
        server = await asyncio.start_unix_server(self.handle, sock=sock, limit=MAX_FRAME + 2)
        self.idle_check()
        await self.finished.wait()
        server.close()
        if self.daemon is not None:  # let the last answer (bye's) go out
            self.daemon.close()
            try:
                await asyncio.wait_for(self.daemon.writer.wait_closed(), 1.0)
            except (asyncio.TimeoutError, OSError):
                pass
        return 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = Conn(writer)
        try:
            uid = peercred.peer_uid(writer.get_extra_info("socket"))
            if uid != os.getuid():
                log.warning("refused a connection from uid %d", uid)
                conn.send(error(None, Refused("permission_denied",
                                              f"uid {uid} may not use the keeper of uid {os.getuid()}")))
                return
            while True:
                idle = None if conn is self.daemon else IDLE_CONN_S
                try:
                    line = await asyncio.wait_for(reader.readuntil(b"\n"), idle)
                except asyncio.LimitOverrunError:
                    conn.send(error(None, Refused("protocol",
                                                  f"frame over {MAX_FRAME} bytes; closing this connection")))
                    return
                except (asyncio.IncompleteReadError, asyncio.TimeoutError, ConnectionError, OSError):
                    return
                if not await self.dispatch(conn, line[:-1]):
                    return
        except Exception:  # one connection must never take the keeper (and its jobs) down
            log.exception("connection handler failed")
        finally:
            if self.daemon is conn:
                log.info("daemon (pid %s) disconnected", conn.pid)
                self.daemon = None
                self.idle_check()
            conn.close()

    async def dispatch(self, conn: Conn, line: bytes) -> bool:
        req_id, op = None, "?"
        try:
            try:
                msg = json.loads(line.decode("utf-8"))
            except (UnicodeDecodeError, ValueError, RecursionError) as e:
                raise Refused("protocol", f"frame is not valid UTF-8 JSON: {str(e)[:120]}") from None
            req_id = _id_of(msg)  # first: a refused request is answered under its own id too
            op, args = parse(msg)
            if op == "tap":
                return await self.op_tap(conn, req_id, args)
            if op in DAEMON_OPS and conn is not self.daemon:
                raise Refused("not_attached", f"{op} is for the daemon's connection: say hello as the daemon first")
            reply = ok(req_id, getattr(self, "op_" + op)(conn, args))
        except Refused as e:
            reply = error(req_id, e)
        except Exception as e:  # a bug: answer, log, keep serving
            log.exception("op %s failed", op)
            reply = error(req_id, Refused("internal", f"internal error in {op}: {e!r}"))
        return conn.send(reply)

    def event(self, kind: str, key: str, **fields: Any) -> None:
        if self.daemon is not None:
            self.daemon.send({"v": VERSION, "event": {"kind": kind, "key": key, **fields}})

    # ------------------------------------------------------------------ ops
    def op_hello(self, conn: Conn, a: dict[str, Any]) -> dict[str, Any]:
        if a["role"] != "daemon":
            raise Refused("bad_request", 'role must be "daemon"')
        who = proved(conn, a.get("pid"))
        old = self.daemon
        if old is not None and old is not conn and old.who != who:
            raise Refused("already_attached", f"a daemon (pid {old.pid}) is attached to this keeper; only one may be")
        self._holds_daemon_lock(who[0])
        if old is not None and old is not conn:
            # The same process again (its pid and start, as the kernel says):
            # its old connection is dead or dying (we may not have read its
            # end yet). The new one takes over.
            log.info("daemon (pid %s) reconnected; dropping its old connection", old.pid)
            old.writer.transport.abort()
        conn.pid, conn.who, self.daemon, self.leaving = who[0], who, conn, False
        log.info("daemon %s (pid %s) attached", a.get("name", ""), conn.pid)
        self.idle_check()
        return {"version": __version__, "protocol": VERSION, "pid": os.getpid(), "features": list(FEATURES),
                "started_at": self.started_at, "runs": self.table.listed()}

    def _holds_daemon_lock(self, pid: int) -> None:
        """The daemon is the process that holds its instance lock (lockholder.py);
        a keeper started without the lock's path (an older daemon's) has only the pid check."""
        if self.daemon_lock is not None and not lockholder.holds(pid, self.daemon_lock):
            log.warning("refused a hello from pid %d: it does not hold %s", pid, self.daemon_lock)
            raise Refused("not_the_daemon", f"pid {pid} does not hold the daemon's lock {self.daemon_lock}: "
                                            "only the daemon of this data dir may attach")

    def op_spawn(self, conn: Conn, a: dict[str, Any]) -> dict[str, Any]:
        if self.stopping or self.finished.is_set():
            raise Refused("stopping", "the keeper is stopping", retry=True)
        run = self.table.spawn(a)
        self.idle_check()
        if run.state == "pending":  # a started (or exited) event follows
            return {"pending": True}
        return {"pid": run.pid, "identity": run.identity}

    def op_unspawn(self, conn: Conn, a: dict[str, Any]) -> dict[str, Any]:
        """Drop a pending run (``dropped``: true) unless it has started."""
        return self.table.unspawn(text(a, "key"))

    def op_trust(self, conn: Conn, a: dict[str, Any]) -> dict[str, Any]:
        items = a["items"]
        if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
            raise Refused("bad_request", "items must be a list of {key, until}")
        checked = [(text(i, "key"), number(i, "until")) for i in items]  # all checked before any is set
        if any(until is None for _, until in checked):
            raise Refused("bad_request", "every item needs until (boot clock seconds)")
        unknown = [k for k, _ in checked if k not in self.table.runs]
        for key, until in checked:
            if key in self.table.runs:
                self.table.set_trust(self.table.runs[key], until)  # type: ignore[arg-type]
        return {"unknown": unknown} if unknown else {}

    def op_kill(self, conn: Conn, a: dict[str, Any]) -> dict[str, Any]:
        run = self.table.runs.get(text(a, "key"))
        if run is None:
            raise Refused("not_found", f"no run with key {a['key']!r} is held")
        reason = a.get("reason") or "killed on request"
        if not isinstance(reason, str):
            raise Refused("bad_request", "reason must be a string")
        self.table.kill(run, reason, number(a, "grace_s", run.kill_grace_s), "request")  # type: ignore[arg-type]
        return {}

    def op_pause(self, conn: Conn, a: dict[str, Any]) -> dict[str, Any]:
        """Stop runs' trees: ``{"runs": {key: what happened}, "unknown": [keys]}``."""
        return self._each_run(a, self.table.pause)

    def op_resume(self, conn: Conn, a: dict[str, Any]) -> dict[str, Any]:
        return self._each_run(a, self.table.resume)

    def _each_run(self, a: dict[str, Any], act: Any) -> dict[str, Any]:
        keys = a["keys"]
        if not isinstance(keys, list) or not all(isinstance(k, str) and k for k in keys) or len(keys) > 10_000:
            raise Refused("bad_request", "keys must be a list of at most 10000 non-empty strings")
        out: dict[str, Any] = {}
        for key in dict.fromkeys(keys):
            run = self.table.runs.get(key)
            if run is not None:
                try:
                    out[key] = act(run)
                except Refused as e:
                    out[key] = {"error": e.wire}
        return {"runs": out, "unknown": [k for k in keys if k not in self.table.runs]}

    def op_ack(self, conn: Conn, a: dict[str, Any]) -> dict[str, Any]:
        keys = a["keys"]
        if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
            raise Refused("bad_request", "keys must be a list of strings")
        self.table.ack(keys)
        self.idle_check()
        return {}

    def op_bye(self, conn: Conn, a: dict[str, Any]) -> dict[str, Any]:
        self.leaving = True
        asyncio.get_running_loop().call_soon(self.idle_check)  # after the answer is queued
        return {}

    async def op_tap(self, conn: Conn, req_id: Any, a: dict[str, Any]) -> bool:
        """Stream a run's log (keeper_tap.follow), then answer with its state
        and outcome. Waits on this follower's writes only, never the keeper's."""
        if conn is self.daemon:
            raise Refused("bad_request", "tap on a connection of its own: the daemon's must not block")
        run = self.table.runs.get(text(a, "key"))
        if run is None:
            raise Refused("not_found", f"no run with key {a['key']!r} is held")
        conn.cork.flush()  # follow writes to the writer itself
        if not await follow(conn.writer, req_id, run):
            return False
        return conn.send(ok(req_id, {"state": run.state, "outcome": run.outcome}))

    # --------------------------------------------------------------- ending
    def idle_check(self) -> None:
        """On every change: journal what could not be before (a full disk
        may have room now), then exit, arm the idle exit, or disarm it."""
        self.table.journal_unsaved()
        if self.stopping or self.finished.is_set():
            return
        quiet = self.table.holds_only_saved()
        if quiet and self.leaving:
            self.exit("told bye and holding nothing")
        elif quiet and self.daemon is None:
            if self._idle is None:
                self._idle = asyncio.get_running_loop().call_later(self.idle_exit_s, self.exit, "idle")
        elif self._idle is not None:
            self._idle.cancel()
            self._idle = None

    def stop(self) -> None:
        """SIGTERM (logout, shutdown): end every run's tree, journal, exit."""
        if self.stopping:
            return
        self.stopping = True
        log.info("SIGTERM: ending every run")
        for run in list(self.table.runs.values()):
            self.table.kill(run, "keeper stopped", run.kill_grace_s, "keeper")
        asyncio.get_running_loop().create_task(self.exit_when_settled())

    async def exit_when_settled(self) -> None:
        while any(r.state != "exited" for r in self.table.runs.values()):  # noqa: ASYNC110
            await asyncio.sleep(0.05)  # a once-only wait at exit: polling is simpler than an event per run
        self.exit("stopped by SIGTERM")

    def exit(self, why: str) -> None:
        log.info("exiting: %s", why)
        self.finished.set()


def proved(conn: Conn, claimed: Any) -> tuple[int, float | None]:
    """Who is at the other end of ``conn``, as the kernel says: (pid, start
    stamp). A hello's ``pid`` is a claim, checked against it, never taken
    for it: a process that says it is another is refused (and whoever is
    attached keeps its connection)."""
    pid = peercred.peer_pid(conn.writer.get_extra_info("socket"))
    if pid is None:
        raise Refused("unverifiable", "the kernel does not say which process this connection is, so it "
                                      "cannot be proved the daemon's")
    if claimed is not None and claimed != pid:
        log.warning("refused a hello from pid %d claiming to be the daemon of pid %r", pid, claimed)
        raise Refused("impostor", f"this connection is pid {pid}, not pid {claimed!r}: the daemon is the "
                                  "process at the other end of its connection, not the one a hello names")
    return pid, start_stamp(pid)


def _id_of(msg: Any) -> Any:
    """A request's id where it is one parse() would accept (else None)."""
    rid = msg.get("id") if isinstance(msg, dict) else None
    return rid if isinstance(rid, (int, str)) and not isinstance(rid, bool) else None

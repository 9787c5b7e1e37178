"""The keeper: the small process that outlives the daemon and owns running jobs.

One per data dir (an flock on keeper.lock). It is the parent of every job:
it spawns them, writes their output to their logs, waits for their exit and
keeps each outcome (journalled) until the daemon acknowledges it. It
enforces each run's timeout and trust deadline itself, connected daemon or
not, so nothing runs unwatched. It knows nothing of the queue, SQLite,
lanes or the CLI. Its contract (wire protocol, journal, trust rule) is in
keeper_wire.py; keeper_client.py is the daemon's side of it.

Every import is at the top: an upgrade replaces files under a running keeper.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import errno
import fcntl
import json
import logging
import os
import signal
import socket
import stat
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import psutil

from . import __version__, peercred, procident, timerfd
from .childwatch import become_subreaper, on_sigchld, reap_orphans
from .errors import SpawnError
from .joblog import LogWriter
from .keeper_wire import (
    DAEMON_OPS, MAX_FRAME, VERSION, Journal, Refused, Trust, clocks_now, encode, error, number, ok, parse,
    read_journal, secs, spawn_command, text, trust_verdict, whole,
)
from .runner import JobProcess

log = logging.getLogger("sloth.keeper")

LOG_CHUNK = 256 * 1024  # bytes of log per tap event
DAEMON_BACKLOG_BYTES = 16 << 20  # unsent to the daemon: past it, cut it off (it resyncs by hello)
TAP_BACKLOG_BYTES = 4 << 20  # live output held for one slow follower: past it, skipped and counted
IDLE_CONN_S = 60.0  # a connection that is not the daemon's and says nothing is dropped
EXIT_LOCKED = 6


# --------------------------------------------------------------------- runs
@dataclass
class Run:
    key: str
    job_id: int
    attempt: int
    token: str
    log_path: str
    started_at: float
    kill_grace_s: float = 10.0
    term_lead_s: float = 1.0
    proc: JobProcess | None = None  # None for an outcome adopted from the journal
    pid: int | None = None
    identity: dict[str, Any] | None = None
    state: str = "running"  # "running" | "frozen" | "exited"
    trust: Trust | None = None
    outcome: dict[str, Any] | None = None
    killed_by: str | None = None
    begin: float = 0.0  # procident stamps: the lifetime orphans are attributed by
    end: float | None = None
    timeout: asyncio.TimerHandle | None = None
    trust_check: asyncio.TimerHandle | None = None  # one per run: renewals replace it
    taps: set[Callable[[bytes | None], None]] = field(default_factory=set)
    journaled: bool = False

    def wire(self) -> dict[str, Any]:
        return {"key": self.key, "job_id": self.job_id, "attempt": self.attempt, "token": self.token,
                "pid": self.pid, "identity": self.identity, "started_at": self.started_at,
                "state": self.state, "trust_until": self.trust.until if self.trust else None,
                "outcome": self.outcome, "log_path": self.log_path}

    @classmethod
    def adopted(cls, w: dict[str, Any]) -> "Run":
        return cls(w["key"], int(w.get("job_id") or 0), int(w.get("attempt") or 0), w.get("token", ""),
                   w.get("log_path", ""),
                   w.get("started_at", 0.0), pid=w.get("pid"), identity=w.get("identity"),
                   state="exited", outcome=w.get("outcome"), journaled=True)


class TapFeed:
    """Live output for one follower, bounded: past ``cap`` bytes held, new
    bytes are skipped and counted, and the follower is told how many where
    they were cut once there is room again. The end (None) always gets in."""

    def __init__(self, cap: int, job_id: int) -> None:
        self.cap, self.held, self.skipped, self.job_id = cap, 0, 0, job_id
        self.q: collections.deque[bytes | None] = collections.deque()
        self.ready = asyncio.Event()

    def put(self, data: bytes | None) -> None:
        if data is not None and self.held + len(data) > self.cap:
            self.skipped += len(data)
            return
        if self.skipped:
            self._push(f"\n[sloth] ... {self.skipped} bytes of live output skipped here: this "
                       f"follower fell behind (`sloth logs {self.job_id}` has them once the job ends) ...\n".encode())
            self.skipped = 0
        self._push(data)

    def _push(self, item: bytes | None) -> None:
        self.q.append(item)
        self.held += len(item or b"")
        self.ready.set()

    async def get(self) -> bytes | None:
        while not self.q:
            self.ready.clear()
            await self.ready.wait()
        item = self.q.popleft()
        self.held -= len(item or b"")
        return item


# --------------------------------------------------------------- connection
class Conn:
    """One client connection. Sending never waits: the daemon's connection
    is cut off when it falls ``DAEMON_BACKLOG_BYTES`` behind."""

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self.writer = writer
        self.pid: Any = None

    def send(self, msg: dict[str, Any]) -> bool:
        if self.writer.is_closing():
            return False
        self.writer.write(encode(msg))
        backlog = self.writer.transport.get_write_buffer_size()
        if backlog > DAEMON_BACKLOG_BYTES:
            log.warning("connection (pid %s) fell %d bytes behind; cutting it off", self.pid, backlog)
            self.writer.transport.abort()
            return False
        return True


# ------------------------------------------------------------------- keeper
class Keeper:
    def __init__(self, journal: Path, *, check_s: float, idle_exit_s: float) -> None:
        self.runs: dict[str, Run] = {}
        self.roots: dict[int, JobProcess] = {}  # root pid -> its process: reap_orphans leaves them be
        self.forgotten: list[tuple[float, float]] = []  # acked runs' lifetimes, for orphan attribution
        self.journal = Journal(journal)
        self.check_s, self.idle_exit_s = check_s, idle_exit_s
        self.daemon: Conn | None = None
        self.started_at = time.time()
        self.stopping = False  # SIGTERM: ending every run, then exit
        self.leaving = False  # told bye: exit once nothing is held
        self.finished = asyncio.Event()
        self._idle: asyncio.TimerHandle | None = None
        self._tick: asyncio.TimerHandle | None = None
        self._ambiguous: set[int] = set()

    # -------------------------------------------------------------- serving
    def _reap_orphans(self) -> None:
        reap_orphans(self.roots)

    def _on_clock_set(self, watch: timerfd.ClockSetWatch) -> None:
        if watch.consume():
            self.check_trust()

    async def serve(self, sock: socket.socket) -> int:
        loop = asyncio.get_running_loop()
        if become_subreaper():
            on_sigchld(loop, self._reap_orphans)
        loop.add_signal_handler(signal.SIGTERM, self.stop)
        for sig in (signal.SIGINT, signal.SIGHUP):  # detached: a terminal's signals are not for us
            loop.add_signal_handler(sig, lambda: None)  # a handler, not SIG_IGN: jobs must not inherit it
        watch = timerfd.create()  # readable when the clock is set or we resume: check trust at once
        if watch is not None:
            loop.add_reader(watch.fd, self._on_clock_set, watch)
        for w in read_journal_safely(self.journal.path):
            self.runs.setdefault(w["key"], Run.adopted(w))
        server = await asyncio.start_unix_server(self.handle, sock=sock, limit=MAX_FRAME + 2)
        self.idle_check()
        await self.finished.wait()
        server.close()
        if self.daemon is not None:  # let the last answer (bye's) go out
            self.daemon.writer.close()
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
            writer.close()

    async def dispatch(self, conn: Conn, line: bytes) -> bool:
        req_id, op = None, "?"
        try:
            try:
                msg = json.loads(line.decode("utf-8"))
            except (UnicodeDecodeError, ValueError, RecursionError) as e:
                raise Refused("protocol", f"frame is not valid UTF-8 JSON: {str(e)[:120]}") from None
            op, args = parse(msg)
            req_id = msg["id"] if "id" in msg else None
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
        old = self.daemon
        if old is not None and old is not conn:
            if old.pid is None or old.pid != a.get("pid"):
                raise Refused("already_attached", f"a daemon (pid {old.pid}) is attached to this keeper; "
                                                  "only one may be")
            # The same daemon again: its old connection is dead or dying (we
            # may not have read its end yet). The new one takes over.
            log.info("daemon (pid %s) reconnected; dropping its old connection", old.pid)
            old.writer.transport.abort()
        conn.pid, self.daemon, self.leaving = a.get("pid"), conn, False
        log.info("daemon %s (pid %s) attached", a.get("name", ""), conn.pid)
        self.idle_check()
        return {"version": __version__, "protocol": VERSION, "pid": os.getpid(),
                "started_at": self.started_at, "runs": [r.wire() for r in self.runs.values()]}

    def op_spawn(self, conn: Conn, a: dict[str, Any]) -> dict[str, Any]:
        if self.stopping or self.finished.is_set():
            raise Refused("stopping", "the keeper is stopping", retry=True)
        key, token = text(a, "key"), text(a, "token")
        if key in self.runs:
            raise Refused("exists", f"a run with key {key!r} is already held")
        argv, env, cwd, log_path = spawn_command(a)
        run = Run(key, whole(a, "job_id"), whole(a, "attempt"), token, str(log_path), time.time(),
                  number(a, "kill_grace_s", 10.0), number(a, "term_lead_s", 1.0))  # type: ignore[arg-type]
        log_cap, timeout_s, trust_until = whole(a, "log_cap"), number(a, "timeout_s"), number(a, "trust_until")
        env = {**env, procident.TOKEN_ENV: token}  # the token scan finds escapees by it
        lw = LogWriter(log_path, log_cap)
        jp = JobProcess(argv, cwd=cwd, env=env, log=lw, on_output=lambda d: self.output(run, d),
                        on_exit=lambda _jp: self.root_exited(run), claim_orphan=self.claimer(key))
        try:
            jp.start(asyncio.get_running_loop())
        except SpawnError as e:
            lw.note(str(e))
            lw.close()
            raise Refused("spawn_failed", str(e), retry=e.retry) from None
        run.proc, run.pid, run.identity = jp, jp.pid, jp.identity()
        run.begin = jp.tree.root_stamp or procident.stamp_now()  # type: ignore[union-attr]
        self.runs[key], self.roots[jp.pid] = run, jp
        if timeout_s:
            run.timeout = asyncio.get_running_loop().call_later(
                timeout_s, self.kill, run, f"timed out after {secs(timeout_s)}", run.kill_grace_s, "timeout")
        if trust_until is not None:
            self.set_trust(run, trust_until)
        self.tick_soon()
        self.idle_check()
        return {"pid": jp.pid, "identity": run.identity}

    def op_trust(self, conn: Conn, a: dict[str, Any]) -> dict[str, Any]:
        items = a["items"]
        if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
            raise Refused("bad_request", "items must be a list of {key, until}")
        checked = [(text(i, "key"), number(i, "until")) for i in items]  # all checked before any is set
        if any(until is None for _, until in checked):
            raise Refused("bad_request", "every item needs until (boot clock seconds)")
        unknown = [k for k, _ in checked if k not in self.runs]
        for key, until in checked:
            if key in self.runs:
                self.set_trust(self.runs[key], until)  # type: ignore[arg-type]
        return {"unknown": unknown} if unknown else {}

    def op_kill(self, conn: Conn, a: dict[str, Any]) -> dict[str, Any]:
        run = self.runs.get(text(a, "key"))
        if run is None:
            raise Refused("not_found", f"no run with key {a['key']!r} is held")
        reason = a.get("reason") or "killed on request"
        if not isinstance(reason, str):
            raise Refused("bad_request", "reason must be a string")
        self.kill(run, reason, number(a, "grace_s", run.kill_grace_s), "request")  # type: ignore[arg-type]
        return {}

    def op_ack(self, conn: Conn, a: dict[str, Any]) -> dict[str, Any]:
        keys = a["keys"]
        if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
            raise Refused("bad_request", "keys must be a list of strings")
        if live := [k for k in keys if k in self.runs and self.runs[k].state != "exited"]:
            raise Refused("bad_request", f"run(s) {', '.join(live)} have not exited; nothing was acknowledged")
        acked = [self.runs.pop(k) for k in keys if k in self.runs]
        for run in acked:
            if run.proc is not None:
                run.proc.log.close()
                self.forgotten.append((run.begin, run.end or procident.stamp_now()))
        if acked:
            self.journal.append({"ack": [r.key for r in acked]})
            self.journal.reset([r.wire() for r in self.runs.values() if r.state == "exited"])
        self.idle_check()
        return {}

    def op_bye(self, conn: Conn, a: dict[str, Any]) -> dict[str, Any]:
        self.leaving = True
        asyncio.get_running_loop().call_soon(self.idle_check)  # after the answer is queued
        return {}

    async def op_tap(self, conn: Conn, req_id: Any, a: dict[str, Any]) -> bool:
        """Stream a run's log: what it holds so far, then live output, then
        the end. Waits on this follower's writes only, never the keeper's."""
        if conn is self.daemon:
            raise Refused("bad_request", "tap on a connection of its own: the daemon's must not block")
        run = self.runs.get(text(a, "key"))
        if run is None:
            raise Refused("not_found", f"no run with key {a['key']!r} is held")
        feed = TapFeed(TAP_BACKLOG_BYTES, run.job_id)
        past = run.proc.log.snapshot() if run.proc is not None else b""
        if run.state != "exited":
            run.taps.add(feed.put)  # no await since the snapshot: every byte is sent once
        else:
            feed.put(None)
        try:
            for i in range(0, len(past), LOG_CHUNK):
                await self.send_log(conn, req_id, past[i:i + LOG_CHUNK])
            while (data := await feed.get()) is not None:
                await self.send_log(conn, req_id, data)
        except (ConnectionError, OSError):
            return False
        finally:
            run.taps.discard(feed.put)
        return conn.send(ok(req_id, {"state": run.state, "outcome": run.outcome}))

    @staticmethod
    async def send_log(conn: Conn, req_id: Any, data: bytes) -> None:
        # surrogateescape: bytes that are not UTF-8 travel and come back exact
        event = {"kind": "log", "data": data.decode("utf-8", "surrogateescape")}
        conn.writer.write(encode({"v": VERSION, "id": req_id, "event": event}))
        await conn.writer.drain()

    # ----------------------------------------------------------- run events
    def output(self, run: Run, data: bytes) -> None:
        for feed in list(run.taps):
            feed(data)

    def root_exited(self, run: Run) -> None:
        ended_at = time.time()
        self.roots.pop(run.pid or 0, None)
        run.end = procident.stamp_now()
        for timer in (run.timeout, run.trust_check):
            if timer is not None:
                timer.cancel()
        ending = run.proc.ending if run.proc else None
        if ending is not None and not ending.done():  # `exited` only once the whole tree is dead
            ending.add_done_callback(lambda _t: self.settle(run, ended_at))
        else:
            self.settle(run, ended_at)

    def settle(self, run: Run, ended_at: float) -> None:
        jp = run.proc
        assert jp is not None
        jp.log.finish()
        run.state = "exited"
        run.outcome = {"returncode": jp.returncode, "ended_at": ended_at, "reason": jp.kill_reason,
                       "killed_by": run.killed_by, "log_problem": jp.log.problem, "log_bytes": jp.log.total}
        run.journaled = self.journal.append({"run": run.wire()})
        self.event("exited", run.key, outcome=run.outcome)
        for feed in list(run.taps):
            feed(None)
        self.idle_check()

    def kill(self, run: Run, reason: str, grace_s: float, by: str) -> None:
        """Begin ending a run's whole tree (idempotent; the first reason stays)."""
        jp = run.proc
        if run.state == "exited" or jp is None or jp.ending is not None or jp.returncode is not None:
            return
        run.killed_by = by
        run.state = "running"  # if frozen: end_tree continues it, to act on SIGTERM
        log.info("run %s (pid %s): %s; ending its process tree", run.key, run.pid, reason)
        jp.log.note(f"{reason}: ending the process tree")
        jp.end_tree_soon(grace_s, reason).add_done_callback(_log_failure)

    def claimer(self, key: str) -> Callable[[int, float | None], bool]:
        """Does an orphan of ours with no readable token belong to run ``key``?
        Only if exactly one run's lifetime covers its start; else leave it."""
        def claim(pid: int, start: float | None) -> bool:
            if pid in self.roots or start is None:
                return False
            lives = {r.key: (r.begin, r.end) for r in self.runs.values() if r.proc is not None}
            lives.update({f"~{i}": life for i, life in enumerate(self.forgotten)})
            owner = procident.attribute_orphan(start, lives)
            if owner is None and pid not in self._ambiguous:
                self._ambiguous.add(pid)
                log.info("orphan pid %d (%s) carries no token and no one run surely started it; left alone",
                         pid, _name(pid))
            if owner == key:
                log.info("orphan pid %d (%s) found only as our child: counted as run %s's", pid, _name(pid), key)
            return owner == key
        return claim

    # -------------------------------------------------------------- fencing
    def set_trust(self, run: Run, until: float) -> None:
        if run.proc is None or run.state == "exited" or run.proc.ending is not None:
            return
        now = clocks_now()
        run.trust = Trust(until, now.total, now.awake)  # type: ignore[arg-type]
        if run.trust_check is not None:
            run.trust_check.cancel()
        run.trust_check = asyncio.get_running_loop().call_later(
            max(0.0, until - run.term_lead_s - now.total), self.check_trust)  # type: ignore[operator]
        if run.state == "frozen":
            log.info("run %s: trusted again; thawing its process tree", run.key)
            run.proc.thaw()
            run.state = "running"

    def check_trust(self) -> None:
        now = clocks_now()
        for run in list(self.runs.values()):
            if run.state != "running" or run.trust is None or run.proc is None or run.proc.ending is not None:
                continue
            verdict = trust_verdict(run.trust, run.term_lead_s, now)
            quiet = now.total - run.trust.boot_at  # type: ignore[operator]
            if verdict == "freeze":
                slept = quiet - (now.awake - run.trust.awake_at)
                why = (f"the machine slept {secs(slept)} and the lease's renewal lapsed meanwhile; "
                       "frozen until the daemon renews or kills it")
                log.info("run %s: %s", run.key, why)
                run.proc.freeze()
                run.state = "frozen"
                self.event("frozen", run.key, why=why)
            elif verdict != "ok":
                self.kill(run, f"fenced: no lease renewal for {secs(quiet)}",
                          max(0.0, run.trust.until - now.total), "fence")  # type: ignore[operator]

    def tick_soon(self) -> None:
        if self._tick is None:
            self._tick = asyncio.get_running_loop().call_later(self.check_s, self.tick)

    def tick(self) -> None:
        """While runs live: remember their trees (a grandchild whose parent
        exits leaves the tree) and check trust (the timers use awake time;
        after a resume only this and the timerfd see the boot clock's jump)."""
        self._tick = None
        live = [r for r in self.runs.values() if r.state == "running" and r.proc and r.proc.tree]
        procident.remember_all(r.proc.tree for r in live)  # type: ignore[union-attr,misc]
        self.check_trust()
        if any(r.state != "exited" for r in self.runs.values()):
            self.tick_soon()
        starts = [r.begin for r in self.runs.values() if r.state != "exited"]
        self.forgotten = [f for f in self.forgotten if starts and f[1] >= min(starts)]

    # --------------------------------------------------------------- ending
    def holds_only_saved(self) -> bool:
        """Nothing runs and every outcome is in the journal (the next keeper
        offers it again), so exiting loses nothing."""
        return all(r.state == "exited" and r.journaled for r in self.runs.values())

    def idle_check(self) -> None:
        """On every change: journal what could not be before (a full disk
        may have room now), then exit, arm the idle exit, or disarm it."""
        for run in self.runs.values():
            if run.state == "exited" and not run.journaled:
                run.journaled = self.journal.append({"run": run.wire()})
        if self.stopping or self.finished.is_set():
            return
        quiet = self.holds_only_saved()
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
        for run in list(self.runs.values()):
            self.kill(run, "keeper stopped", run.kill_grace_s, "keeper")
        asyncio.get_running_loop().create_task(self.exit_when_settled())

    async def exit_when_settled(self) -> None:
        while any(r.state != "exited" for r in self.runs.values()):  # noqa: ASYNC110
            await asyncio.sleep(0.05)  # a once-only wait at exit: polling is simpler than an event per run
        self.exit("stopped by SIGTERM")

    def exit(self, why: str) -> None:
        log.info("exiting: %s", why)
        self.finished.set()


def _log_failure(task: "asyncio.Task[None]") -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("ending a process tree failed: %r", task.exception())


def _name(pid: int) -> str:
    try:
        return psutil.Process(pid).name()
    except psutil.Error:
        return "?"


def read_journal_safely(path: Path) -> list[dict[str, Any]]:
    try:
        return read_journal(path)
    except OSError as e:
        log.error("cannot read the journal %s: %s", path, e.strerror or e)
        return []


# --------------------------------------------------------------- start-up
class Locked(Exception):
    pass


def take_lock(path: Path) -> int:
    """flock keeper.lock for our lifetime (the kernel drops it however we die)."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
        holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
        os.close(fd)
        if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            raise Locked(holder) from None
        raise
    return fd


def listen(path: Path) -> socket.socket:
    """keeper.sock, 0600 from birth. We hold the lock, so a socket (or a
    symlink: unlinking one never touches its target) at the path is a dead
    keeper's leftover; anything else is not ours to delete."""
    try:
        st = os.lstat(path)
        if not (stat.S_ISSOCK(st.st_mode) or stat.S_ISLNK(st.st_mode)):
            raise OSError(errno.EEXIST, "something that is not a socket is in the way")
        os.unlink(path)
    except FileNotFoundError:
        pass
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)
    try:
        s.bind(str(path))
    finally:
        os.umask(old)  # jobs inherit ours: keep the user's
    s.listen(128)
    return s


def detach(log_path: Path | None) -> None:
    """Into the background: our output to the log, then fork; the parent
    exits 0, which tells the starter we are listening."""
    fd = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o600) \
        if log_path else os.open(os.devnull, os.O_WRONLY)
    sys.stdout.flush()
    sys.stderr.flush()
    for target in (1, 2):
        os.dup2(fd, target)
    os.close(fd)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    if os.fork() != 0:
        os._exit(0)
    os.setsid()


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m sloth_daemon.keeper")
    p.add_argument("--socket", type=Path, required=True)
    p.add_argument("--lock", type=Path, required=True)
    p.add_argument("--journal", type=Path, required=True)
    p.add_argument("--log", type=Path, help="with --detach: where our output goes")
    p.add_argument("--check-s", type=float, default=5.0)
    p.add_argument("--idle-exit-s", type=float, default=10.0)
    p.add_argument("--detach", action="store_true", help="fork into the background once listening")
    a = p.parse_args(argv)
    for name in ("socket", "lock", "journal", "log"):
        if getattr(a, name) is not None:
            setattr(a, name, getattr(a, name).absolute())
    return a


def main(argv: list[str] | None = None) -> int:
    for sig in (signal.SIGINT, signal.SIGHUP):  # until serve() puts handlers in (jobs must not inherit SIG_IGN)
        signal.signal(sig, signal.SIG_IGN)
    a = parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if os.environ.get("SLOTH_DEBUG") else logging.INFO,
                        format="%(asctime)s sloth-keeper[%(process)d] %(levelname)s: %(message)s")
    try:
        lock = take_lock(a.lock)
    except Locked as e:
        print(f"sloth keeper: another keeper (pid {e}) holds {a.lock}", file=sys.stderr)
        return EXIT_LOCKED
    except OSError as e:
        print(f"sloth keeper: cannot lock {a.lock}: {e.strerror or e}", file=sys.stderr)
        return 1
    try:
        sock = listen(a.socket)
    except OSError as e:
        print(f"sloth keeper: cannot listen on {a.socket}: {e.strerror or e}", file=sys.stderr)
        return 1
    if a.detach:
        detach(a.log)
    os.chdir("/")
    os.ftruncate(lock, 0)
    os.pwrite(lock, f"{os.getpid()}\n".encode(), 0)
    log.info("sloth keeper %s listening on %s", __version__, a.socket)
    code = asyncio.run(Keeper(a.journal, check_s=a.check_s, idle_exit_s=a.idle_exit_s).serve(sock))
    try:
        os.unlink(a.socket)  # ours: we hold the lock until we are gone
    except OSError:
        pass
    return code


if __name__ == "__main__":
    sys.exit(main())

"""The daemon's side of the keeper (keeper/main.py): an asyncio client.

One connection, used from the daemon's event loop. What the worker fires
and forgets (spawn, trust, kill, ack) returns at once, never blocks the
loop and never raises: the request goes to the transport's buffer and its
answer, or the run's later events, reach its ``KeptRunListener``. A dead
connection (or a keeper that stopped reading) marks the client lost and
calls ``on_lost`` once; the worker then connects again and resyncs from
the new ``held`` (the runs the keeper lists in its hello).
"""

from __future__ import annotations

import asyncio
import collections
import functools
import itertools
import json
import logging
import os
import subprocess
import sys
from typing import Any, AsyncIterator, Callable, Protocol

from sloth_daemon.keeper import peercred
from sloth_daemon.daemon.keeper_errors import KeeperError, RunGone
from sloth_daemon.keeper.wire import ENV_REFS_KEPT, MAX_FRAME, VERSION, Cork, boot_now, encode, read_journal
from sloth_daemon.paths import Paths, ensure_dir
from sloth_daemon.daemon.keeper_hello import KeeperVersionMismatch, hello_answer

__all__ = ["KeeperClient", "KeeperError", "KeeperVersionMismatch", "KeptRunListener", "boot_now", "read_journal"]

log = logging.getLogger("sloth.keeper_client")

EXIT_LOCKED = 6  # keeper/main.py: another keeper holds the lock (it won a race: connect to it)
MAX_LINE = 64 << 20  # a hello listing thousands of runs is large
# A tap's lines are log chunks (256 KiB, at most ~1.5 MiB as JSON). asyncio
# reads ahead up to twice a reader's limit: a small one keeps a slow
# follower's backlog in the keeper, where it is bounded and skipped (not
# tens of MiB buffered here, issue 14 item 9).
TAP_LINE_LIMIT = 2 << 20
OUT_CAP = 16 << 20  # unsent bytes to the keeper before we call it lost
START_TIMEOUT_S = 20.0
HELLO_TIMEOUT_S = 10.0
BATCH = 2000  # trust items / ack keys per request: frames stay well under MAX_FRAME
KEEPER_LOG_ROTATE_BYTES = 1 << 20
# The service manager's variables are the daemon's (systemd would take the
# keeper for the service's main process); everything else the keeper
# inherits, LD_PRELOAD too: both must read the same boot clock.
NOT_FOR_KEEPER = ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID", "LISTEN_FDS", "LISTEN_PID", "LISTEN_FDNAMES")


class KeptRunListener(Protocol):
    """One per run, supplied by the worker. Called on the event loop."""

    def started(self, pid: int, identity: dict[str, Any]) -> None: ...
    def spawn_failed(self, message: str, retry: bool, resource: bool = False) -> None: ...
    def exited(self, outcome: dict[str, Any]) -> None: ...
    def frozen(self, why: str) -> None: ...
    def taken_back(self) -> None: ...
    def noted(self, what: str, message: str) -> None: ...
    def progressed(self, progress: dict[str, Any]) -> None: ...


Reply = Callable[[dict[str, Any] | None], None]  # the response, or None if the connection was lost


class KeeperClient:
    def __init__(self, socket_path: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                 hello: dict[str, Any]) -> None:
        self.socket_path = socket_path
        self._reader, self._writer = reader, writer
        self._cork = Cork(writer)  # a turn's spawns and acks leave in one write
        self.info = {k: v for k, v in hello.items() if k != "runs"}  # version, protocol, pid, started_at
        self.held: list[dict[str, Any]] = hello["runs"]
        self.on_lost: Callable[[], None] = lambda: None
        self.on_quiet: Callable[[], None] = lambda: None  # after a message leaves it ``quiet``
        self.lost = False
        self._closing = False
        self._ids = itertools.count(2)  # 1 was the hello
        self._pending: dict[int, Reply] = {}
        self._sinks: dict[str, KeptRunListener] = {}
        self._early: dict[str, list[dict[str, Any]]] = {r["key"]: [] for r in self.held}
        self._env_refs: collections.OrderedDict[int, tuple[str, dict[str, str]]] = collections.OrderedDict()
        self._refs_sent: set[str] = set()
        self._withdrawing: set[str] = set()  # keys an unspawn is out for: a refused spawn of one is not sent again
        self._ref_ids = itertools.count(1)
        self._task = asyncio.get_running_loop().create_task(self._read_loop())

    @classmethod
    async def connect(cls, paths: Paths, *, start: bool = True, name: str = "", check_s: float = 5.0,
                      python: str = sys.executable, idle_exit_s: float = 10.0) -> "KeeperClient":
        """Connect to the keeper of ``paths``; if none answers and ``start``,
        start one (detached) and wait for it, boundedly; then say hello as the
        daemon. Raises KeeperError saying why not."""
        conn = await _open(paths)
        if conn is None:
            if not start:
                raise KeeperError(f"no keeper is listening on {paths.keeper_socket}")
            await _start(paths, python, check_s, idle_exit_s)
            conn = await _open(paths)
            if conn is None:
                raise KeeperError(f"the keeper started but does not answer on {paths.keeper_socket}")
        reader, writer = conn
        try:
            writer.write(encode(_request(1, "hello", role="daemon", pid=os.getpid(), name=name)))
            msg = hello_answer(paths, await asyncio.wait_for(reader.readline(), HELLO_TIMEOUT_S))
        except (OSError, ValueError, asyncio.TimeoutError) as e:
            writer.close()
            raise KeeperError(f"the keeper on {paths.keeper_socket} did not answer hello: {e!r}") from None
        except KeeperVersionMismatch:
            writer.close()
            raise
        if not msg.get("ok"):
            writer.close()
            raise KeeperError(f"the keeper refused us: {msg.get('error', {}).get('message')}")
        return cls(str(paths.keeper_socket), reader, writer, msg["result"])

    @property
    def holding(self) -> int:
        """Runs the keeper holds for us: running, held behind another, or
        ended with an outcome not yet acknowledged (as far as we know)."""
        return len(self._sinks) + len(self._early)

    @property
    def quiet(self) -> bool:
        """It holds nothing for us and has answered everything (our acks
        too): the keeper may go without anything to hand over."""
        return not (self._sinks or self._early or self._pending or self.lost)

    # ------------------------------------------------------- fire and forget
    def spawn(self, req: dict[str, Any], sink: KeptRunListener) -> None:
        """Ask for a run (keeper-spec's spawn args, the environment as
        ``env`` plus ``env_extra``); ``sink`` hears how it went. An ``env``
        object this connection sent before goes as its ref only."""
        key, whole = req["key"], self._whole(req)
        sent: list[dict[str, Any]] = []

        def reply(msg: dict[str, Any] | None) -> None:
            if msg is None:
                return  # lost: whether it started, the next hello's runs say
            if msg.get("ok"):
                if not msg["result"].get("pending"):  # held behind ``after``: a started event follows
                    _call(sink.started, msg["result"]["pid"], msg["result"]["identity"])
                return
            err = msg.get("error") or {}
            if err.get("code") == "unknown_env" and len(sent) == 1 and key in self._withdrawing:
                if self._sinks.pop(key, None) is sink:  # refused, and withdrawn meanwhile: it never starts
                    _call(sink.taken_back)
                return
            if err.get("code") == "unknown_env" and len(sent) == 1:  # the keeper forgot it (or the env
                sent.append(whole)  # of the run it waits for): send it whole, once
                self._send("spawn", whole, reply)
                return
            if self._sinks.get(key) is sink:
                del self._sinks[key]
            retry = err.get("retry", err.get("code") != "bad_request")
            _call(sink.spawn_failed, str(err.get("message")), bool(retry), bool(err.get("resource")))
        self._sinks[key] = sink
        sent.append(self._by_ref(req, whole))
        if not self._send("spawn", sent[0], reply):
            if not self.lost:  # too large for a frame: this job can never be sent as it is
                del self._sinks[key]
                _call(sink.spawn_failed, f"the job's command and environment exceed the keeper's "
                                         f"{MAX_FRAME}-byte request limit", False)

    def _whole(self, req: dict[str, Any]) -> dict[str, Any]:
        """The request with its environment whole: what any keeper takes
        (``env_ref`` only added where this keeper knows refs)."""
        if "env_ref" not in self.info.get("features", ()):
            env, extra = req["env"], req.get("env_extra")
            return {**{k: v for k, v in req.items() if k != "env_extra"}, "env": {**env, **extra} if extra else env}
        return {**req, "env_ref": self._ref(req["env"])}

    def _by_ref(self, req: dict[str, Any], whole: dict[str, Any]) -> dict[str, Any]:
        ref = whole.get("env_ref")
        if ref is None or ref not in self._refs_sent:
            if ref is not None:
                self._refs_sent.add(ref)
            return whole
        return {k: v for k, v in whole.items() if k != "env"}

    def _ref(self, env: dict[str, str]) -> str:
        """This connection's name for the environment object ``env``: jobs
        that share one (one `sloth add`) share its ref. First in, first out,
        at most half what the keeper keeps (keeper.wire.ENV_REFS_KEPT)."""
        hit = self._env_refs.get(id(env))
        if hit is not None and hit[1] is env:  # the same object, not a reused id
            return hit[0]
        ref = f"e{next(self._ref_ids)}"
        self._env_refs[id(env)] = (ref, env)  # holding ``env`` keeps its id unique
        while len(self._env_refs) > ENV_REFS_KEPT // 2:
            self._refs_sent.discard(self._env_refs.popitem(last=False)[1][0])
        return ref

    def attach(self, key: str, sink: KeptRunListener) -> None:
        """Route the events of a run adopted from ``held`` to ``sink``
        (those that came before are delivered now)."""
        self._sinks[key] = sink
        for ev in self._early.pop(key, []):
            self._deliver(sink, ev)

    def trust(self, items: list[tuple[str, float]]) -> None:
        """Renewed leases: each run may live until ``until`` (boot_now() clock)."""
        for i in range(0, len(items), BATCH):
            self._send("trust", {"items": [{"key": k, "until": u} for k, u in items[i:i + BATCH]]})

    def kill(self, key: str, reason: str, grace_s: float) -> None:
        self._send("kill", {"key": key, "reason": reason, "grace_s": grace_s})

    def unspawn(self, key: str) -> None:
        """Drop a run held behind another if it has not started: its sink
        hears ``taken_back`` (else its events go on as they would)."""
        def reply(msg: dict[str, Any] | None) -> None:
            self._withdrawing.discard(key)
            sink = self._sinks.get(key)
            if msg is not None and msg.get("ok") and msg["result"].get("dropped") and sink is not None:
                del self._sinks[key]
                _call(sink.taken_back)
        self._withdrawing.add(key)
        self._send("unspawn", {"key": key}, reply)

    def ack(self, keys: list[str]) -> None:
        """The outcomes of ``keys`` are recorded: the keeper may forget them,
        and so do we (a held run never attached no longer counts in ``holding``)."""
        for key in keys:
            self._early.pop(key, None)
            self._sinks.pop(key, None)
        for i in range(0, len(keys), BATCH):
            self._send("ack", {"keys": keys[i:i + BATCH]})

    async def ask(self, op: str, args: dict[str, Any], timeout_s: float = 10.0) -> dict[str, Any]:
        """One request whose answer the caller waits for (pause, resume):
        its result. Raises KeeperError if refused, lost or not answered in time."""
        fut: asyncio.Future[dict[str, Any] | None] = asyncio.get_running_loop().create_future()

        def answered(m: dict[str, Any] | None) -> None:
            if not fut.done():
                fut.set_result(m)
        if not self._send(op, args, answered):
            raise KeeperError(f"the keeper connection is lost: {op} was not sent")
        try:
            msg = await asyncio.wait_for(fut, timeout_s)
        except asyncio.TimeoutError:
            raise KeeperError(f"the keeper did not answer {op} within {timeout_s:.0f}s") from None
        if msg is None:
            raise KeeperError(f"the keeper connection was lost before {op} was answered")
        if not msg.get("ok"):
            raise KeeperError(f"the keeper refused {op}: {(msg.get('error') or {}).get('message')}")
        return msg["result"]

    # ----------------------------------------------------------------- other
    async def tap(self, key: str) -> AsyncIterator[bytes]:
        """A run's output on a connection of its own: what its log holds so
        far, then live output until it ends. Raises KeeperError."""
        try:
            reader, writer = await asyncio.open_unix_connection(self.socket_path, limit=TAP_LINE_LIMIT)
        except OSError as e:
            raise KeeperError(f"cannot connect to the keeper to follow run {key}: {e.strerror or e}") from None
        try:
            writer.write(encode(_request(1, "tap", key=key)))
            while True:
                line = await reader.readline()
                if not line:
                    raise KeeperError(f"the keeper closed the tap of run {key} before its end")
                msg = _decode(line)
                if "event" in msg:
                    yield str(msg["event"].get("data", "")).encode("utf-8", "surrogateescape")
                elif msg.get("ok"):
                    return
                else:
                    err = msg.get("error") or {}
                    raise (RunGone if err.get("code") == "not_found" else KeeperError)(
                        f"cannot follow run {key}: {err.get('message')}")
        except (OSError, ValueError) as e:
            raise KeeperError(f"following run {key} failed: {e!r}") from None
        finally:
            writer.close()

    async def bye(self) -> None:
        """Tell the keeper to exit once it holds nothing."""
        fut: asyncio.Future[dict[str, Any] | None] = asyncio.get_running_loop().create_future()

        def answered(m: dict[str, Any] | None) -> None:
            if not fut.done():
                fut.set_result(m)
        if self._send("bye", {}, answered):
            msg = await fut
            if msg is not None and msg.get("ok"):
                return
        raise KeeperError("the keeper connection was lost before bye was answered")

    async def retire(self, timeout_s: float) -> None:
        """Tell a ``quiet`` keeper bye and wait until it hangs up (it exits
        at once, holding nothing). Its hanging up is not a loss. Raises
        KeeperError, or asyncio.TimeoutError past ``timeout_s``."""
        self._closing = True
        await self.bye()
        await asyncio.wait_for(asyncio.shield(self._task), timeout_s)

    async def close(self) -> None:
        """Hang up (on_lost is not called). The keeper and its runs go on."""
        self._closing = True
        self._task.cancel()
        self._lose()
        try:
            await asyncio.wait_for(self._writer.wait_closed(), 1.0)
        except (OSError, asyncio.TimeoutError):
            pass

    # --------------------------------------------------------------- inside
    def _send(self, op: str, args: dict[str, Any], reply: Reply | None = None) -> bool:
        """Queue one request; False if it was not sent (lost, or over the frame limit)."""
        if self.lost or self._writer.is_closing():
            self._lose()
            return False
        rid = next(self._ids)
        data = encode(_request(rid, op, **args))
        if len(data) > MAX_FRAME:
            log.error("keeper request %s of %d bytes is over the frame limit; not sent", op, len(data))
            return False
        self._pending[rid] = reply or functools.partial(_log_refusal, op)
        self._cork.put(data)
        if (backlog := self._cork.backlog()) > OUT_CAP:
            log.error("the keeper stopped reading (%d bytes unsent); dropping the connection", backlog)
            self._lose()
            return False
        return True

    async def _read_loop(self) -> None:
        try:
            while line := await self._reader.readline():
                msg = _decode(line)
                if "event" in msg:
                    self._route(msg["event"])
                elif (reply := self._pending.pop(msg.get("id"), None)) is not None:  # type: ignore[arg-type]
                    reply(msg)
                if self.quiet:
                    _call(self.on_quiet)
        except (OSError, ValueError) as e:
            log.warning("keeper connection failed: %r", e)
        finally:
            self._lose()

    def _route(self, ev: dict[str, Any]) -> None:
        key = ev.get("key")
        sink = self._sinks.get(key)  # type: ignore[arg-type]
        if sink is not None:
            self._deliver(sink, ev)
        elif key in self._early:
            self._early[key].append(ev)  # a held run not attached yet
        else:
            log.warning("keeper event %s for a run we do not know: %s", ev.get("kind"), key)

    def _deliver(self, sink: KeptRunListener, ev: dict[str, Any]) -> None:
        if ev.get("kind") == "exited":
            if self._sinks.get(ev["key"]) is sink:
                del self._sinks[ev["key"]]  # its last event
            _call(sink.exited, ev.get("outcome") or {})
        elif ev.get("kind") == "frozen":
            _call(sink.frozen, str(ev.get("why", "")))
        elif ev.get("kind") == "started":  # a run held behind another started when that one ended
            _call(sink.started, ev.get("pid"), ev.get("identity") or {})
        elif ev.get("kind") == "note":
            _call(sink.noted, str(ev.get("what", "")), str(ev.get("message", "")))
        elif ev.get("kind") == "progress" and isinstance(ev.get("progress"), dict):
            _call(sink.progressed, ev["progress"])

    def _lose(self) -> None:
        if self.lost:
            return
        self.lost = True
        self._cork.close()  # what was queued before a close() or bye still goes
        pending, self._pending = self._pending, {}
        for reply in pending.values():
            _call(reply, None)
        if not self._closing:
            _call(self.on_lost)


def _request(rid: int, op: str, **args: Any) -> dict[str, Any]:
    return {"v": VERSION, "id": rid, "op": op, "args": args}


def _decode(line: bytes) -> dict[str, Any]:
    msg = json.loads(line.decode("utf-8"))
    if not isinstance(msg, dict) or msg.get("v") != VERSION:
        raise ValueError(f"the keeper speaks another protocol: {line[:80]!r}")
    return msg


def _call(fn: Callable[..., Any], *args: Any) -> None:
    """A sink's bug must not stop the events of every other run."""
    try:
        fn(*args)
    except Exception:
        log.exception("keeper client callback %r failed", fn)


def _log_refusal(op: str, msg: dict[str, Any] | None) -> None:
    if msg is not None and not msg.get("ok"):
        log.warning("keeper refused %s: %s", op, (msg.get("error") or {}).get("message"))


async def _open(paths: Paths) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
    """A connection to the keeper, or None if nobody listens there."""
    try:
        reader, writer = await asyncio.open_unix_connection(str(paths.keeper_socket), limit=MAX_LINE)
    except (FileNotFoundError, ConnectionRefusedError):
        return None
    except OSError as e:
        raise KeeperError(f"cannot connect to the keeper on {paths.keeper_socket}: {e.strerror or e}") from None
    uid = peercred.peer_uid(writer.get_extra_info("socket"))
    if uid != os.getuid():  # our 0700 folder should make this impossible: never talk to a stranger
        writer.close()
        raise KeeperError(f"the keeper socket {paths.keeper_socket} is served by uid {uid}, not us")
    return reader, writer


async def _start(paths: Paths, python: str, check_s: float, idle_exit_s: float) -> None:
    """Start a keeper and wait until it listens: it forks into the background
    once its socket is bound, so its starter's exit is the signal (0: ready;
    EXIT_LOCKED: another keeper won a race, also fine; else its stderr says why)."""
    for d in (paths.data_dir, paths.runtime_dir, paths.log_dir):
        ensure_dir(d)
    _rotate(paths.keeper_log)
    argv = [python, "-m", "sloth_daemon.keeper", "--detach", "--socket", str(paths.keeper_socket),
            "--lock", str(paths.keeper_lock), "--journal", str(paths.keeper_journal),
            "--daemon-lock", str(paths.lock), "--log", str(paths.keeper_log),
            "--check-s", str(check_s), "--idle-exit-s", str(idle_exit_s)]
    env = {k: v for k, v in os.environ.items() if k not in NOT_FOR_KEEPER}
    try:
        # A plain Popen: a fork and exec, once per keeper start; its exit is
        # polled below without blocking the loop.
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,  # noqa: ASYNC220
                                stderr=subprocess.PIPE, cwd="/", env=env, start_new_session=True)
    except OSError as e:
        raise KeeperError(f"cannot start the keeper ({python}): {e.strerror or e}") from None
    loop = asyncio.get_running_loop()
    deadline = loop.time() + START_TIMEOUT_S
    while proc.poll() is None:
        if loop.time() > deadline:
            proc.kill()
            proc.wait()
            raise KeeperError(f"the keeper did not start listening within {START_TIMEOUT_S:.0f}s")
        await asyncio.sleep(0.005)
    assert proc.stderr is not None
    err = proc.stderr.read().decode(errors="replace").strip()  # it has exited: EOF is there
    proc.stderr.close()
    if proc.returncode not in (0, EXIT_LOCKED):
        raise KeeperError(f"the keeper could not start (exit {proc.returncode}): {err[-2000:]}")


def _rotate(log_path: os.PathLike[str]) -> None:
    """Keep one old keeper log: it grows only by a few lines per kill and start."""
    try:
        if os.stat(log_path).st_size > KEEPER_LOG_ROTATE_BYTES:
            os.replace(log_path, f"{os.fspath(log_path)}.1")
    except OSError:
        pass

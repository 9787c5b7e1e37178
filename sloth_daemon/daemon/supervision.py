"""The keeper as the worker's Spawner.

Job processes are the keeper's children (keeper/main.py), so they outlive the
daemon: a restart, an upgrade or a crash of the daemon neither kills nor
re-runs them. This adapter holds the daemon's connection to its keeper; if
that connection is lost (the keeper died, or cut off a daemon that stopped
reading), it connects again -- starting a new keeper if none answers -- and
hands the runs the keeper now lists to ``on_resync``, so the worker can
re-attach what survived and account for what did not.

A keeper that has held nothing for ``linger_s`` is let go (told bye; it
exits at once) and the next spawn starts another: the spawns that come
meanwhile wait, unsent, until the old keeper is gone (its lock is free) and
the new one has said hello, so no spawn ever reaches a keeper that is
leaving. docs/idle.md says why the linger is 5 s.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any, AsyncIterator, Callable

from sloth_daemon.keeper import lockholder
from sloth_daemon.errors import SlothError
from sloth_daemon.daemon.keeper_errors import KeeperError
from sloth_daemon.paths import Paths
from sloth_daemon.daemon.worker.spawner import Outcome, RunSink, SpawnRequest

if TYPE_CHECKING:
    from sloth_daemon.daemon.keeper_client import KeeperClient

log = logging.getLogger("sloth.supervision")
RECONNECT_BACKOFF_S = (0.05, 0.2, 1.0, 2.0, 5.0)
RETIRE_TIMEOUT_S = 5.0  # a keeper told bye that has not hung up by then is left to its own idle exit
GONE_POLL_S = 0.005  # how often the old keeper's lock is tried while a spawn waits for it to go


class _ToWorker:
    """The worker's RunSink as the keeper client calls it: its own methods,
    but for ``exited``, whose wire outcome becomes an Outcome here (or a
    spawn that failed, for a run held behind another)."""

    def __init__(self, sink: RunSink) -> None:
        self.sink = sink
        self.started, self.spawn_failed, self.frozen = sink.started, sink.spawn_failed, sink.frozen
        self.taken_back, self.noted, self.progressed = sink.taken_back, sink.noted, sink.progressed

    def exited(self, outcome: dict[str, Any]) -> None:
        failed = outcome.get("spawn_error")
        if isinstance(failed, dict):  # held behind another run, it could not start when that one ended
            self.sink.spawn_failed(str(outcome.get("reason")), bool(failed.get("retry")), bool(failed.get("resource")))
        else:
            self.sink.exited(Outcome.from_wire(outcome))


class KeeperSpawner:
    def __init__(self, paths: Paths, *, name: str, check_s: float, linger_s: float = 5.0,
                 on_resync: Callable[[list[dict[str, Any]]], None] = lambda kept: None,
                 on_rest: Callable[[], None] = lambda: None) -> None:
        """``on_resync``: told the runs a new keeper lists that it kept
        from before (the worker takes them over); ``on_rest``: the keeper
        let go is gone, the daemon is at rest."""
        self.paths, self.name, self.check_s, self.linger_s = paths, name, check_s, linger_s
        self.client: KeeperClient | None = None
        self.problem: str | None = None  # why the last connect failed (a keeper of another version ...)
        self.on_resync, self.on_rest = on_resync, on_rest
        self._tasks: set[asyncio.Task[None]] = set()  # kept: the loop holds only weak references
        # Spawns not sent yet, by key: waiting for an earlier process to end,
        # or for a keeper (the last one was let go). A kill or unspawn drops them here.
        self._delayed: dict[str, RunSink] = {}
        self._for_keeper: list[SpawnRequest] = []  # of those, the ones waiting for a keeper
        self._reconnecting = False  # lost: the reconnect loop runs (else no client means let go)
        self._linger: asyncio.TimerHandle | None = None
        self._going: asyncio.Task[None] | None = None  # the keeper let go, until its lock is free
        self._coming: asyncio.Task[None] | None = None  # the next keeper, started for waiting spawns
        self.connects = self.losses = 0  # keepers connected to (each start) and lost (sloth metrics)

    async def connect(self) -> list[dict[str, Any]]:
        """Connect (starting a keeper if none answers); the runs it holds."""
        from sloth_daemon.daemon.keeper_client import KeeperClient  # here: none at rest (docs/idle.md)

        try:
            client = await KeeperClient.connect(self.paths, name=self.name, check_s=self.check_s)
        except SlothError as e:
            self.problem = e.message
            raise
        client.on_lost = self._lost
        client.on_quiet = self._quiet
        self.client, self.problem = client, None
        self.connects += 1
        if client.quiet:
            self._quiet()
        return client.held

    def status(self) -> dict[str, Any]:
        """For `sloth daemon status`: the keeper's pid, version and protocol,
        the runs it holds for us, or (none connected) why not."""
        if self.client is None:
            if self.problem is None and not self._reconnecting:
                return {"pid": None, "version": None, "protocol": None, "runs": 0, "problem": None, "idle": True}
            return {"pid": None, "version": None, "protocol": None, "runs": None,
                    "problem": self.problem or "not connected (it is being restarted)"}
        info = self.client.info
        return {"pid": info.get("pid"), "version": info.get("version"), "protocol": info.get("protocol"),
                "runs": self.client.holding, "problem": None}

    @property
    def pid(self) -> int | None:
        return self.client.info.get("pid") if self.client is not None else None

    @property
    def pipelines(self) -> bool:
        """Whether this keeper can hold a run behind another (spawn ``after``)."""
        return self.client is not None and "after" in self.client.info.get("features", ())

    # ------------------------------------------------------------ Spawner
    def spawn(self, req: SpawnRequest, sink: RunSink) -> None:
        if self._linger is not None:  # it holds a run again: it stays
            self._linger.cancel()
            self._linger = None
        if req.previous and _procident().is_same_process(req.previous):
            # The lease expired but the old process lives (an orphan of a
            # lost keeper, or a stalled foreign worker): end it first.
            self._delayed[req.key] = sink
            self._track(self._spawn_after_kill(req, sink))
        else:
            self._spawn(req, sink)

    def attach(self, key: str, sink: RunSink) -> None:
        if self.client is not None:
            self.client.attach(key, _ToWorker(sink))

    def kill(self, key: str, reason: str, grace_s: float) -> None:
        if (sink := self._delayed.pop(key, None)) is not None:  # not sent yet: it never starts
            sink.exited(Outcome(None, reason, killed_by="request", started=False))
            self._settled()
        elif self.client is not None:
            self.client.kill(key, reason, grace_s)

    def unspawn(self, key: str) -> None:
        """A spawn not sent yet (an earlier process is being ended) is
        dropped here; else the keeper decides (withdrawal.py)."""
        if (sink := self._delayed.pop(key, None)) is not None:
            sink.taken_back()
            self._settled()
        elif self.client is not None:  # else the resync after the reconnect says where it is
            self.client.unspawn(key)

    def trust(self, items: list[tuple[str, float]]) -> None:
        if self.client is not None and items:
            self.client.trust(items)

    def ack(self, keys: list[str]) -> None:
        if self.client is not None and keys:
            self.client.ack(keys)

    def tap(self, key: str) -> AsyncIterator[bytes] | None:
        return self.client.tap(key) if self.client is not None else None

    async def pause(self, keys: list[str], *, resume: bool = False) -> dict[str, Any]:
        """Stop (or with ``resume`` continue) these runs' trees: the keeper's
        answer, {"runs": {key: ...}, "unknown": [...]}. Raises KeeperError."""
        client = self.client
        if client is None:
            raise KeeperError("no keeper is connected (it is being restarted)", hint="Try again in a moment.")
        if "pause" not in client.info.get("features", ()):
            raise KeeperError(f"the keeper (version {client.info.get('version')}) cannot pause a running job",
                              hint="It is an older one that still holds runs; it exits once they end.")
        return await client.ask("resume" if resume else "pause", {"keys": keys})

    async def close(self, *, bye: bool) -> None:
        """Hang up. With ``bye`` the keeper exits once it holds nothing;
        without, it keeps the runs for the next daemon."""
        client, self.client = self.client, None
        if self._linger is not None:
            self._linger.cancel()
            self._linger = None
        if client is None:
            return
        if bye:
            try:
                await client.bye()
            except SlothError as e:
                log.warning("keeper: %s", e.message)
        await client.close()

    # ------------------------------------------------------------- inside
    def _spawn(self, req: SpawnRequest, sink: RunSink) -> None:
        if self.client is None and not self._reconnecting:  # let go when idle: start the next
            self._delayed[req.key] = sink
            self._for_keeper.append(req)
            if self._coming is None:
                self._coming = self._track(self._next_keeper())
            return
        if self.client is None:  # between a lost keeper and the next: say so, it is retried
            sink.spawn_failed("no keeper to start the job (it is being restarted)", True)
            return
        if (req.keep_awake or req.limits) and "holds" not in self.client.info.get("features", ()):
            sink.spawn_failed(f"the keeper (version {self.client.info.get('version')}) cannot hold --keep-awake "
                              "or limits; it exits once the runs it holds end", True)
            return
        if req.watch and "watch" not in self.client.info.get("features", ()):
            sink.spawn_failed(f"the keeper (version {self.client.info.get('version')}) cannot watch --stall or "
                              "--fail-on; it exits once the runs it holds end", True)
            return
        if req.after is not None and not self.pipelines:  # a keeper without `after` (a reconnect
            sink.taken_back()  # while an earlier process was ended) would start it at once: not so
            return
        wire = _wire(req)
        if "watch" not in self.client.info.get("features", ()):  # an older keeper reads no results: none is kept
            wire.pop("result_path", None)
        self.client.spawn(wire, _ToWorker(sink))

    async def _spawn_after_kill(self, req: SpawnRequest, sink: RunSink) -> None:
        loop = asyncio.get_running_loop()
        try:
            await loop.run_in_executor(None, _procident().kill_identity_blocking, req.previous or {},
                                       req.kill_grace_s)
        except Exception as e:  # a bug or a psutil surprise: do not start beside it
            if self._delayed.pop(req.key, None) is not None:
                sink.spawn_failed(f"cannot end the previous attempt's process: {e}", True)
                self._settled()
            return
        if self._delayed.pop(req.key, None) is not None:  # else withdrawn or killed meanwhile: told so
            self._spawn(req, sink)

    def _track(self, coro: Any) -> asyncio.Task[None]:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    # ------------------------------------------------- letting it go when idle
    def linger(self, seconds: float) -> None:
        """A new ``linger_s`` (a config reload): a keeper lingering now is
        let go on the new length, counted from now."""
        self.linger_s = seconds
        if self._linger is not None:
            self._linger.cancel()
            self._linger = None
            self._quiet()

    def _quiet(self) -> None:
        """The keeper holds nothing for us: let it go if it still holds nothing after ``linger_s``."""
        if self._linger is None and not self._delayed:
            self._linger = asyncio.get_running_loop().call_later(self.linger_s, self._let_go)

    def _settled(self) -> None:
        """A spawn that never reached the keeper was dropped: it may be quiet now."""
        if self.client is not None and self.client.quiet:
            self._quiet()

    def _let_go(self) -> None:
        self._linger = None
        client = self.client
        if client is None or not client.quiet or self._delayed:  # a spawn came meanwhile
            return
        log.info("the keeper (pid %s) has held nothing for %gs: letting it go", client.info.get("pid"),
                 self.linger_s)
        self.client = None  # from here a spawn waits for the next keeper (_spawn)
        self._going = self._track(self._retire(client))

    async def _retire(self, client: KeeperClient) -> None:
        try:
            await client.retire(RETIRE_TIMEOUT_S)
        except (SlothError, asyncio.TimeoutError) as e:  # it stays until its own idle exit, or a hello keeps it
            log.warning("keeper: told bye, it did not go: %s", getattr(e, "message", repr(e)))
            await client.close()
            return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + RETIRE_TIMEOUT_S
        while lockholder.held(self.paths.keeper_lock) and loop.time() < deadline:  # noqa: ASYNC110
            await asyncio.sleep(GONE_POLL_S)  # between its hanging up and its exit: milliseconds
        if self.client is None and not self._for_keeper:  # no spawn came meanwhile
            self.on_rest()

    async def _next_keeper(self) -> None:
        """Start a keeper for the spawns waiting (once the last one is gone) and send them."""
        try:
            if self._going is not None:
                await self._going
            self._going = None
            try:
                held = await self.connect()
            except SlothError as e:
                log.error("keeper: %s", e.message)
                held = None
        finally:
            self._coming = None
        waiting, self._for_keeper = self._for_keeper, []
        if held:  # a keeper with runs it held before (not ours to lose): the worker accounts for them
            self.on_resync(held)
        for req in waiting:
            if (sink := self._delayed.pop(req.key, None)) is None:
                continue  # killed or withdrawn while it waited: told so then
            if self.client is None:
                sink.spawn_failed(f"cannot start the keeper: {self.problem}", True)
            else:
                self._spawn(req, sink)

    # ------------------------------------------------------------ lost
    def _lost(self) -> None:
        log.error("lost the connection to the keeper; connecting again")
        self.losses += 1
        self.client = None
        self._reconnecting = True
        self._track(self._reconnect())

    async def _reconnect(self) -> None:
        for delay in (*RECONNECT_BACKOFF_S, *[RECONNECT_BACKOFF_S[-1]] * 1000):
            await asyncio.sleep(delay)
            try:
                held = await self.connect()
            except SlothError as e:
                log.error("keeper: %s", e.message)
                continue
            self._reconnecting = False
            self.on_resync(held)
            return


def _procident() -> Any:
    """keeper/procident (and psutil), loaded the first time a previous
    attempt's process must be looked at: most spawns have none (docs/idle.md)."""
    from sloth_daemon.keeper import procident

    return procident


def _wire(req: SpawnRequest) -> dict[str, Any]:
    """The keeper's spawn arguments (keeper.wire.OPS["spawn"])."""
    return {
        "key": req.key, "job_id": req.job_id, "attempt": req.attempt, "token": req.key,
        "argv": req.argv, "cwd": req.cwd, "env": req.env, "env_extra": req.env_extra or {},
        "log_path": str(req.log_path),
        "log_cap": req.log_cap, "timeout_s": req.timeout_s, "kill_grace_s": req.kill_grace_s,
        "trust_until": req.trust_until, "term_lead_s": req.term_lead_s,
        **({"after": req.after} if req.after is not None else {}),
        **({"keep_awake": True} if req.keep_awake else {}),
        **({"limits": req.limits} if req.limits else {}),
        **({"watch": req.watch} if req.watch else {}),
        **({"result_path": str(req.result_path)} if req.result_path is not None else {}),
    }

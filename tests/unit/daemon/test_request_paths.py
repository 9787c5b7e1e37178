"""Issue 29, "no layers that only forward", on the daemon's request side: a
request reaches the object that does the work within two hops of its
handler. Stated mechanically, on the real objects a daemon builds (a real
queue, worker and Control; a fake spawner):

  - a handler calls ``self.X.m(...)``, never ``self.X.Y.m(...)``: it does
    not reach through one collaborator to another (``self.c.worker.lanes``);
  - the ``m`` it calls on a collaborator is not a one-line forward (a def
    whose body, after a docstring, is ``return [await] self.a.b(args
    passed through)``): the collaborator does the work itself;
  - the request-side classes hold no such forward, and the Worker and
    Control no longer carry the user-request methods that only forwarded.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from pathlib import Path
from typing import Any

import pytest

from sloth_daemon.clock import ManualClocks
from sloth_daemon.config import Settings
from sloth_daemon.daemon import edit_ops, handlers, job_ops, lane_ops, streams, supervision
from sloth_daemon.daemon.control import Control
from sloth_daemon.daemon.schedules import ops as schedule_ops
from sloth_daemon.daemon.handlers import LAZY, Handlers
from sloth_daemon.daemon.main import compose_scheduler
from sloth_daemon.daemon.worker.loop import Worker
from sloth_daemon.paths import resolve
from sloth_daemon.queue import Queue
from tests.unit.daemon.test_worker import FakeSpawner

HANDLER_MODULES = (handlers, job_ops, lane_ops, edit_ops, schedule_ops, streams)
USER_REQUESTS = ("cancel", "cancel_many", "kill", "retry", "retry_many", "restart", "prune", "pause", "resume",
                 "remove_lane")


def is_forward(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """A def whose body, after an optional docstring, is one ``[return]
    [await] self.a[.b...](args)``, each argument one of its parameters."""
    body = fn.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
            and isinstance(body[0].value.value, str):
        body = body[1:]
    if len(body) != 1 or not isinstance(body[0], (ast.Return, ast.Expr)):
        return False
    call = body[0].value
    if isinstance(call, ast.Await):
        call = call.value
    if not isinstance(call, ast.Call) or not isinstance(call.func, ast.Attribute):
        return False
    base = call.func.value
    while isinstance(base, ast.Attribute):
        base = base.value
    if not (isinstance(base, ast.Name) and base.id == "self"):
        return False
    params = {a.arg for a in fn.args.args[1:] + fn.args.kwonlyargs}
    params |= {a.arg for a in (fn.args.vararg, fn.args.kwarg) if a is not None}
    passed = [a.value if isinstance(a, ast.Starred) else a for a in call.args] + [k.value for k in call.keywords]
    return all(isinstance(x, ast.Name) and x.id in params for x in passed)


def forwards(cls: type) -> list[str]:
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    node = tree.body[0]
    assert isinstance(node, ast.ClassDef)
    return [fn.name for fn in node.body if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) and is_forward(fn)]


def self_chain(node: ast.expr) -> list[str] | None:
    """``self.a.b.c`` -> ["a", "b", "c"]; None for what is not rooted at self."""
    names: list[str] = []
    while isinstance(node, ast.Attribute):
        names.append(node.attr)
        node = node.value
    return names[::-1] if isinstance(node, ast.Name) and node.id == "self" else None


def calls_on_collaborators(cls: type) -> list[tuple[str, list[str]]]:
    """(method, chain) of every ``self.<chain>(...)`` call in the class with
    at least a collaborator and a method (``self.x.y(...)`` and deeper)."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    out = []
    for fn in ast.walk(tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for node in ast.walk(fn):
                if isinstance(node, ast.Call) and (chain := self_chain(node.func)) is not None and len(chain) >= 2:
                    out.append((fn.name, chain))
    return out


@pytest.fixture
def daemon_handlers(tmp_path: Path):
    clocks, paths, settings = ManualClocks(), resolve({"SLOTH_HOME": str(tmp_path)}), Settings()
    q = Queue(paths.db, clocks)
    sp = FakeSpawner()
    w = Worker(q, settings, sp, clocks=clocks, log_path=paths.job_log, instance="t")
    scheduler = compose_scheduler(q, w, clocks, None, job=lambda d: c.validate([d], fired=True)[0],
                                  place=lambda d: dict(c._placed(d)))  # as main.build composes it
    c = Control(q, w, sp, paths, settings, request_stop=lambda *a, **k: None, instance="t", scheduler=scheduler)
    h = Handlers(c, {})
    yield h
    q.close()


def handler_objects(h: Handlers) -> list[Any]:
    for name in LAZY:  # the families made at their first request, made now
        if not any(type(f).__name__ == LAZY[name][1] for f in h.families):
            h.made(name)
    return [h, *h.families, h.streaming]


def test_every_handler_family_is_one_the_handlers_hold(daemon_handlers):
    """The objects the rules below look at are all the handlers there are:
    every op of the table is a method of one of them (or a doer's own)."""
    classes = {type(o) for o in handler_objects(daemon_handlers)}
    for module in HANDLER_MODULES:
        for name, cls in vars(module).items():
            if inspect.isclass(cls) and cls.__module__ == module.__name__ and any(
                    n.startswith("op_") for n in vars(cls)):
                assert cls in classes, f"{module.__name__}.{name} has ops the rules here do not see"


def test_a_handler_never_reaches_through_a_collaborator(daemon_handlers):
    """Nor does Control, which names the worker's parts it uses."""
    deep = [(cls.__name__, fn, ".".join(chain)) for cls in [*map(type, handler_objects(daemon_handlers)), Control]
            for fn, chain in calls_on_collaborators(cls) if len(chain) > 2]
    assert deep == [], f"self.a.b.m(...) in a handler: {deep}"


def test_what_a_handler_calls_does_the_work_itself(daemon_handlers):
    """Each ``self.x.m(...)`` of a handler, resolved on the live objects:
    ``m`` is not a one-line forward to yet another object. The queue is
    the end of the daemon's part: how the public queue reaches its engine
    is the queue contract's (backends/, deliverables 1 and 2)."""
    seen, forwarding = set(), []
    for obj in handler_objects(daemon_handlers):
        for fn, (attr, meth) in calls_on_collaborators(type(obj)):
            target = getattr(obj, attr)
            if target is daemon_handlers.queue:
                seen.add(f"queue.{meth}")
                continue
            impl = inspect.getattr_static(type(target), meth, None)
            if not inspect.isfunction(impl) or not impl.__module__.startswith("sloth_daemon."):
                continue  # a callable held (settings), a method of the standard library
            seen.add(f"{type(target).__name__}.{meth}")
            node = ast.parse(textwrap.dedent(inspect.getsource(impl))).body[0]
            assert isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            if is_forward(node):
                forwarding.append(f"{type(obj).__name__}.{fn} -> {type(target).__name__}.{meth}")
    assert forwarding == []
    # the doers of the requests issue 29 named, each reached from its handler directly
    assert {"Actions.cancel", "Actions.cancel_many", "Actions.kill", "Actions.retry", "Actions.retry_many",
            "Actions.restart", "Actions.prune", "Actions.pause", "Actions.resume", "Actions.remove_lane",
            "Worker.pause_jobs", "Worker.set_lane", "Scheduler.run_now", "Lanes.check", "Gates.never_job", "Gates.sweep",
            "queue.edit", "queue.bump", "queue.hold", "queue.unhold", "queue.batch_ids", "queue.latest"} <= seen


@pytest.mark.parametrize("cls", [Control, Handlers, job_ops.JobOps, lane_ops.LaneOps, edit_ops.EditOps,
                                 schedule_ops.ScheduleOps, streams.Streams, supervision._ToWorker])
def test_the_request_side_holds_no_one_line_forward(cls):
    assert forwards(cls) == []


def test_worker_and_control_no_longer_carry_the_forwarded_user_requests():
    assert [n for n in USER_REQUESTS if hasattr(Worker, n)] == []
    assert [n for n in (*USER_REQUESTS, "pause_jobs", "set_lane", "get", "events", "jobs", "batch_ids",
                        "log_path", "reload", "shutdown") if hasattr(Control, n)] == []


def test_the_forward_test_sees_a_forward():
    """The detector itself: it counts what it should (the rules above
    would pass vacuously otherwise)."""
    src = textwrap.dedent('''
        class A:
            def a(self, x):
                "doc"
                return self.b.c(x)
            async def b(self, x, *, y):
                return await self.q.r(x, y=y)
            def c(self, x):
                return self.b.c(x + 1)
            def d(self, x):
                self.b.c(x)
                return x
    ''')
    cls = ast.parse(src).body[0]
    assert isinstance(cls, ast.ClassDef)
    assert [f.name for f in cls.body if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)) and is_forward(f)] \
        == ["a", "b"]


def test_a_connection_accepted_as_the_daemon_closes_is_refused_not_served_on_a_closed_queue(daemon_handlers):
    """The stop's race (a chaos soak found it): asyncio accepted a connection
    just before server.close(), and its task first ran after the queue had
    closed, so its add failed inside with 'Cannot operate on a closed
    database'. Such a connection is told the daemon is stopping, and nothing
    it asked is done."""
    import asyncio
    import json
    import socket

    from sloth_daemon.daemon.server import Server

    server = Server(daemon_handlers.control)

    async def scenario() -> dict[str, Any]:
        ours, theirs = socket.socketpair()
        reader, writer = await asyncio.open_unix_connection(sock=ours)
        client_reader, client_writer = await asyncio.open_unix_connection(sock=theirs)
        client_writer.write(json.dumps({"v": 1, "id": 1, "op": "add",
                                        "args": {"jobs": [{"command": ["true"]}]}}).encode() + b"\n")
        await client_writer.drain()
        await server.close()  # the stop begins: the accepted connection's task has not run yet
        daemon_handlers.control.queue.close()
        served = asyncio.ensure_future(server.handle(reader, writer))  # ... and runs now, as asyncio would run it
        try:
            return dict(json.loads(await asyncio.wait_for(client_reader.readline(), 5)))
        finally:
            client_writer.close()
            await asyncio.wait_for(served, 5)

    answer = asyncio.run(scenario())
    assert answer["ok"] is False and answer["error"]["code"] == "busy", answer
    assert "stopping" in answer["error"]["message"]


def test_a_follow_that_reaches_the_keeper_after_the_run_ended_reads_its_file(tmp_path):
    """`logs -f` of an attempt that ended in milliseconds: the daemon still
    thought it live, the keeper had let it go (RunGone before any output).
    Its whole log is in its file: that is sent, not an error (test_daily
    hit this under load)."""
    import asyncio

    from sloth_daemon.daemon import streams
    from sloth_daemon.daemon.keeper_client import KeeperError, RunGone

    async def gone() -> Any:
        raise RunGone("cannot follow run k: no run with key 'k' is held")
        yield b""  # an async generator, as the keeper client's tap is

    async def cut() -> Any:
        yield b"half"
        raise RunGone("cannot follow run k: no run with key 'k' is held")

    sent: list[Any] = []

    async def emit(ev: Any) -> None:
        sent.append(ev)

    assert asyncio.run(streams._stream(gone(), emit)) is False and sent == []
    with pytest.raises(KeeperError):  # some output then gone: not a run that ended before the tap
        asyncio.run(streams._stream(cut(), emit))

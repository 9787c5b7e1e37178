"""The queue's contract, declared once (backends/contract.py) and kept by
both engines: the public face binds each method of it from the engine's
parts (no method of its own in between), each with the contract's
docstring; the settings the parts share are one object; and
docs/library.md's examples run as written, on both engines."""

from __future__ import annotations

import ast
import contextlib
import inspect
import io
import re
from pathlib import Path

import pytest

from sloth_daemon.backends import contract, open_read_only
from sloth_daemon.backends.face import Queue, QueueReads, ReadOnlyQueue

ROOT = Path(__file__).resolve().parents[3]
LIBRARY_MD = ROOT / "docs" / "library.md"
# The Protocols whose every method a Queue answers, and those of its read-only view.
WRITE_SIDE = (contract.Store, contract.Adds, contract.Claims, contract.Leases, contract.Requests,
              contract.Edits, contract.Meta)
READ_SIDE = (contract.Reads, contract.Listings)
STORE_ATTRS = {"broken"}  # a property of the store, read through the face's property


def methods(proto: type) -> list[str]:
    return [n for n, v in vars(proto).items() if callable(v) and not n.startswith("_")]


def test_a_queue_answers_every_method_of_the_contract_with_the_part_that_does_the_work(q):
    parts = {contract.Store: q.engine.store, contract.Adds: q.engine.adds, contract.Claims: q.engine.claims,
             contract.Leases: q.engine.leases, contract.Requests: q.engine.requests, contract.Edits: q.engine.edits,
             contract.Meta: q.engine.meta, contract.Reads: q.engine.reads,
             contract.Listings: q.engine.listings}
    for proto in WRITE_SIDE + READ_SIDE:
        for name in methods(proto):
            got = getattr(q, name)
            # the engine's part's own bound method: a call reaches it directly
            assert inspect.ismethod(got) or hasattr(got, "__wrapped__"), (proto.__name__, name)
            assert got.__self__ is parts[proto], (proto.__name__, name)
            # its docstring is the contract's, written once
            assert inspect.getdoc(got) == inspect.getdoc(getattr(proto, name)), (proto.__name__, name)
    assert not [n for n, v in vars(Queue).items() if inspect.isfunction(v) and not n.startswith("__")]
    assert q.machines is None if q.engine.machines is None else q.machines is q.engine.machines


def test_the_read_only_view_is_the_same_reads_over_a_read_only_engine(q, queue_target):
    a = q.enqueue(["a"])
    with open_read_only(queue_target) as ro:
        assert isinstance(ro, ReadOnlyQueue) and isinstance(q, QueueReads) and isinstance(ro, QueueReads)
        for name in methods(contract.Reads) + methods(contract.Listings):
            assert getattr(ro, name).__self__ in (ro.engine.reads, ro.engine.listings), name
        assert ro.get(a).command == ["a"] and [j.id for j in ro.get_many([a, a + 100])] == [a]
        assert (ro.identity is not None) == (q.machines is not None)  # a shared queue's id is in its database


def test_the_settings_the_parts_share_change_in_place_for_new_jobs_and_backoffs(q, clock):
    """A reload sets them on the face; on PostgreSQL they used to stay with
    the parts as they were when the queue was opened."""
    q.lease_s, q.max_attempts, q.backoff_cap_s = 7, 2, 1
    job = q.get(q.enqueue(["x"]))
    assert (job.lease_s, job.max_attempts) == (7.0, 2)
    claimed = q.claim("w")
    failed = q.fail(claimed.id, claimed.token, message="exit 1")
    assert failed.state == "queued" and failed.not_before == pytest.approx(clock.now() + 1)  # 2 s uncapped


def test_get_many_reads_the_jobs_that_exist_by_id(q):
    a, b = q.enqueue(["a"]), q.enqueue(["b"])
    assert [j.id for j in q.get_many([b, 10_000, a, True])] == [a, b]
    assert q.get_many([]) == []


def _blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", LIBRARY_MD.read_text(), re.S)


def test_the_library_examples_run_as_written(queue_target, tmp_path, monkeypatch):
    """Every python block of docs/library.md, in order in one folder, as a
    reader would paste them (on PostgreSQL its "demo/queue.db" is the
    test's URL); what each ``print(...)  # shown`` prints is what it says."""
    monkeypatch.chdir(tmp_path)
    blocks = _blocks()
    assert len(blocks) >= 2
    for code in blocks:
        if not str(queue_target).endswith(".db"):
            code = code.replace('"demo/queue.db"', repr(str(queue_target)))
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(code, str(LIBRARY_MD), "exec"), {"__name__": "__doc_example__"})
        said = [c.strip() for line in code.splitlines() if line.lstrip().startswith("print(")
                for c in [line.split("#", 1)[1] if "#" in line else ""] if c]
        assert out.getvalue().splitlines() == said


def test_every_engine_part_names_the_protocol_it_keeps():
    """The same role has the same class name on both engines: SqliteX and PgX."""
    pkg = ROOT / "sloth_daemon" / "backends"
    kept: dict[str, set[str]] = {}
    for f in [*pkg.glob("sqlite/*.py"), *pkg.glob("postgres/*.py")]:
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.ClassDef):
                for base in node.bases:
                    if isinstance(base, ast.Attribute) and ast.unparse(base).startswith("contract."):
                        kept.setdefault(base.attr, set()).add(node.name)
    for role, names in kept.items():
        stems = {re.sub(r"^(Sqlite|Pg)", "", n) for n in names}
        assert len(stems) == 1 and all(re.match(r"(Sqlite|Pg)", n) for n in names), (role, names)
    assert {"Store", "Adds", "Claims", "Leases", "Requests", "Edits", "Meta", "Reads", "Listings",
            "ScheduleReads"} <= kept.keys()


# What reads the queue in the daemon is typed against the contract: no
# queue held as Any, no capability probed by name. The one exception: the
# CLI's read-only lanes (daemon/worker/lanes.py ReadLanes) take either face.
QUEUE_ANY_ALLOWED = {"daemon/worker/lanes.py:ReadLanes"}


def _queue_like(node: ast.AST) -> bool:
    text = ast.unparse(node)
    return text in ("q", "queue") or text.endswith(".queue") or text.endswith("_queue")


def test_the_daemon_holds_the_queue_typed_and_probes_no_capability_by_name():
    pkg = ROOT / "sloth_daemon"
    probes, untyped = [], []
    for f in sorted(pkg.rglob("*.py")):
        rel = f.relative_to(pkg).as_posix()
        if rel.startswith("backends/"):
            continue
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                    and node.func.id in ("getattr", "hasattr") and node.args and _queue_like(node.args[0]):
                probes.append(f"{rel}:{node.lineno}: {ast.unparse(node)}")
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for a in [*node.args.args, *node.args.kwonlyargs]:
                    if a.arg in ("queue", "q") and a.annotation is not None and ast.unparse(a.annotation) == "Any" \
                            and f"{rel}:{node.name}" not in QUEUE_ANY_ALLOWED and not rel.startswith("cli/"):
                        untyped.append(f"{rel}:{node.lineno}: {node.name}({a.arg}: Any)")
            if isinstance(node, ast.AnnAssign) and _queue_like(node.target) and ast.unparse(node.annotation) == "Any":
                untyped.append(f"{rel}:{node.lineno}: {ast.unparse(node)}")
    assert not probes, probes
    assert not untyped, untyped

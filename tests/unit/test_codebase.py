"""The shape of the code, checked rather than hoped (docs/architecture.md):
which part each module is in, who may import whom, no import cycles, no
classes assembled from mixins, and short functions.

Imports are read with ast from the source, every import statement counted
(lazy ones inside functions and those under ``if TYPE_CHECKING:`` too: a
type-level cycle is still a cycle for the reader).
"""

from __future__ import annotations

import ast
import statistics
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[2] / "sloth_daemon"

# The parts, each a subpackage named for what runs there; "top" is the few
# modules every part uses.
PARTS = ("cli", "daemon", "keeper", "backends", "service", "top")
MAX_TOP_MODULES = 12
# Who may import whom. The dependency direction points down:
# cli -> daemon (only to run it) -> keeper, backends -> top.
MAY_IMPORT = {
    "top": {"top"},
    "backends": {"top"},
    "keeper": {"top"},
    "service": {"top"},
    "daemon": {"top", "keeper", "backends", "service"},
    "cli": {"top", "backends", "service"},
}
# Single edges across those lines, each with its reason.
EXCEPTIONS = {
    # The library's face: Queue and open_queue are the backends'.
    ("queue", "backends"), ("queue", "backends.face"),
    # config names the queue a daemon opens (a path or a URL) and asks the
    # backends whether psycopg is there for a URL.
    ("config", "backends"),
    # `sloth daemon run` runs the daemon in the client's process.
    ("cli.daemon", "daemon.main"),
    # The launcher checks that the pid a lock names is still the daemon that
    # wrote it: process identity is the keeper's.
    ("cli.launcher", "keeper.procident"),
    # Reading a lane's settings with no daemon: the lanes' own rules.
    ("cli.offline", "daemon.worker.lanes"),
    # ... and a schedule's, as the daemon shows it (schedule ls/show with no daemon).
    ("cli.offline", "daemon.schedules.ops"),
    # ... and what a job's attempts handed on, as show and result answer it (issue 33).
    ("cli.offline", "daemon.worker.handing"),
    # ... and their arguments checked as the daemon checks them (batch_show with no daemon, issue 33).
    ("cli.offline", "daemon.request_args"),
    # `sloth doctor` says what applies keep-awake and limits on this machine:
    # the keeper's to know (it applies them).
    ("cli.doctor", "keeper.keep_awake"),
    ("cli.doctor", "keeper.resource_limits"),
}
# The core (the top modules and the queue library) knows nothing of
# transport, processes or the CLI.
FORBIDDEN_IN_CORE = {"socket", "asyncio", "subprocess", "select", "selectors", "psutil", "typer", "click",
                     "signal"}
# backends.postgres.db polls the database's own socket (psycopg's) with
# select(), to see without a round trip whether the server dropped an idle
# connection: talking to its storage is the queue's business.
CORE_MAY_USE = {"backends.postgres.db": {"select"}}
MAX_MEDIAN_FUNCTION_LINES = 8
MAX_P90_FUNCTION_LINES = 20


def _modules() -> dict[str, Path]:
    out = {}
    for f in sorted(PKG.rglob("*.py")):
        rel = f.relative_to(PKG).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts) or "__init__"] = f
    return out


MODULES = _modules()


def part(name: str) -> str:
    head = name.split(".")[0]
    return head if head in PARTS else "top"


def _imports(name: str) -> tuple[set[str], set[str]]:
    """(sloth_daemon modules, outside top-level packages) that module ``name`` imports."""
    path = MODULES[name]
    tree = ast.parse(path.read_text())
    pkg_parts = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    if name == "__init__":
        pkg_parts = []
    inside, outside = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("sloth_daemon"):
                    inside.add(a.name.removeprefix("sloth_daemon").lstrip(".") or "__init__")
                else:
                    outside.add(a.name.split(".")[0])
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0:
                if (node.module or "").startswith("sloth_daemon"):
                    base = node.module.removeprefix("sloth_daemon").lstrip(".")  # type: ignore[union-attr]
                    inside |= _resolve(base.split(".") if base else [], node)
                else:
                    outside.add((node.module or "").split(".")[0])
                continue
            base = pkg_parts[: len(pkg_parts) - (node.level - 1)] if node.level > 1 else list(pkg_parts)
            if node.module:
                base = base + node.module.split(".")
            inside |= _resolve(base, node)
    return inside, outside


def _resolve(base: list[str], node: ast.ImportFrom) -> set[str]:
    """``from X import a, b``: a and b are modules of X when they exist as such, else names in X."""
    out = set()
    for a in node.names:
        sub = ".".join(base + [a.name])
        out.add(sub if sub in MODULES else (".".join(base) or "__init__"))
    return out


def test_at_most_a_dozen_modules_stand_at_the_top():
    top = sorted(n for n in MODULES if "." not in n and n not in ("__init__", "__main__") and n not in PARTS)
    assert len(top) <= MAX_TOP_MODULES, top


def test_each_part_imports_only_what_lies_below_it():
    bad = []
    for name in MODULES:
        if name in ("__init__", "__main__"):
            continue
        for dep in _imports(name)[0]:
            if dep in ("__init__",) or part(dep) == part(name) or part(dep) in MAY_IMPORT[part(name)]:
                continue
            if (name, dep) not in EXCEPTIONS:
                bad.append(f"{name} -> {dep}")
    assert not bad, f"imports against the layering (docs/architecture.md): {sorted(bad)}"


# The two queue engines: each speaks only its own SQL, and what they decide
# alike is backends.rules's, so neither imports the other.
ENGINES = ("backends.sqlite", "backends.postgres")


def _within(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def test_neither_queue_engine_imports_the_other():
    bad = [f"{name} -> {dep}" for name in MODULES for dep in _imports(name)[0]
           for ours, theirs in (ENGINES, ENGINES[::-1]) if _within(name, ours) and _within(dep, theirs)]
    assert not bad, f"one queue engine imports the other (share it through backends.rules): {sorted(bad)}"


def test_every_exception_is_still_needed():
    used = {(n, d) for n in MODULES for d in _imports(n)[0]}
    assert EXCEPTIONS <= used, EXCEPTIONS - used


def test_the_core_imports_nothing_of_transport_processes_or_the_cli():
    bad = {}
    for name in MODULES:
        if part(name) not in ("top", "backends") or name in ("__init__", "__main__"):
            continue
        outside = _imports(name)[1]
        wrong = outside & (FORBIDDEN_IN_CORE - CORE_MAY_USE.get(name, set()))
        if wrong:
            bad[name] = sorted(wrong)
    assert not bad, f"core modules import transport or processes: {bad}"


def test_there_are_no_import_cycles():
    graph = {name: _imports(name)[0] - {name} for name in MODULES}
    # A package's __init__ importing its own submodules (to register or
    # re-export them) is not a cycle of the design; submodules importing the
    # package's shared parts is. Keep only edges that leave the package.
    for name, deps in graph.items():
        if MODULES[name].name == "__init__.py":
            graph[name] = {d for d in deps if not d.startswith(name + ".")}
    cycles = _cycles(graph)
    assert not cycles, f"import cycles: {cycles}"


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    found, state, stack = [], {}, []

    def visit(n: str) -> None:
        state[n] = 1
        stack.append(n)
        for m in sorted(graph.get(n, ())):
            if state.get(m) == 1:
                found.append(stack[stack.index(m):] + [m])
            elif m not in state:
                visit(m)
        stack.pop()
        state[n] = 2

    for n in sorted(graph):
        if n not in state:
            visit(n)
    return found


def function_lengths() -> list[tuple[int, str]]:
    """Lines of every function and method, from its `def` to its last line."""
    out = []
    for name, p in MODULES.items():
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                out.append(((node.end_lineno or node.lineno) - node.lineno + 1, f"{name}.{node.name}"))
    return sorted(out)


def test_functions_are_short():
    lengths = function_lengths()
    n = [x for x, _ in lengths]
    p90 = n[int(0.9 * len(n))]
    assert statistics.median(n) <= MAX_MEDIAN_FUNCTION_LINES, lengths[-10:]
    assert p90 <= MAX_P90_FUNCTION_LINES, lengths[-10:]


def test_no_class_is_assembled_from_two_or_more_of_ours():
    """Composition, not mixins (docs/architecture.md): a class owns its state
    and names its collaborators."""
    trees = {name: ast.parse(p.read_text()) for name, p in MODULES.items()}
    ours = {n.name for t in trees.values() for n in ast.walk(t) if isinstance(n, ast.ClassDef)}
    mixed = []
    for name, t in trees.items():
        for n in ast.walk(t):
            if isinstance(n, ast.ClassDef):
                bases = [ast.unparse(b).split("[")[0].split(".")[-1] for b in n.bases]
                if sum(b in ours for b in bases) >= 2:
                    mixed.append(f"{name}.{n.name}({', '.join(bases)})")
    assert not mixed, mixed


def test_the_light_state_names_are_the_models():
    """checks.STATE_NAMES and state_name (what `ls --state` reads, without
    importing models) say what models.JobState says."""
    from sloth_daemon import checks, models

    assert checks.STATE_NAMES == models.STATE_NAMES
    for s in (*models.STATE_NAMES, "claimed"):
        assert checks.state_name(s) == models.state_name(s)
    for bad in ("", "Done", "paused", "runnin"):
        with pytest.raises(ValueError):
            checks.state_name(bad)
        with pytest.raises(ValueError):
            models.state_name(bad)

"""The shape of the code, checked rather than hoped: the layering of the
core, no import cycles, module sizes and function lengths (issue 12).

Imports are read with ast from the source, every import statement counted
(lazy ones inside functions too), except those under ``if TYPE_CHECKING:``.
"""

from __future__ import annotations

import ast
import statistics
from pathlib import Path

PKG = Path(__file__).resolve().parents[2] / "sloth_daemon"

# The core knows nothing of transport, processes or the CLI.
CORE = {"errors", "models", "clock", "spec", "db", "queue", "backends", "backends.sqlite",
        "backends.sqlite_enqueue", "backends.sqlite_pick", "backends.sqlite_reads",
        "backends.postgres", "backends.pg_enqueue", "backends.pg_claim", "backends.pg_reads",
        "backends.pg_migrate", "backends.pgdb", "backends.pg_errors", "backends.pg_deps", "backends.pg_leases",
        "backends.pg_batch", "backends.pg_listing", "backends.pg_readonly", "backends.pg_identity", "durations",
        "backends.sqlite_batch", "backends.sqlite_deps", "backends.sqlite_listing", "backends.sqlite_readonly",
        "backends.sqlite_leases", "backends.sqlite_unit", "backends.pg_hosts", "backends.pg_logs", "text", "checks",
        "safefile", "masking",
        "jsonlite", "backends.sqlite_scan", "backends.pg_scan"}
FORBIDDEN_IN_CORE = {"socket", "asyncio", "subprocess", "select", "selectors", "psutil", "typer", "click",
                     "signal"}
# What one core module may use of those, and why. backends.pgdb polls the
# database's own socket (psycopg's) with select(), to see without a round
# trip whether the server dropped an idle connection: talking to its storage
# is the queue's business; our transport and processes are not.
CORE_MAY_USE = {"backends.pgdb": {"select"}}
MAX_MODULE_LINES = 420  # "~400"
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


def _type_checking_lines(tree: ast.AST) -> set[int]:
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for sub in node.body:
                lines.update(range(sub.lineno, (sub.end_lineno or sub.lineno) + 1))
    return lines


def _imports(name: str) -> tuple[set[str], set[str]]:
    """(sloth_daemon modules, outside top-level packages) that module ``name`` imports."""
    path = MODULES[name]
    tree = ast.parse(path.read_text())
    skip = _type_checking_lines(tree)
    pkg_parts = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    if name == "__init__":
        pkg_parts = []
    inside, outside = set(), set()
    for node in ast.walk(tree):
        if getattr(node, "lineno", None) in skip:
            continue
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


def test_the_core_imports_nothing_of_transport_processes_or_the_cli():
    bad = {}
    for name in CORE:
        inside, outside = _imports(name)
        wrong = (outside & (FORBIDDEN_IN_CORE - CORE_MAY_USE.get(name, set()))) | {m for m in inside if m not in CORE}
        if wrong:
            bad[name] = sorted(wrong)
    assert not bad, f"core modules import outside the core: {bad}"


def test_the_core_list_names_real_modules():
    assert CORE <= set(MODULES)


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


def test_no_module_is_much_over_four_hundred_lines():
    sizes = {name: len(p.read_text().splitlines()) for name, p in MODULES.items()}
    big = {n: s for n, s in sizes.items() if s > MAX_MODULE_LINES}
    assert not big, f"split these modules: {big}"


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

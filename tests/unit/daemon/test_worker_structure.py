"""The worker's shape (issue 29): objects built whole by the composition
root, a run's stage changed only by its own moves, a loop that stays small."""

from __future__ import annotations

import ast
from pathlib import Path

import sloth_daemon

PKG = Path(sloth_daemon.__file__).parent
WORKER = PKG / "daemon" / "worker"

# Set from outside after construction: Control's settings, replaced by a
# reload (a new value, not wiring). The queue's on_side_change is the
# composition root's one registration.
KNOWN = {("main.py", "queue.on_side_change"),
         ("main.py", "self.control.settings"),
         ("member.py", "self.m.me")}  # Shared's own machine row, refreshed


def _assigned_attributes(path: Path) -> list[str]:
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        targets = node.targets if isinstance(node, ast.Assign) else \
            [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else []
        for t in targets:
            for el in (t.elts if isinstance(t, ast.Tuple) else [t]):
                if isinstance(el, ast.Attribute) and not (isinstance(el.value, ast.Name) and el.value.id == "self"):
                    out.append(ast.unparse(el))
    return out


def test_the_composition_root_sets_nothing_on_what_it_built():
    files = [PKG / "daemon" / "main.py", *sorted((PKG / "daemon" / "shared").glob("*.py"))]
    found = {(p.name, a) for p in files for a in _assigned_attributes(p)}
    assert found - KNOWN == set()


def test_the_worker_sets_nothing_on_its_queue():
    assert [a for a in _assigned_attributes(WORKER / "loop.py") if a.startswith(("queue.", "self.queue."))
            and not a.endswith(("lease_s", "max_attempts", "backoff_cap_s"))] == []


def test_a_runs_stage_is_changed_only_by_its_moves():
    """``stage`` is assigned in lifecycle.py's Attempt._move and nowhere else."""
    for path in sorted(WORKER.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Assign):
                names = [ast.unparse(t) for t in node.targets]
                if any(n.endswith(".stage") for n in names):
                    assert (path.name, names) == ("lifecycle.py", ["self.stage"])


def test_the_worker_loop_stays_small():
    src = (WORKER / "loop.py").read_text()
    worker = next(n for n in ast.parse(src).body if isinstance(n, ast.ClassDef) and n.name == "Worker")
    methods = [n for n in worker.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    assert len(src.splitlines()) <= 380 and len(methods) <= 30  # main: 663 lines, 55 methods

"""Issue 29, item 6: one meaning per class name across sloth_daemon/. A
class name defined in two modules reads as one thing in two places; the
same role in each queue engine (backends/sqlite/X.py and
backends/postgres/X.py) is one meaning, and allowed. Any other repeat must
be renamed, or listed here with why, and the list should end empty."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2] / "sloth_daemon"
ENGINES = ("backends/sqlite/", "backends/postgres/")
# name: the modules that define it, left to their owners this round (issue 29).
NOT_YET = {
    "Plan": {"backends/edits.py", "daemon/schedules/policy.py"},  # an edit's plan; a schedule's next run
}


def _classes() -> dict[str, set[str]]:
    found: dict[str, set[str]] = defaultdict(set)
    for f in sorted(ROOT.rglob("*.py")):
        for node in ast.walk(ast.parse(f.read_text(), str(f))):
            if isinstance(node, ast.ClassDef):
                found[node.name].add(f.relative_to(ROOT).as_posix())
    return found


def _one_role_in_each_engine(paths: set[str]) -> bool:
    """The same module of each engine: backends/postgres/X.py and backends/sqlite/X.py."""
    if len(paths) != 2:
        return False
    pg, lite = sorted(paths)
    return pg.startswith(ENGINES[1]) and lite.startswith(ENGINES[0]) and pg[len(ENGINES[1]):] == lite[len(ENGINES[0]):]


def test_no_class_name_means_two_things():
    repeated = {name: paths for name, paths in _classes().items()
                if len(paths) > 1 and not _one_role_in_each_engine(paths)}
    assert {n: p for n, p in repeated.items() if NOT_YET.get(n) != p} == {}


def test_the_list_of_names_not_yet_renamed_holds_only_repeats():
    classes = _classes()
    stale = {n for n, paths in NOT_YET.items() if classes.get(n) != paths or len(paths) < 2}
    assert not stale, f"renamed meanwhile: take {sorted(stale)} off NOT_YET"

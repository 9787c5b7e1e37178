"""What `pip install .` ships: every package of sloth_daemon is in the
wheel. pyproject.toml lists the packages by hand (service/ is shipped as
the data package sloth_daemon.service_templates), and a package left off
that list is missing only from a normal install: the editable install the
tests run in finds it in the tree, so nothing else would notice (the
daemon of a `pip install .` failed at its start with "No module named
'sloth_daemon.daemon.telling'")."""

from __future__ import annotations

import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - 3.10
    import tomli as tomllib  # type: ignore[import-not-found,no-redef,unused-ignore]

ROOT = Path(__file__).resolve().parents[2]


def test_every_package_of_the_tree_is_listed_for_the_wheel() -> None:
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    on_disk = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "sloth_daemon").rglob("__init__.py")}
    assert on_disk - listed == set(), "packages pip install . would leave out: add them to pyproject.toml"
    assert listed - on_disk == {"sloth_daemon.service_templates"}

"""Layers that only forward, counted (issue 29): a method whose body, after
an optional docstring, is one call ``self.a.b(...)`` (returned or not)
passing its own parameters (or fields of its own) through, and nothing else, is a hop a reader
must follow to find the object that does the work. Call that object
instead. The count is held at or under CEILING; lower it as forwards go.
"""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

PKG = Path(__file__).resolve().parents[2] / "sloth_daemon"
CEILING = 10  # issue 29: 120 before it (SqliteQueue 52, its read-only view 16, Control 17, Worker 12); 10 after its merge


def _params(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> set[str]:
    a = fn.args
    names = {x.arg for x in [*a.posonlyargs, *a.args, *a.kwonlyargs]}
    names |= {x.arg for x in (a.vararg, a.kwarg) if x is not None}
    return names - {"self"}


def _passes_through(call: ast.Call, params: set[str]) -> bool:
    """Each argument is one of the method's parameters, or a field of its
    own (``self.run``: what a per-object relay adds is not work)."""
    values = [*call.args, *(k.value for k in call.keywords)]
    values = [v.value if isinstance(v, ast.Starred) else v for v in values]
    return all((isinstance(v, ast.Name) and v.id in params)
               or (isinstance(v, ast.Attribute) and isinstance(v.value, ast.Name) and v.value.id == "self")
               for v in values)


def is_forward(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    body = fn.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
            and isinstance(body[0].value.value, str):
        body = body[1:]
    if len(body) != 1 or not isinstance(body[0], (ast.Return, ast.Expr)) or body[0].value is None:
        return False
    call = body[0].value
    if isinstance(call, ast.Await):
        call = call.value
    if not isinstance(call, ast.Call):
        return False
    f = call.func  # self.a.b
    return (isinstance(f, ast.Attribute) and isinstance(f.value, ast.Attribute)
            and isinstance(f.value.value, ast.Name) and f.value.value.id == "self"
            and _passes_through(call, _params(fn)))


def forwards(root: Path = PKG) -> Counter[str]:
    """module:Class -> how many of its methods only forward."""
    out: Counter[str] = Counter()
    for f in sorted(root.rglob("*.py")):
        for cls in ast.walk(ast.parse(f.read_text())):
            if isinstance(cls, ast.ClassDef):
                for fn in cls.body:
                    if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) and is_forward(fn):
                        out[f"{f.relative_to(root).with_suffix('')}:{cls.name}"] += 1
    return out


def test_the_forwarding_methods_stay_under_the_ceiling():
    counts = forwards()
    total = sum(counts.values())
    listing = "\n".join(f"{n:3d} {name}" for name, n in counts.most_common())
    assert total <= CEILING, f"{total} one-line forwarding methods (ceiling {CEILING}):\n{listing}"


def test_the_count_sees_a_forward_and_nothing_else():
    src = '''
class A:
    def fwd(self, x, *, y=1):
        """docstring"""
        return self.b.c(x, y=y)
    def also(self, *a, **kw):
        self.b.c(*a, **kw)
    def adds(self, x):
        return self.b.c(x, 1)
    def two(self, x):
        self.b.c(x)
        return x
    def relay(self, x):
        self.w.on_c(self.run, x)
    def near(self, x):
        return self.c(x)
    def other(self, x):
        return other.b.c(x)
'''
    cls = ast.parse(src).body[0]
    assert [fn.name for fn in cls.body if is_forward(fn)] == ["fwd", "also", "relay"]

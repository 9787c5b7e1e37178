"""The request families made at their first request (handlers.LAZY): each
names exactly the ops its family's table answers, so no op is missing
before the first request or answered by a stale stub after it. That each
works the first time through a real daemon after its rest:
tests/acceptance/test_renewal.py."""

from __future__ import annotations

import importlib
import inspect

from sloth_daemon.daemon.handlers import LAZY


def test_each_lazy_family_names_exactly_its_tables_ops():
    for module, cls, names in LAZY.values():
        family_cls = getattr(importlib.import_module(module), cls)
        arity = len(inspect.signature(family_cls).parameters)
        family = family_cls(*[None] * arity)
        assert sorted(family.table(lambda op: op)) == sorted(names), (module, cls)

"""How the suite is shared between pytest-xdist's workers (README: `pytest -q -n 4`).

Each test is sent alone, as ``--dist load`` sends them, except the tests of
a file that defines a module- or class-scoped fixture (one chaos soak whose
results several tests read, the README's blocks run in order in one HOME,
one network of machines): those go to one worker together, in their order,
so the fixture is made once and the order holds. (xdist's own
``--dist loadgroup`` does this for tests marked ``xdist_group``, but with
pytest 9 its marks no longer reach the scheduler.) Units of several tests
are sent first, then single tests in collection order, where
tests/conftest.py puts the slow ones first: no long test is left for the end.
"""

from __future__ import annotations

import re
from typing import Any

from xdist.scheduler import LoadScopeScheduling

SHARED_FIXTURE = re.compile(r"""scope\s*=\s*["'](module|class|package)["']""")


class Together(LoadScopeScheduling):
    def __init__(self, config: Any, log: Any = None) -> None:
        super().__init__(config, log)
        self.root = config.rootpath
        self.shares: dict[str, bool] = {}  # test file -> has a module/class-scoped fixture

    def _split_scope(self, nodeid: str) -> str:
        file = nodeid.split("::", 1)[0]
        if file not in self.shares:
            try:
                self.shares[file] = bool(SHARED_FIXTURE.search((self.root / file).read_text()))
            except OSError:
                self.shares[file] = False
        return file if self.shares[file] else nodeid

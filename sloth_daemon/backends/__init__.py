"""Queue backends: one module per storage engine behind one contract.

``sqlite`` is the embedded default (one file in the data dir). Each backend
module is the only place that speaks its SQL; the contract tests run against
every backend. :func:`open_queue` picks one from a path or a URL.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..clock import Clock
    from .sqlite import SqliteQueue


def open_queue(target: str | os.PathLike[str], clock: "Clock | None" = None, **defaults: Any) -> "SqliteQueue":
    """Open the queue at ``target``: a filesystem path (SQLite, created with
    its folder if missing). ``defaults`` are lease_s, max_attempts and
    backoff_cap_s for jobs that do not set their own."""
    from .sqlite import SqliteQueue

    return SqliteQueue(target, clock, **defaults)

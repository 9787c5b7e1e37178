"""Queue backends: one module per storage engine behind one contract.

``sqlite`` is the embedded default (one file in the data dir). Each backend
module is the only place that speaks its SQL; the contract tests run against
every backend. :func:`open_queue` picks one from a path or a URL.

What schema v4 (issue 9) added to the contract, for a backend to port (each
method's docstring in the sqlite modules says its transitions and errors;
tests/unit/test_queue_daily.py is their contract test):

* states ``blocked`` (waits for prerequisites; in no claim index) and
  ``running`` (was ``claimed``); ``counts()`` names all six;
* ``enqueue_many`` specs with ``after``/``after_any``/``after_previous`` and
  ``retry_exit``/``no_retry_exit``; every transition that ends a job settles
  its blocked dependents in the same transaction and reports them, after the
  commit, to ``on_side_change``; ``retry`` may go back to ``blocked``;
* ``cancel_many``, ``retry_many``, ``restart``, ``prune(states=, lane=,
  dry_run=)``: one transaction each, returning ``models.Batch``;
* reads: ``listing`` (``models.Listing``), ``running`` (``claimed`` is an
  alias), ``prereqs``, ``dependents``, ``lane_counts``, ``lane_busy``,
  ``lane_rows``; lanes table writes ``set_lane``, ``forget_lane``.
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

"""Queue backends: one module per storage engine behind one contract.

``sqlite`` is the embedded default (one file in the data dir); ``postgres``
is one queue shared by the daemons of several machines. Each backend module
is the only place that speaks its SQL; the contract tests run against every
backend. :func:`open_queue` picks one from a path or a URL.

What SQLite schema v5 (issue 9) added to the contract, for a backend to port (each
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
from typing import TYPE_CHECKING, Any, Union

if TYPE_CHECKING:
    from ..clock import Clock
    from .postgres import PgQueue
    from .sqlite import SqliteQueue

URL_SCHEMES = ("postgresql://", "postgres://")


def is_url(target: str | os.PathLike[str]) -> bool:
    """True for a PostgreSQL URL (``postgresql://`` or ``postgres://``)."""
    return isinstance(target, str) and target.lower().startswith(URL_SCHEMES)


def open_queue(target: str | os.PathLike[str], clock: "Clock | None" = None,
               **defaults: Any) -> "Union[SqliteQueue, PgQueue]":
    """Open the queue at ``target``:

    * a filesystem path: the SQLite queue in that file (created with its
      folder if missing);
    * a ``postgresql://`` or ``postgres://`` URL (libpq's syntax, e.g.
      ``postgresql://me@db.lan/sloth``): the queue on that PostgreSQL
      database, its schema migrated if needed. Needs psycopg 3
      (``pip install 'slothqueue[postgres]'``), imported only here, so
      SQLite users never load it.

    ``defaults`` are lease_s, max_attempts and backoff_cap_s for jobs that do
    not set their own (PgQueue also takes migrate= and options=). ``clock``
    is for tests: on PostgreSQL every time comes from the server's clock
    unless a test clock is given.
    """
    if is_url(target):
        try:
            from .postgres import PgQueue
        except ImportError as e:
            from ..errors import StorageError

            raise StorageError(
                f"a PostgreSQL queue needs psycopg 3, which is not installed ({e})",
                hint="pip install 'slothqueue[postgres]' (or psycopg[binary]) into sloth's environment.",
            ) from e
        return PgQueue(str(target), clock, **defaults)
    from .sqlite import SqliteQueue

    return SqliteQueue(target, clock, **defaults)

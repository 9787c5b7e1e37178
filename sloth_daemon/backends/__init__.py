"""Queue backends: one contract, two engines, one face.

``contract.py`` declares what the queue does, once: a typed Protocol per
concern, each method's transitions and errors in its docstring there, and
the optional parts only a shared queue has (``machines``, ``logs``) typed
``X | None``. ``sqlite/`` is the embedded default (one file in the data
dir) and ``postgres/`` one queue shared by the daemons of several machines;
each ``engine.py`` builds the parts that keep the contract over its storage
(the same role named alike: ``SqliteLeases``, ``PgLeases``), and is the only
place that speaks its SQL. ``face.py`` is the public ``Queue`` written once
over an engine (``sloth_daemon.queue.Queue``), and ``ReadOnlyQueue``, the
same reads over a read-only engine. What both engines decide alike (no SQL)
is ``rules.py``'s, ``edits.py``'s and ``schedule_rules.py``'s; the contract
tests (tests/unit/backends/) run against both.

Beyond enqueue/claim/heartbeat/complete/fail/release/cancel/retry, the
contract keeps:

* states ``blocked`` (waits for prerequisites; in no claim index), ``held``
  and ``running`` (was ``claimed``); ``counts()`` names them all;
* ``enqueue_many`` specs with ``after``/``after_any``/``after_previous`` and
  ``retry_exit``/``no_retry_exit``, and ``batch=TOKEN`` recorded in the same
  transaction (``batch_ids``); every transition that ends a job settles
  its blocked dependents in the same transaction and reports them, after the
  commit, to ``on_side_change``; ``retry`` may go back to ``blocked``;
* runs and tries: ``attempts`` counts runs, ``tries`` what counts against
  ``max_attempts``; ``release(delay_s=)``, ``abandon(refund=)``, ``adopt``,
  ``unclaim``; outcomes with ``ended_at``, ``runner``, ``durable``;
  ``unit()``, ``flush()``, ``sync()``;
* ``cancel_many``, ``retry_many``, ``restart``, ``prune(states=, lane=,
  dry_run=)``, ``edit``, ``bump``, ``hold``/``unhold``: one transaction each;
* reads: ``listing`` (``models.Listing``), ``running`` (``claimed`` is an
  alias), ``get_many``, ``prereqs``, ``dependents``, ``lane_counts``,
  ``lane_busy``, ``lane_rows``; lanes table writes ``set_lane``,
  ``forget_lane``;
* ``identity`` (a random id made with the queue), ``check()`` and
  ``broken`` (the storage changed under the open queue); paths stored as
  bytes; a read-only view for when no daemon answers (:func:`open_read_only`),
  whose ``scan`` reads a listing of any size a chunk at a time (sqlite/scan.py,
  postgres/scan.py: the daemon's ``ls --json`` too, on a view of its own).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sloth_daemon.backends.face import Queue, ReadOnlyQueue
    from sloth_daemon.clock import Clock

URL_SCHEMES = ("postgresql://", "postgres://")


def is_url(target: str | os.PathLike[str]) -> bool:
    """True for a PostgreSQL URL (``postgresql://`` or ``postgres://``)."""
    return isinstance(target, str) and target.lower().startswith(URL_SCHEMES)


def open_queue(target: str | os.PathLike[str], clock: "Clock | None" = None, **options: Any) -> "Queue":
    """Open the queue at ``target``:

    * a filesystem path: the SQLite queue in that file (created with its
      folder if missing);
    * a ``postgresql://`` or ``postgres://`` URL (libpq's syntax, e.g.
      ``postgresql://me@db.lan/sloth``): the queue on that PostgreSQL
      database, its schema migrated if needed. Needs psycopg 3
      (``pip install 'slothqueue[postgres]'``), imported only here, so
      SQLite users never load it.

    ``options`` are lease_s, max_attempts and backoff_cap_s for jobs that do
    not set their own, lock_wait_s (and on PostgreSQL migrate= and
    options=). ``clock`` is for tests: on PostgreSQL every time comes from
    the server's clock unless a test clock is given.
    """
    if is_url(target):
        require_psycopg()
    from sloth_daemon.backends.face import Queue

    return Queue(target, clock, **options)


def open_read_only(target: str | os.PathLike[str], *, quick: bool = False) -> "ReadOnlyQueue":
    """The queue at ``target`` (a path or a URL, as for open_queue) opened to
    read only, for the CLI when no daemon answers: it never creates,
    migrates or writes anything. ``quick``: a PostgreSQL server gets one
    try of libpq's shortest connect timeout (2 s), no reconnecting (for
    `sloth config`, which shows the settings whether or not it answers).
    Raises FileNotFoundError (no SQLite file there) or StorageError
    (unreachable, or not this sloth's schema)."""
    from sloth_daemon.backends.face import ReadOnlyQueue

    if is_url(target):
        require_psycopg()
        from sloth_daemon.backends.postgres import engine as pg

        return ReadOnlyQueue(pg.open_read_engine(str(target), pg.QUICK if quick else None))
    from sloth_daemon.backends.sqlite import engine as sqlite

    return ReadOnlyQueue(sqlite.open_read_engine(target))


def require_psycopg() -> None:
    """StorageError saying how to install psycopg unless it imports: every
    way to a queue URL (config.queue_target) asks this first, so a daemon,
    `sloth db` or a read without the daemon never fails deeper, on an import."""
    try:
        import psycopg  # noqa: F401
    except ImportError as e:
        raise _no_psycopg(e) from e


def _no_psycopg(e: ImportError) -> Exception:
    from sloth_daemon.errors import StorageError

    return StorageError(
        f"a PostgreSQL queue needs psycopg 3, which is not installed ({e})",
        hint="pip install 'slothqueue[postgres]' (or psycopg[binary]) into sloth's environment.",
    )

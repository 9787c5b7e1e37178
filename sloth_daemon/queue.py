"""The lease queue, as the daemon and library users see it.

``Queue`` is the embedded SQLite queue (``Queue(path, clock=None)``);
``open_queue(target)`` opens a queue from a path or a URL. The SQL lives in
the backend modules under ``backends/``.
"""

from sloth_daemon.backends import open_queue
from sloth_daemon.backends.sqlite.queue import SqliteQueue as Queue

__all__ = ["Queue", "open_queue"]

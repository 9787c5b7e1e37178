"""The lease queue, as the daemon and library users see it (docs/library.md).

``Queue(target, clock=None, **options)`` opens the queue at a path (one
SQLite file) or a ``postgresql://`` URL; ``open_queue(target)`` is the same.
The contract is declared once in backends/contract.py, the face written once
in backends/face.py over an engine (backends/sqlite/, backends/postgres/).
"""

from sloth_daemon.backends import open_queue
from sloth_daemon.backends.face import Queue

__all__ = ["Queue", "open_queue"]

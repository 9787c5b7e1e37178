"""The lease queue on one SQLite file.

``queue.SqliteQueue`` is the face (``sloth_daemon.queue.Queue``): it is
composed of the objects below and hands each call to the one that owns its
SQL. ``readonly.SqliteReadOnly`` composes the same readers over a read-only
connection.

- unit.py: ``SqliteStore``, the connection and its unit of work (the one
  transaction helper, the unit of a worker's turn, the dependents a
  transaction settled, told after the commit, the broken-file guard);
- reads.py: ``JobRows`` (a row as a Job) and ``SqliteReads``; listing.py:
  ``SqliteListings`` (what ``sloth ls`` shows); scan.py: a listing read a
  chunk at a time;
- enqueue.py: ``SqliteAdds`` (adding jobs, batch records);
- leases.py: ``SqliteLeases`` (claims and their holders); pick.py: what a
  claim picks; ends.py: ``SqliteEnds`` (a job's end); deps.py: what an end
  does to the jobs waiting for it;
- batch.py: ``SqliteRequests`` (the user's cancel, retry, restart, prune);
- meta.py: ``SqliteSettings`` (the queue's identity, settings, lanes);
- db.py: connecting, migrating, the transaction itself; identity.py: which
  queue a folder holds.
"""

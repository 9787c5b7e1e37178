"""The lease queue on one SQLite file.

``engine.py`` builds the parts below, each keeping one Protocol of the
contract (backends/contract.py), for the face (backends/face.py:
``sloth_daemon.queue.Queue``); ``open_read_engine`` the same readers over a
read-only connection.

- unit.py: ``SqliteStore``, the connection and its unit of work (the one
  transaction helper, the unit of a worker's turn, the dependents a
  transaction settled, told after the commit, the broken-file guard);
- reads.py: ``JobRows`` (a row as a Job) and ``SqliteReads``; listing.py:
  ``SqliteListings`` (what ``sloth ls`` shows); scan.py: a listing read a
  chunk at a time;
- enqueue.py: ``SqliteAdds`` (adding jobs, batch records);
- claim.py: ``SqliteClaims``; pick.py: what a claim picks; leases.py:
  ``SqliteLeases`` (what a lease's holder does); ends.py: ``SqliteEnds`` (a job's end); deps.py: what an end
  does to the jobs waiting for it;
- batch.py: ``SqliteRequests`` (the user's cancel, retry, restart, prune);
- edits.py: ``SqliteEdits``; schedules.py: ``SqliteSchedules``;
- meta.py: ``SqliteMeta`` (the queue's identity, settings, lanes);
- db.py: connecting, migrating, the transaction itself; identity.py: which
  queue a folder holds.
"""

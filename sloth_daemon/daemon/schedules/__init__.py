"""Schedules: named, persistent recipes that queue ordinary jobs.

* recipe.py: a schedule as asked for, validated (every or cron, time zone,
  --missed, --overlap, --jitter, the job);
* slots.py: when its slots fall (intervals in wall time; cron in a zone,
  across DST: a local time that does not exist fires once at the first
  valid instant after it, one that exists twice fires once);
* policy.py: what to do when slots are due (missed runs, overlap, jitter),
  pure functions of the recipe, its progress and now;
* scheduler.py: what the daemon composes: the schedules it knows, one timer
  for the earliest slot, each firing written with its jobs in one
  transaction (backends/schedule_rules.py);
* ops.py: the socket's schedule_* ops, checked.

Only the daemon imports this package (cronsim with it): `sloth add` never.
"""

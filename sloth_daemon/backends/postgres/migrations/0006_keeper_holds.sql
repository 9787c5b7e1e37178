-- sloth queue on PostgreSQL: what the keeper holds for a run's whole life
-- (issue 24), as SQLite's migration 6 -> 7. Never edit a released file; add
-- the next number instead.
--
-- * keep_awake: the job's run holds a sleep inhibitor while it runs.
-- * limits: resource limits as JSON ({"mem": bytes, "cpus": 1.5, "nice": 10,
--   "io": "idle"}); NULL: none.
-- * paused_run: the token of the run paused on request (`sloth pause --job`):
--   the job is paused while it still holds that token, so a new claim is
--   never paused by an old run's flag.

ALTER TABLE sloth.jobs ADD COLUMN keep_awake boolean NOT NULL DEFAULT false;
ALTER TABLE sloth.jobs ADD COLUMN limits text;
ALTER TABLE sloth.jobs ADD COLUMN paused_run text;

-- sloth queue on PostgreSQL, schema v2 (SQLite schema v4 made the same change).
-- attempts count runs: never decremented or reset, so every run has its own
-- log. tries are the runs that count against max_attempts (an interruption,
-- a fence or a crash of sloth gives one back); refunds bound how many
-- crashes of sloth a job is forgiven between user retries.
ALTER TABLE sloth.jobs ADD COLUMN tries bigint NOT NULL DEFAULT 0;
ALTER TABLE sloth.jobs ADD COLUMN refunds bigint NOT NULL DEFAULT 0;
UPDATE sloth.jobs SET tries = attempts;

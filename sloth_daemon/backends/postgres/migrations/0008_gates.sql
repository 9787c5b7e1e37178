-- sloth queue on PostgreSQL: gates (issue 24), as SQLite's migration 6 -> 7.
--
-- * gate: a job's run conditions, named resources and lane slots, one
--   canonical JSON text (checks.gate_json); NULL for a job without any. A
--   queued job with a gate is out of the claim indexes (jobs_ready,
--   jobs_due, jobs_placed, jobs_placed_due now hold gate IS NULL only), so
--   jobs waiting for mains power cost a claim nothing; jobs_gated groups
--   them by gate, so a daemon looks at one head per (gate, lane) against
--   what holds on its own machine (resources are each machine's own).
-- * tokens: the resource tokens the current run took (JSON), kept with the
--   run: a daemon restarted under a keeper that still runs it finds them held.
-- * wait_reason: why a gated queued job does not start ("waiting for mains power").

ALTER TABLE sloth.jobs ADD COLUMN gate text COLLATE "C";
ALTER TABLE sloth.jobs ADD COLUMN tokens text;
ALTER TABLE sloth.jobs ADD COLUMN wait_reason text;

DROP INDEX sloth.jobs_ready;
DROP INDEX sloth.jobs_due;
DROP INDEX sloth.jobs_placed;
DROP INDEX sloth.jobs_placed_due;
CREATE INDEX jobs_ready      ON sloth.jobs (lane, priority DESC, not_before, id) WHERE state = 'queued' AND gate IS NULL;
CREATE INDEX jobs_due        ON sloth.jobs (lane, not_before) WHERE state = 'queued' AND gate IS NULL;
CREATE INDEX jobs_placed     ON sloth.jobs (lane, place, priority DESC, not_before, id)
    WHERE state = 'queued' AND gate IS NULL;
CREATE INDEX jobs_placed_due ON sloth.jobs (lane, place, not_before) WHERE state = 'queued' AND gate IS NULL;
CREATE INDEX jobs_gated      ON sloth.jobs (gate, lane, priority DESC, not_before, id)
    WHERE state = 'queued' AND gate IS NOT NULL;

-- sloth queue on PostgreSQL: where a job was queued from (issue 28 #14).
--
-- * origin: the name of the daemon (a user on a machine: hosts.name) whose
--   connection inserted the job. Each daemon's connections carry it as the
--   setting sloth.origin (db.PgOptions.origin), so every way a job is made
--   (add, restart, a schedule's firing) records it without naming it; NULL
--   for a job made before this migration or by a connection without it
--   (`sloth db`, a library user). `sloth wait`, `logs` and `show` with no id
--   mean the latest job of this machine's (jobs_origin seeks it).

ALTER TABLE sloth.jobs ADD COLUMN origin text COLLATE "C"
    DEFAULT nullif(current_setting('sloth.origin', true), '');
CREATE INDEX jobs_origin ON sloth.jobs (origin, id) WHERE origin IS NOT NULL;

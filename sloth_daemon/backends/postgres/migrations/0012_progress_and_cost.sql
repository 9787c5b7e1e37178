-- sloth queue on PostgreSQL: progress and what each run cost (issue 31,
-- docs/progress.md); SQLite's 10 -> 11 makes the same change.
--
-- * progress: the running attempt's latest value as it says it (JSON text
--   with the attempt it belongs to: a new attempt never shows the last
--   one's), the latest only, written at most once a second a run, its
--   commit not waiting for the disk.
-- * attempts: one row per run that ended, what the keeper measured (its
--   cgroup or the reaped root's rusage: covers), written with its outcome;
--   gone with its job.

ALTER TABLE sloth.jobs ADD COLUMN progress text;

CREATE TABLE sloth.attempts (
    job_id         bigint           NOT NULL REFERENCES sloth.jobs (id) ON DELETE CASCADE,
    attempt        bigint           NOT NULL,
    cpu_s          double precision NOT NULL,  -- user + system
    peak_rss_bytes bigint           NOT NULL,
    wall_s         double precision NOT NULL,
    ended          text             NOT NULL,  -- how it ended: "exit 0", "exceeded --mem 100M" ...
    covers         text             NOT NULL,  -- 'cgroup' or 'rusage' (keeper/cost.py)
    PRIMARY KEY (job_id, attempt)
);

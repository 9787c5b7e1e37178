-- sloth queue on PostgreSQL: watchdogs, retry rules and results (issue 33
-- items 5 and 3), as SQLite's migration that adds them. Never edit a
-- released file; add the next number instead.
--
-- * rules: the job's --stall, --fail-on, --retry-on/--no-retry-on and
--   --backoff as JSON (checks.rules_json); NULL: none.
-- * results: the JSON an attempt wrote to $SLOTH_RESULT (at most
--   keeper/results.py's cap), kept with its attempt and written in the
--   transaction that records the attempt's end, so a dependent claimed
--   after that end always finds it.

ALTER TABLE sloth.jobs ADD COLUMN rules text;
CREATE TABLE sloth.results (
    job_id  bigint           NOT NULL REFERENCES sloth.jobs (id) ON DELETE CASCADE,
    attempt bigint           NOT NULL,
    data    text             NOT NULL,
    at      double precision NOT NULL,
    PRIMARY KEY (job_id, attempt)
);

-- sloth queue on PostgreSQL, schema v5: held jobs (issue 22: `sloth hold`,
-- `sloth release`, `add --hold`), as SQLite's migration 6 -> 7. Applied in
-- one transaction under the migration advisory lock (pg_migrate.py). Never
-- edit a released file; add the next number instead.
--
-- * A 'held' state: kept from being claimed until released. Like a blocked
--   row, a held one is in no claim index (jobs_ready, jobs_due, jobs_lease
--   and jobs_placed* are partial on other states), so holding costs a
--   claim nothing; jobs_held finds a lane's held jobs in the order they
--   would run (bump, lane counts). Its key stays taken.
-- * sloth.settle: a held dependent whose prerequisite did not end as it
--   needed is cancelled, as a blocked one is; one with nothing left to wait
--   for stays held (its release queues it); a held prerequisite counts as
--   unfinished.

ALTER TABLE sloth.jobs DROP CONSTRAINT jobs_state_check;
ALTER TABLE sloth.jobs ADD CONSTRAINT jobs_state_check
    CHECK (state IN ('blocked', 'queued', 'held', 'running', 'done', 'failed', 'cancelled'));
DROP INDEX sloth.jobs_active_key;
CREATE UNIQUE INDEX jobs_active_key ON sloth.jobs (key)
    WHERE key IS NOT NULL AND state IN ('blocked', 'held', 'queued', 'running');
CREATE INDEX jobs_held ON sloth.jobs (lane, priority DESC, not_before, id) WHERE state = 'held';

CREATE OR REPLACE FUNCTION sloth.settle(ended_id bigint, ended_state text) RETURNS SETOF sloth.jobs
LANGUAGE plpgsql VOLATILE SET plan_cache_mode = force_generic_plan SET enable_seqscan = off AS $$
DECLARE
    ids     bigint[] := ARRAY[ended_id];
    states  text[]   := ARRAY[ended_state];
    waiting bigint[];
    gone    bigint[];
BEGIN
    LOOP
        SELECT coalesce(array_agg(DISTINCT job_id), '{}') INTO waiting
          FROM sloth.deps WHERE after_id = ANY(ids);
        EXIT WHEN cardinality(waiting) = 0;
        PERFORM 1 FROM sloth.jobs WHERE id = ANY(waiting) AND (state IN ('blocked', 'held')) IS TRUE
         ORDER BY id FOR UPDATE;
        WITH cause AS (
            SELECT DISTINCT ON (d.job_id) d.job_id, e.id AS pid, e.state AS pstate
              FROM unnest(ids, states) AS e(id, state) JOIN sloth.deps d ON d.after_id = e.id
             WHERE d.after_id = ANY(ids) AND e.state <> 'done' AND d.need = 'done'
             ORDER BY d.job_id, e.id
        ), gone_rows AS (
            UPDATE sloth.jobs j SET state = 'cancelled', finished_at = sloth.now(), updated_at = sloth.now(),
                   message = format('not run: job %s, which it runs after, %s', c.pid, sloth.ended(c.pstate))
              FROM cause c WHERE j.id = ANY(waiting) AND j.id = c.job_id AND (j.state IN ('blocked', 'held')) IS TRUE
            RETURNING j.id, j.message
        ), ev AS (
            INSERT INTO sloth.events (job_id, at, kind, attempt, message)
            SELECT id, sloth.now(), 'cancelled', 0, message FROM gone_rows
        )
        SELECT coalesce(array_agg(id ORDER BY id), '{}') INTO gone FROM gone_rows;
        RETURN QUERY SELECT * FROM sloth.jobs WHERE id = ANY(gone) ORDER BY id;
        RETURN QUERY
        WITH cause AS (
            SELECT DISTINCT ON (d.job_id) d.job_id, e.id AS pid, e.state AS pstate
              FROM unnest(ids, states) AS e(id, state) JOIN sloth.deps d ON d.after_id = e.id
             WHERE d.after_id = ANY(ids)
             ORDER BY d.job_id, e.id
        ), ready AS (
            UPDATE sloth.jobs j SET state = 'queued', not_before = greatest(j.not_before, sloth.now()),
                   updated_at = sloth.now()
              FROM cause c
             WHERE j.id = ANY(waiting) AND j.id = c.job_id AND (j.state = 'blocked') IS TRUE
               AND NOT EXISTS (SELECT 1 FROM sloth.deps d WHERE d.job_id = j.id
                                  AND (SELECT p.state FROM sloth.jobs p WHERE p.id = d.after_id)
                                      IN ('blocked', 'held', 'queued', 'running'))
            RETURNING j.*
        ), ev AS (
            INSERT INTO sloth.events (job_id, at, kind, attempt, message)
            SELECT r.id, sloth.now(), 'ready', 0,
                   format('job %s %s; nothing left to wait for', c.pid, sloth.ended(c.pstate))
              FROM ready r JOIN cause c ON c.job_id = r.id
        )
        SELECT * FROM ready ORDER BY id;
        ids := gone;
        states := array_fill('cancelled'::text, ARRAY[cardinality(gone)]);
    END LOOP;
END $$;

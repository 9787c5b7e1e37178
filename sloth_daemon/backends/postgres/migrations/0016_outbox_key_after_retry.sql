-- sloth queue on PostgreSQL: the outbox key counts a job's retries, as
-- SQLite's migration 15 -> 16. Never edit a released file; add the next
-- number instead.
--
-- A job retried and then ended again in the same attempt (a cancel, a
-- retry, a cancel: no run between) made the same key as its first end, so
-- ON CONFLICT DO NOTHING told its second end to no one. The key is
-- unchanged while the job was never retried (job:<id>:<attempt>:<event>)
-- and gains ':r<n>' after its n-th retry.

CREATE OR REPLACE FUNCTION sloth.events_tell() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    j record;
    evt text;
    retries bigint;
BEGIN
    SELECT id, state, tell, exit_code INTO j FROM sloth.jobs WHERE id = NEW.job_id;
    IF j.tell IS NULL THEN
        RETURN NULL;
    END IF;
    evt := CASE
        WHEN NEW.kind = 'started' THEN 'started'
        WHEN j.state = 'done' AND NEW.kind = 'done' THEN 'done'
        WHEN j.state = 'failed' AND NEW.kind IN ('failed', 'lease_expired', 'fenced') THEN 'failed'
        WHEN j.state = 'cancelled' AND NEW.kind = 'cancelled' THEN 'cancelled'
        WHEN j.state = 'queued' AND NEW.kind IN ('failed', 'fenced') THEN 'retrying'
    END;
    IF evt IS NULL THEN
        RETURN NULL;
    END IF;
    SELECT count(*) INTO retries FROM sloth.events WHERE job_id = NEW.job_id AND kind = 'retried';
    INSERT INTO sloth.outbox (key, event, channel, job_id, attempt, exit_code, at, next_at)
    SELECT 'job:' || j.id || ':' || NEW.attempt || ':' || evt
               || CASE WHEN retries > 0 THEN ':r' || retries ELSE '' END,
           evt, ch::text, j.id, NEW.attempt, j.exit_code, NEW.at, NEW.at
    FROM jsonb_array_elements(j.tell::jsonb) AS ch
    WHERE ch -> 'on' ? evt
    ON CONFLICT DO NOTHING;
    RETURN NULL;
END $$;

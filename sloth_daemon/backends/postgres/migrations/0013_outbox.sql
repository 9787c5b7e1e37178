-- sloth queue on PostgreSQL: the outbox (issue 32, docs/telling.md), as
-- SQLite's migration 10 -> 11.
--
-- * jobs.tell: who is told of a job's runs (JSON, checks.tell_json).
-- * outbox: one row per message to send (a ping, a webhook, a mail),
--   written in the transaction of the transition that causes it; a sender
--   (daemon/telling/) delivers it after the commit, leased as a job is
--   (lease_until, token: on a shared queue each message is sent by one
--   machine). key + channel is unique: a transition told twice is one row.
-- * events_tell: the trigger that writes them, for every event that is a
--   run's start or end, whichever path wrote it (a claim's start, complete,
--   fail, release, cancel, a cascade of dependents). It is an AFTER ROW
--   trigger, so it sees the job as the whole statement left it (a
--   one-statement completion updates the job and inserts its events in one
--   statement: backends/postgres/leases.py).

ALTER TABLE sloth.jobs ADD COLUMN tell text;

CREATE TABLE sloth.outbox (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    key         text             NOT NULL COLLATE "C",
    event       text             NOT NULL,
    channel     text             NOT NULL COLLATE "C",
    job_id      bigint,          -- no reference: a pruned job's message still goes
    attempt     bigint           NOT NULL DEFAULT 0,
    exit_code   integer,         -- the job's as the event left it
    schedule    text,
    note        text             NOT NULL DEFAULT '',
    at          double precision NOT NULL,
    state       text             NOT NULL DEFAULT 'pending',  -- pending, sent, failed
    tries       integer          NOT NULL DEFAULT 0,
    next_at     double precision NOT NULL,
    lease_until double precision,
    token       text,
    sender      text,
    last_error  text,
    sent_at     double precision,
    UNIQUE (key, channel)
);
CREATE INDEX outbox_due ON sloth.outbox (next_at) WHERE state = 'pending';
CREATE INDEX outbox_failed ON sloth.outbox (id) WHERE state = 'failed';

CREATE FUNCTION sloth.events_tell() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    j record;
    evt text;
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
    INSERT INTO sloth.outbox (key, event, channel, job_id, attempt, exit_code, at, next_at)
    SELECT 'job:' || j.id || ':' || NEW.attempt || ':' || evt, evt, ch::text, j.id, NEW.attempt, j.exit_code,
           NEW.at, NEW.at
    FROM jsonb_array_elements(j.tell::jsonb) AS ch
    WHERE ch -> 'on' ? evt
    ON CONFLICT DO NOTHING;
    RETURN NULL;
END $$;

CREATE TRIGGER events_tell AFTER INSERT ON sloth.events FOR EACH ROW
    WHEN (NEW.kind IN ('started', 'done', 'failed', 'lease_expired', 'cancelled', 'fenced'))
    EXECUTE FUNCTION sloth.events_tell();

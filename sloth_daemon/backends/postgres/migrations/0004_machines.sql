-- sloth queue on PostgreSQL, schema v4: one queue for several machines
-- (issue 11). Applied in one transaction under the migration advisory lock
-- (pg_migrate.py). Never edit a released file; add the next number instead.
--
-- * place: where a job may run. '' anywhere (`sloth add --anywhere`), else
--   the name of a host or of a tag a daemon advertises (`--on NAME`; by
--   default the host that queued it: its cwd and environment are that
--   machine's). A claim asks for its own places only; jobs_placed and
--   jobs_placed_due let it seek into each (lane, place) as jobs_ready and
--   jobs_due let a claim that takes any place seek into each lane.
-- * hosts: each daemon's row, refreshed every few seconds (last_seen on
--   the server's clock): `sloth status`, `sloth db status`, and a second
--   daemon under a name a live one uses is refused (boot_id tells a restart
--   of the same machine from another machine).
-- * logs: each attempt's capped log, uploaded by the daemon that runs it
--   while it runs and at its end, so `sloth logs` works from any machine.
-- * wakeups: a NOTIFY on sloth_jobs when jobs become queued (a hint for
--   LISTENing daemons; they poll too), on sloth_cancel with the id when a
--   running job is cancelled (its holder ends it now, not at its next renewal).

ALTER TABLE sloth.jobs ADD COLUMN place text COLLATE "C" NOT NULL DEFAULT '';
CREATE INDEX jobs_placed     ON sloth.jobs (lane, place, priority DESC, not_before, id) WHERE state = 'queued';
CREATE INDEX jobs_placed_due ON sloth.jobs (lane, place, not_before) WHERE state = 'queued';

CREATE TABLE sloth.hosts (
    name       text COLLATE "C" PRIMARY KEY,
    tags       text[]           NOT NULL DEFAULT '{}',
    worker     text             NOT NULL,  -- sloth-daemon:HOST:PID:INSTANCE
    pid        bigint           NOT NULL,
    boot_id    text             NOT NULL,  -- the machine's boot: a restart here, or another machine
    version    text             NOT NULL,
    started_at double precision NOT NULL,
    last_seen  double precision NOT NULL   -- sloth.now() of its last refresh
);

CREATE TABLE sloth.logs (
    job_id     bigint           NOT NULL REFERENCES sloth.jobs (id) ON DELETE CASCADE,
    attempt    bigint           NOT NULL,
    host       text             NOT NULL,  -- where it ran (and where the whole file is)
    data       bytea            NOT NULL DEFAULT '',
    done       boolean          NOT NULL DEFAULT false,  -- all of it is here
    updated_at double precision NOT NULL,
    PRIMARY KEY (job_id, attempt)
);
CREATE INDEX logs_open ON sloth.logs (host) WHERE NOT done;

CREATE FUNCTION sloth.tell_queued() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('sloth_jobs', '');  -- one per transaction: identical payloads fold
    RETURN NULL;
END $$;

CREATE FUNCTION sloth.tell_added() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM added WHERE state = 'queued') THEN
        PERFORM pg_notify('sloth_jobs', '');
    END IF;
    RETURN NULL;
END $$;

CREATE FUNCTION sloth.tell_cancelled() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('sloth_cancel', NEW.id::text);
    RETURN NULL;
END $$;

-- Named sloth_tell_*: the test fixtures drop every other trigger between tests.
-- A batch insert is one statement: one check of its rows, not one call per row.
CREATE TRIGGER sloth_tell_added AFTER INSERT ON sloth.jobs
    REFERENCING NEW TABLE AS added FOR EACH STATEMENT EXECUTE FUNCTION sloth.tell_added();
-- Row triggers whose WHEN is false cost no call: claims, renewals and ends never call them.
CREATE TRIGGER sloth_tell_queued AFTER UPDATE OF state ON sloth.jobs FOR EACH ROW
    WHEN (NEW.state = 'queued' AND OLD.state <> 'queued') EXECUTE FUNCTION sloth.tell_queued();
CREATE TRIGGER sloth_tell_cancelled AFTER UPDATE OF state ON sloth.jobs FOR EACH ROW
    WHEN (OLD.state = 'running' AND NEW.state = 'cancelled') EXECUTE FUNCTION sloth.tell_cancelled();

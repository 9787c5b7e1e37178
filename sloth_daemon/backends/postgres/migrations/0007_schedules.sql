-- sloth queue on PostgreSQL: schedules (issue 23). Applied in one
-- transaction under the migration advisory lock (migrate.py). Never edit a
-- released file; add the next number instead.
--
-- * schedules: a schedule's recipe (JSON, daemon/schedules/recipe.py) and
--   its progress: next_slot, the first slot not yet handled, and version,
--   compared and set by every change, so of several daemons firing one
--   schedule at once only the first moves it.
-- * schedule_runs: one row per slot handled, (schedule, slot) its key,
--   with the job it queued, written in the same transaction as the job
--   (backends/schedule_rules.py): a slot never makes two jobs, on any
--   number of machines.

CREATE TABLE sloth.schedules (
    name       text COLLATE "C" PRIMARY KEY,
    recipe     text             NOT NULL,
    paused     boolean          NOT NULL DEFAULT false,
    next_slot  bigint           NOT NULL,
    last_slot  bigint,
    last_job   bigint,
    missed     bigint           NOT NULL DEFAULT 0,
    dropped    bigint           NOT NULL DEFAULT 0,
    version    bigint           NOT NULL DEFAULT 0,
    created_at double precision NOT NULL,
    updated_at double precision NOT NULL
);

CREATE TABLE sloth.schedule_runs (
    schedule text COLLATE "C" NOT NULL,
    slot     bigint           NOT NULL,
    manual   boolean          NOT NULL DEFAULT false,
    job_id   bigint,
    at       double precision NOT NULL,
    note     text             NOT NULL DEFAULT '',
    PRIMARY KEY (schedule, slot, manual)
);

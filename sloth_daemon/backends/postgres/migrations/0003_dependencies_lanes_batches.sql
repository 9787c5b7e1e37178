-- sloth queue on PostgreSQL, schema v3: what SQLite schema v5 (issue 9) and
-- issue 14's edges added, the PostgreSQL way. Applied in one transaction
-- under the migration advisory lock (pg_migrate.py). Never edit a released
-- file; add the next number instead.
--
-- * The running state's own name ('claimed' was schema v1-v2's) and a
--   'blocked' state for jobs added --after others. Blocked rows are in no
--   claim index (jobs_ready, jobs_due, jobs_lease are partial on other
--   states), so a million waiting jobs cost a claim nothing.
-- * deps: one row per prerequisite. waited_on marks a job others wait for:
--   its end must settle them in the same transaction (sloth.settle), so
--   the one-statement completion (postgres.py) takes only jobs nobody
--   waits for. Being a column of the job's own row, it is re-read when a
--   completion waits for the enqueue that set it, which a look at deps
--   would not be (a concurrent enqueue's rows are invisible to it).
-- * exit codes that are not retried, lanes that outlive their jobs, batch
--   records (a client that lost the answer asks which ids its batch got).
-- * cwd as bytes: a path need not be UTF-8 (a folder named in Latin-1);
--   text cannot hold such bytes, bytea holds any.

DROP INDEX sloth.jobs_ready;
DROP INDEX sloth.jobs_lease;
DROP INDEX sloth.jobs_active_key;
ALTER TABLE sloth.jobs DROP CONSTRAINT jobs_state_check, DROP CONSTRAINT jobs_check;
UPDATE sloth.jobs SET state = 'running' WHERE state = 'claimed';
ALTER TABLE sloth.jobs
    ADD CONSTRAINT jobs_state_check
        CHECK (state IN ('blocked', 'queued', 'running', 'done', 'failed', 'cancelled')),
    -- a lease exists exactly while the job is running
    ADD CONSTRAINT jobs_lease_check
        CHECK ((state = 'running') = (token IS NOT NULL AND lease_until IS NOT NULL)),
    ADD COLUMN prereqs       text,     -- JSON {"after": [ids], "after_any": [ids]}, for display
    ADD COLUMN retry_exit    text,     -- JSON list: only these exit codes retry
    ADD COLUMN no_retry_exit text,     -- JSON list: never retried (NULL: 126, 127)
    ADD COLUMN waited_on     boolean NOT NULL DEFAULT false,
    ALTER COLUMN cwd TYPE bytea USING convert_to(cwd, 'UTF8');

-- claim order within a lane: a claim seeks into each lane on its own
-- (pg_claim.py), so a lane it skips costs it a seek, not a walk over its backlog
CREATE INDEX jobs_ready   ON sloth.jobs (lane, priority DESC, not_before, id) WHERE state = 'queued';
CREATE INDEX jobs_lease   ON sloth.jobs (lease_until) WHERE state = 'running';
CREATE INDEX jobs_blocked ON sloth.jobs (lane, id) WHERE state = 'blocked';
CREATE UNIQUE INDEX jobs_active_key ON sloth.jobs (key)
    WHERE key IS NOT NULL AND state IN ('blocked', 'queued', 'running');

CREATE TABLE sloth.deps (
    job_id   bigint NOT NULL REFERENCES sloth.jobs (id) ON DELETE CASCADE,
    after_id bigint NOT NULL REFERENCES sloth.jobs (id) ON DELETE CASCADE,
    need     text   NOT NULL CHECK (need IN ('done', 'end')),  -- --after, --after-any
    PRIMARY KEY (job_id, after_id)
);
CREATE INDEX deps_after ON sloth.deps (after_id);

CREATE TABLE sloth.lanes (
    name        text COLLATE "C" PRIMARY KEY,
    concurrency bigint,            -- from `sloth lane set` (NULL: the config's)
    config_was  bigint,            -- the config's value then (a later edit wins)
    created_at  double precision NOT NULL
);
INSERT INTO sloth.lanes (name, created_at) SELECT lane, min(created_at) FROM sloth.jobs GROUP BY lane;

-- enqueue_many(batch=TOKEN): the ids, as JSON runs [[first, last], ...],
-- written in the transaction that queued them; pruned after a day.
CREATE TABLE sloth.batches (
    token text PRIMARY KEY,
    at    double precision NOT NULL,
    ids   text NOT NULL
);
CREATE INDEX batches_at ON sloth.batches (at);

-- x >= 0 with `places` decimals, as Python's f"{x:.{places}f}": the exact
-- binary value of x rounded half to even. (round() of a float8 rounds its
-- already-rounded product; numeric takes only 15 digits of a float8.) x is
-- m * 2^e exactly (from its bits); the rest is integer arithmetic.
CREATE FUNCTION sloth.fixed(x double precision, places int) RETURNS text
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
DECLARE
    bits bigint := ('x' || encode(float8send(abs(x)), 'hex'))::bit(64)::bigint;
    e    int := (bits >> 52)::int;
    m    numeric := bits & 4503599627370495;
    den  numeric;
    q    numeric;
    txt  text;
BEGIN
    IF e > 0 THEN m := m + 4503599627370496; ELSE e := 1; END IF;
    e := e - 1075;
    IF e >= 0 THEN
        q := m * 2::numeric ^ e * 10::numeric ^ places;
    ELSE
        den := 2::numeric ^ (-e);
        q := div(m * 10::numeric ^ places, den);
        IF 2 * mod(m * 10::numeric ^ places, den) > den
           OR (2 * mod(m * 10::numeric ^ places, den) = den AND mod(q, 2) = 1) THEN
            q := q + 1;
        END IF;
    END IF;
    txt := trunc(q)::text;
    txt := repeat('0', places + 1 - length(txt)) || txt;  -- 0.5 and 0.05, not .5
    RETURN CASE WHEN places = 0 THEN txt ELSE left(txt, -places) || '.' || right(txt, places) END;
END $$;

-- A duration as people read it: 850ms, 1.5s, 42s, 5m30s, 2h, 3d4h
-- (durations.format_duration, to the digit).
CREATE FUNCTION sloth.format_duration(seconds double precision) RETURNS text
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
DECLARE
    s double precision := abs(seconds);
    n bigint := trunc(abs(seconds));
BEGIN
    IF s < 1 THEN RETURN sloth.fixed(s * 1000, 0) || 'ms'; END IF;
    IF s < 10 THEN RETURN replace(sloth.fixed(s, 1) || 's', '.0s', 's'); END IF;
    IF s < 60 THEN RETURN sloth.fixed(s, 0) || 's'; END IF;
    IF s < 3600 THEN
        RETURN n / 60 || CASE WHEN n % 60 > 0 AND n / 60 < 10 THEN 'm' || n % 60 || 's' ELSE 'm' END;
    END IF;
    IF s < 86400 THEN
        RETURN n / 3600 || CASE WHEN n % 3600 >= 60 AND n / 3600 < 10 THEN 'h' || n % 3600 / 60 || 'm' ELSE 'h' END;
    END IF;
    RETURN n / 86400 || CASE WHEN n % 86400 >= 3600 AND n / 86400 < 10 THEN 'd' || n % 86400 / 3600 || 'h' ELSE 'd' END;
END $$;

CREATE FUNCTION sloth.ended(state text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE state WHEN 'done' THEN 'is done' WHEN 'failed' THEN 'failed'
                      WHEN 'cancelled' THEN 'was cancelled' ELSE 'is ' || state END
$$;

-- Settle the blocked dependents of a job that just ended (in the caller's
-- transaction, after the job's own UPDATE): cancelled (event 'cancelled')
-- when they needed it done and it is not, queued (event 'ready') when
-- nothing they wait for is unfinished; then theirs in turn, a level at a
-- time (a loop, not recursion: a chain may be 50,000 long). Returns every
-- row it changed, for the caller to report.
--
-- The blocked dependents are locked first, in id order: two transactions
-- that end two prerequisites of one job take turns on it, and the second
-- (each statement of a function takes a fresh snapshot) sees the first's
-- end and queues it. Without the lock each would see the other's
-- prerequisite unfinished and the job would wait forever.
--
-- Every statement finds its rows by id (deps_after, then the primary key),
-- never by state: a plan that walked the blocked rows would make a chain
-- quadratic, and statistics are stale right after a big batch. Hence
-- "(state = 'blocked') IS TRUE": the same test, in a form no index offers
-- to answer, so the planner cannot prefer jobs_by_state or jobs_blocked.
CREATE FUNCTION sloth.settle(ended_id bigint, ended_state text) RETURNS SETOF sloth.jobs
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
        PERFORM 1 FROM sloth.jobs WHERE id = ANY(waiting) AND (state = 'blocked') IS TRUE ORDER BY id FOR UPDATE;
        WITH cause AS (
            SELECT DISTINCT ON (d.job_id) d.job_id, e.id AS pid, e.state AS pstate
              FROM unnest(ids, states) AS e(id, state) JOIN sloth.deps d ON d.after_id = e.id
             WHERE d.after_id = ANY(ids) AND e.state <> 'done' AND d.need = 'done'
             ORDER BY d.job_id, e.id
        ), gone_rows AS (
            UPDATE sloth.jobs j SET state = 'cancelled', finished_at = sloth.now(), updated_at = sloth.now(),
                   message = format('not run: job %s, which it runs after, %s', c.pid, sloth.ended(c.pstate))
              FROM cause c WHERE j.id = ANY(waiting) AND j.id = c.job_id AND (j.state = 'blocked') IS TRUE
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
                                      IN ('blocked', 'queued', 'running'))
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

-- sloth queue on PostgreSQL: the machine's own history for the timeline
-- (issue 31; the counterpart of SQLite's machine_events migration).
--
-- * kind 'up': a daemon's time up on a host, from its start to the stamp it
--   refreshes while it runs (sloth.now(), the server's clock, as every time
--   here); detail 'running', 'stopped: why', or 'crashed' when the host's
--   next daemon starts and finds it still 'running'. Downtime is the gap
--   between a host's up rows.
-- * kind 'sleep': a sleep of that host its clock watch saw, ending when it
--   was seen.
-- Bounded: rules.MACHINE_EVENTS_KEPT rows per host, and pruned with the jobs.

CREATE TABLE sloth.machine_events (
    id       bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    host     text COLLATE "C" NOT NULL,
    kind     text NOT NULL,
    start_at double precision NOT NULL,
    end_at   double precision NOT NULL,
    detail   text NOT NULL DEFAULT ''
);
CREATE INDEX machine_events_end ON sloth.machine_events (end_at);
CREATE INDEX machine_events_host ON sloth.machine_events (host, id);

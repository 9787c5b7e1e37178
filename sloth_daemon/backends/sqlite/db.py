"""SQLite connection, schema migrations and the one transaction helper.

Durability: WAL with ``synchronous=FULL``. In WAL mode NORMAL is safe against
an application crash but a power cut (the battery dies) can roll back the last
commits, i.e. forget a job the user was told was queued, or re-run one we
recorded as done. FULL fsyncs the WAL on every commit; measured here it costs
~0.2 ms per commit (tests/bench/bench_queue.py), so we pay it.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import time
from pathlib import Path
from typing import Iterator
from urllib.parse import quote

from sloth_daemon.errors import QueueBroken, StorageBusy, StorageError

BUSY_TIMEOUT_MS = 10_000
HEADER = b"SQLite format 3\x00"
# SQLite's primary result codes for "this is no longer a sound database".
_SQLITE_CORRUPT, _SQLITE_NOTADB = 11, 26

# Each entry migrates user_version i -> i+1. Never edit a released entry;
# append a new one. Version 1 was the first released schema.
MIGRATIONS: list[str] = [
    # 0 -> 1: jobs and their events.
    """
    CREATE TABLE jobs (
        id           INTEGER PRIMARY KEY AUTOINCREMENT,
        command      TEXT    NOT NULL,            -- JSON array of argv
        state        TEXT    NOT NULL,
        lane         TEXT    NOT NULL DEFAULT 'default',
        priority     INTEGER NOT NULL DEFAULT 0,
        attempts     INTEGER NOT NULL DEFAULT 0,
        max_attempts INTEGER NOT NULL,
        lease_s      REAL    NOT NULL,
        timeout_s    REAL,
        not_before   REAL    NOT NULL,
        lease_until  REAL,
        token        TEXT,
        worker       TEXT,
        key          TEXT,
        cwd          TEXT,
        env          TEXT,                        -- JSON object or NULL
        message      TEXT    NOT NULL DEFAULT '',
        created_at   REAL    NOT NULL,
        updated_at   REAL    NOT NULL
    );
    CREATE TABLE events (
        id      INTEGER PRIMARY KEY,
        job_id  INTEGER NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,
        at      REAL    NOT NULL,
        kind    TEXT    NOT NULL,
        attempt INTEGER NOT NULL,
        message TEXT    NOT NULL DEFAULT ''
    );
    CREATE INDEX events_job ON events(job_id, id);
    CREATE INDEX jobs_state ON jobs(state, priority, not_before);
    """,
    # 1 -> 2: runner identity, labels, shell flag, finish time; partial indexes
    # that keep claim O(log n) even when most queued rows are delayed.
    """
    ALTER TABLE jobs ADD COLUMN label TEXT;
    ALTER TABLE jobs ADD COLUMN shell INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE jobs ADD COLUMN runner TEXT;           -- JSON identity of the process
    ALTER TABLE jobs ADD COLUMN exit_code INTEGER;
    ALTER TABLE jobs ADD COLUMN finished_at REAL;
    DROP INDEX jobs_state;
    CREATE INDEX jobs_ready ON jobs(lane, priority, not_before, id) WHERE state = 'queued';
    CREATE INDEX jobs_due   ON jobs(lane, not_before) WHERE state = 'queued';
    CREATE INDEX jobs_lease ON jobs(lease_until) WHERE state = 'claimed';
    CREATE INDEX jobs_by_state ON jobs(state, id);
    CREATE INDEX jobs_finished ON jobs(finished_at) WHERE finished_at IS NOT NULL;
    CREATE UNIQUE INDEX jobs_active_key ON jobs(key)
        WHERE key IS NOT NULL AND state IN ('queued', 'claimed');
    -- v1 kept no finish time: without one, prune() would never delete old jobs.
    UPDATE jobs SET finished_at = updated_at WHERE state IN ('done', 'failed', 'cancelled');
    CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);  -- e.g. paused lanes
    """,
    # 2 -> 3: each distinct job environment stored once. `sloth add` captures
    # the caller's environment (~2 KB); a batch of 50,000 jobs shares one.
    """
    CREATE TABLE envs (
        id   INTEGER PRIMARY KEY AUTOINCREMENT,  -- never reused: readers cache by id
        hash TEXT    NOT NULL UNIQUE,   -- sha256 of data
        data TEXT    NOT NULL           -- JSON object
    );
    ALTER TABLE jobs ADD COLUMN env_id INTEGER REFERENCES envs(id);
    CREATE INDEX jobs_env ON jobs(env_id) WHERE env_id IS NOT NULL;
    """,
    # 3 -> 4: attempts count runs (never decremented or reset, so every run
    # has its own log file); tries are the runs that count against
    # max_attempts (an interruption or a crash of sloth gives one back);
    # refunds bound how many crashes of sloth a job is forgiven.
    """
    ALTER TABLE jobs ADD COLUMN tries INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE jobs ADD COLUMN refunds INTEGER NOT NULL DEFAULT 0;
    UPDATE jobs SET tries = attempts;
    """,
    # 4 -> 5: dependencies, the running state's own name, exit codes that are
    # not retried, and lanes that outlive their jobs. A job added --after
    # others is 'blocked': in no claim index (jobs_ready, jobs_due and
    # jobs_lease are partial on other states), so waiting jobs cost a claim
    # nothing; the transition that ends its last prerequisite queues it.
    """
    DROP INDEX jobs_lease;
    DROP INDEX jobs_active_key;
    UPDATE jobs SET state = 'running' WHERE state = 'claimed';
    CREATE INDEX jobs_lease ON jobs(lease_until) WHERE state = 'running';
    CREATE UNIQUE INDEX jobs_active_key ON jobs(key)
        WHERE key IS NOT NULL AND state IN ('blocked', 'queued', 'running');
    CREATE INDEX jobs_blocked ON jobs(lane, id) WHERE state = 'blocked';
    ALTER TABLE jobs ADD COLUMN prereqs TEXT;        -- JSON {"after": [ids], "after_any": [ids]}
    ALTER TABLE jobs ADD COLUMN retry_exit TEXT;     -- JSON list: only these exit codes retry
    ALTER TABLE jobs ADD COLUMN no_retry_exit TEXT;  -- JSON list: never retried (NULL: 126, 127)
    CREATE TABLE deps (
        job_id   INTEGER NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,
        after_id INTEGER NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,
        need     TEXT    NOT NULL,    -- 'done' (--after) or 'end' (--after-any)
        PRIMARY KEY (job_id, after_id)
    ) WITHOUT ROWID;
    CREATE INDEX deps_after ON deps(after_id);
    CREATE TABLE lanes (
        name        TEXT PRIMARY KEY,
        concurrency INTEGER,          -- from `sloth lane set` (NULL: the config's)
        config_was  INTEGER,          -- the config's value then (a later edit wins)
        created_at  REAL    NOT NULL
    );
    INSERT INTO lanes (name, created_at) SELECT lane, min(created_at) FROM jobs GROUP BY lane;
    """,
    # 5 -> 6: where a job may run ('' anywhere; a host or a tag), as on a
    # shared PostgreSQL queue. One machine's queue runs every job here.
    """
    ALTER TABLE jobs ADD COLUMN place TEXT NOT NULL DEFAULT '';
    """,
    # 6 -> 7: held jobs (`sloth hold`, `add --hold`, issue 22). A held job is
    # in no claim index (jobs_ready, jobs_due and jobs_lease are partial on
    # other states), as a blocked one, so holding costs a claim nothing; its
    # key stays taken, and jobs_held finds a lane's held jobs (bump, lane
    # counts) in the order they would run.
    """
    DROP INDEX jobs_active_key;
    CREATE UNIQUE INDEX jobs_active_key ON jobs(key)
        WHERE key IS NOT NULL AND state IN ('blocked', 'held', 'queued', 'running');
    CREATE INDEX jobs_held ON jobs(lane, priority, not_before, id) WHERE state = 'held';
    """,
    # 7 -> 8: what the keeper holds for a run's whole life (issue 24): a
    # sleep inhibitor (keep_awake), resource limits (JSON, e.g. {"mem": ...,
    # "nice": 10}), and the run paused on request: the token of the run
    # paused (the job is paused while it still holds that token, so a new
    # claim is never paused by an old run's flag).
    """
    ALTER TABLE jobs ADD COLUMN keep_awake INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE jobs ADD COLUMN limits TEXT;
    ALTER TABLE jobs ADD COLUMN paused_run TEXT;
    """,
    # 8 -> 9: schedules (issue 23). A schedule's recipe and its progress
    # (next_slot: the first slot not yet handled; version: compare and set);
    # each slot handled, one row per (schedule, slot), with the job it queued
    # in the same transaction (backends/schedule_rules.py).
    """
    CREATE TABLE schedules (
        name       TEXT    PRIMARY KEY,
        recipe     TEXT    NOT NULL,              -- JSON (daemon/schedules/recipe.py)
        paused     INTEGER NOT NULL DEFAULT 0,
        next_slot  INTEGER NOT NULL,              -- epoch seconds
        last_slot  INTEGER,
        last_job   INTEGER,
        missed     INTEGER NOT NULL DEFAULT 0,    -- slots coalesced into a catch-up, or skipped
        dropped    INTEGER NOT NULL DEFAULT 0,    -- --missed all: slots beyond the cap
        version    INTEGER NOT NULL DEFAULT 0,
        created_at REAL    NOT NULL,
        updated_at REAL    NOT NULL
    );
    CREATE TABLE schedule_runs (
        schedule TEXT    NOT NULL,
        slot     INTEGER NOT NULL,
        manual   INTEGER NOT NULL DEFAULT 0,      -- `sloth schedule run`
        job_id   INTEGER,                         -- NULL: not queued (note says why)
        at       REAL    NOT NULL,
        note     TEXT    NOT NULL DEFAULT '',
        PRIMARY KEY (schedule, slot, manual)
    ) WITHOUT ROWID;
    """,
    # 9 -> 10: gates (run conditions, named resources, lane slots: issue 24).
    # A queued job with a gate is out of the claim indexes (jobs_ready and
    # jobs_due now hold gate IS NULL only), so jobs that wait for mains power
    # cost a claim nothing; jobs_gated groups them by gate text, so the
    # daemon looks at one head per (gate, lane) against what holds here.
    # tokens: the resource tokens a run took (the keeper outlives the daemon: a
    # restarted daemon finds them held); wait_reason: why a gated job waits.
    """
    ALTER TABLE jobs ADD COLUMN gate TEXT;
    ALTER TABLE jobs ADD COLUMN tokens TEXT;
    ALTER TABLE jobs ADD COLUMN wait_reason TEXT;
    DROP INDEX jobs_ready;
    DROP INDEX jobs_due;
    CREATE INDEX jobs_ready ON jobs(lane, priority, not_before, id) WHERE state = 'queued' AND gate IS NULL;
    CREATE INDEX jobs_due   ON jobs(lane, not_before) WHERE state = 'queued' AND gate IS NULL;
    CREATE INDEX jobs_gated ON jobs(gate, lane, priority, not_before, id) WHERE state = 'queued' AND gate IS NOT NULL;
    """,
    # 10 -> 11: the machine's own history for the timeline (issue 31): each
    # daemon's time up (kind 'up': from its start to the stamp it refreshes
    # while it runs; detail 'running', 'stopped: why' or, seen by the next
    # start, 'crashed') and each sleep the clock watch saw (kind 'sleep'),
    # per host. Downtime is the gap between a host's up rows. Bounded:
    # rules.MACHINE_EVENTS_KEPT per host, and pruned with the job history.
    """
    CREATE TABLE machine_events (
        id       INTEGER PRIMARY KEY AUTOINCREMENT,
        host     TEXT    NOT NULL,
        kind     TEXT    NOT NULL,             -- 'up' | 'sleep'
        start_at REAL    NOT NULL,
        end_at   REAL    NOT NULL,
        detail   TEXT    NOT NULL DEFAULT ''
    );
    CREATE INDEX machine_events_end ON machine_events(end_at);
    CREATE INDEX machine_events_host ON machine_events(host, id);
    """,
    # 11 -> 12: progress and what each run cost (issue 31, docs/progress.md).
    # progress: the running attempt's latest value as it says it (JSON with
    # the attempt it belongs to: a new attempt never shows the last one's),
    # the latest only, written at most once a second a run, without an fsync.
    # attempts: one row per run that ended, what the keeper measured (cgroup
    # or rusage, ``covers``), written with its outcome; gone with its job.
    """
    ALTER TABLE jobs ADD COLUMN progress TEXT;
    CREATE TABLE attempts (
        job_id         INTEGER NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,
        attempt        INTEGER NOT NULL,
        cpu_s          REAL    NOT NULL,     -- user + system
        peak_rss_bytes INTEGER NOT NULL,
        wall_s         REAL    NOT NULL,
        ended          TEXT    NOT NULL,     -- how it ended: "exit 0", "exceeded --mem 100M" ...
        covers         TEXT    NOT NULL,     -- 'cgroup' or 'rusage' (keeper/cost.py)
        PRIMARY KEY (job_id, attempt)
    ) WITHOUT ROWID;
    """,
    # 12 -> 13: the outbox (issue 32, docs/telling.md). A job carries its
    # channels (tell: JSON, checks.tell_json); the trigger events_tell turns
    # each event that is a run's start or end into one outbox row per channel
    # that wants it, in the transaction that wrote the event, whichever path
    # wrote it (a claim's start, complete, fail, release, cancel, a cascade of
    # dependents): the intent is stored with the transition. A sender
    # delivers the rows after the commit (daemon/telling/), leased like jobs;
    # key + channel is unique, so a transition told twice is one message.
    # The event told: started (the process recorded), done, failed (an end
    # for good), retrying (a counted try failed, tries left), cancelled;
    # missed (a schedule's dead-man switch) is written by the scheduler.
    """
    ALTER TABLE jobs ADD COLUMN tell TEXT;
    CREATE TABLE outbox (
        id          INTEGER PRIMARY KEY AUTOINCREMENT,
        key         TEXT    NOT NULL,             -- job:<id>:<attempt>:<event>, schedule:<name>:<deadline>:missed
        event       TEXT    NOT NULL,
        channel     TEXT    NOT NULL,             -- JSON: {"kind", "url" or "to", "on"}
        job_id      INTEGER,                      -- no reference: a pruned job's message still goes
        attempt     INTEGER NOT NULL DEFAULT 0,
        exit_code   INTEGER,                      -- the job's as the event left it
        schedule    TEXT,
        note        TEXT    NOT NULL DEFAULT '',  -- why (a missed window's reason)
        at          REAL    NOT NULL,             -- when the event happened
        state       TEXT    NOT NULL DEFAULT 'pending',  -- pending, sent, failed
        tries       INTEGER NOT NULL DEFAULT 0,
        next_at     REAL    NOT NULL,
        lease_until REAL,
        token       TEXT,
        sender      TEXT,
        last_error  TEXT,
        sent_at     REAL,
        UNIQUE (key, channel)
    );
    CREATE INDEX outbox_due ON outbox(next_at) WHERE state = 'pending';
    CREATE INDEX outbox_failed ON outbox(id) WHERE state = 'failed';
    CREATE TRIGGER events_tell AFTER INSERT ON events
    WHEN NEW.kind IN ('started', 'done', 'failed', 'lease_expired', 'cancelled', 'fenced')
    BEGIN
        INSERT OR IGNORE INTO outbox (key, event, channel, job_id, attempt, exit_code, at, next_at)
        SELECT 'job:' || t.id || ':' || NEW.attempt || ':' || t.evt, t.evt, ch.value, t.id, NEW.attempt,
               t.exit_code, NEW.at, NEW.at
        FROM (SELECT id, tell, exit_code, CASE
                WHEN NEW.kind = 'started' THEN 'started'
                WHEN state = 'done' AND NEW.kind = 'done' THEN 'done'
                WHEN state = 'failed' AND NEW.kind IN ('failed', 'lease_expired', 'fenced') THEN 'failed'
                WHEN state = 'cancelled' AND NEW.kind = 'cancelled' THEN 'cancelled'
                WHEN state = 'queued' AND NEW.kind IN ('failed', 'fenced') THEN 'retrying'
              END AS evt FROM jobs WHERE id = NEW.job_id AND tell IS NOT NULL) AS t, json_each(t.tell) AS ch
        WHERE t.evt IS NOT NULL
          AND EXISTS (SELECT 1 FROM json_each(ch.value, '$.on') AS e WHERE e.value = t.evt);
    END;
    """,
    # 13 -> 14: batches with a handle and arrays (issue 33). The batch
    # records of v5 (meta rows "batch:TOKEN", what a client that lost a
    # commit's answer asks about) move to a table of their own and gain an
    # id and a name: one record per commit, the handle of `--batch` when
    # ``handle`` (add --stdin/--file, an array, or --batch NAME). A job of
    # such a batch carries its id and name (the name never changes, so a
    # listing shows it without a join); ``member``: an array member's
    # values (JSON {index, value, args}: its SLOTH_ARRAY_* variables).
    # Key policies: a job added `--on-dup append` (or `replace` while the
    # key's job runs) waits behind that job with the same key (key_behind:
    # its id), so one key may have several unfinished jobs, one of them the
    # head: the unique index holds heads only; jobs_active_key, now plain,
    # finds all of them.
    """
    CREATE TABLE batches (
        id     INTEGER PRIMARY KEY AUTOINCREMENT,
        token  TEXT    UNIQUE,
        name   TEXT,
        handle INTEGER NOT NULL DEFAULT 0,
        at     REAL    NOT NULL,
        ids    TEXT    NOT NULL                   -- JSON runs [[first, last], ...]
    );
    CREATE INDEX batches_name ON batches(name, id) WHERE name IS NOT NULL;
    INSERT INTO batches (token, at, ids)
        SELECT substr(key, 7), json_extract(value, '$.at'), json_extract(value, '$.ids') FROM meta
        WHERE substr(key, 1, 6) = 'batch:' ORDER BY json_extract(value, '$.at');
    DELETE FROM meta WHERE substr(key, 1, 6) = 'batch:';
    ALTER TABLE jobs ADD COLUMN batch_id INTEGER;
    ALTER TABLE jobs ADD COLUMN batch_name TEXT;
    ALTER TABLE jobs ADD COLUMN member TEXT;
    CREATE INDEX jobs_batch ON jobs(batch_id, state) WHERE batch_id IS NOT NULL;
    ALTER TABLE jobs ADD COLUMN key_behind INTEGER;
    DROP INDEX jobs_active_key;
    CREATE INDEX jobs_active_key ON jobs(key)
        WHERE key IS NOT NULL AND state IN ('blocked', 'held', 'queued', 'running');
    CREATE UNIQUE INDEX jobs_key_head ON jobs(key)
        WHERE key IS NOT NULL AND key_behind IS NULL AND state IN ('blocked', 'held', 'queued', 'running');
    """,
    # 14 -> 15: watchdogs, retry rules and results (issue 33 items 5 and 3). rules: the
    # job's --stall, --fail-on, --retry-on/--no-retry-on and --backoff as JSON
    # (checks.rules_json; NULL: none). results: the JSON an attempt wrote to
    # $SLOTH_RESULT (at most keeper/results.py's cap), kept with its attempt
    # and written in the transaction that records the attempt's end, so a
    # dependent claimed after that end always finds it.
    """
    ALTER TABLE jobs ADD COLUMN rules TEXT;
    CREATE TABLE results (
        job_id  INTEGER NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,
        attempt INTEGER NOT NULL,
        data    TEXT    NOT NULL,   -- JSON as the job wrote it (validated)
        at      REAL    NOT NULL,
        PRIMARY KEY (job_id, attempt)
    ) WITHOUT ROWID;
    """,
    # 15 -> 16: a job retried and then ended again in the same attempt (a
    # cancel, a retry, a cancel: no run between) made the same outbox key as
    # its first end, so INSERT OR IGNORE told its second end to no one. The
    # key now counts the job's retries before the event: unchanged while
    # there was none (job:<id>:<attempt>:<event>), ':r<n>' after the n-th.
    """
    DROP TRIGGER events_tell;
    CREATE TRIGGER events_tell AFTER INSERT ON events
    WHEN NEW.kind IN ('started', 'done', 'failed', 'lease_expired', 'cancelled', 'fenced')
    BEGIN
        INSERT OR IGNORE INTO outbox (key, event, channel, job_id, attempt, exit_code, at, next_at)
        SELECT 'job:' || t.id || ':' || NEW.attempt || ':' || t.evt
               || coalesce(':r' || nullif((SELECT count(*) FROM events r
                                          WHERE r.job_id = NEW.job_id AND r.kind = 'retried'), 0), ''),
               t.evt, ch.value, t.id, NEW.attempt, t.exit_code, NEW.at, NEW.at
        FROM (SELECT id, tell, exit_code, CASE
                WHEN NEW.kind = 'started' THEN 'started'
                WHEN state = 'done' AND NEW.kind = 'done' THEN 'done'
                WHEN state = 'failed' AND NEW.kind IN ('failed', 'lease_expired', 'fenced') THEN 'failed'
                WHEN state = 'cancelled' AND NEW.kind = 'cancelled' THEN 'cancelled'
                WHEN state = 'queued' AND NEW.kind IN ('failed', 'fenced') THEN 'retrying'
              END AS evt FROM jobs WHERE id = NEW.job_id AND tell IS NOT NULL) AS t, json_each(t.tell) AS ch
        WHERE t.evt IS NOT NULL
          AND EXISTS (SELECT 1 FROM json_each(ch.value, '$.on') AS e WHERE e.value = t.evt);
    END;
    """,
]
SCHEMA_VERSION = len(MIGRATIONS)


def _damaged(e: sqlite3.DatabaseError) -> bool:
    """Whether ``e`` says the file is damaged (corrupt pages, not a database)."""
    code = getattr(e, "sqlite_errorcode", None)
    primary = None if code is None else code & 0xFF
    text = str(e).lower()
    return primary in (_SQLITE_CORRUPT, _SQLITE_NOTADB) or "malformed" in text or "not a database" in text


class Guard:
    """Notices the database file changing under an open connection: removed
    or renamed (``mv queue.db queue.db.broken``), replaced by another file,
    truncated (``: > queue.db``), or corrupted (SQLite says so). Once it has,
    it stays broken: the connection takes no more writes (db.transaction
    checks it first), so nothing is written to a file nobody will read, and
    every error says what happened instead of "internal error"."""

    def __init__(self, path: Path) -> None:
        self.path = path
        st = os.stat(path)
        self.ident = (st.st_dev, st.st_ino)
        self.broken: str | None = None

    def check(self) -> None:
        """Raise QueueBroken if the file is not the one we opened, or was cut
        short. A stat (~1 us): cheap beside a transaction's fsync."""
        if self.broken is None:
            try:
                st = os.stat(self.path)
            except FileNotFoundError:
                self._break("was removed or renamed while the queue was open")
            except OSError:
                return  # cannot tell (e.g. a permission change): SQLite will say if it matters
            else:
                if (st.st_dev, st.st_ino) != self.ident:
                    self._break("was replaced by another file while the queue was open")
                elif st.st_size < len(HEADER):
                    self._break(f"was truncated to {st.st_size} bytes while the queue was open")
        if self.broken is not None:
            raise QueueBroken(f"the queue database {self.path} {self.broken}; it takes no more writes")

    def _break(self, why: str) -> None:
        self.broken = why

    def failed(self, e: sqlite3.DatabaseError, doing: str) -> StorageError:
        """The error to raise for ``e`` (met while ``doing``): QueueBroken,
        from now on, if the file is damaged or changed; else a StorageError."""
        if _damaged(e):
            self._break(f"is damaged ({e})")
        try:
            self.check()
        except QueueBroken as broken:
            return broken
        return StorageError(f"{doing}: {e}",
                            hint="Check that the data dir is writable and not full (`sloth doctor`).")


class GuardedConnection(sqlite3.Connection):
    """A connection that knows its file's :class:`Guard` (set by connect),
    and its fsync mode, so a run of commits of one kind sets it once."""

    guard: Guard | None = None
    synchronous = "FULL"  # connect() sets it so

    def set_synchronous(self, mode: str) -> None:
        if self.synchronous != mode:
            self.execute(f"PRAGMA synchronous = {mode}")
            self.synchronous = mode


def guard_of(conn: sqlite3.Connection) -> Guard | None:
    return getattr(conn, "guard", None)


def connect(path: str | os.PathLike[str], *, migrate_to: int = SCHEMA_VERSION,
            busy_timeout_s: float = BUSY_TIMEOUT_MS / 1000) -> sqlite3.Connection:
    """Open (creating if needed, 0600) the queue database and migrate it forward.
    ``busy_timeout_s``: how long a statement waits for another process's
    lock (the daemon waits briefly and retries later, so its loop never
    freezes behind a foreign writer)."""
    p = Path(path)
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        # Made here, 0600, so SQLite opens a file that exists and gives its
        # -wal and -shm the same mode (it copies the database's).
        os.close(os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600))
    except FileExistsError:
        pass
    except OSError as e:
        raise StorageError(f"cannot create the queue database {p}: {e.strerror or e}") from e
    conn = None
    try:
        conn = sqlite3.connect(
            str(p), isolation_level=None, timeout=busy_timeout_s, check_same_thread=False,
            factory=GuardedConnection,
        )
        conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_s * 1000)}")
        mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        if str(mode).lower() != "wal":
            raise StorageError(f"cannot switch {p} to WAL mode (got {mode})")
        conn.execute("PRAGMA synchronous = FULL")
        conn.execute("PRAGMA foreign_keys = ON")
        migrate(conn, migrate_to)
        conn.guard = Guard(p)  # after WAL mode is set: the file holds its header from here on
    except sqlite3.DatabaseError as e:
        if conn is not None:
            conn.close()
        if _damaged(e):  # met while reading the schema or migrating: the same words as a read that meets it
            raise StorageError(
                f"the queue database {p} is damaged ({e})",
                hint=f"Restore it from a backup, or salvage it: `sqlite3 {p} .recover | sqlite3 {p}.recovered`, "
                     "then put the copy in its place (`sloth doctor` says more).",
            ) from e
        raise StorageError(
            f"cannot open queue database {p}: {e}",
            hint="Check the folder is writable and the file is a sloth database (`sloth doctor`).",
        ) from e
    except BaseException:
        if conn is not None:
            conn.close()
        raise
    return conn


def migrate(conn: sqlite3.Connection, target: int = SCHEMA_VERSION) -> int:
    """Apply pending migrations, each in its own IMMEDIATE transaction."""
    while True:
        with transaction(conn):
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                raise StorageError(
                    f"database schema v{version} is newer than this sloth (v{SCHEMA_VERSION})",
                    hint="Upgrade sloth, or point SLOTH_HOME elsewhere.",
                )
            if version >= target:
                return version
            for stmt in _statements(MIGRATIONS[version]):
                conn.execute(stmt)
            conn.execute(f"PRAGMA user_version = {version + 1}")


def quick_check(path: str | os.PathLike[str], *, timeout_s: float = 5.0) -> list[str]:
    """``PRAGMA quick_check`` over a read-only connection that neither
    migrates nor writes (safe beside a running daemon): ``["ok"]`` when the
    file is sound, else SQLite's findings. Raises sqlite3.DatabaseError
    (an OperationalError mentioning "locked"/"busy" when a writer holds it)."""
    conn = sqlite3.connect(read_only_uri(path), uri=True, timeout=timeout_s)
    try:
        return [str(r[0]) for r in conn.execute("PRAGMA quick_check").fetchall()]
    finally:
        conn.close()


def _statements(script: str) -> list[str]:
    # executescript() would COMMIT our transaction; split on ';' instead
    # (the DDL above holds no ';' inside literals); a trigger's body holds
    # several, so parts are joined until SQLite calls the statement complete.
    out, held = [], ""
    for part in script.split(";"):
        lines = [ln.split("--", 1)[0] for ln in part.splitlines()]
        held += "\n".join(lines) + ";"
        if sqlite3.complete_statement(held):
            if held.strip(" \n;"):
                out.append(held.strip().rstrip(";"))
            held = ""
    return out


@contextlib.contextmanager
def transaction(conn: sqlite3.Connection, *, durable: bool = True,
                patience_s: float = 3 * BUSY_TIMEOUT_MS / 1000) -> Iterator[sqlite3.Connection]:
    """``BEGIN IMMEDIATE`` ... ``COMMIT``; rolls back on any exception.

    ``durable=False`` commits without an fsync (``synchronous=NORMAL`` for
    this one transaction): still safe against a crash of any process, and
    the next durable commit fsyncs the WAL with it, in order. Only for
    writes that mean nothing after a power cut, because every process they
    describe died with the machine: a claim, a lease renewal, the pid of a
    running job. Results (done, failed, cancelled) and enqueues stay durable.

    IMMEDIATE takes the write lock up front, so two writers never both read
    then collide on upgrade (the classic source of "database is locked").
    The busy timeout makes waiting writers queue; past it we retry until
    ``patience_s`` and then raise StorageBusy, never a bare sqlite3 error.
    """
    deadline = time.monotonic() + patience_s
    guard = guard_of(conn)
    if guard is not None:
        guard.check()  # never a write to a file that was replaced or cut under us
    if isinstance(conn, GuardedConnection):
        conn.set_synchronous("FULL" if durable else "NORMAL")
        yield from _transaction(conn, deadline)
        return
    if not durable:  # a connection not made by connect(): put FULL back after
        conn.execute("PRAGMA synchronous = NORMAL")
    try:
        yield from _transaction(conn, deadline)
    finally:
        if not durable:
            conn.execute("PRAGMA synchronous = FULL")


def _transaction(conn: sqlite3.Connection, deadline: float) -> Iterator[sqlite3.Connection]:
    guard = guard_of(conn)
    while True:
        try:
            conn.execute("BEGIN IMMEDIATE")
            break
        except sqlite3.OperationalError as e:
            if "locked" not in str(e) and "busy" not in str(e):
                raise _storage(guard, e, "cannot start a transaction") from e
            if time.monotonic() > deadline:
                raise StorageBusy("the queue database stayed locked by another process") from e
    try:
        yield conn
    except sqlite3.DatabaseError as e:
        _rollback(conn)
        raise _storage(guard, e, "queue database error") from e
    except BaseException:
        _rollback(conn)
        raise
    else:
        try:
            conn.execute("COMMIT")
        except sqlite3.DatabaseError as e:
            _rollback(conn)
            raise _storage(guard, e, "cannot commit to the queue database") from e


def _rollback(conn: sqlite3.Connection) -> None:
    if conn.in_transaction:
        try:
            conn.execute("ROLLBACK")
        except sqlite3.DatabaseError:
            pass  # a damaged file may refuse even this; the error being raised says why


def _storage(guard: Guard | None, e: sqlite3.DatabaseError, doing: str) -> StorageError:
    if guard is not None:
        return guard.failed(e, doing)
    return StorageError(f"{doing}: {e}", hint="Check that the data dir is writable and not full (`sloth doctor`).")


def failed(conn: sqlite3.Connection, e: sqlite3.DatabaseError) -> StorageError:
    """The error to raise for ``e`` met while writing (see Guard.failed)."""
    return _storage(guard_of(conn), e, "queue database error")


def reading(conn: sqlite3.Connection, e: sqlite3.DatabaseError) -> StorageError:
    """The error to raise for ``e`` met while reading (see Guard.failed)."""
    return _storage(guard_of(conn), e, "cannot read the queue database")


def connect_readonly(path: str | os.PathLike[str], *, timeout_s: float = 5.0) -> sqlite3.Connection:
    """Open the queue database to read only: never creates, migrates or
    writes it (for the CLI when no daemon answers). Raises FileNotFoundError
    when there is no database, StorageError when it cannot be read or its
    schema is not this sloth's."""
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(str(p))
    conn = sqlite3.connect(read_only_uri(p), uri=True, timeout=timeout_s,
                           isolation_level=None, check_same_thread=False)
    try:
        _same_schema(conn, p)
    except BaseException:
        conn.close()
        raise
    return conn


def read_only_uri(p: str | os.PathLike[str]) -> str:
    """A read that makes no file: SQLite's mode=ro still creates -wal and -shm
    (a write: "disk I/O error" on a full disk). Without a -wal (no daemon
    since a clean close) the file is the whole queue: read it as immutable."""
    idle = not os.path.lexists(f"{os.fspath(p)}-wal")
    return f"file:{quote(os.fspath(p))}?mode=ro" + ("&immutable=1" if idle else "")


def _same_schema(conn: sqlite3.Connection, p: Path) -> None:
    try:
        version = conn.execute("PRAGMA user_version").fetchone()[0]
    except sqlite3.DatabaseError as e:
        raise StorageError(f"cannot read queue database {p}: {e}") from e
    if version != SCHEMA_VERSION:
        older = version < SCHEMA_VERSION
        raise StorageError(
            f"queue database {p} has schema v{version}; this sloth reads v{SCHEMA_VERSION}",
            hint=("Start the daemon once to upgrade it (`sloth daemon start`)." if older
                  else "Upgrade sloth, or point SLOTH_HOME elsewhere."))

"""Adding jobs to the SQLite queue: one job, or a batch in one transaction.

A part of the SQLite engine (engine.py). A batch is validated whole before
anything is written (all or none), each distinct environment is stored
once, and runs of keyless jobs go in with one executemany. A job that waits
for others goes in on its own, ``blocked`` (see backends/sqlite/deps.py); each lane a
batch names is registered (the lanes table outlives the lane's jobs).
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any, Iterable, Mapping

from sloth_daemon.clock import Clock
from sloth_daemon.errors import IllegalTransition
from sloth_daemon.spec import JobSpec
from sloth_daemon.text import as_bytes, is_utf8
from sloth_daemon.backends import contract, rules
from sloth_daemon.backends.sqlite import deps
from sloth_daemon.backends.sqlite.reads import reads
from sloth_daemon.backends.sqlite.unit import SqliteStore

# The literal IN list must match jobs_active_key's WHERE for the partial index
# to apply; with bound parameters it cannot, and the lookup scans the table.
SQL_ACTIVE_KEY = (
    "SELECT id FROM jobs INDEXED BY jobs_active_key"
    " WHERE key = ? AND state IN ('blocked', 'held', 'queued', 'running')"
)
_COLUMNS = ("command, lane, priority, max_attempts, lease_s, timeout_s, not_before, key, cwd,"
            " env_id, label, shell, created_at, updated_at, retry_exit, no_retry_exit, place, keep_awake, limits")
SQL_INSERT = f"INSERT INTO jobs (state, {_COLUMNS}) VALUES ('queued', {', '.join('?' * 19)})"
# A job with a gate (conditions, needs, slots) goes in on its own: few do, and the run's statement stays as it was.
SQL_INSERT_GATED = f"INSERT INTO jobs (state, gate, {_COLUMNS}) VALUES ('queued', {', '.join('?' * 20)})"
# A job that waits for others: its state (blocked, queued or cancelled) is decided at insert.
SQL_INSERT_WAITING = (
    f"INSERT INTO jobs (state, message, finished_at, prereqs, gate, {_COLUMNS})"
    f" VALUES ({', '.join('?' * 24)})"
)
SQL_ADD_LANE = "INSERT INTO lanes (name, created_at) VALUES (?, ?) ON CONFLICT(name) DO NOTHING"


BATCH_PREFIX, BATCH_PREFIX_END = "batch:", "batch;"  # meta keys of batch records: [start, end)
class SqliteAdds(contract.Adds):
    """Adding jobs, and the batch records that say what a batch was queued
    as. Its own state: the clock; ``defaults`` (shared, the daemon's
    settings) fill the fields a spec leaves out; writes go through ``store``."""

    def __init__(self, store: SqliteStore, clock: Clock, defaults: contract.QueueDefaults) -> None:
        self.store, self.conn, self.clock, self.defaults = store, store.conn, clock, defaults

    def enqueue_many(self, specs: Iterable[Mapping[str, Any] | JobSpec], *, batch: str | None = None) -> list[int]:
        d = self.defaults
        rows = rules.parse_specs(specs, d.max_attempts, d.lease_s)  # validate all before writing any
        now = self.clock.now()
        with self.store.tx() as c:
            if batch is not None and c.execute("SELECT 1 FROM meta WHERE key = ?", (BATCH_PREFIX + batch,)).fetchone():
                raise IllegalTransition(f"batch {batch} was queued already; it is never queued twice",
                                        hint="Ask which ids it got with the `batch` op.")
            ids = self.insert(c, rows, now)
            if batch is not None:
                c.execute("INSERT INTO meta (key, value) VALUES (?, ?)",
                          (BATCH_PREFIX + batch, json.dumps({"at": now, "ids": rules.id_runs(ids)})))
            return ids

    @staticmethod
    def insert(c: sqlite3.Connection, rows: list[JobSpec], now: float) -> list[int]:
        """Validated jobs inside the caller's transaction (a schedule's
        occurrence goes in with the slot it is for: sqlite/schedules.py)."""
        for lane in {r.lane for r in rows}:
            c.execute(SQL_ADD_LANE, (lane, now))
        return _Batch(c, now, _put_envs(c, rows)).insert(rows)

    @reads
    def batch_ids(self, batch: str) -> list[int] | None:
        row = self.conn.execute("SELECT value FROM meta WHERE key = ?", (BATCH_PREFIX + batch,)).fetchone()
        if row is None:
            return None
        return rules.run_ids(json.loads(row[0])["ids"])

    def prune_batch_records(self, c: sqlite3.Connection, now: float) -> None:
        """Batch records older than rules.BATCH_RECORD_S (a range of meta's primary key)."""
        for key, value in c.execute("SELECT key, value FROM meta WHERE key >= ? AND key < ?",
                                    (BATCH_PREFIX, BATCH_PREFIX_END)).fetchall():
            if json.loads(value)["at"] < now - rules.BATCH_RECORD_S:
                c.execute("DELETE FROM meta WHERE key = ?", (key,))


class _Batch:
    """Inserting one validated batch inside its transaction."""

    def __init__(self, c: sqlite3.Connection, now: float, env_ids: dict[str, int]) -> None:
        self.c, self.now, self.env_ids = c, now, env_ids
        self.ids: list[int] = []
        self.run: list[tuple] = []  # consecutive plain rows, inserted by one executemany
        self.states: dict[int, str] = {}  # states read or written so far (see deps.initial_state)
        self.deps: list[tuple[int, int, str]] = []  # deps rows, inserted at the end in one executemany

    def insert(self, rows: list[JobSpec]) -> list[int]:
        for r in rows:
            env_id = None if r.env_json is None else self.env_ids[r.env_json]
            if r.key is None and not r.waits and not r.hold and r.gate_json is None and r.rules_json is None:
                self.run.append(_values(r, env_id, self.now))
                continue
            self.flush()
            hit = self.c.execute(SQL_ACTIVE_KEY, (r.key,)).fetchone() if r.key is not None else None
            if hit:
                self.ids.append(hit[0])
                continue
            elif r.waits or r.hold:
                self.ids.append(self._waiting(r, env_id))
            else:
                self.ids.append(int(self.c.execute(SQL_INSERT_GATED, (r.gate_json, *_values(r, env_id, self.now)))
                                    .lastrowid or 0))
            if r.rules_json is not None:  # few jobs have rules: the plain statements stay as they were
                self.c.execute("UPDATE jobs SET rules = ? WHERE id = ?", (r.rules_json, self.ids[-1]))
        self.flush()
        deps.add_deps(self.c, self.deps)
        return self.ids

    def flush(self) -> None:
        self.ids += _insert_run(self.c, self.run)
        self.run = []

    def _waiting(self, r: JobSpec, env_id: int | None) -> int:
        """A job that waits for others, or is added held (``add --hold``)."""
        wanted = rules.waits_for(r, self.ids[-1] if self.ids else None)
        state, why = deps.initial_state(self.c, wanted, self.states)
        if r.hold and state != "cancelled":
            state = "held"
        shown = rules.prereqs_json(wanted)
        finished = self.now if state == "cancelled" else None
        message = why if state == "cancelled" else ""
        jid = int(self.c.execute(SQL_INSERT_WAITING, (state, message, finished, shown, r.gate_json,
                                                      *_values(r, env_id, self.now))).lastrowid or 0)
        self.deps += [(jid, pid, need) for pid, need in wanted]
        if state in ("cancelled", "held"):
            self.c.execute("INSERT INTO events (job_id, at, kind, attempt, message) VALUES (?, ?, ?, 0, ?)",
                           (jid, self.now, state, why if state == "cancelled" else rules.HELD_AT_ADD))
        self.states[jid] = state
        return jid


def _put_envs(c: sqlite3.Connection, rows: list[JobSpec]) -> dict[str, int]:
    """One envs row per distinct environment of the batch: text -> id."""
    env_ids: dict[str, int] = {}
    for r in rows:
        if r.env_json is not None and r.env_json not in env_ids:
            env_ids[r.env_json] = _put_env(c, r.env_json)
    return env_ids



def _put_env(c: sqlite3.Connection, text: str) -> int:
    """The id of this environment in ``envs``, adding it if new."""
    digest = rules.sha256_hex(text)
    c.execute("INSERT INTO envs (hash, data) VALUES (?, ?) ON CONFLICT(hash) DO NOTHING",
              (digest, text))
    return c.execute("SELECT id FROM envs WHERE hash = ?", (digest,)).fetchone()[0]


def _values(r: JobSpec, env_id: int | None, now: float) -> tuple:
    nb = now if r.not_before is None else r.not_before
    return (r.command_json, r.lane, r.priority, r.max_attempts, r.lease_s, r.timeout_s, nb,
            r.key, path_value(r.cwd), env_id, r.label, int(r.shell), now, now, r.retry_exit_json, r.no_retry_exit_json,
            r.place, int(r.keep_awake), r.limits_json)


def path_value(p: str | None) -> str | bytes | None:
    """A path as SQLite keeps it: TEXT when it is UTF-8, else its bytes as a
    BLOB (a folder named in Latin-1 round-trips exactly; Job.from_row reads both)."""
    if p is None or is_utf8(p):
        return p
    return as_bytes(p)


def _insert_run(c: sqlite3.Connection, run: list[tuple]) -> list[int]:
    """Insert rows with one executemany; return their ids. Under our write lock
    with AUTOINCREMENT each insert takes the next rowid, so the ids of a run
    are the consecutive numbers ending at last_insert_rowid()."""
    if not run:
        return []
    c.executemany(SQL_INSERT, run)
    last = c.execute("SELECT last_insert_rowid()").fetchone()[0]
    return list(range(last - len(run) + 1, last + 1))

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
from typing import TYPE_CHECKING, Any, Iterable, Mapping

from sloth_daemon.clock import Clock
from sloth_daemon.errors import BadRequest, IllegalTransition
from sloth_daemon.models import JobState
from sloth_daemon.spec import JobSpec
from sloth_daemon.text import as_bytes, is_utf8
from sloth_daemon.backends import contract, rules
from sloth_daemon.backends.sqlite import deps
from sloth_daemon.backends.sqlite.reads import reads
from sloth_daemon.backends.sqlite.unit import SqliteStore

if TYPE_CHECKING:
    from sloth_daemon.backends.sqlite.ends import SqliteEnds

# The literal IN list must match jobs_active_key's WHERE for the partial index
# to apply; with bound parameters it cannot, and the lookup scans the table.
SQL_ACTIVE_KEY = (
    "SELECT id FROM jobs INDEXED BY jobs_active_key"
    " WHERE key = ? AND state IN ('blocked', 'held', 'queued', 'running')"
)
_COLUMNS = ("command, lane, priority, max_attempts, lease_s, timeout_s, not_before, key, cwd,"
            " env_id, label, shell, created_at, updated_at, retry_exit, no_retry_exit, place, keep_awake, limits,"
            " batch_id, batch_name, member, key_behind")
SQL_INSERT = f"INSERT INTO jobs (state, {_COLUMNS}) VALUES ('queued', {', '.join('?' * 23)})"
# A job with a gate (conditions, needs, slots) goes in on its own: few do, and the run's statement stays as it was.
SQL_INSERT_GATED = f"INSERT INTO jobs (state, gate, {_COLUMNS}) VALUES ('queued', {', '.join('?' * 24)})"
# A job that waits for others: its state (blocked, queued or cancelled) is decided at insert.
SQL_INSERT_WAITING = (
    f"INSERT INTO jobs (state, message, finished_at, prereqs, gate, {_COLUMNS})"
    f" VALUES ({', '.join('?' * 28)})"
)
# Every unfinished job with a key (one head, and those added behind it: --on-dup); sorted by
# the caller (an ORDER BY here costs a temporary b-tree: SQLite does not see the index's rowid order).
SQL_ACTIVE_KEYS = SQL_ACTIVE_KEY.replace("SELECT id", "SELECT id, state")
SQL_ADD_LANE = "INSERT INTO lanes (name, created_at) VALUES (?, ?) ON CONFLICT(name) DO NOTHING"


SQL_BATCH_OPEN = "INSERT INTO batches (token, name, handle, at, ids) VALUES (?, ?, ?, ?, '[]') RETURNING id"



class SqliteAdds(contract.Adds):
    """Adding jobs, and the batch records that say what a batch was queued
    as. Its own state: the clock; ``defaults`` (shared, the daemon's
    settings) fill the fields a spec leaves out; writes go through ``store``."""

    def __init__(self, store: SqliteStore, clock: Clock, defaults: contract.QueueDefaults,
                 ends: SqliteEnds | None = None) -> None:
        self.store, self.conn, self.clock, self.defaults, self.ends = store, store.conn, clock, defaults, ends

    def enqueue_many(self, specs: Iterable[Mapping[str, Any] | JobSpec], *, batch: str | None = None,
                     handle: contract.Handle | None = None) -> list[int]:
        d = self.defaults
        rows = rules.parse_specs(specs, d.max_attempts, d.lease_s)  # validate all before writing any
        now = self.clock.now()
        with self.store.tx() as c:
            record = None if batch is None and handle is None else self._open(c, batch, handle, now)
            ids = self.insert(c, rows, now, None if handle is None or record is None else (record, handle.name),
                              ends=self.ends)
            if record is not None:
                c.execute("UPDATE batches SET ids = ? WHERE id = ?", (json.dumps(rules.id_runs(ids)), record))
            return ids

    @staticmethod
    def _open(c: sqlite3.Connection, batch: str | None, handle: contract.Handle | None, now: float) -> int:
        """The batch's record (its id), written first: its jobs carry the id."""
        token = batch if batch is not None else rules.new_token()
        if c.execute("SELECT 1 FROM batches WHERE token = ?", (token,)).fetchone():
            raise IllegalTransition(f"batch {token} was queued already; it is never queued twice",
                                    hint="Ask which ids it got with the `batch` op.")
        return int(c.execute(SQL_BATCH_OPEN, (token, None if handle is None else handle.name, int(handle is not None),
                                              now)).fetchone()[0])

    @staticmethod
    def insert(c: sqlite3.Connection, rows: list[JobSpec], now: float,
               handle: tuple[int, str | None] | None = None, *, ends: SqliteEnds | None = None) -> list[int]:
        """Validated jobs inside the caller's transaction (a schedule's
        occurrence goes in with the slot it is for: sqlite/schedules.py);
        ``handle``: the (id, name) of the batch they are queued in; ``ends``:
        what cancels the jobs a `--on-dup replace` replaces."""
        for lane in {r.lane for r in rows}:
            c.execute(SQL_ADD_LANE, (lane, now))
        batch = _Batch(c, now, _put_envs(c, rows), handle or (None, None), ends)
        ids = batch.insert(rows)
        told = [(r.tell_json, jid) for i, (r, jid) in enumerate(zip(rows, ids, strict=True))
                if r.tell_json is not None and i not in batch.kept]  # a kept job stands as it was
        if told:  # few jobs tell anyone: the plain insert stays as it was
            c.executemany("UPDATE jobs SET tell = ? WHERE id = ? AND tell IS NULL", told)
        return ids

    @reads
    def batch_ids(self, batch: str) -> list[int] | None:
        row = self.conn.execute("SELECT ids FROM batches WHERE token = ?", (batch,)).fetchone()
        if row is None:
            return None
        return rules.run_ids(json.loads(row[0]))

    def prune_batch_records(self, c: sqlite3.Connection, now: float) -> None:
        """Records older than rules.BATCH_RECORD_S, but never a handle's while a job of it is kept."""
        c.execute("DELETE FROM batches WHERE at < ? AND NOT (handle AND EXISTS"
                  " (SELECT 1 FROM jobs INDEXED BY jobs_batch WHERE batch_id = batches.id))",
                  (now - rules.BATCH_RECORD_S,))


class _Batch:
    """Inserting one validated batch inside its transaction."""

    def __init__(self, c: sqlite3.Connection, now: float, env_ids: dict[str, int],
                 handle: tuple[int | None, str | None], ends: SqliteEnds | None) -> None:
        self.c, self.now, self.env_ids, self.handle, self.ends = c, now, env_ids, handle, ends
        self.ids: list[int] = []
        self.run: list[tuple] = []  # consecutive plain rows, inserted by one executemany
        self.states: dict[int, str] = {}  # states read or written so far (see deps.initial_state)
        self.deps: list[tuple[int, int, str]] = []  # deps rows, inserted at the end in one executemany
        self.kept: set[int] = set()  # positions whose id is an unfinished job their key kept (--on-dup keep)

    def insert(self, rows: list[JobSpec]) -> list[int]:
        for r in rows:
            env_id = None if r.env_json is None else self.env_ids[r.env_json]
            if r.key is None and not r.waits and not r.hold and r.gate_json is None and r.rules_json is None:
                self.run.append(_values(r, env_id, self.now, self.handle))
                continue
            self.flush()
            plan = rules.KeyPlan() if r.key is None else self._key(r)
            if plan.kept is not None:
                self.kept.add(len(self.ids))
                self.ids.append(plan.kept)
                continue
            if plan.behind is not None:
                r = r._replace(after_any=(*r.after_any, plan.behind))
            if r.waits or r.hold:
                self.ids.append(self._waiting(r, env_id, plan.behind))
            else:
                values = _values(r, env_id, self.now, self.handle)
                self.ids.append(int(self.c.execute(SQL_INSERT_GATED, (r.gate_json, *values)).lastrowid or 0))
            if plan.note:
                self.c.execute("INSERT INTO events (job_id, at, kind, attempt, message) VALUES (?, ?, ?, 0, ?)",
                               (self.ids[-1], self.now, rules.KEY_EVENT, plan.note))
            if r.rules_json is not None:  # few jobs have rules: the plain statements stay as they were
                self.c.execute("UPDATE jobs SET rules = ? WHERE id = ?", (r.rules_json, self.ids[-1]))
        self.flush()
        deps.add_deps(self.c, self.deps)
        return self.ids

    def flush(self) -> None:
        self.ids += _insert_run(self.c, self.run)
        self.run = []

    def _key(self, r: JobSpec) -> rules.KeyPlan:
        """What the key's policy does (rules.key_plan), the jobs it replaces cancelled."""
        assert r.key is not None
        plan = rules.key_plan(r.key, r.on_dup, sorted((i, st) for i, st in self.c.execute(SQL_ACTIVE_KEYS, (r.key,))))
        for jid in plan.cancel:
            if self.ends is None:
                raise BadRequest("--on-dup replace is not available here")
            attempts = self.c.execute("SELECT attempts FROM jobs WHERE id = ?", (jid,)).fetchone()[0]
            self.ends.finish(self.c, jid, JobState.CANCELLED, self.now, attempts, "cancelled",
                             rules.REPLACED.format(key=r.key))
            self.states[jid] = JobState.CANCELLED.value
        return plan

    def _waiting(self, r: JobSpec, env_id: int | None, behind: int | None = None) -> int:
        """A job that waits for others, or is added held (``add --hold``)."""
        wanted = rules.waits_for(r, self.ids[-1] if self.ids else None)
        state, why = deps.initial_state(self.c, wanted, self.states)
        if r.hold and state != "cancelled":
            state = "held"
        shown = rules.prereqs_json(wanted)
        finished = self.now if state == "cancelled" else None
        message = why if state == "cancelled" else ""
        jid = int(self.c.execute(SQL_INSERT_WAITING, (state, message, finished, shown, r.gate_json,
                                                      *_values(r, env_id, self.now, self.handle, behind))
                                 ).lastrowid or 0)
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


def _values(r: JobSpec, env_id: int | None, now: float, handle: tuple[int | None, str | None],
            behind: int | None = None) -> tuple:
    nb = now if r.not_before is None else r.not_before
    return (r.command_json, r.lane, r.priority, r.max_attempts, r.lease_s, r.timeout_s, nb,
            r.key, path_value(r.cwd), env_id, r.label, int(r.shell), now, now, r.retry_exit_json, r.no_retry_exit_json,
            r.place, int(r.keep_awake), r.limits_json, *handle, r.member_json, behind)


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

"""Adding jobs to the PostgreSQL queue: one job, or a batch in one
transaction (the counterpart of backends/sqlite/enqueue.py).

PgAdds, a part of the PostgreSQL engine (engine.py), adds them. A batch is validated whole before
anything is written (all or none), each distinct environment is stored
once, and runs of keyless jobs go in with one statement whatever their
size, jobs that wait for others too: ids are taken from the sequence first
and each job's state (blocked, queued or cancelled) is decided here from the
prerequisites' states, read once under a lock (backends/postgres/deps.py). A key is
settled by the server's partial unique index, even between two machines.
"""

from __future__ import annotations

import json
from typing import Any, Iterable, Iterator, Mapping

from sloth_daemon.errors import BadRequest, IllegalTransition
from sloth_daemon.models import JobState
from sloth_daemon.spec import JobSpec
from sloth_daemon.text import as_bytes
from sloth_daemon.backends import contract, rules
from sloth_daemon.backends.postgres import deps
from sloth_daemon.backends.postgres.db import Connection, Cursor, one
from sloth_daemon.backends.postgres.writer import PgWriter, event

WAITED_ON = 18  # the index of waited_on in a row's values (_Batch._row)
_COLUMNS = ("id, command, state, lane, priority, max_attempts, lease_s, timeout_s, not_before, key, cwd,"
            " env_id, label, shell, retry_exit, no_retry_exit, message, prereqs, waited_on, place, keep_awake, limits,"
            " gate, batch_id, batch_name, member, key_behind")
_TYPES = ("bigint text text text bigint bigint float8 float8 float8 text bytea bigint text bool text"
          " text text text bool text bool text text bigint text text bigint").split()
_NAMES = _COLUMNS.replace(" ", "").split(",")
_PARAMS = ", ".join(f"%{'b' if c == 'command' else 's'}::{t}[]" for c, t in zip(_NAMES, _TYPES, strict=True))
# Jobs in one statement: the arrays are columns, now is the server's. The
# commands go in binary: psycopg writes a text array's element with every
# quote and backslash escaped by a regular expression's callback, and a
# command's JSON has a backslash for every character outside ASCII (500
# commands of 20,000 'é' each took 16 s to add, over a minute loaded). A run
# of keyless jobs never meets the ON CONFLICT (NULL keys are in no index);
# a keyed job goes alone, and yields to an active job with its key.
SQL_INSERT = f"""
INSERT INTO sloth.jobs ({_COLUMNS}, finished_at, created_at, updated_at)
SELECT t.id, t.command, t.state, t.lane, t.priority, t.max_attempts, t.lease_s, t.timeout_s,
       coalesce(t.not_before, sloth.now()), t.key, t.cwd, t.env_id, t.label, t.shell, t.retry_exit,
       t.no_retry_exit, t.message, t.prereqs, t.waited_on, t.place, t.keep_awake, t.limits, t.gate,
       t.batch_id, t.batch_name, t.member, t.key_behind,
       CASE WHEN t.state = 'cancelled' THEN sloth.now() END, sloth.now(), sloth.now()
FROM unnest({_PARAMS}) AS t({_COLUMNS})
ON CONFLICT (key) WHERE key IS NOT NULL AND key_behind IS NULL AND state IN ('blocked', 'held', 'queued', 'running')
DO NOTHING RETURNING id
"""
SQL_SET_RULES = ("UPDATE sloth.jobs j SET rules = t.rules FROM unnest(%s::bigint[], %s::text[]) AS t(id, rules)"
                 " WHERE j.id = t.id")
SQL_NEXT_IDS = "SELECT nextval(pg_get_serial_sequence('sloth.jobs', 'id')) AS id FROM generate_series(1, %s)"
SQL_ACTIVE_KEY = "SELECT id FROM sloth.jobs WHERE key = %s AND state IN ('blocked', 'held', 'queued', 'running')"
# Every unfinished job with a key, oldest first, locked (one head, and those added behind it: --on-dup).
SQL_ACTIVE_KEYS = SQL_ACTIVE_KEY.replace("SELECT id", "SELECT id, state") + " ORDER BY id FOR UPDATE"
# Adds of one key take turns (between daemons too): what a policy reads is what it acts on.
SQL_KEY_LOCK = "SELECT pg_advisory_xact_lock(hashtextextended('sloth.key:' || %s, 0))"
SQL_HELD_EVENTS = ("INSERT INTO sloth.events (job_id, at, kind, attempt, message)"
                   " SELECT unnest(%s::bigint[]), sloth.now(), 'held', 0, %s")
SQL_ENV_FIND = "SELECT id FROM sloth.envs WHERE hash = %s FOR KEY SHARE"
SQL_ENV_ADD = "INSERT INTO sloth.envs (hash, data) VALUES (%s, %s) ON CONFLICT (hash) DO NOTHING RETURNING id"
SQL_ADD_LANES = ("INSERT INTO sloth.lanes (name, created_at) SELECT unnest(%s::text[]), sloth.now()"
                 " ON CONFLICT (name) DO NOTHING")
SQL_BATCH_OPEN = ("INSERT INTO sloth.batches (token, at, ids, name, handle) VALUES (%s, sloth.now(), '[]', %s, %s)"
                  " ON CONFLICT (token) DO NOTHING RETURNING id")
SQL_BATCH_IDS = "UPDATE sloth.batches SET ids = %s WHERE token = %s"
SQL_BATCH_READ = "SELECT ids FROM sloth.batches WHERE token = %s"
SQL_BATCH_PRUNE = ("DELETE FROM sloth.batches b WHERE at < sloth.now() - %s AND NOT (handle AND EXISTS"
                   " (SELECT 1 FROM sloth.jobs j WHERE j.batch_id = b.id))")



class PgAdds(contract.Adds):
    """enqueue_many and batch_ids of the queue (its enqueue is
    rules.enqueue_one over enqueue_many): writes through ``writer``, reads
    on ``db``; ``defaults`` (shared, the daemon's settings) fill the fields
    a job leaves out."""

    def __init__(self, db: Connection, writer: PgWriter, defaults: contract.QueueDefaults) -> None:
        self._db = db
        self.writer = writer
        self.defaults = defaults

    def enqueue_many(self, specs: Iterable[Mapping[str, Any] | JobSpec], *, batch: str | None = None,
                     handle: contract.Handle | None = None) -> list[int]:
        d = self.defaults
        rows = rules.parse_specs(specs, d.max_attempts, d.lease_s)  # validate all before writing any
        if not rows and batch is None:
            return []
        if handle is not None and batch is None:
            batch = rules.new_token()
        return self.writer.write(lambda c: insert_all(c, rows, batch, handle, self.writer), "adding jobs")

    def batch_ids(self, batch: str) -> list[int] | None:
        row = self._db.read(lambda c: c.execute(SQL_BATCH_READ, (batch,)).fetchone(), "reading a batch")
        if row is None:
            return None
        return rules.run_ids(json.loads(row["ids"]))



def prune_batch_records(c: Cursor) -> None:
    c.execute(SQL_BATCH_PRUNE, (rules.BATCH_RECORD_S,))


def insert_all(c: Cursor, rows: list[JobSpec], batch: str | None, handle: contract.Handle | None = None,
               ends: PgWriter | None = None) -> list[int]:
    """The whole batch, in order, inside the caller's transaction (a schedule's firing: postgres/schedules.py);
    with ``handle`` its jobs carry the record's id and the handle's name; ``ends`` cancels
    the jobs a `--on-dup replace` replaces."""
    record = None
    if batch is not None:
        record = c.execute(SQL_BATCH_OPEN, (batch, None if handle is None else handle.name, handle is not None)
                           ).fetchone()
        if record is None:
            raise IllegalTransition(f"batch {batch} was queued already; it is never queued twice",
                                    hint="Ask which ids it got with the `batch` op.")
    c.execute(SQL_ADD_LANES, (sorted({r.lane for r in rows}),))
    env_ids = {text: _put_env(c, text) for text in sorted({r.env_json for r in rows if r.env_json is not None})}
    known = deps.lock_states(c, (i for r in rows for i in r.after + r.after_any))
    tag = (None, None) if handle is None or record is None else (record["id"], handle.name)
    inserting = _Batch(c, env_ids, known, len(rows), tag, ends)
    ids = inserting.insert(rows)
    told = [(r.tell_json, jid) for i, (r, jid) in enumerate(zip(rows, ids, strict=True))
            if r.tell_json is not None and i not in inserting.kept]  # a kept job stands as it was
    if told:  # few jobs tell anyone: the plain insert stays as it was
        c.executemany("UPDATE sloth.jobs SET tell = %s WHERE id = %s AND tell IS NULL", told)
    if batch is not None:
        c.execute(SQL_BATCH_IDS, (json.dumps(rules.id_runs(ids)), batch))
    return ids


def _put_env(c: Cursor, text: str) -> int:
    """The id of this environment in ``envs``, adding it if new. The row is
    locked FOR KEY SHARE until commit, so a concurrent prune cannot delete
    it before our jobs reference it."""
    digest = rules.sha256_hex(text)
    while True:
        row = c.execute(SQL_ENV_FIND, (digest,)).fetchone()
        if row:
            return int(row["id"])
        row = c.execute(SQL_ENV_ADD, (digest, text)).fetchone()
        if row:
            return int(row["id"])
        # another transaction added it between our two statements: read it again


class _Batch:
    """Inserting one validated batch inside its transaction."""

    def __init__(self, c: Cursor, env_ids: dict[str, int], known: dict[int, str], n: int,
                 handle: tuple[int | None, str | None], ends: PgWriter | None = None) -> None:
        self.c, self.env_ids, self.known, self.handle, self.ends = c, env_ids, known, handle, ends
        self.behind: int | None = None  # the job the keyed job being made waits behind (_keyed)
        self.ids: list[int] = []
        self.run: dict[int, list[Any]] = {}  # id -> values: the rows to insert with one statement
        self.late: set[int] = set()  # jobs waited for that are not in the run: marked at the end
        self.deps: list[tuple[int, int, str]] = []
        self.cancelled: list[tuple[int, str]] = []  # (id, why) of jobs cancelled as they are added
        self.held: list[int] = []  # jobs added held (`add --hold`): their event at the end
        self.kept: set[int] = set()  # positions whose id is an unfinished job their key kept (--on-dup keep)
        self.rules: list[tuple[int, str]] = []  # (id, rules) of jobs with watchdogs or retry rules: set at the end
        self._free = self._take(n)

    def insert(self, rows: list[JobSpec]) -> list[int]:
        for r in rows:
            if r.key is None:
                jid = next(self._free)
                self.run[jid] = self._row(r, jid)
            else:
                self._flush()
                self._keyed(r)
        self._flush()
        deps.add_deps(self.c, self.deps, self.cancelled, self.late)
        if self.held:
            mine = set(self.ids)  # not those a key conflict gave up (_forget)
            self.c.execute(SQL_HELD_EVENTS, ([i for i in self.held if i in mine], rules.HELD_AT_ADD))
        if self.rules:  # few jobs have rules: the one statement of a run stays as it was
            mine = set(self.ids)
            kept = [(i, t) for i, t in self.rules if i in mine]
            self.c.execute(SQL_SET_RULES, ([i for i, _ in kept], [t for _, t in kept]))
        return self.ids

    def _take(self, n: int) -> Iterator[int]:
        """Ids from the sequence, ``n`` at a time, as many as asked for."""
        while True:
            yield from (r["id"] for r in self.c.execute(SQL_NEXT_IDS, (max(n, 1),)).fetchall())

    def _flush(self) -> None:
        if self.run:
            self.c.execute(SQL_INSERT, [list(col) for col in zip(*self.run.values(), strict=True)])
            self.run = {}

    def _keyed(self, r: JobSpec) -> None:
        """The active job with this key, or a new one, as its policy says
        (rules.key_plan). Adds of one key take turns (SQL_KEY_LOCK); the
        partial unique index settles a race with an add that does not (a
        restart), as before."""
        assert r.key is not None
        self.c.execute(SQL_KEY_LOCK, (r.key,))
        while True:
            plan = rules.key_plan(r.key, r.on_dup, [(h["id"], h["state"]) for h in self.c.execute(
                SQL_ACTIVE_KEYS, (r.key,)).fetchall()])
            if plan.kept is not None:
                self.kept.add(len(self.ids))
                self.ids.append(plan.kept)  # not ours: a dependent locks it to read its state
                return
            for jid in plan.cancel:
                if self.ends is None:
                    raise BadRequest("--on-dup replace is not available here")
                old = one(self.c.execute("SELECT attempts FROM sloth.jobs WHERE id = %s", (jid,)))
                self.ends.finish(self.c, jid, JobState.CANCELLED, old["attempts"], "cancelled",
                                 rules.REPLACED.format(key=r.key))
                self.known[jid] = JobState.CANCELLED.value
            self.behind = plan.behind
            spec = r if plan.behind is None else r._replace(after_any=(*r.after_any, plan.behind))
            row = self._row(spec, next(self._free))
            self.behind = None
            if self.c.execute(SQL_INSERT, [[v] for v in row]).fetchone():
                if plan.note:
                    event(self.c, row[0], rules.KEY_EVENT, 0, plan.note)
                return
            self._forget(row[0])  # the other enqueuer committed first: its job is the active one now

    def _row(self, r: JobSpec, jid: int) -> list[Any]:
        """The values of one job (and its deps rows), its state decided."""
        state, message, shown = ("queued", "", None) if not r.waits else self._waiting(r, jid)
        if r.hold and state != "cancelled":  # `add --hold`
            state = "held"
            self.held.append(jid)
        self.ids.append(jid)
        self.known[jid] = state
        if r.rules_json is not None:
            self.rules.append((jid, r.rules_json))
        return [jid, r.command_json, state, r.lane, r.priority, r.max_attempts, r.lease_s, r.timeout_s,
                r.not_before, r.key, None if r.cwd is None else as_bytes(r.cwd),
                None if r.env_json is None else self.env_ids[r.env_json], r.label, r.shell,
                r.retry_exit_json, r.no_retry_exit_json, message, shown, False, r.place, r.keep_awake, r.limits_json,
                r.gate_json, *self.handle, r.member_json, self.behind]

    def _waiting(self, r: JobSpec, jid: int) -> tuple[str, str, str | None]:
        wanted = rules.waits_for(r, self.ids[-1] if self.ids else None)
        self.known.update(deps.lock_states(self.c, [i for i, _ in wanted if i not in self.known]))
        state, why = deps.initial_state(wanted, self.known)
        self.deps += [(jid, pid, need) for pid, need in wanted]
        for pid, _ in wanted:  # waited on: set as it is inserted (a chain), else marked at the end
            if pid in self.run:
                self.run[pid][WAITED_ON] = True
            else:
                self.late.add(pid)
        if state == "cancelled":
            self.cancelled.append((jid, why))
        shown = rules.prereqs_json(wanted)
        return state, why if state == "cancelled" else "", shown

    def _forget(self, jid: int) -> None:
        """Undo _row for a job that was not inserted after all."""
        self.ids.remove(jid)
        self.known.pop(jid, None)
        self.deps = [d for d in self.deps if d[0] != jid]
        self.cancelled = [e for e in self.cancelled if e[0] != jid]

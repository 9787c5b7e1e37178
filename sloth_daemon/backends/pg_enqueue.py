"""Adding jobs to the PostgreSQL queue: one job, or a batch in one
transaction.

A base class of PgQueue (postgres.py). A batch is validated whole before
anything is written (all or none), each distinct environment is stored
once, runs of keyless jobs go in with one statement, and a key is settled
by the server's partial unique index, even between two machines.
"""

from __future__ import annotations

import hashlib
from typing import Any, Iterable, Mapping, Sequence

from ..spec import Defaults, EnvCache, JobSpec
from .pgdb import Connection, Cursor

SQL_INSERT_COLUMNS = (
    "id, command, state, lane, priority, max_attempts, lease_s, timeout_s, not_before, key,"
    " cwd, env_id, label, shell, created_at, updated_at"
)
# A run of jobs in one statement: the arrays are columns, now is the server's.
SQL_INSERT_MANY = f"""
INSERT INTO sloth.jobs ({SQL_INSERT_COLUMNS})
SELECT t.id, t.command, 'queued', t.lane, t.priority, t.max_attempts, t.lease_s, t.timeout_s,
       coalesce(t.not_before, sloth.now()), NULL, t.cwd, t.env_id, t.label, t.shell,
       sloth.now(), sloth.now()
FROM unnest(%s::bigint[], %s::text[], %s::text[], %s::bigint[], %s::bigint[],
            %s::float8[], %s::float8[], %s::float8[], %s::text[], %s::bigint[], %s::text[],
            %s::bool[])
     AS t(id, command, lane, priority, max_attempts, lease_s, timeout_s, not_before, cwd,
          env_id, label, shell)
"""
SQL_INSERT_KEYED = f"""
INSERT INTO sloth.jobs ({SQL_INSERT_COLUMNS})
VALUES (nextval(pg_get_serial_sequence('sloth.jobs', 'id')), %s, 'queued', %s, %s, %s, %s, %s,
        coalesce(%s, sloth.now()), %s, %s, %s, %s, %s, sloth.now(), sloth.now())
ON CONFLICT (key) WHERE key IS NOT NULL AND state IN ('queued', 'claimed') DO NOTHING
RETURNING id
"""
SQL_NEXT_IDS = "SELECT nextval(pg_get_serial_sequence('sloth.jobs', 'id')) AS id FROM generate_series(1, %s)"
SQL_ACTIVE_KEY = "SELECT id FROM sloth.jobs WHERE key = %s AND state IN ('queued', 'claimed')"
SQL_ENV_FIND = "SELECT id FROM sloth.envs WHERE hash = %s FOR KEY SHARE"
SQL_ENV_ADD = "INSERT INTO sloth.envs (hash, data) VALUES (%s, %s) ON CONFLICT (hash) DO NOTHING RETURNING id"

Run = list[tuple[JobSpec, int | None]]  # consecutive keyless jobs and their env ids


class PgEnqueue:
    _db: Connection
    lease_s: float
    max_attempts: int

    def enqueue(
        self,
        command: Sequence[str],
        *,
        max_attempts: int | None = None,
        lease_s: float | None = None,
        not_before: float | None = None,
        priority: int = 0,
        lane: str = "default",
        key: str | None = None,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        timeout_s: float | None = None,
        label: str | None = None,
        shell: bool = False,
    ) -> int:
        """Add a job in state ``queued`` and return its id.

        With ``key``: if an unfinished (queued or claimed) job has the same key,
        return its id and add nothing. Raises BadRequest for invalid fields.
        """
        return self.enqueue_many(
            [
                dict(
                    command=command, max_attempts=max_attempts, lease_s=lease_s,
                    not_before=not_before, priority=priority, lane=lane, key=key,
                    cwd=cwd, env=env, timeout_s=timeout_s, label=label, shell=shell,
                )
            ]
        )[0]

    def enqueue_many(self, specs: Iterable[Mapping[str, Any]]) -> list[int]:
        """Enqueue many jobs in one transaction; all or none. Same rules as enqueue."""
        cache: EnvCache = {}
        defaults = Defaults(self.max_attempts, self.lease_s)
        rows = [JobSpec.parse(s, defaults, cache) for s in specs]  # validate all before writing any
        if not rows:
            return []
        return self._db.write(lambda c: _insert_all(c, rows), "adding jobs")


def _insert_all(c: Cursor, rows: list[JobSpec]) -> list[int]:
    """Insert ``rows`` in order and return their ids: keyless runs with one
    statement each, keyed jobs one by one (a key may name an active job)."""
    env_ids = {text: _put_env(c, text) for text in {r.env_json for r in rows if r.env_json is not None}}
    ids: list[int] = []
    run: Run = []
    for r in rows:
        env_id = None if r.env_json is None else env_ids[r.env_json]
        if r.key is None:
            run.append((r, env_id))
            continue
        ids += _insert_run(c, run)
        run = []
        ids.append(_insert_keyed(c, r, env_id))
    return ids + _insert_run(c, run)


def _put_env(c: Cursor, text: str) -> int:
    """The id of this environment in ``envs``, adding it if new. The row is
    locked FOR KEY SHARE until commit, so a concurrent prune cannot delete
    it before our jobs reference it."""
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
    while True:
        row = c.execute(SQL_ENV_FIND, (digest,)).fetchone()
        if row:
            return row["id"]
        row = c.execute(SQL_ENV_ADD, (digest, text)).fetchone()
        if row:
            return row["id"]
        # another transaction added it between our two statements: read it again


def _insert_run(c: Cursor, run: Run) -> list[int]:
    """Insert keyless jobs with one statement; ids are taken from the sequence
    first, so they are known in order whatever order the server inserts in."""
    if not run:
        return []
    ids = [r["id"] for r in c.execute(SQL_NEXT_IDS, (len(run),)).fetchall()]
    cols = zip(*[(r.command_json, r.lane, r.priority, r.max_attempts, r.lease_s, r.timeout_s,
                  r.not_before, r.cwd, env_id, r.label, r.shell) for r, env_id in run], strict=True)
    c.execute(SQL_INSERT_MANY, (ids, *[list(col) for col in cols]))
    return ids


def _insert_keyed(c: Cursor, r: JobSpec, env_id: int | None) -> int:
    """The active job with this key, or a new one. The partial unique index
    settles a race with another enqueuer of the same key."""
    while True:
        hit = c.execute(SQL_ACTIVE_KEY, (r.key,)).fetchone()
        if hit:
            return hit["id"]
        row = c.execute(SQL_INSERT_KEYED, (
            r.command_json, r.lane, r.priority, r.max_attempts, r.lease_s, r.timeout_s,
            r.not_before, r.key, r.cwd, env_id, r.label, r.shell)).fetchone()
        if row:
            return row["id"]
        # the other enqueuer committed first: its job is the active one now

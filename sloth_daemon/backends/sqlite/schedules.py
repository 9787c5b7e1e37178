"""Schedules on the SQLite queue: their rows, and a firing (its slots and
their jobs) in one transaction. The rules it keeps are
backends/schedule_rules.py's; what to fire is the daemon's
(daemon/schedules/)."""

from __future__ import annotations

import sqlite3
from typing import Any, Callable, Mapping

from sloth_daemon.backends import contract, schedule_rules as sr
from sloth_daemon.backends.sqlite.enqueue import SQL_ACTIVE_KEY
from sloth_daemon.backends.sqlite.reads import reads
from sloth_daemon.backends.sqlite.unit import SqliteStore
from sloth_daemon.clock import Clock
from sloth_daemon.models import ACTIVE_STATES
from sloth_daemon.spec import JobSpec

SQL_LIST = ("SELECT s.*, j.state AS last_state, j.exit_code AS last_exit, j.finished_at AS last_finished_at"
            " FROM schedules s LEFT JOIN jobs j ON j.id = s.last_job")
SQL_RUNS = ("SELECT r.slot, r.manual, r.job_id, r.at, r.note, j.state, j.exit_code, j.finished_at"
            " FROM schedule_runs r LEFT JOIN jobs j ON j.id = r.job_id WHERE r.schedule = ?"
            " ORDER BY r.at DESC, r.slot DESC LIMIT ?")
SQL_RUN_ADD = ("INSERT INTO schedule_runs (schedule, slot, manual, job_id, at, note) VALUES (?, ?, ?, NULL, ?, ?)"
               " ON CONFLICT DO NOTHING")
SQL_PROGRESS = ("UPDATE schedules SET version = version + 1, next_slot = coalesce(?, next_slot),"
                " last_job = ?, last_slot = coalesce(?, last_slot), missed = missed + ?, dropped = dropped + ?,"
                " updated_at = ? WHERE name = ?")
SQL_STAMP = "SELECT count(*), coalesce(sum(version), 0), coalesce(max(updated_at), 0) FROM schedules"
SQL_LAST_MANUAL = "SELECT max(slot) AS top FROM schedule_runs WHERE schedule = ? AND manual"
KEEP_RUNS_S = 30 * 86400.0  # rows of slots older than this are pruned at a firing


Insert = Callable[[sqlite3.Connection, list[JobSpec], float], list[int]]


class SqliteScheduleReads(contract.ScheduleReads):
    """The schedules' rows read on ``conn`` (the daemon's, or a read-only
    one: `schedule ls` and `show` with no daemon, cli/offline.py)."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    @reads
    def get(self, name: str) -> dict[str, Any]:
        row = self.conn.execute(SQL_LIST + " WHERE s.name = ?", (name,)).fetchone()
        if row is None:
            raise sr.missing(name)
        return sr.record(row)

    @reads
    def all(self) -> list[dict[str, Any]]:
        return [sr.record(r) for r in self.conn.execute(SQL_LIST + " ORDER BY s.name")]

    @reads
    def stamp(self) -> tuple[Any, ...]:
        return tuple(self.conn.execute(SQL_STAMP).fetchone())

    @reads
    def runs(self, name: str, limit: int = sr.RUNS_SHOWN) -> list[dict[str, Any]]:
        return [sr.run_record(r) for r in self.conn.execute(SQL_RUNS, (name, int(limit)))]

    @reads
    def last_success(self, name: str) -> float | None:
        return self.conn.execute("SELECT max(j.finished_at) FROM schedule_runs r JOIN jobs j ON j.id = r.job_id"
                                 " WHERE r.schedule = ? AND j.state = 'done'", (name,)).fetchone()[0]


class SqliteSchedules(SqliteScheduleReads):
    """The schedules and schedule_runs tables: read as SqliteScheduleReads, written
    through ``store``, jobs added with ``insert`` (SqliteAdds.insert)
    inside the firing's transaction, times from ``clock``."""

    def __init__(self, store: SqliteStore, clock: Clock, insert: Insert) -> None:
        super().__init__(store.conn)
        self.store, self.clock, self.insert = store, clock, insert

    def add(self, name: str, recipe: Mapping[str, Any], next_slot: int) -> dict[str, Any]:
        now = self.clock.now()
        with self.store.tx() as c:
            try:
                c.execute("INSERT INTO schedules (name, recipe, next_slot, created_at, updated_at)"
                          " VALUES (?, ?, ?, ?, ?)", (name, sr.changes(recipe, None, None)["recipe"],
                                                      int(next_slot), now, now))
            except sqlite3.IntegrityError:
                raise sr.taken(name) from None
        return self.get(name)

    def change(self, name: str, *, version: int | None = None, recipe: Mapping[str, Any] | None = None,
               paused: bool | None = None, next_slot: int | None = None) -> dict[str, Any] | None:
        cols = sr.changes(recipe, paused, next_slot)
        sets = "".join(f", {k} = ?" for k in cols)
        guard = "" if version is None else " AND version = ?"
        with self.store.tx() as c:
            cur = c.execute(f"UPDATE schedules SET version = version + 1, updated_at = ?{sets} WHERE name = ?{guard}",
                            (self.clock.now(), *cols.values(), name, *(() if version is None else (version,))))
            if not cur.rowcount:
                self._exists(c, name)
                return None
        return self.get(name)

    def remove(self, name: str) -> None:
        with self.store.tx() as c:
            if not c.execute("DELETE FROM schedules WHERE name = ?", (name,)).rowcount:
                raise sr.missing(name)
            c.execute("DELETE FROM schedule_runs WHERE schedule = ?", (name,))
            # its `schedule run` job stays, but not its key: a schedule made again under this
            # name would have its own runs answered with that job (deduped)
            c.execute("UPDATE jobs SET key = NULL WHERE key = ?", (sr.slot_key(name, sr.MANUAL),))

    def fire(self, name: str, firing: sr.Firing) -> list[dict[str, Any]] | None:
        now = self.clock.now()
        with self.store.tx() as c:
            row = c.execute("SELECT version, last_job FROM schedules WHERE name = ?", (name,)).fetchone()
            if row is None:
                raise sr.missing(name)
            if firing.version is not None and row["version"] != firing.version:
                return None
            out = _Firing(c, name, now, row["last_job"], self.insert)
            results = [out.one(o) for o in firing.occurrences]
            c.execute(SQL_PROGRESS, (firing.next_slot, out.last_job, out.last_slot, firing.missed, firing.dropped,
                                     now, name))
            c.execute("DELETE FROM schedule_runs WHERE schedule = ? AND slot < ?", (name, int(now - KEEP_RUNS_S)))
        return results

    @staticmethod
    def _exists(c: sqlite3.Connection, name: str) -> None:
        if c.execute("SELECT 1 FROM schedules WHERE name = ?", (name,)).fetchone() is None:
            raise sr.missing(name)


class _Firing:
    """One firing's occurrences, inside its transaction."""

    def __init__(self, c: sqlite3.Connection, name: str, now: float, last_job: int | None, insert: Insert) -> None:
        self.c, self.name, self.now, self.insert = c, name, now, insert
        self.last_job: int | None = last_job
        self.last_slot: int | None = None

    def one(self, o: sr.Occurrence) -> dict[str, Any]:
        manual = o.spec is not None and o.spec.key == sr.slot_key(self.name, sr.MANUAL)
        if manual and (hit := self.c.execute(SQL_ACTIVE_KEY, (o.spec.key,)).fetchone()):  # type: ignore[union-attr]
            return {"slot": o.slot, "job_id": hit[0], "deduped": True}
        if manual:  # a run by hand has a row of its own, even a second in the same second
            o = o._replace(slot=sr.manual_slot(self.c.execute(SQL_LAST_MANUAL, (self.name,)).fetchone(), o.slot))
        if not self.c.execute(SQL_RUN_ADD, (self.name, o.slot, int(manual), self.now, o.note)).rowcount:
            return {"slot": o.slot, "job_id": None, "taken": True}
        if o.spec is None:
            return {"slot": o.slot, "job_id": None, "note": o.note}
        job_id = self.insert(self.c, [self._chained(o.spec)], self.now)[0]
        self.c.execute("UPDATE schedule_runs SET job_id = ? WHERE schedule = ? AND slot = ? AND manual = ?",
                       (job_id, self.name, o.slot, int(manual)))
        self.last_job = job_id
        self.last_slot = o.slot  # a run by hand is the last run too (`schedule ls` LAST)
        return {"slot": o.slot, "job_id": job_id, "note": o.note}

    def _chained(self, spec: JobSpec) -> JobSpec:
        """``after_previous`` on an occurrence: after the schedule's last job,
        if that is still active (one that ended, or was pruned, is no wait)."""
        if spec.after_previous is None:
            return spec
        row = None if self.last_job is None else self.c.execute(
            "SELECT state FROM jobs WHERE id = ?", (self.last_job,)).fetchone()
        active = row is not None and row[0] in ACTIVE_STATES
        wait = (self.last_job,) if active and self.last_job is not None else ()
        return spec._replace(after_previous=None, after_any=wait)


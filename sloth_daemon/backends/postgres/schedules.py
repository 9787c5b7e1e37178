"""Schedules on the PostgreSQL queue: their rows, and a firing (its slots
and their jobs) in one transaction, the counterpart of
backends/sqlite/schedules.py. Several daemons may fire one schedule at
once: the UPDATE that compares and sets its version makes the second wait
for the first's row lock and then find the version moved (nothing
written), and (schedule, slot) is the key of schedule_runs besides."""

from __future__ import annotations

from typing import Any, Callable, Mapping

from sloth_daemon.backends import contract, schedule_rules as sr
from sloth_daemon.backends.postgres.db import Connection, Cursor
from sloth_daemon.backends.postgres.enqueue import SQL_ACTIVE_KEY
from sloth_daemon.backends.postgres.writer import PgWriter
from sloth_daemon.models import ACTIVE_STATES
from sloth_daemon.spec import JobSpec

SQL_LIST = ("SELECT s.*, j.state AS last_state, j.exit_code AS last_exit, j.finished_at AS last_finished_at"
            " FROM sloth.schedules s LEFT JOIN sloth.jobs j ON j.id = s.last_job")
SQL_RUNS = ("SELECT r.slot, r.manual::int AS manual, r.job_id, r.at, r.note, j.state, j.exit_code, j.finished_at"
            " FROM sloth.schedule_runs r LEFT JOIN sloth.jobs j ON j.id = r.job_id WHERE r.schedule = %s"
            " ORDER BY r.at DESC, r.slot DESC LIMIT %s")
SQL_RUN_ADD = ("INSERT INTO sloth.schedule_runs (schedule, slot, manual, job_id, at, note)"
               " VALUES (%s, %s, %s, NULL, sloth.now(), %s) ON CONFLICT DO NOTHING RETURNING slot")
SQL_PROGRESS = ("UPDATE sloth.schedules SET version = version + 1, next_slot = coalesce(%s, next_slot),"
                " last_job = %s, last_slot = coalesce(%s, last_slot), missed = missed + %s,"
                " dropped = dropped + %s, updated_at = sloth.now() WHERE name = %s")
SQL_PRUNE_RUNS = "DELETE FROM sloth.schedule_runs WHERE schedule = %s AND slot < sloth.now() - %s"
SQL_STAMP = ("SELECT count(*) AS n, coalesce(sum(version), 0) AS v, coalesce(max(updated_at), 0) AS at"
             " FROM sloth.schedules")
SQL_LAST_MANUAL = "SELECT max(slot) AS top FROM sloth.schedule_runs WHERE schedule = %s AND manual"
KEEP_RUNS_S = 30 * 86400.0

Insert = Callable[[Cursor, list[JobSpec], None], list[int]]


class PgScheduleReads(contract.ScheduleReads):
    """The schedules' rows read on ``db`` (the daemon's, or a read-only one:
    `schedule ls` and `show` with no daemon, cli/offline.py)."""

    def __init__(self, db: Connection) -> None:
        self._db = db

    def get(self, name: str) -> dict[str, Any]:
        row = self._db.read(lambda c: c.execute(SQL_LIST + " WHERE s.name = %s", (name,)).fetchone(),
                            "reading a schedule")
        if row is None:
            raise sr.missing(name)
        return sr.record(row)

    def all(self) -> list[dict[str, Any]]:
        rows = self._db.read(lambda c: c.execute(SQL_LIST + " ORDER BY s.name").fetchall(), "reading schedules")
        return [sr.record(r) for r in rows]

    def stamp(self) -> tuple[Any, ...]:
        row = self._db.read(lambda c: c.execute(SQL_STAMP).fetchone(), "reading schedules")
        return tuple((row or {}).values())

    def runs(self, name: str, limit: int = sr.RUNS_SHOWN) -> list[dict[str, Any]]:
        rows = self._db.read(lambda c: c.execute(SQL_RUNS, (name, int(limit))).fetchall(), "reading a schedule")
        return [sr.run_record(r) for r in rows]

    def last_success(self, name: str) -> float | None:
        row = self._db.read(lambda c: c.execute(
            "SELECT max(j.finished_at) AS t FROM sloth.schedule_runs r JOIN sloth.jobs j ON j.id = r.job_id"
            " WHERE r.schedule = %s AND j.state = 'done'", (name,)).fetchone(), "reading a schedule")
        return None if row is None else row["t"]


class PgSchedules(PgScheduleReads):
    """The schedules and schedule_runs tables: read as PgScheduleReads,
    written through ``writer``; jobs added with ``insert``
    (enqueue.insert_all) inside the firing's transaction."""

    def __init__(self, db: Connection, writer: PgWriter, insert: Insert) -> None:
        super().__init__(db)
        self.writer, self.insert = writer, insert

    def add(self, name: str, recipe: Mapping[str, Any], next_slot: int) -> dict[str, Any]:
        text = sr.changes(recipe, None, None)["recipe"]

        def add(c: Cursor) -> bool:
            return c.execute("INSERT INTO sloth.schedules (name, recipe, next_slot, created_at, updated_at)"
                             " VALUES (%s, %s, %s, sloth.now(), sloth.now()) ON CONFLICT (name) DO NOTHING"
                             " RETURNING name", (name, text, int(next_slot))).fetchone() is not None

        if not self.writer.write(add, "adding a schedule"):
            raise sr.taken(name)
        return self.get(name)

    def change(self, name: str, *, version: int | None = None, recipe: Mapping[str, Any] | None = None,
               paused: bool | None = None, next_slot: int | None = None) -> dict[str, Any] | None:
        cols = sr.changes(recipe, paused, next_slot)
        if "paused" in cols:
            cols["paused"] = bool(cols["paused"])
        sets = "".join(f", {k} = %s" for k in cols)
        guard = "" if version is None else " AND version = %s"
        sql = f"UPDATE sloth.schedules SET version = version + 1, updated_at = sloth.now(){sets} WHERE name = %s{guard}"

        def change(c: Cursor) -> bool:
            if c.execute(sql, (*cols.values(), name, *(() if version is None else (version,)))).rowcount:
                return True
            _exists(c, name)
            return False

        return self.get(name) if self.writer.write(change, "changing a schedule") else None

    def remove(self, name: str) -> None:
        def remove(c: Cursor) -> None:
            if not c.execute("DELETE FROM sloth.schedules WHERE name = %s", (name,)).rowcount:
                raise sr.missing(name)
            c.execute("DELETE FROM sloth.schedule_runs WHERE schedule = %s", (name,))
            # its `schedule run` job stays, but not its key (as SqliteSchedules.remove)
            c.execute("UPDATE sloth.jobs SET key = NULL WHERE key = %s", (sr.slot_key(name, sr.MANUAL),))

        self.writer.write(remove, "removing a schedule")

    def fire(self, name: str, firing: sr.Firing) -> list[dict[str, Any]] | None:
        def fire(c: Cursor) -> list[dict[str, Any]] | None:
            row = c.execute("SELECT version, last_job FROM sloth.schedules WHERE name = %s FOR UPDATE",
                            (name,)).fetchone()
            if row is None:
                raise sr.missing(name)
            if firing.version is not None and row["version"] != firing.version:
                return None
            out = _Firing(c, name, row["last_job"], self.insert)
            results = [out.one(o) for o in firing.occurrences]
            c.execute(SQL_PROGRESS, (firing.next_slot, out.last_job, out.last_slot, firing.missed, firing.dropped,
                                     name))
            c.execute(SQL_PRUNE_RUNS, (name, KEEP_RUNS_S))
            return results

        return self.writer.write(fire, "firing a schedule")


def _exists(c: Cursor, name: str) -> None:
    if c.execute("SELECT 1 FROM sloth.schedules WHERE name = %s", (name,)).fetchone() is None:
        raise sr.missing(name)


class _Firing:
    """One firing's occurrences, inside its transaction."""

    def __init__(self, c: Cursor, name: str, last_job: int | None, insert: Insert) -> None:
        self.c, self.name, self.insert = c, name, insert
        self.last_job: int | None = last_job
        self.last_slot: int | None = None

    def one(self, o: sr.Occurrence) -> dict[str, Any]:
        manual = o.spec is not None and o.spec.key == sr.slot_key(self.name, sr.MANUAL)
        if manual and (hit := self.c.execute(SQL_ACTIVE_KEY, (o.spec.key,)).fetchone()):  # type: ignore[union-attr]
            return {"slot": o.slot, "job_id": hit["id"], "deduped": True}
        if manual:  # a run by hand has a row of its own, even a second in the same second
            o = o._replace(slot=sr.manual_slot(self.c.execute(SQL_LAST_MANUAL, (self.name,)).fetchone(), o.slot))
        if self.c.execute(SQL_RUN_ADD, (self.name, o.slot, manual, o.note)).fetchone() is None:
            return {"slot": o.slot, "job_id": None, "taken": True}
        if o.spec is None:
            return {"slot": o.slot, "job_id": None, "note": o.note}
        job_id = self.insert(self.c, [self._chained(o.spec)], None)[0]
        self.c.execute("UPDATE sloth.schedule_runs SET job_id = %s WHERE schedule = %s AND slot = %s AND manual = %s",
                       (job_id, self.name, o.slot, manual))
        self.last_job = job_id
        self.last_slot = o.slot  # a run by hand is the last run too (`schedule ls` LAST)
        return {"slot": o.slot, "job_id": job_id, "note": o.note}

    def _chained(self, spec: JobSpec) -> JobSpec:
        """``after_previous``: after the schedule's last job if it is still active."""
        if spec.after_previous is None:
            return spec
        row = None if self.last_job is None else self.c.execute(
            "SELECT state FROM sloth.jobs WHERE id = %s FOR KEY SHARE", (self.last_job,)).fetchone()
        active = row is not None and row["state"] in ACTIVE_STATES
        wait = (self.last_job,) if active and self.last_job is not None else ()
        return spec._replace(after_previous=None, after_any=wait)


"""Each attempt's log, shipped to a shared queue's database, so that `sloth
logs ID` (and ``-f``) work from any machine (backends/postgres/logs.py stores it).

The keeper writes an attempt's capped log file here (the head as it comes,
the tail when the run ends); this copies what the file holds to the
attempt's row, once a second, from where the last copy ended: while the
run lasts (a follower elsewhere sees the head grow), and the rest once the
worker is done with the run (its outcome recorded: the file is complete),
then marks it done. A daemon that stopped before it could is made good by
the next one: rows this host began and never marked done are finished from
the files.

Bounded: the file is capped (log_cap_bytes, head and tail), at most CHUNK
bytes of one attempt and TICK_BYTES in all go per second, and the reading
and writing happen on a thread with a connection of its own, so a slow
server or disk never holds up the worker loop.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
from pathlib import Path
from typing import Any, Callable

from sloth_daemon.backends.postgres import logs as pg_logs, db as pgdb
from sloth_daemon.errors import LogUnreadable, SlothError
from sloth_daemon.paths import open_log

log = logging.getLogger("sloth.logship")
TICK_S = 1.0
CHUNK = 256 * 1024
TICK_BYTES = 2 * 1024 * 1024
Key = tuple[int, int]  # (job id, attempt)
DONE = -1  # a result: all of it is stored, the row marked done
DROP = -2  # a result: nothing more can be stored (the job is gone)


class LogShipper:
    """Ships the logs of the runs ``worker`` holds (see the module docstring)."""

    def __init__(self, url: str, options: pgdb.PgOptions, worker: Any, log_path: Callable[[int, int], Path],
                 cap: int) -> None:
        self.worker, self.log_path, self.cap = worker, log_path, cap
        self.host = worker.host
        self.db = pgdb.Connection(url, options, lambda: None)
        self.shipped: dict[Key, int | None] = {}  # bytes stored so far (None: ask the database)
        self.final: set[Key] = set()  # the file is complete: store the rest, then mark it done
        self._pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="sloth-logship")
        self._started = False

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(TICK_S)
            await self.tick(loop)

    async def tick(self, loop: asyncio.AbstractEventLoop) -> None:
        """One round: note what runs and what ended, ship a part of each."""
        if not self._started:
            self._started = True
            await self._adopt_unfinished(loop)
        self._follow_runs()
        todo = [(key, self.shipped[key], key in self.final) for key in self._order()]
        if todo:
            results = await loop.run_in_executor(self._pool, self._ship_all, todo)
            self._apply(results)

    async def close(self) -> None:
        """The daemon stops: ship what is complete (bounded), then let go."""
        try:
            loop = asyncio.get_running_loop()
            self._follow_runs()
            for _ in range(8):
                if not self.final:
                    break
                await self.tick(loop)
        except SlothError as e:
            log.warning("logs not shipped: %s", e.message)
        self._pool.shutdown(wait=False)
        self.db.close()

    # ---------------------------------------------------------- the loop's
    def job_changed(self, job: Any) -> None:
        """Every change this daemon makes (Control.watch): a run of ours so
        short that no tick saw it running is shipped too."""
        if job.worker == self.worker.name and job.attempts:
            self.shipped.setdefault((job.id, job.attempts), None)

    def _follow_runs(self) -> None:
        """Runs the worker holds are shipped as they grow; one it no longer
        holds (or holds for a later attempt) is complete."""
        live = {(r.job.id, r.attempt) for r in self.worker.running.values()}
        for key in live:
            self.shipped.setdefault(key, None)
        self.final |= {key for key in self.shipped if key not in live}

    def _order(self) -> list[Key]:
        return sorted(self.shipped, key=lambda k: (k not in self.final, k))

    def _apply(self, results: dict[Key, int]) -> None:
        for key, got in results.items():
            if got in (DONE, DROP):
                self.shipped.pop(key, None)
                self.final.discard(key)
            else:
                self.shipped[key] = got

    async def _adopt_unfinished(self, loop: asyncio.AbstractEventLoop) -> None:
        try:
            rows = await loop.run_in_executor(self._pool, pg_logs.unfinished, self.db, self.host)
        except SlothError as e:
            log.warning("cannot read this host's unfinished logs: %s", e.message)
            return
        for job, attempt, size in rows:
            self.shipped.setdefault((job, attempt), size)

    # -------------------------------------------------------- the thread's
    def _ship_all(self, todo: list[tuple[Key, int | None, bool]]) -> dict[Key, int]:
        out: dict[Key, int] = {}
        budget = TICK_BYTES
        for key, done_so_far, final in todo:
            if budget <= 0:
                break
            try:
                out[key] = self._ship(key, done_so_far, final, min(CHUNK, budget))
            except LogUnreadable as e:  # not a file we may read (a link, a folder): never
                log.warning("job %d attempt %d: log not stored: %s", *key, e.message)
                out[key] = DROP
            except SlothError as e:
                log.warning("job %d attempt %d: log not stored yet: %s", *key, e.message)
                if "foreign key" in e.message or "violates" in e.message:
                    out[key] = DROP  # pruned meanwhile
                continue
            budget -= CHUNK
        return out

    def _ship(self, key: Key, offset: int | None, final: bool, limit: int) -> int:
        """Store the next part of one attempt's file; the new stored length, or DONE/DROP."""
        job, attempt = key
        if offset is None:
            found = pg_logs.stored_size(self.db, job, attempt)
            if found is not None and found[1]:
                return DONE
            offset = 0 if found is None else found[0]
        data, size = self._read(self.log_path(job, attempt), offset, limit)
        if size is None and not final:
            return offset  # nothing printed yet
        if offset + len(data) > self.cap + 4096:  # the capped file with its notes: never more
            return DROP
        last = final and offset + len(data) >= (size or 0)
        if not data and not last:
            return offset
        got = pg_logs.append(self.db, job, attempt, self.host, data, offset, last)
        if got is None:
            found = pg_logs.stored_size(self.db, job, attempt)
            return DONE if found is not None and found[1] else (found[0] if found else 0)
        return DONE if last else got

    @staticmethod
    def _read(path: Path, offset: int, limit: int) -> tuple[bytes, int | None]:
        """Up to ``limit`` bytes of the file from ``offset``, and its size (None: no file)."""
        try:
            with open_log(path) as f:
                size = f.seek(0, 2)
                f.seek(offset)
                return f.read(limit), size
        except FileNotFoundError:
            return b"", None
